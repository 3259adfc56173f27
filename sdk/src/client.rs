//! Calling actors and workers, and reading membership, through the local sidecar.

use crate::connect::{self, ConnectError, DialError, SidecarChannel};
use crate::members::{MemberFilter, Members};
use crate::payload;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sigx_proto::ActorError;
use sigx_proto::v1::{self, actor_host_client::ActorHostClient};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The largest message the SDK encodes or decodes. The sidecar enforces its own, smaller payload
/// limit (default 4 MiB) and answers `invalid` naming it; this only keeps tonic's default (4 MiB
/// for the whole message) from rejecting a payload the sidecar would accept.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How much longer than the call's own deadline the gRPC deadline is. The sidecar answers
/// `timeout` itself when the call's deadline passes; the transport deadline is only a backstop
/// for a sidecar that stopped answering, so it must not win the race.
const TRANSPORT_DEADLINE_SLACK: Duration = Duration::from_secs(2);

/// Reads a failed RPC to the local sidecar. A status with a sigx error detail is decoded as is.
/// A transport failure that proves the call did not run is `unreachable`: the socket could not
/// be dialed (no such file, nobody listening, the dial timed out), the connection closed before
/// the request was written (hyper's `is_canceled`), or the sidecar refused the stream before
/// processing it ([`refused_by_sidecar`]). Any other failure of the connection is
/// `outcome-unknown`: the request may have reached the sidecar and run. (tonic's own reading of
/// those would not do: it calls a cancelled request, or a stream the sidecar reset with
/// `CANCEL`, `Cancelled`, which reads as `timeout`.) Anything else without a detail goes through
/// [`ActorError::from_status`].
pub(crate) fn read_status(status: &tonic::Status, socket: &Path) -> ActorError {
    use std::error::Error as _;
    if status.details().is_empty() {
        // Looked for first: hyper reports a refused stream as a failure of the connection, the
        // h2 error under it says which.
        let mut causes = std::iter::successors(status.source(), |&e| e.source());
        if let Some(refusal) = causes.find_map(refused_by_sidecar) {
            return ActorError::unreachable(format!(
                "the sidecar at {} refused the call before running it ({refusal}); it may be \
                 shutting down. The call did not run: retrying it is safe",
                socket.display()
            ));
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = status.source();
        while let Some(e) = cause {
            if let Some(dial) = e.downcast_ref::<DialError>() {
                return ActorError::unreachable(format!(
                    "{dial} (is it running, and does SIGX_SOCKET name its socket?)"
                ));
            }
            // hyper cancels exactly the requests it never wrote to the connection.
            if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
                if hyper.is_canceled() {
                    return ActorError::unreachable(format!(
                        "the connection to the sidecar at {} closed before the request was \
                         sent ({hyper}); the call did not run",
                        socket.display()
                    ));
                }
                // Any other failure of the connection came after the request was handed to
                // it: the sidecar may have run it. (A failure of this side's own request body,
                // `is_user`, carries the status that says why further down the chain.)
                if !hyper.is_user() {
                    let why = match hyper.source() {
                        Some(detail) => format!("{hyper}: {detail}"),
                        None => hyper.to_string(),
                    };
                    return ActorError::outcome_unknown(format!(
                        "the connection to the sidecar at {} broke with the call in flight ({why}); \
                     it may or may not have run",
                        socket.display()
                    ));
                }
            }
            cause = e.source();
        }
    }
    ActorError::from_status(status)
}

/// HTTP/2's own proofs that the sidecar did not process a stream (RFC 9113 §8.7): it reset the
/// stream with `REFUSED_STREAM`, or its GOAWAY named a last stream below this one (h2 fails
/// exactly those streams with the GOAWAY's error). A draining sidecar, or one at its stream
/// limit, answers new calls this way. The sidecar's mesh client reads its peers the same way.
fn refused_by_sidecar<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a h2::Error> {
    e.downcast_ref::<h2::Error>().filter(|h2| {
        h2.is_remote() && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM))
    })
}

