//! The mesh server: the `Mesh` gRPC service behind the auth layer, on any [`Listener`].

use super::auth::{MeshAuthLayer, VerifiedPeer, Verifier};
use super::transport::{AcceptLimits, Listener, incoming};
use async_trait::async_trait;
use bytes::Bytes;
use sigx_proto::ActorError;
use sigx_proto::v1::{
    self, CollectRequest, CollectResponse, DeliverRequest, DeliverResponse, LookupRequest,
    LookupResponse, RegisterRequest, RegisterResponse, UnregisterRequest, UnregisterResponse,
    deliver_response::Outcome,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// Runs calls delivered by peers (implemented by the host: local activation, turn dispatch).
#[async_trait]
pub trait DeliverHandler: Send + Sync + 'static {
    /// Runs `req` from authenticated `peer`, finishing by `deadline`. An `Err` travels back
    /// in-band as the call's answer (it is an answer, not a transport failure).
    async fn deliver(
        &self,
        peer: &str,
        req: DeliverRequest,
        deadline: Instant,
    ) -> Result<Bytes, ActorError>;
}

/// Answers the directory RPCs (implemented by [`crate::directory::Directory`]). Synchronous on
/// purpose: every answer is computed under one partition lock, with no I/O.
pub trait DirectoryHandler: Send + Sync + 'static {
    /// `Lookup` from `peer`.
    fn lookup(&self, peer: &str, req: LookupRequest) -> Result<LookupResponse, ActorError>;
    /// `Register` from `peer`.
    fn register(&self, peer: &str, req: RegisterRequest) -> Result<RegisterResponse, ActorError>;
    /// `Unregister` from `peer`.
    fn unregister(
        &self,
        peer: &str,
        req: UnregisterRequest,
    ) -> Result<UnregisterResponse, ActorError>;
    /// `Collect` from `peer`.
    fn collect(&self, peer: &str, req: CollectRequest) -> Result<CollectResponse, ActorError>;
}

/// Limits and timeouts of the mesh server.
#[derive(Debug, Clone)]
pub struct MeshServerConfig {
    /// The largest gRPC message accepted, bytes: the payload limit plus envelope overhead.
    /// Larger messages are refused with `RESOURCE_EXHAUSTED` without being buffered whole.
    pub max_message_bytes: usize,
    /// The largest HTTP/2 header list accepted, bytes.
    pub max_header_list_bytes: u32,
    /// Concurrent requests per connection.
    pub concurrency_per_connection: usize,
    /// HTTP/2 keepalive ping interval (detects dead peers on idle pooled connections).
    pub keepalive_interval: Duration,
    /// Upper bound for any delivered call's remaining time, whatever the caller says.
    pub max_call_timeout: Duration,
    /// Limits on inbound connections (count, silence after connecting).
    pub accept: AcceptLimits,
}

impl Default for MeshServerConfig {
    fn default() -> Self {
        MeshServerConfig {
            max_message_bytes: 4 * 1024 * 1024 + 64 * 1024,
            max_header_list_bytes: 16 * 1024,
            concurrency_per_connection: 1024,
            keepalive_interval: Duration::from_secs(10),
            max_call_timeout: Duration::from_secs(300),
            accept: AcceptLimits::default(),
        }
    }
}

/// The `Mesh` service implementation.
pub struct MeshService {
    deliver: Arc<dyn DeliverHandler>,
    directory: Arc<dyn DirectoryHandler>,
    max_call_timeout: Duration,
}

impl MeshService {
    /// A service dispatching to the two handlers.
    pub fn new(
        deliver: Arc<dyn DeliverHandler>,
        directory: Arc<dyn DirectoryHandler>,
        config: &MeshServerConfig,
    ) -> Self {
        MeshService {
            deliver,
            directory,
            max_call_timeout: config.max_call_timeout,
        }
    }
}

