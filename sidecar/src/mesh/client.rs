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
    CollectRequest, CollectResponse, DeliverRequest, DeliverResponse, LookupRequest,
    LookupResponse, RegisterRequest, RegisterResponse, UnregisterRequest, UnregisterResponse,
    deliver_response::Outcome,
};
use std::collections::BTreeMap;
use std::error::Error as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

/// gRPC method paths (signed into every request's MAC).
pub mod paths {
    /// `Mesh/Deliver`.
    pub const DELIVER: &str = "/sigx.actors.v1.Mesh/Deliver";
    /// `Mesh/Lookup`.
    pub const LOOKUP: &str = "/sigx.actors.v1.Mesh/Lookup";
    /// `Mesh/Register`.
    pub const REGISTER: &str = "/sigx.actors.v1.Mesh/Register";
    /// `Mesh/Unregister`.
    pub const UNREGISTER: &str = "/sigx.actors.v1.Mesh/Unregister";
    /// `Mesh/Collect`.
    pub const COLLECT: &str = "/sigx.actors.v1.Mesh/Collect";
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
    advertise: String,
    /// `http://<advertise>`: the `:authority` of every request.
    origin: http::Uri,
    state: Arc<watch::Sender<LinkState>>,
    /// The open connection's request handle, if one is open.
    sender: Mutex<Option<SendRequest<tonic::body::Body>>>,
    /// A dial is in progress: calls arriving meanwhile wait for its outcome and share it.
    dialing: Mutex<bool>,
}

impl PeerLink {
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
        }
    }

    /// This host's id.
    pub fn self_id(&self) -> &str {
        &self.self_id
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
                    link.state.send_modify(|s| s.departed = true);
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
            advertise: peer.advertise.to_owned(),
            origin,
            state: Arc::new(watch::Sender::new(LinkState::default())),
            sender: Mutex::new(None),
            dialing: Mutex::new(false),
        });
        // A host id keeps one address for its life; a new address means a stale entry.
        if let Some(old) = pool.insert(peer.id.to_owned(), link.clone()) {
            old.state.send_modify(|s| s.departed = true);
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
        let mut rx = link.state.subscribe();
        {
            if let Some(sender) = link.live_sender() {
                return Ok(sender);
            }
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
            return link.live_sender().ok_or_else(|| {
                "the connection closed as soon as it opened: the call was never sent".to_owned()
            });
        }
    }

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
        let mut req = tonic::Request::new(msg);
        req.set_timeout(deadline - Instant::now());
        let mut headers = std::mem::take(req.metadata_mut()).into_headers();
        self.auth
            .sign_headers(&self.self_id, self.clock.wall_unix_ms(), path, &mut headers);
        *req.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
        let call = async {
            let sender = self.sender(&link).await.map_err(unreachable)?;
            let mut grpc = tonic::client::Grpc::with_origin(H2Service(sender), link.origin.clone())
                .max_decoding_message_size(self.config.max_message_bytes)
                .max_encoding_message_size(self.config.max_message_bytes);
            grpc.ready().await.map_err(|e| {
                unreachable(format!(
                    "the connection closed before the call was sent: {e}"
                ))
            })?;
            grpc.unary(
                req,
                http::uri::PathAndQuery::from_static(path),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .map(|r| r.into_inner())
            .map_err(|status| classify(peer, status))
        };
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
        let resp: DeliverResponse = self.unary(peer, paths::DELIVER, req, deadline).await?;
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
}

/// Dials `link`'s peer and opens an HTTP/2 connection on the socket, then records the outcome
/// on the link's state (which wakes every caller waiting for it).
async fn dial(link: Arc<PeerLink>, connector: Arc<dyn Connector>, config: MeshClientConfig) {
    let addr = link.advertise.as_str();
    let timeout = config.connect_timeout;
    let opened = tokio::time::timeout(timeout, async {
        let io = connector.connect(addr).await?;
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
