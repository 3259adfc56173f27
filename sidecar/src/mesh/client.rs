//! The mesh client: one pooled HTTP/2 connection per peer, signed requests, deadlines, and a
//! classification of every failure into what the routing loop may do with it.

use super::auth::MeshAuth;
use super::transport::BoxedIo;
use super::transport::Connector;
use crate::clock::SharedClock;
use bytes::Bytes;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sigx_proto::ActorError;
use sigx_proto::v1::{
    CollectRequest, CollectResponse, DeliverAnswer, DeliverFrame, DeliverRequest, DeliverResponse,
    ListEntriesRequest, ListEntriesResponse, LookupRequest, LookupResponse, RegisterRequest,
    RegisterResponse, UnregisterRequest, UnregisterResponse, deliver_response::Outcome,
};
use std::collections::{BTreeMap, HashMap};
use std::error::Error as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// gRPC method paths (signed into every request's MAC).
pub mod paths {
    /// `Mesh/Deliver`.
    pub const DELIVER: &str = "/sigx.actors.v1.Mesh/Deliver";
    /// `Mesh/DeliverStream`.
    pub const DELIVER_STREAM: &str = "/sigx.actors.v1.Mesh/DeliverStream";
    /// `Mesh/Lookup`.
    pub const LOOKUP: &str = "/sigx.actors.v1.Mesh/Lookup";
    /// `Mesh/Register`.
    pub const REGISTER: &str = "/sigx.actors.v1.Mesh/Register";
    /// `Mesh/Unregister`.
    pub const UNREGISTER: &str = "/sigx.actors.v1.Mesh/Unregister";
    /// `Mesh/Collect`.
    pub const COLLECT: &str = "/sigx.actors.v1.Mesh/Collect";
    /// `Mesh/ListEntries`.
    pub const LIST_ENTRIES: &str = "/sigx.actors.v1.Mesh/ListEntries";
}

/// How a mesh call failed — a statement about whether it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeshCallError {
    /// Nothing was sent: the dial failed, was refused or timed out. The call never ran.
    #[error("host {peer} ({addr}) is unreachable: {reason}")]
    Unreachable {
        /// The peer's host id.
        peer: String,
        /// The address dialled.
        addr: String,
        /// Why the dial failed.
        reason: String,
    },
    /// The peer answered with an error.
    #[error("host answered: {0}")]
    Answered(ActorError),
    /// The call's deadline passed before an answer came back. It may have run.
    #[error("no answer from host {peer} within the call's deadline")]
    Timeout {
        /// The peer's host id.
        peer: String,
    },
    /// The connection died with the call in flight: it may or may not have run.
    #[error(
        "host connection to {peer} closed with this call in flight ({reason}): outcome unknown, \
         not retried"
    )]
    OutcomeUnknown {
        /// The peer's host id.
        peer: String,
        /// What the transport said.
        reason: String,
    },
}

impl MeshCallError {
    /// The error as the routing loop and the app see it.
    pub fn into_actor_error(self) -> ActorError {
        match self {
            MeshCallError::Answered(e) => e,
            e @ MeshCallError::Unreachable { .. } => ActorError::unreachable(e.to_string()),
            e @ MeshCallError::Timeout { .. } => ActorError::timeout(e.to_string()),
            e @ MeshCallError::OutcomeUnknown { .. } => ActorError::outcome_unknown(e.to_string()),
        }
    }

    /// True when the call provably never ran.
    pub fn never_ran(&self) -> bool {
        match self {
            MeshCallError::Unreachable { .. } => true,
            MeshCallError::Answered(e) => e.kind.is_retryable_route(),
            _ => false,
        }
    }
}

/// Client limits and timeouts.
#[derive(Debug, Clone)]
pub struct MeshClientConfig {
    /// Dial timeout (a dial that times out never sent anything: `unreachable`).
    pub connect_timeout: Duration,
    /// The largest message sent or accepted, bytes.
    pub max_message_bytes: usize,
    /// HTTP/2 keepalive ping interval on pooled connections.
    pub keepalive_interval: Duration,
    /// After a failed dial, calls to that peer fail at once as `unreachable` for this long
    /// (doubling per consecutive failure up to [`MeshClientConfig::dial_backoff_max`]) instead
    /// of each queueing behind the next dial. The routing loop waits and re-resolves meanwhile.
    pub dial_backoff_min: Duration,
    /// The longest such pause.
    pub dial_backoff_max: Duration,
}