fn peer_of<T>(req: &tonic::Request<T>) -> Result<String, tonic::Status> {
    req.extensions()
        .get::<VerifiedPeer>()
        .map(|p| p.0.clone())
        .ok_or_else(|| {
            // Unreachable when served through `serve`: the auth layer runs first.
            ActorError::unauthenticated("mesh request reached the service without auth").to_status()
        })
}

#[tonic::async_trait]
impl v1::mesh_server::Mesh for MeshService {
    async fn deliver(
        &self,
        request: tonic::Request<DeliverRequest>,
    ) -> Result<tonic::Response<DeliverResponse>, tonic::Status> {
        let peer = peer_of(&request)?;
        let req = request.into_inner();
        let timeout = Duration::from_millis(req.timeout_ms).min(self.max_call_timeout);
        if timeout.is_zero() {
            return Err(ActorError::invalid(
                "Deliver without a timeout: every mesh call carries the caller's remaining deadline",
            )
            .to_status());
        }
        let deadline = Instant::now() + timeout;
        let span = tracing::debug_span!(
            "mesh.deliver",
            peer = %peer,
            actor_type = req.actor.as_ref().map(|a| a.actor_type.as_str()).unwrap_or(""),
            key = req.actor.as_ref().map(|a| a.key.as_str()).unwrap_or(""),
        );
        let outcome = match self
            .deliver
            .deliver(&peer, req, deadline)
            .instrument(span)
            .await
        {
            Ok(bytes) => Outcome::Ok(bytes),
            Err(err) => Outcome::Error(err.to_detail()),
        };
        Ok(tonic::Response::new(DeliverResponse {
            outcome: Some(outcome),
        }))
    }

    async fn lookup(
        &self,
        request: tonic::Request<LookupRequest>,
    ) -> Result<tonic::Response<LookupResponse>, tonic::Status> {
        let peer = peer_of(&request)?;
        self.directory
            .lookup(&peer, request.into_inner())
            .map(tonic::Response::new)
            .map_err(|e| e.to_status())
    }

    async fn register(
        &self,
        request: tonic::Request<RegisterRequest>,
    ) -> Result<tonic::Response<RegisterResponse>, tonic::Status> {
        let peer = peer_of(&request)?;
        self.directory
            .register(&peer, request.into_inner())
            .map(tonic::Response::new)
            .map_err(|e| e.to_status())
    }

    async fn unregister(
        &self,
        request: tonic::Request<UnregisterRequest>,
    ) -> Result<tonic::Response<UnregisterResponse>, tonic::Status> {
        let peer = peer_of(&request)?;
        self.directory
            .unregister(&peer, request.into_inner())
            .map(tonic::Response::new)
            .map_err(|e| e.to_status())
    }

    async fn collect(
        &self,
        request: tonic::Request<CollectRequest>,
    ) -> Result<tonic::Response<CollectResponse>, tonic::Status> {
        let peer = peer_of(&request)?;
        self.directory
            .collect(&peer, request.into_inner())
            .map(tonic::Response::new)
            .map_err(|e| e.to_status())
    }
}

/// Serves the mesh on `listener` until `shutdown` completes, then waits for open connections
/// to finish (HTTP/2 GOAWAY: in-flight calls complete, new ones go elsewhere).
///
/// Every request passes [`MeshAuthLayer`] before the gRPC service decodes anything.
pub async fn serve<L, F>(
    listener: L,
    verifier: Arc<Verifier>,
    service: MeshService,
    config: MeshServerConfig,
    shutdown: F,
) -> Result<(), tonic::transport::Error>
where
    L: Listener,
    F: Future<Output = ()> + Send,
{
    let svc = v1::mesh_server::MeshServer::new(service)
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes);
    tonic::transport::Server::builder()
        .http2_max_header_list_size(config.max_header_list_bytes)
        .concurrency_limit_per_connection(config.concurrency_per_connection)
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_interval * 2))
        .layer(MeshAuthLayer::new(verifier))
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming(listener, config.accept), shutdown)
        .await
}
