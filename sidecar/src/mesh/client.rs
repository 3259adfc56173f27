//! The mesh client: one pooled HTTP/2 channel per peer, signed requests, deadlines, and a
//! classification of every failure into what the routing loop may do with it.

use super::auth::MeshAuth;
use super::transport::Connector;
use crate::clock::SharedClock;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use sigx_proto::ActorError;
use sigx_proto::v1::{
    CollectRequest, CollectResponse, DeliverRequest, DeliverResponse, LookupRequest,
    LookupResponse, RegisterRequest, RegisterResponse, UnregisterRequest, UnregisterResponse,
    deliver_response::Outcome,
};
use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

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
}

impl Default for MeshClientConfig {
    fn default() -> Self {
        MeshClientConfig {
            connect_timeout: Duration::from_secs(2),
            max_message_bytes: 4 * 1024 * 1024 + 64 * 1024,
            keepalive_interval: Duration::from_secs(10),
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

/// Calls peers over pooled channels.
pub struct MeshClient {
    self_id: Arc<str>,
    auth: MeshAuth,
    clock: SharedClock,
    connector: Arc<dyn Connector>,
    config: MeshClientConfig,
    pool: Mutex<HashMap<(String, String), Channel>>,
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
            pool: Mutex::new(HashMap::new()),
        }
    }

    /// This host's id.
    pub fn self_id(&self) -> &str {
        &self.self_id
    }

    /// Drops pooled channels to `peer` (it left the view).
    pub fn forget(&self, peer: &str) {
        self.pool
            .lock()
            .expect("mesh pool lock")
            .retain(|(id, _), _| id != peer);
    }

    /// Drops pooled channels to every peer not in `keep`.
    pub fn retain_peers(&self, keep: impl Fn(&str) -> bool) {
        self.pool
            .lock()
            .expect("mesh pool lock")
            .retain(|(id, _), _| keep(id));
    }

    fn channel(&self, peer: PeerAddr<'_>) -> Result<Channel, MeshCallError> {
        let key = (peer.id.to_owned(), peer.advertise.to_owned());
        let mut pool = self.pool.lock().expect("mesh pool lock");
        if let Some(ch) = pool.get(&key) {
            return Ok(ch.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", peer.advertise))
            .map_err(|e| MeshCallError::Unreachable {
                peer: peer.id.to_owned(),
                addr: peer.advertise.to_owned(),
                reason: format!("bad advertised address: {e}"),
            })?
            .http2_keep_alive_interval(self.config.keepalive_interval)
            .keep_alive_timeout(self.config.keepalive_interval * 2)
            // Pings on idle pooled connections too: a peer whose machine vanished (no FIN, no RST)
            // is found before the next call waits out its whole deadline on a dead socket.
            .keep_alive_while_idle(true);
        let connector = self.connector.clone();
        let addr = peer.advertise.to_owned();
        let timeout = self.config.connect_timeout;
        // The dial (with its own timeout) happens inside the connector service, so every dial
        // failure reaches the caller wrapped in tonic's `ConnectError`: proof nothing was sent.
        let svc = tower::service_fn(move |_uri: http::Uri| {
            let connector = connector.clone();
            let addr = addr.clone();
            async move {
                match tokio::time::timeout(timeout, connector.connect(&addr)).await {
                    Ok(Ok(io)) => Ok(TokioIo::new(io)),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("connect to {addr} timed out after {timeout:?}"),
                    )),
                }
            }
        });
        let ch = endpoint.connect_with_connector_lazy(svc);
        // A host id keeps one address for its life; a new address means a stale entry.
        pool.retain(|(id, _), _| id != peer.id);
        pool.insert(key, ch.clone());
        Ok(ch)
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
        let now = Instant::now();
        if deadline <= now {
            return Err(MeshCallError::Timeout {
                peer: peer.id.to_owned(),
            });
        }
        let channel = self.channel(peer)?;
        let mut grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(self.config.max_message_bytes)
            .max_encoding_message_size(self.config.max_message_bytes);
        let mut req = tonic::Request::new(msg);
        req.set_timeout(deadline - now);
        let mut headers = std::mem::take(req.metadata_mut()).into_headers();
        self.auth
            .sign_headers(&self.self_id, self.clock.wall_unix_ms(), path, &mut headers);
        *req.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
        let call = async {
            grpc.ready().await.map_err(|e| MeshCallError::Unreachable {
                peer: peer.id.to_owned(),
                addr: peer.advertise.to_owned(),
                reason: format!("channel not ready: {e}"),
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
        match tokio::time::timeout_at(deadline, call).await {
            Ok(r) => r,
            Err(_) => Err(MeshCallError::Timeout {
                peer: peer.id.to_owned(),
            }),
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

/// Sorts a failed call into the three outcomes that matter.
fn classify(peer: PeerAddr<'_>, status: tonic::Status) -> MeshCallError {
    let mut source = status.source();
    while let Some(err) = source {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            return MeshCallError::Unreachable {
                peer: peer.id.to_owned(),
                addr: peer.advertise.to_owned(),
                reason: err.to_string(),
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