impl Default for MeshClientConfig {
    fn default() -> Self {
        MeshClientConfig {
            connect_timeout: Duration::from_secs(2),
            max_message_bytes: 4 * 1024 * 1024 + 64 * 1024,
            keepalive_interval: Duration::from_secs(10),
            dial_backoff_min: Duration::from_millis(100),
            dial_backoff_max: Duration::from_secs(1),
        }
    }
}

/// A peer to call: its host id and advertised address.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr<'a> {
    /// Host id (signed into nothing, used for the pool key and messages).
    pub id: &'a str,
    /// `host:port`.
    pub advertise: &'a str,
}

/// What the client knows about its connection to one peer. It is what lets a failed call say
/// whether it could have run: a call that started with no open connection and ended before any
/// dial succeeded was never written to a socket.
#[derive(Debug, Default, Clone)]
struct LinkState {
    /// Connections to the peer whose socket is still open.
    open: usize,
    /// Sockets dialled so far.
    connects: u64,
    /// Dials finished so far, either way.
    dials: u64,
    /// Calls fail fast until then: the last dial failed.
    down_until: Option<Instant>,
    /// The current pause after a failed dial.
    backoff: Duration,
    /// Failed dials so far.
    failures: u64,
    /// Why the last dial failed.
    last_failure: Option<String>,
    /// The peer left the view: calls in flight end now, new ones never start.
    departed: bool,
}

/// One peer's pooled HTTP/2 connection and its state.
///
/// The connection is hyper's HTTP/2 client used directly, not tonic's `Channel`: a `Channel`
/// queues every request through a buffer task before the connection task sees it, one extra
/// task hand-off per call on the hottest path of a cross-host call. Dials are this type's own
/// (serialized, with the backoff of [`LinkState`]), so nothing of `Channel` was needed.
struct PeerLink {
    /// The host id dialled (a TLS connector checks the server's certificate names it).
    id: String,
    advertise: String,
    /// `http://<advertise>`: the `:authority` of every request.
    origin: http::Uri,
    state: Arc<watch::Sender<LinkState>>,
    /// The open connection's request handle, if one is open.
    sender: Mutex<Option<SendRequest<tonic::body::Body>>>,
    /// A dial is in progress: calls arriving meanwhile wait for its outcome and share it.
    dialing: Mutex<bool>,
    /// The open call stream (`DeliverStream`), if one is open.
    stream: Mutex<Option<Arc<CallStream>>>,
    /// One stream opening at a time.
    opening: tokio::sync::Mutex<()>,
    /// The peer answered `DeliverStream` with UNIMPLEMENTED: calls to it use `Deliver`.
    streams_unsupported: AtomicBool,
}

impl PeerLink {
    /// The open call stream, unless it has closed.
    fn live_stream(&self) -> Option<Arc<CallStream>> {
        let mut stream = self.stream.lock().expect("peer link lock");
        match &*stream {
            Some(s) if s.is_open() => Some(s.clone()),
            Some(_) => {
                *stream = None;
                None
            }
            None => None,
        }
    }

    /// The peer left (or moved): close the call stream; its calls end through the link state.
    fn close(&self) {
        self.state.send_modify(|s| s.departed = true);
        if let Some(stream) = self.stream.lock().expect("peer link lock").take() {
            stream.close();
        }
    }

    /// Drops the cached connection handle; true if there was one.
    fn forget_sender(&self) -> bool {
        self.sender.lock().expect("peer link lock").take().is_some()
    }

    /// The open connection's handle, unless it has closed.
    fn live_sender(&self) -> Option<SendRequest<tonic::body::Body>> {
        let mut sender = self.sender.lock().expect("peer link lock");
        match &*sender {
            Some(s) if !s.is_closed() => Some(s.clone()),
            Some(_) => {
                *sender = None;
                None
            }
            None => None,
        }
    }
}

/// Calls whose payload is at most this many bytes go on the peer's call stream; larger ones
/// use `Deliver`, one HTTP/2 stream each, so they cannot hold small calls up behind them.
pub const STREAM_PAYLOAD_MAX: usize = 64 * 1024;

/// What a call waiting on a call stream is told.
type StreamAnswer = Result<DeliverResponse, String>;