/// A handle on the local sidecar's app API: call actors and workers, list members, read status.
///
/// Cheap to clone (one shared HTTP/2 connection, a [`SidecarChannel`]). The connection is made
/// on first use and again after it closes, so a `Client` outlives sidecar restarts.
///
/// ```no_run
/// # async fn demo() -> Result<(), sigx_sdk::ActorError> {
/// let client = sigx_sdk::Client::from_env();
/// let reply = client.call("Counter", "user-42", "increment", "5").await?;
/// let value: i64 = serde_json::from_slice(&reply).unwrap();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: ActorHostClient<SidecarChannel>,
    socket: Arc<PathBuf>,
    timeout: Option<Duration>,
    /// The W3C trace context this client's calls carry (as `traceparent` / `tracestate`
    /// metadata): a turn's client carries its turn's, so calls made from inside a turn continue
    /// the caller's trace.
    trace: Option<v1::TraceContext>,
    /// Where new activations this client's calls create should go (`with_locality`).
    locality: v1::Locality,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("socket", &self.socket)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Client {
    fn from_channel(channel: SidecarChannel, socket: &Path) -> Self {
        Client {
            inner: ActorHostClient::with_origin(channel, connect::origin())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            socket: Arc::new(socket.to_path_buf()),
            timeout: None,
            trace: None,
            locality: v1::Locality::Any,
        }
    }

    /// A client for the sidecar at `socket`. Nothing is dialed until the first call, so this
    /// never fails; a call made while nothing listens fails with that call's error.
    pub fn lazy(socket: impl AsRef<Path>) -> Self {
        let socket = socket.as_ref();
        Self::from_channel(connect::lazy_channel(socket), socket)
    }

    /// A client for the socket named by `SIGX_SOCKET` (default `/var/run/sigx/sidecar.sock`),
    /// connected lazily.
    pub fn from_env() -> Self {
        Self::lazy(connect::socket_from_env())
    }

    /// A client for the sidecar at `socket`, connected now: fails when nothing listens there.
    pub async fn connect(socket: impl AsRef<Path>) -> Result<Self, ConnectError> {
        let socket = socket.as_ref();
        Ok(Self::from_channel(
            connect::eager_channel(socket).await?,
            socket,
        ))
    }

    /// The socket this client dials.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A copy of this client whose calls carry `timeout` as their deadline (instead of the
    /// sidecar's default, 30 s). The deadline covers the whole call, routing included.
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        Client {
            timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// This client with a placement preference on its calls: an actor a call activates goes
    /// to a host on the calling sidecar's node (`SameNode`) or zone (`SameZone`) when one is
    /// eligible, else anywhere eligible. Actors already active stay where they are.
    pub fn with_locality(&self, locality: v1::Locality) -> Self {
        Client {
            locality,
            ..self.clone()
        }
    }

    /// A copy of this client whose calls carry the W3C trace context `trace` (e.g. a
    /// `traceparent` your own tracing made), so the sidecar's spans and the callee's turn join
    /// that trace. A turn's [`Context::client`](crate::Context::client) already carries its turn's.
    pub fn with_trace(&self, trace: Option<v1::TraceContext>) -> Self {
        Client {
            trace,
            ..self.clone()
        }
    }

    /// The W3C trace context this client's calls carry, if any.
    pub fn trace(&self) -> Option<&v1::TraceContext> {
        self.trace.as_ref()
    }

    /// The deadline this client's calls carry, if one was set with [`Client::with_timeout`].
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(t) = self.timeout {
            request.set_timeout(t + TRANSPORT_DEADLINE_SLACK);
        }
        // The standard W3C metadata (what OpenTelemetry's gRPC instrumentation sends), on every
        // request of this client: the sidecar reads it on Call.
        if let Some(trace) = &self.trace {
            for (key, value) in [
                ("traceparent", &trace.traceparent),
                ("tracestate", &trace.tracestate),
            ] {
                if let Ok(v) = value.parse()
                    && !value.is_empty()
                {
                    request.metadata_mut().insert(key, v);
                }
            }
        }
        request
    }

    fn timeout_ms(&self) -> u64 {
        self.timeout
            .map(|t| t.as_millis().clamp(1, u64::MAX as u128) as u64)
            .unwrap_or(0)
    }

    /// Calls `method` on the actor (or worker) `actor_type`/`key` with an opaque payload and
    /// returns the reply payload. Errors carry the runtime's stable [`ErrorKind`](crate::ErrorKind):
    /// `app` for the actor's own failure, `invalid` for bad input, `timeout`, and so on.
    pub async fn call(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
        method: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, ActorError> {
        let request = self.request(v1::CallRequest {
            actor: Some(v1::ActorRef {
                actor_type: actor_type.into(),
                key: key.into(),
            }),
            method: method.into(),
            payload: payload.into(),
            timeout_ms: self.timeout_ms(),
            // Sent as metadata by `request`.
            trace: None,
            locality: self.locality as i32,
        });
        let mut inner = self.inner.clone();
        match inner.call(request).await {
            Ok(response) => Ok(response.into_inner().payload),
            Err(status) => Err(read_status(&status, &self.socket)),
        }
    }

    /// [`Client::call`] with a JSON request and a JSON reply.
    pub async fn call_json<Req, Resp>(
        &self,
        actor_type: &str,
        key: &str,
        method: &str,
        request: &Req,
    ) -> Result<Resp, ActorError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let body = payload::json(request)?;
        let reply = self.call(actor_type, key, method, body).await?;
        payload::from_json(&reply).map_err(|e| {
            ActorError::invalid(format!(
                "the reply of {actor_type}/{key}.{method} is not the JSON the caller expects: {e}"
            ))
        })
    }

    /// A handle on one actor, for repeated calls.
    pub fn actor(&self, actor_type: impl Into<String>, key: impl Into<String>) -> ActorHandle {
        ActorHandle {
            client: self.clone(),
            actor_type: actor_type.into(),
            key: key.into(),
            fence: 0,
        }
    }

    /// The sidecar's current membership view, filtered (active hosts by default).
    pub async fn members(&self, filter: &MemberFilter) -> Result<Members, ActorError> {
        let mut inner = self.inner.clone();
        inner
            .members(self.request(filter.to_proto()))
            .await
            .map(|r| Members::from_proto(r.into_inner()))
            .map_err(|s| read_status(&s, &self.socket))
    }

    /// The membership view now, then again on every change the sidecar observes. The stream
    /// ends (or yields an error) when the connection to the sidecar is lost; see
    /// [`Client::on_change`] for a subscription that re-subscribes by itself.
    pub async fn watch_members(
        &self,
        filter: &MemberFilter,
    ) -> Result<impl Stream<Item = Result<Members, ActorError>> + Send + 'static, ActorError> {
        let mut inner = self.inner.clone();
        let socket = self.socket.clone();
        let stream = inner
            .watch_members(tonic::Request::new(filter.to_proto()))
            .await
            .map_err(|s| read_status(&s, &socket))?
            .into_inner();
        Ok(stream.map(move |item| {
            item.map(Members::from_proto)
                .map_err(|s| read_status(&s, &socket))
        }))
    }

    /// Runs `callback` with every view the sidecar reports (the current one first), until the
    /// returned [`Subscription`] is dropped. When the connection drops, it subscribes again with
    /// capped backoff. A panicking callback is logged and does not end the subscription.
    pub fn on_change<F>(&self, filter: MemberFilter, callback: F) -> Subscription
    where
        F: Fn(&Members) + Send + Sync + 'static,
    {
        let client = self.clone();
        let task = tokio::spawn(async move {
            let mut backoff = crate::serve::Backoff::default();
            loop {
                match client.watch_members(&filter).await {
                    Ok(stream) => {
                        let mut stream = std::pin::pin!(stream);
                        while let Some(item) = stream.next().await {
                            match item {
                                Ok(members) => {
                                    backoff.reset();
                                    let result = std::panic::catch_unwind(
                                        std::panic::AssertUnwindSafe(|| callback(&members)),
                                    );
                                    if result.is_err() {
                                        tracing::error!(
                                            version = members.version,
                                            "an on_change callback panicked; the subscription goes on"
                                        );
                                    }
                                }
                                Err(e) => {
                                    tracing::debug!(error = %e, "membership watch ended");
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "membership watch could not start"),
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
        });
        Subscription { task }
    }

    /// A handle that calls worker `worker_type` on the chosen host only: one attempt, no
    /// re-placement (`unreachable` and `wrong-host` are answers, not retried). Workers only; the
    /// sidecar refuses a stateful type.
    pub fn worker_on(
        &self,
        host_id: impl Into<String>,
        worker_type: impl Into<String>,
    ) -> WorkerOn {
        WorkerOn {
            client: self.clone(),
            host_id: host_id.into(),
            worker_type: worker_type.into(),
            key: String::new(),
        }
    }

    /// One attempt at `method` of worker `worker_type` on host `host_id`.
    pub async fn dispatch_on(
        &self,
        host_id: impl Into<String>,
        worker_type: impl Into<String>,
        key: impl Into<String>,
        method: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, ActorError> {
        let request = self.request(v1::DispatchOnRequest {
            host_id: host_id.into(),
            worker: Some(v1::ActorRef {
                actor_type: worker_type.into(),
                key: key.into(),
            }),
            method: method.into(),
            payload: payload.into(),
            timeout_ms: self.timeout_ms(),
        });
        let mut inner = self.inner.clone();
        match inner.dispatch_on(request).await {
            Ok(response) => Ok(response.into_inner().payload),
            Err(status) => Err(read_status(&status, &self.socket)),
        }
    }

    /// The sidecar's view of itself: host, state, activations, counters, membership view.
    pub async fn status(&self) -> Result<v1::StatusResponse, ActorError> {
        let mut inner = self.inner.clone();
        inner
            .status(self.request(v1::StatusRequest {}))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| read_status(&s, &self.socket))
    }

    /// Where the actor `actor_type`/`key` is active now: its host, activation id and (when this
    /// sidecar runs it) epoch, or `active: false`. Activates nothing.
    pub async fn locate(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
    ) -> Result<v1::LocateResponse, ActorError> {
        let request = self.request(v1::LocateRequest {
            actor: Some(v1::ActorRef {
                actor_type: actor_type.into(),
                key: key.into(),
            }),
            timeout_ms: self.timeout_ms(),
        });
        let mut inner = self.inner.clone();
        inner
            .locate(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| read_status(&s, &self.socket))
    }

    /// One page of the live activations of `actor_type`, fleet-wide: pass an empty
    /// `page_token` for the first page, then each page's `next_page_token` until it is empty.
    /// Check `incomplete`: partitions whose owner did not answer are listed in `skipped`.
    pub async fn list_actors(
        &self,
        actor_type: impl Into<String>,
        page_size: u32,
        page_token: impl Into<String>,
    ) -> Result<v1::ListActorsResponse, ActorError> {
        self.list_actors_with(actor_type, page_size, page_token, false)
            .await
    }

    /// [`Client::list_actors`], with each actor's stored reminders (`ActorLocation::reminders`)
    /// when `with_reminders` is set (the sidecar reads them from the state store, one read per
    /// actor of the page).
    pub async fn list_actors_with(
        &self,
        actor_type: impl Into<String>,
        page_size: u32,
        page_token: impl Into<String>,
        with_reminders: bool,
    ) -> Result<v1::ListActorsResponse, ActorError> {
        let request = self.request(v1::ListActorsRequest {
            actor_type: actor_type.into(),
            page_size,
            page_token: page_token.into(),
            timeout_ms: self.timeout_ms(),
            with_reminders,
        });
        let mut inner = self.inner.clone();
        inner
            .list_actors(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| read_status(&s, &self.socket))
    }

    /// The raw generated client, for RPCs this SDK does not wrap. It shares this client's
    /// connection; its errors are plain tonic statuses (a failed dial is `Unavailable`).
    pub fn raw(&self) -> ActorHostClient<SidecarChannel> {
        self.inner.clone()
    }
}

/// One actor, bound to a client: `counter.call("increment", "1")`.
#[derive(Debug, Clone)]
pub struct ActorHandle {
    client: Client,
    actor_type: String,
    key: String,
    /// The epoch its reminder changes carry (0: none), set by `Context::this_actor`.
    fence: u64,
}

impl ActorHandle {
    pub(crate) fn parts(&self) -> (&Client, &str, &str) {
        (&self.client, &self.actor_type, &self.key)
    }

    /// The same actor, its reminder changes fenced by `epoch`: the store refuses them
    /// (`stale-epoch`, nothing changed) once a newer activation of the actor exists.
    pub(crate) fn fenced(mut self, epoch: u64) -> Self {
        self.fence = epoch;
        self
    }

    /// The epoch this handle's reminder changes carry, 0 when unfenced (a handle from
    /// [`Client::actor`]); inside a turn, [`crate::Context::this_actor`] fences with the turn's.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Calls `method` with an opaque payload.
    pub async fn call(
        &self,
        method: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, ActorError> {
        self.client
            .call(self.actor_type.as_str(), self.key.as_str(), method, payload)
            .await
    }

    /// Calls `method` with a JSON request and a JSON reply.
    pub async fn call_json<Req, Resp>(
        &self,
        method: &str,
        request: &Req,
    ) -> Result<Resp, ActorError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        self.client
            .call_json(&self.actor_type, &self.key, method, request)
            .await
    }
}

/// A worker type on one chosen host (see [`Client::worker_on`]).
#[derive(Debug, Clone)]
pub struct WorkerOn {
    client: Client,
    host_id: String,
    worker_type: String,
    key: String,
}

impl WorkerOn {
    /// Passes `key` to the worker's turns (workers have no identity; the key is the app's own).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// The target host.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// One attempt at `method` on the chosen host.
    pub async fn call(
        &self,
        method: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, ActorError> {
        self.client
            .dispatch_on(
                self.host_id.as_str(),
                self.worker_type.as_str(),
                self.key.as_str(),
                method,
                payload,
            )
            .await
    }
}

/// A running [`Client::on_change`] subscription; dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscription {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}
