//! The mesh server: the `Mesh` gRPC service behind the auth layer, on any [`Listener`].

use super::auth::{MeshAuthLayer, VerifiedPeer, Verifier};
use super::transport::{AcceptLimits, Listener, incoming};
use async_trait::async_trait;
use bytes::Bytes;
use sigx_proto::ActorError;
use sigx_proto::v1::{
    self, CollectRequest, CollectResponse, DeliverAnswer, DeliverFrame, DeliverRequest,
    DeliverResponse, ListEntriesRequest, ListEntriesResponse, LookupRequest, LookupResponse,
    RegisterRequest, RegisterResponse, UnregisterRequest, UnregisterResponse,
    deliver_response::Outcome,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

/// How long a closing call stream waits for its caller to half-close it after the closing
/// notice, before it stops reading (the caller stops sending within a round trip).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

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
    /// `ListEntries` from `peer` (read-only: actor enumeration).
    fn list_entries(
        &self,
        peer: &str,
        req: ListEntriesRequest,
    ) -> Result<ListEntriesResponse, ActorError>;
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
    /// Calls one call stream may run at once (further frames wait: HTTP/2 flow control then
    /// holds the caller back).
    stream_concurrency: usize,
    /// True once the server shuts down: call streams send their closing notice.
    draining: watch::Receiver<bool>,
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
            stream_concurrency: config.concurrency_per_connection,
            draining: watch::channel(false).1,
        }
    }
}

/// Runs one delivered call: the work of `Deliver` and of one `DeliverStream` frame. `Err` is a
/// request that cannot run at all.
async fn run_delivered(
    deliver: &dyn DeliverHandler,
    peer: &str,
    req: DeliverRequest,
    max_call_timeout: Duration,
) -> Result<DeliverResponse, ActorError> {
    let timeout = Duration::from_millis(req.timeout_ms).min(max_call_timeout);
    if timeout.is_zero() {
        return Err(ActorError::invalid(
            "Deliver without a timeout: every mesh call carries the caller's remaining deadline",
        ));
    }
    let deadline = Instant::now() + timeout;
    let span = tracing::debug_span!(
        "mesh.deliver",
        peer = %peer,
        actor_type = req.actor.as_ref().map(|a| a.actor_type.as_str()).unwrap_or(""),
        key = req.actor.as_ref().map(|a| a.key.as_str()).unwrap_or(""),
    );
    // Bounded by the caller's deadline here too: the caller has given up by then (a unary
    // caller resets its HTTP/2 stream, which drops this future; a frame on a call stream has
    // no stream of its own to reset).
    let delivered = tokio::time::timeout_at(deadline, deliver.deliver(peer, req, deadline))
        .instrument(span)
        .await
        .unwrap_or_else(|_| {
            Err(ActorError::timeout(
                "the call's deadline passed on the host running it; a late result is discarded",
            ))
        });
    let outcome = match delivered {
        Ok(bytes) => Outcome::Ok(bytes),
        Err(err) => Outcome::Error(err.to_detail()),
    };
    Ok(DeliverResponse {
        outcome: Some(outcome),
    })
}

fn answer(call_id: u64, err: ActorError) -> DeliverAnswer {
    DeliverAnswer {
        call_id,
        response: Some(DeliverResponse {
            outcome: Some(Outcome::Error(err.to_detail())),
        }),
    }
}

/// Reads one call stream's frames and runs each call in a task of its own; answers go to `tx`.
/// On shutdown it sends the closing notice, answers frames that crossed it as never run, and
/// stops once the caller half-closes (or after [`CLOSE_GRACE`]). The answer stream ends when
/// the last running call has answered.
async fn serve_call_stream(
    peer: Arc<str>,
    mut frames: tonic::Streaming<DeliverFrame>,
    tx: mpsc::UnboundedSender<Result<DeliverAnswer, tonic::Status>>,
    deliver: Arc<dyn DeliverHandler>,
    max_call_timeout: Duration,
    limit: Arc<Semaphore>,
    mut draining: watch::Receiver<bool>,
) {
    let mut closing_at: Option<Instant> = None;
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let frame = tokio::select! {
            biased;
            _ = draining.wait_for(|d| *d), if closing_at.is_none() => {
                closing_at = Some(Instant::now());
                let _ = tx.send(Ok(DeliverAnswer { call_id: 0, response: None }));
                continue;
            }
            _ = tokio::time::sleep_until(closing_at.map(|t| t + CLOSE_GRACE).unwrap_or_else(Instant::now)), if closing_at.is_some() => {
                tracing::debug!(peer = %peer, "call stream not half-closed after the closing notice: stop reading");
                return;
            }
            frame = frames.message() => frame,
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(peer = %peer, %status, "call stream ended");
                return;
            }
        };
        if frame.call_id == 0 {
            tracing::warn!(peer = %peer, "call stream frame with call id 0 (reserved): ignored");
            continue;
        }
        if closing_at.is_some() {
            let _ = tx.send(Ok(answer(
                frame.call_id,
                ActorError::unreachable(
                    "the host is shutting down and closed this call stream before the call                      ran: it never ran",
                ),
            )));
            continue;
        }
        let Some(req) = frame.request else {
            let _ = tx.send(Ok(answer(
                frame.call_id,
                ActorError::invalid("DeliverFrame without a request"),
            )));
            continue;
        };
        let (peer, tx, deliver) = (peer.clone(), tx.clone(), deliver.clone());
        tokio::spawn(async move {
            let response = match run_delivered(&*deliver, &peer, req, max_call_timeout).await {
                Ok(response) => response,
                Err(err) => {
                    let _ = tx.send(Ok(answer(frame.call_id, err)));
                    return;
                }
            };
            let _ = tx.send(Ok(DeliverAnswer {
                call_id: frame.call_id,
                response: Some(response),
            }));
            drop(permit);
        });
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
        run_delivered(
            &*self.deliver,
            &peer,
            request.into_inner(),
            self.max_call_timeout,
        )
        .await
        .map(tonic::Response::new)
        .map_err(|e| e.to_status())
    }

    type DeliverStreamStream =
        Pin<Box<dyn futures::Stream<Item = Result<DeliverAnswer, tonic::Status>> + Send + 'static>>;

    async fn deliver_stream(
        &self,
        request: tonic::Request<tonic::Streaming<DeliverFrame>>,
    ) -> Result<tonic::Response<Self::DeliverStreamStream>, tonic::Status> {
        let peer: Arc<str> = peer_of(&request)?.into();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve_call_stream(
            peer,
            request.into_inner(),
            tx,
            self.deliver.clone(),
            self.max_call_timeout,
            Arc::new(Semaphore::new(self.stream_concurrency)),
            self.draining.clone(),
        ));
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        )))
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

    async fn list_entries(
        &self,
        request: tonic::Request<ListEntriesRequest>,
    ) -> Result<tonic::Response<ListEntriesResponse>, tonic::Status> {
        let peer = peer_of(&request)?;
        self.directory
            .list_entries(&peer, request.into_inner())
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
    let mut service = service;
    let (draining, draining_rx) = watch::channel(false);
    service.draining = draining_rx;
    let shutdown = async move {
        shutdown.await;
        let _ = draining.send(true);
    };
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