/// One long-lived `DeliverStream` to a peer: calls go out as frames with ids, answers come
/// back in any order and find their callers by id.
struct CallStream {
    /// The frames' way out; `None` once the stream takes no more calls.
    tx: Mutex<Option<mpsc::UnboundedSender<DeliverFrame>>>,
    /// Calls sent and not yet answered.
    waiters: Mutex<HashMap<u64, oneshot::Sender<StreamAnswer>>>,
    next_id: AtomicU64,
    /// The task reading answers.
    reader: Mutex<Option<tokio::task::AbortHandle>>,
}

impl CallStream {
    fn is_open(&self) -> bool {
        self.tx.lock().expect("call stream lock").is_some()
    }

    /// Sends `req` (taken from the option) as a frame. `None`, with `req` left in place, when
    /// the stream takes no more calls: nothing was sent.
    fn send(self: &Arc<Self>, req: &mut Option<DeliverRequest>) -> Option<WaitingCall> {
        let tx = self.tx.lock().expect("call stream lock");
        let tx = tx.as_ref()?;
        let call_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer_tx, answer_rx) = oneshot::channel();
        self.waiters
            .lock()
            .expect("call stream lock")
            .insert(call_id, answer_tx);
        let frame = DeliverFrame {
            call_id,
            request: req.take(),
        };
        if let Err(mpsc::error::SendError(frame)) = tx.send(frame) {
            self.waiters
                .lock()
                .expect("call stream lock")
                .remove(&call_id);
            *req = frame.request;
            return None;
        }
        Some(WaitingCall {
            stream: self.clone(),
            call_id,
            answer: answer_rx,
        })
    }

    /// No more calls: half-close the stream (the peer answers what it has and ends it).
    fn stop_sending(&self) {
        self.tx.lock().expect("call stream lock").take();
    }

    /// Ends the stream now, and every call waiting on it with `reason`.
    fn fail_all(&self, reason: &str) {
        self.stop_sending();
        let waiters = std::mem::take(&mut *self.waiters.lock().expect("call stream lock"));
        for (_, waiter) in waiters {
            let _ = waiter.send(Err(reason.to_owned()));
        }
    }

    /// The peer left: stop reading; waiting calls end through the link state.
    fn close(&self) {
        self.stop_sending();
        if let Some(reader) = self.reader.lock().expect("call stream lock").take() {
            reader.abort();
        }
    }
}

/// A call sent on a call stream, until its answer. Dropped unanswered (the caller gave up),
/// it forgets its id, and a late answer finds nobody.
struct WaitingCall {
    stream: Arc<CallStream>,
    call_id: u64,
    answer: oneshot::Receiver<StreamAnswer>,
}

impl WaitingCall {
    async fn answer(mut self) -> StreamAnswer {
        (&mut self.answer)
            .await
            .unwrap_or_else(|_| Err("the call stream was dropped".into()))
    }
}

impl Drop for WaitingCall {
    fn drop(&mut self) {
        self.stream
            .waiters
            .lock()
            .expect("call stream lock")
            .remove(&self.call_id);
    }
}

/// Reads a call stream's answers and hands each to its caller, until the stream ends; then
/// every call still waiting ends with outcome unknown (it may have run).
async fn read_answers(
    stream: Arc<CallStream>,
    mut answers: tonic::Streaming<DeliverAnswer>,
    peer: String,
) {
    let reason = loop {
        match answers.message().await {
            Ok(Some(answer)) if answer.call_id == 0 => {
                // The peer is shutting down: send nothing more; it answers what it has.
                tracing::debug!(peer = %peer, "call stream closing (peer shutting down)");
                stream.stop_sending();
            }
            Ok(Some(answer)) => {
                let waiter = stream
                    .waiters
                    .lock()
                    .expect("call stream lock")
                    .remove(&answer.call_id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Ok(answer.response.unwrap_or_default()));
                }
            }
            Ok(None) => break "the host ended the call stream with this call in flight".to_owned(),
            Err(status) => {
                break format!(
                    "the call stream broke with this call in flight ({:?}: {})",
                    status.code(),
                    status.message()
                );
            }
        }
    };
    tracing::debug!(peer = %peer, %reason, "call stream ended");
    stream.fail_all(&reason);
}

/// A request handle as the tower service tonic's generated client machinery calls.
struct H2Service(SendRequest<tonic::body::Body>);

impl tower::Service<http::Request<tonic::body::Body>> for H2Service {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(req))
    }
}

/// A pooled connection's socket; reports its close to the peer's [`LinkState`].
struct TrackedIo {
    io: BoxedIo,
    state: Arc<watch::Sender<LinkState>>,
}

impl Drop for TrackedIo {
    fn drop(&mut self) {
        self.state
            .send_modify(|s| s.open = s.open.saturating_sub(1));
    }
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The largest HTTP/2 header list accepted from a peer, bytes (the server's own limit).
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// Calls peers over pooled connections, one per peer.
pub struct MeshClient {
    self_id: Arc<str>,
    auth: MeshAuth,
    clock: SharedClock,
    connector: Arc<dyn Connector>,
    config: MeshClientConfig,
    // Ordered: when several peers leave at once their waiting calls wake in one order, so a
    // simulation replays exactly (a HashMap iterates in a per-process random order).
    pool: Mutex<BTreeMap<String, Arc<PeerLink>>>,
    /// Call streams opened so far (one per peer, again after each one ends).
    streams_opened: AtomicU64,
}

impl std::fmt::Debug for MeshClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshClient")
            .field("self_id", &self.self_id)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

impl MeshClient {
    /// A client signing as `self_id`.
    pub fn new(
        self_id: impl Into<Arc<str>>,
        auth: MeshAuth,
        clock: SharedClock,
        connector: Arc<dyn Connector>,
        config: MeshClientConfig,
    ) -> Self {
        MeshClient {
            self_id: self_id.into(),
            auth,
            clock,
            connector,
            config,
            pool: Mutex::new(BTreeMap::new()),
            streams_opened: AtomicU64::new(0),
        }
    }

    /// This host's id.
    pub fn self_id(&self) -> &str {
        &self.self_id
    }

    /// Call streams (`DeliverStream`) opened so far: one per peer, and again after one ends.
    pub fn call_streams_opened(&self) -> u64 {
        self.streams_opened.load(Ordering::Relaxed)
    }

    /// Drops the pooled connection to `peer` (it left the view). Calls in flight to it end at
    /// once: `outcome-unknown` when they may have been sent, `unreachable` when not.
    pub fn forget(&self, peer: &str) {
        self.retain_peers(|id| id != peer);
    }

    /// Drops pooled connections to every peer not in `keep`, ending their calls as
    /// [`MeshClient::forget`] does.
    pub fn retain_peers(&self, keep: impl Fn(&str) -> bool) {
        self.pool
            .lock()
            .expect("mesh pool lock")
            .retain(|id, link| {
                let kept = keep(id);
                if !kept {
                    link.close();
                }
                kept
            });
    }

    fn link(&self, peer: PeerAddr<'_>) -> Result<Arc<PeerLink>, MeshCallError> {
        let mut pool = self.pool.lock().expect("mesh pool lock");
        if let Some(link) = pool.get(peer.id)
            && link.advertise == peer.advertise
        {
            return Ok(link.clone());
        }
        let origin: http::Uri = format!("http://{}", peer.advertise).parse().map_err(|e| {
            MeshCallError::Unreachable {
                peer: peer.id.to_owned(),
                addr: peer.advertise.to_owned(),
                reason: format!("bad advertised address: {e}"),
            }
        })?;
        let link = Arc::new(PeerLink {
            id: peer.id.to_owned(),
            advertise: peer.advertise.to_owned(),
            origin,
            state: Arc::new(watch::Sender::new(LinkState::default())),
            sender: Mutex::new(None),
            dialing: Mutex::new(false),
            stream: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            streams_unsupported: AtomicBool::new(false),
        });
        // A host id keeps one address for its life; a new address means a stale entry.
        if let Some(old) = pool.insert(peer.id.to_owned(), link.clone()) {
            old.close();
        }
        Ok(link)
    }

    /// A handle on an open connection to the link's peer, dialling one if none is open. An
    /// `Err` says why there is none; nothing was sent on it.
    ///
    /// The dial runs in a task of its own, one per peer at a time: callers wait for its
    /// outcome, and a caller giving up (its deadline, an abandoned directory round) does not
    /// abort a dial the next caller will want.
    async fn sender(&self, link: &Arc<PeerLink>) -> Result<SendRequest<tonic::body::Body>, String> {
        if let Some(sender) = link.live_sender() {
            return Ok(sender);
        }
        let mut rx = link.state.subscribe();
        let dials_before = {
            let s = rx.borrow_and_update();
            // Calls queued behind a dial that failed end as unreachable; the backoff
            // promises the peer no dial until it passes.
            let now = Instant::now();
            if let Some(until) = s.down_until.filter(|u| *u > now) {
                return Err(format!(
                    "not dialled: the last dial to {} failed ({}); next attempt in {} ms",
                    link.advertise,
                    s.last_failure.as_deref().unwrap_or("unknown reason"),
                    (until - now).as_millis()
                ));
            }
            s.dials
        };
        {
            let mut dialing = link.dialing.lock().expect("peer link lock");
            if !*dialing {
                *dialing = true;
                tokio::spawn(dial(
                    link.clone(),
                    self.connector.clone(),
                    self.config.clone(),
                ));
            }
        }
        loop {
            if rx.changed().await.is_err() {
                return Err("the connection pool was dropped".into());
            }
            let s = rx.borrow_and_update();
            if s.dials != dials_before {
                if let Some(failure) = s.last_failure.as_deref()
                    && s.down_until.is_some()
                {
                    return Err(format!("the dial failed: {failure}"));
                }
                break;
            }
        }
        // One dial per call: a connection that closed as soon as it opened is this call's
        // answer, not a reason to dial again until the deadline.
        link.live_sender().ok_or_else(|| {
            "the connection closed as soon as it opened: the call was never sent".to_owned()
        })
    }

    /// Runs `call` on `peer`'s link, and sorts how it ended by what the link saw meanwhile: the
    /// peer left the view (the call ends now: outcome unknown, unless it was never sent), the
    /// dial it waited for failed (unreachable now, not one connect timeout per waiting call
    /// later), or the deadline passed (unreachable when no connection could be made, else
    /// timeout).
    async fn guarded<T, F, Fut>(
        &self,
        peer: PeerAddr<'_>,
        deadline: Instant,
        call: F,
    ) -> Result<T, MeshCallError>
    where
        F: FnOnce(Arc<PeerLink>) -> Fut,
        Fut: std::future::Future<Output = Result<T, MeshCallError>>,
    {
        let unreachable = |reason: String| MeshCallError::Unreachable {
            peer: peer.id.to_owned(),
            addr: peer.advertise.to_owned(),
            reason,
        };
        if deadline <= Instant::now() {
            return Err(MeshCallError::Timeout {
                peer: peer.id.to_owned(),
            });
        }
        let link = self.link(peer)?;
        let mut rx = link.state.subscribe();
        let (open_before, connects_before, failures_before) = {
            let s = rx.borrow_and_update();
            if s.departed {
                return Err(unreachable("the host left this host's view".into()));
            }
            // Never queue behind a dial that just failed: fail at once (the call was not sent)
            // and let the routing loop wait and re-resolve.
            let now = Instant::now();
            if s.open == 0
                && let Some(until) = s.down_until
                && until > now
            {
                return Err(unreachable(format!(
                    "the last dial failed ({}); not dialled again for {} ms",
                    s.last_failure.as_deref().unwrap_or("unknown reason"),
                    (until - now).as_millis()
                )));
            }
            (s.open, s.connects, s.failures)
        };
        // True when the call cannot have reached a socket: no connection was open when it
        // started and none has been made since.
        let never_sent = |s: &LinkState| open_before == 0 && s.connects == connects_before;
        let call = call(link.clone());
        // Ends the call early when the link says how it ended: the peer left the view (the
        // call may have run: outcome unknown, unless it was never sent), or the dial it was
        // queued behind failed (it was not sent: unreachable now, not one connect timeout per
        // queued call later).
        let link_event = async {
            loop {
                {
                    let s = rx.borrow_and_update();
                    if s.departed {
                        return Err(if never_sent(&s) {
                            unreachable("the host left this host's view".into())
                        } else {
                            MeshCallError::OutcomeUnknown {
                                peer: peer.id.to_owned(),
                                reason: "the host left this host's view with the call in flight"
                                    .into(),
                            }
                        });
                    }
                    if never_sent(&s) && s.failures != failures_before {
                        return Err(unreachable(format!(
                            "the dial failed: {}",
                            s.last_failure.as_deref().unwrap_or("unknown reason")
                        )));
                    }
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            biased;
            r = tokio::time::timeout_at(deadline, call) => match r {
                Ok(r) => r,
                Err(_) => {
                    let s = link.state.borrow();
                    Err(if never_sent(&s) {
                        unreachable(format!(
                            "no connection could be made within the call's deadline{}",
                            s.last_failure
                                .as_deref()
                                .map(|f| format!(" (last dial: {f})"))
                                .unwrap_or_default()
                        ))
                    } else {
                        MeshCallError::Timeout {
                            peer: peer.id.to_owned(),
                        }
                    })
                }
            },
            r = link_event => r,
        }
    }

    /// One unary RPC, signed, with the call's deadline as its gRPC timeout.
    async fn unary<Req, Resp>(
        &self,
        peer: PeerAddr<'_>,
        path: &'static str,
        msg: Req,
        deadline: Instant,
    ) -> Result<Resp, MeshCallError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.guarded(peer, deadline, |link| async move {
            let mut grpc = self.grpc(peer, &link).await?;
            let req = self.signed(tonic::Request::new(msg), path, Some(deadline));
            grpc.unary(
                req,
                http::uri::PathAndQuery::from_static(path),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .map(|r| r.into_inner())
            .map_err(|status| classify(peer, status))
        })
        .await
    }

    /// A gRPC client on the link's open connection (dialled if none is), ready to send.
    async fn grpc(
        &self,
        peer: PeerAddr<'_>,
        link: &Arc<PeerLink>,
    ) -> Result<tonic::client::Grpc<H2Service>, MeshCallError> {
        let unreachable = |reason: String| MeshCallError::Unreachable {
            peer: peer.id.to_owned(),
            addr: peer.advertise.to_owned(),
            reason,
        };
        let sender = self.sender(link).await.map_err(unreachable)?;
        let mut grpc = tonic::client::Grpc::with_origin(H2Service(sender), link.origin.clone())
            .max_decoding_message_size(self.config.max_message_bytes)
            .max_encoding_message_size(self.config.max_message_bytes);
        grpc.ready().await.map_err(|e| {
            unreachable(format!(
                "the connection closed before the call was sent: {e}"
            ))
        })?;
        Ok(grpc)
    }

    /// `req` with this host's MAC over `path` (and `deadline` as its gRPC timeout).
    fn signed<T>(
        &self,
        mut req: tonic::Request<T>,
        path: &'static str,
        deadline: Option<Instant>,
    ) -> tonic::Request<T> {
        if let Some(deadline) = deadline {
            req.set_timeout(deadline.saturating_duration_since(Instant::now()));
        }
        let mut headers = std::mem::take(req.metadata_mut()).into_headers();
        self.auth
            .sign_headers(&self.self_id, self.clock.wall_unix_ms(), path, &mut headers);
        *req.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
        req
    }

    /// The link's open call stream, opening one if there is none. `Ok(None)`: the peer has no
    /// `DeliverStream` (an older version during a rolling upgrade); use `Deliver`.
    async fn call_stream(
        &self,
        peer: PeerAddr<'_>,
        link: &Arc<PeerLink>,
    ) -> Result<Option<Arc<CallStream>>, MeshCallError> {
        if let Some(stream) = link.live_stream() {
            return Ok(Some(stream));
        }
        if link.streams_unsupported.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let _opening = link.opening.lock().await;
        if let Some(stream) = link.live_stream() {
            return Ok(Some(stream));
        }
        match self.open_call_stream(peer, link).await {
            // The cached connection died under the stream (it broke with it, and the
            // connection has not noticed yet): the stream was never opened; dial afresh once.
            Err(MeshCallError::Unreachable { .. }) if link.forget_sender() => {
                self.open_call_stream(peer, link).await
            }
            opened => opened,
        }
    }

    async fn open_call_stream(
        &self,
        peer: PeerAddr<'_>,
        link: &Arc<PeerLink>,
    ) -> Result<Option<Arc<CallStream>>, MeshCallError> {
        let mut grpc = self.grpc(peer, link).await?;
        let (tx, rx) = mpsc::unbounded_channel::<DeliverFrame>();
        let req = self.signed(
            tonic::Request::new(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)),
            paths::DELIVER_STREAM,
            None,
        );
        let answers = match grpc
            .streaming(
                req,
                http::uri::PathAndQuery::from_static(paths::DELIVER_STREAM),
                tonic_prost::ProstCodec::<DeliverFrame, DeliverAnswer>::default(),
            )
            .await
        {
            Ok(answers) => answers.into_inner(),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(peer = %peer.id, "peer has no DeliverStream: calls to it use Deliver");
                link.streams_unsupported.store(true, Ordering::Relaxed);
                return Ok(None);
            }
            Err(status) => return Err(classify(peer, status)),
        };
        let stream = Arc::new(CallStream {
            tx: Mutex::new(Some(tx)),
            waiters: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            reader: Mutex::new(None),
        });
        self.streams_opened.fetch_add(1, Ordering::Relaxed);
        let reader = tokio::spawn(read_answers(stream.clone(), answers, peer.id.to_owned()));
        *stream.reader.lock().expect("call stream lock") = Some(reader.abort_handle());
        *link.stream.lock().expect("peer link lock") = Some(stream.clone());
        Ok(Some(stream))
    }

    /// Delivers `req` as one frame of the link's call stream. `Ok(None)`: the peer has no call
    /// stream; nothing was sent.
    async fn deliver_on_stream(
        &self,
        peer: PeerAddr<'_>,
        link: &Arc<PeerLink>,
        req: &mut Option<DeliverRequest>,
    ) -> Result<Option<DeliverResponse>, MeshCallError> {
        // A stream that closed between finding it and sending on it was sent nothing: one more
        // stream is opened for the call then (the second cannot have closed for the same
        // reason without the connection refusing the new stream, which is `unreachable`).
        for _ in 0..2 {
            let Some(stream) = self.call_stream(peer, link).await? else {
                return Ok(None);
            };
            let Some(waiting) = stream.send(req) else {
                continue;
            };
            return match waiting.answer().await {
                Ok(answer) => Ok(Some(answer)),
                Err(reason) => Err(MeshCallError::OutcomeUnknown {
                    peer: peer.id.to_owned(),
                    reason,
                }),
            };
        }
        Err(MeshCallError::Unreachable {
            peer: peer.id.to_owned(),
            addr: peer.advertise.to_owned(),
            reason: "the host closed its call stream twice before the call was sent".into(),
        })
    }

    /// Delivers a call. The actor's answer (success or error) comes back as `Ok`/`Answered`.
    pub async fn deliver(
        &self,
        peer: PeerAddr<'_>,
        mut req: DeliverRequest,
        deadline: Instant,
    ) -> Result<Bytes, MeshCallError> {
        req.timeout_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1) as u64;
        let resp: DeliverResponse = if req.payload.len() <= STREAM_PAYLOAD_MAX {
            let mut req = Some(req);
            let streamed = self
                .guarded(peer, deadline, |link| async move {
                    let answer = self.deliver_on_stream(peer, &link, &mut req).await?;
                    Ok((answer, req))
                })
                .await?;
            match streamed {
                (Some(answer), _) => answer,
                (None, Some(req)) => self.unary(peer, paths::DELIVER, req, deadline).await?,
                (None, None) => unreachable!("a request not sent on a stream is handed back"),
            }
        } else {
            self.unary(peer, paths::DELIVER, req, deadline).await?
        };
        match resp.outcome {
            Some(Outcome::Ok(bytes)) => Ok(bytes),
            Some(Outcome::Error(detail)) => {
                Err(MeshCallError::Answered(ActorError::from_detail(&detail)))
            }
            None => Err(MeshCallError::OutcomeUnknown {
                peer: peer.id.to_owned(),
                reason: "the answer carried no outcome".into(),
            }),
        }
    }

    /// Directory `Lookup`.
    pub async fn lookup(
        &self,
        peer: PeerAddr<'_>,
        req: LookupRequest,
        deadline: Instant,
    ) -> Result<LookupResponse, MeshCallError> {
        self.unary(peer, paths::LOOKUP, req, deadline).await
    }

    /// Directory `Register`.
    pub async fn register(
        &self,
        peer: PeerAddr<'_>,
        req: RegisterRequest,
        deadline: Instant,
    ) -> Result<RegisterResponse, MeshCallError> {
        self.unary(peer, paths::REGISTER, req, deadline).await
    }

    /// Directory `Unregister`.
    pub async fn unregister(
        &self,
        peer: PeerAddr<'_>,
        req: UnregisterRequest,
        deadline: Instant,
    ) -> Result<UnregisterResponse, MeshCallError> {
        self.unary(peer, paths::UNREGISTER, req, deadline).await
    }

    /// Directory `Collect`.
    pub async fn collect(
        &self,
        peer: PeerAddr<'_>,
        req: CollectRequest,
        deadline: Instant,
    ) -> Result<CollectResponse, MeshCallError> {
        self.unary(peer, paths::COLLECT, req, deadline).await
    }

    /// Directory `ListEntries` (actor enumeration).
    pub async fn list_entries(
        &self,
        peer: PeerAddr<'_>,
        req: ListEntriesRequest,
        deadline: Instant,
    ) -> Result<ListEntriesResponse, MeshCallError> {
        self.unary(peer, paths::LIST_ENTRIES, req, deadline).await
    }
}

/// Dials `link`'s peer and opens an HTTP/2 connection on the socket, then records the outcome
/// on the link's state (which wakes every caller waiting for it).
async fn dial(link: Arc<PeerLink>, connector: Arc<dyn Connector>, config: MeshClientConfig) {
    let addr = link.advertise.as_str();
    let timeout = config.connect_timeout;
    let opened = tokio::time::timeout(timeout, async {
        let io = connector.connect_to(&link.id, addr).await?;
        link.state.send_modify(|s| {
            s.open += 1;
            s.connects += 1;
        });
        let io = TrackedIo {
            io,
            state: link.state.clone(),
        };
        hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_header_list_size(MAX_HEADER_LIST_BYTES)
            // Pings on idle pooled connections too: a peer whose machine vanished (no FIN, no
            // RST) is found before the next call waits out its whole deadline on a dead socket.
            .keep_alive_interval(config.keepalive_interval)
            .keep_alive_timeout(config.keepalive_interval * 2)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| std::io::Error::other(format!("HTTP/2 handshake: {e}")))
    })
    .await
    .unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("connect to {addr} timed out after {timeout:?}"),
        ))
    });
    let now = Instant::now();
    match opened {
        Ok((sender, connection)) => {
            let peer = addr.to_owned();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(peer = %peer, error = %e, "mesh connection ended");
                }
            });
            *link.sender.lock().expect("peer link lock") = Some(sender);
            *link.dialing.lock().expect("peer link lock") = false;
            link.state.send_modify(|s| {
                s.dials += 1;
                s.down_until = None;
                s.backoff = Duration::ZERO;
                s.last_failure = None;
            });
        }
        Err(e) => {
            *link.dialing.lock().expect("peer link lock") = false;
            let (min, max) = (config.dial_backoff_min, config.dial_backoff_max);
            link.state.send_modify(|s| {
                s.dials += 1;
                s.failures += 1;
                s.backoff = (s.backoff * 2).clamp(min, max);
                s.down_until = Some(now + s.backoff);
                s.last_failure = Some(e.to_string());
            });
        }
    }
}

/// Sorts a failed call into the three outcomes that matter.
fn classify(peer: PeerAddr<'_>, status: tonic::Status) -> MeshCallError {
    let mut source = status.source();
    while let Some(err) = source {
        // hyper's proof that a request was never handed to a connection: it was queued on one
        // that closed (or was not ready) before the request was written.
        if let Some(hyper) = err.downcast_ref::<hyper::Error>()
            && hyper.is_canceled()
        {
            return MeshCallError::Unreachable {
                peer: peer.id.to_owned(),
                addr: peer.advertise.to_owned(),
                reason: format!("the request was never sent: {hyper}"),
            };
        }
        // HTTP/2's own proofs that a stream was not processed (RFC 9113 §8.7): the peer
        // refused it (RST_STREAM REFUSED_STREAM), or its GOAWAY named a last stream below ours
        // (h2 fails exactly those streams with the GOAWAY error). A draining peer answers new
        // calls this way; they are safe to send elsewhere.
        if let Some(h2) = err.downcast_ref::<h2::Error>()
            && h2.is_remote()
            && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM))
        {
            return MeshCallError::Unreachable {
                peer: peer.id.to_owned(),
                addr: peer.advertise.to_owned(),
                reason: format!("the peer refused the stream before processing it: {h2}"),
            };
        }
        source = err.source();
    }
    let carries_detail = status
        .metadata()
        .get(sigx_proto::error::ERROR_KIND_METADATA)
        .is_some();
    if carries_detail || status.code() == tonic::Code::Unauthenticated {
        return MeshCallError::Answered(ActorError::from_status(&status));
    }
    match status.code() {
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => MeshCallError::Timeout {
            peer: peer.id.to_owned(),
        },
        // A size limit hit by a gRPC codec (the server's decoder refusing an oversize request
        // before any work, or our own encoder/decoder). `invalid` is never retried, so reading
        // an oversize *response* this way cannot run a call twice.
        tonic::Code::ResourceExhausted | tonic::Code::OutOfRange | tonic::Code::InvalidArgument => {
            MeshCallError::Answered(ActorError::invalid(format!(
                "mesh call to host {} exceeded a limit: {}",
                peer.id,
                status.message()
            )))
        }
        _ => MeshCallError::OutcomeUnknown {
            peer: peer.id.to_owned(),
            reason: format!("{:?}: {}", status.code(), status.message()),
        },
    }
}
