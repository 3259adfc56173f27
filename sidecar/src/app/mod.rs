//! The app API: the `ActorHost` gRPC service the sidecar serves on its Unix socket.
//!
//! The app registers on the `Serve` stream and answers turns; anyone on the socket may `Call`.
//! Where a call goes is not decided here: the service hands it to a [`Dispatcher`] — the local
//! runtime on a single host, the routing loop in a cluster.

pub mod authority;
pub mod deadline;
pub mod enumerate;
pub mod inflight;

pub use enumerate::{local_epoch, refuse_worker};
pub use inflight::CallsInFlight;

use crate::runtime::{ActorId, AttachError, Registry, Runtime};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use sigx_proto::ActorError;
use sigx_proto::v1::{self, actor_host_server::ActorHost};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// How long an app has to send `Register` after opening `Serve`.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Where calls go and what the host says about the cluster: the local runtime on a single host,
/// the routing loop and membership in a cluster.
#[async_trait]
pub trait Dispatcher: Send + Sync + 'static {
    /// Runs a call wherever the actor lives (or a worker, here); a new activation goes where
    /// `locality` prefers.
    async fn call(
        &self,
        actor: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
        locality: crate::placement::Locality,
    ) -> Result<Bytes, ActorError>;

    /// One attempt at a worker method on a chosen host.
    async fn dispatch_on(
        &self,
        host_id: String,
        worker: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError>;

    /// Where `actor` is active now (`Locate`): activates nothing.
    async fn locate(
        &self,
        actor: ActorId,
        deadline: Instant,
    ) -> Result<v1::LocateResponse, ActorError>;

    /// One page of the live activations of `actor_type` after `after` (`ListActors`).
    async fn list_actors(
        &self,
        actor_type: String,
        page_size: usize,
        after: Option<v1::ListCursor>,
        deadline: Instant,
    ) -> Result<crate::directory::ListPage, ActorError>;

    /// The filtered membership view.
    fn members(&self, req: &v1::MembersRequest) -> v1::MembersResponse;

    /// The filtered view now, then on every observed change.
    fn watch_members(&self, req: v1::MembersRequest) -> BoxStream<'static, v1::MembersResponse>;

    /// This host's status.
    fn status(&self) -> v1::StatusResponse;
}

/// The `Status` answer every dispatcher gives: the host's descriptor, its probe state, its live
/// activations per type, its counters and its view.
pub fn status_response(
    state: &crate::health::HostState,
    runtime: &Runtime,
    host: v1::HostDescriptor,
    counters: std::collections::BTreeMap<String, u64>,
    view: v1::MembersResponse,
) -> v1::StatusResponse {
    v1::StatusResponse {
        host: Some(host),
        state: state.state_name().to_string(),
        fence_reason: state.fence_reason().unwrap_or_default(),
        app_connected: runtime.app().is_some(),
        activations: runtime
            .activation_counts()
            .into_iter()
            .map(|(actor_type, activations)| v1::TypeActivations {
                actor_type,
                activations,
            })
            .collect(),
        counters: counters.into_iter().collect(),
        view: Some(view),
    }
}

/// The `ActorHost` service.
#[derive(Clone)]
pub struct AppService {
    runtime: Runtime,
    dispatcher: Arc<dyn Dispatcher>,
    default_timeout: Duration,
    calls: Arc<CallsInFlight>,
}

impl AppService {
    /// The service over `runtime`, sending calls to `dispatcher`; its `Call`s and `DispatchOn`s
    /// are counted in `calls` while they run (a graceful stop waits for them).
    pub fn new(
        runtime: Runtime,
        dispatcher: Arc<dyn Dispatcher>,
        default_timeout: Duration,
        calls: Arc<CallsInFlight>,
    ) -> Self {
        AppService {
            runtime,
            dispatcher,
            default_timeout,
            calls,
        }
    }

    fn deadline<T>(&self, req: &Request<T>, timeout_ms: u64) -> Instant {
        deadline::from_request(
            req.metadata(),
            timeout_ms,
            self.default_timeout,
            Instant::now(),
        )
    }

    fn max_payload(&self) -> usize {
        self.runtime.config().max_payload_bytes
    }
}

fn actor_of(actor: Option<&v1::ActorRef>, field: &str) -> Result<ActorId, ActorError> {
    let Some(actor) = actor else {
        return Err(ActorError::invalid(format!(
            "{field} is missing: name the actor type and key"
        )));
    };
    if actor.actor_type.is_empty() {
        return Err(ActorError::invalid(format!(
            "{field}.actor_type is empty: name a registered type"
        )));
    }
    if actor.key.len() > 1024 {
        return Err(ActorError::invalid(format!(
            "{field}.key is {} bytes: keys are at most 1024 bytes",
            actor.key.len()
        )));
    }
    Ok(ActorId::from_proto(actor))
}

fn check_payload(len: usize, limit: usize) -> Result<(), ActorError> {
    if len > limit {
        return Err(ActorError::invalid(format!(
            "payload of {len} bytes exceeds the limit of {limit} bytes (SIGX_MAX_PAYLOAD_BYTES); \
             send less per call"
        )));
    }
    Ok(())
}

/// Checks an app's `CallRequest` before anything runs: the actor, the locality, the payload
/// size against `max_payload`, and the method name. The error names the field to fix.
pub fn check_call(
    req: &v1::CallRequest,
    max_payload: usize,
) -> Result<(ActorId, crate::placement::Locality), ActorError> {
    let actor = actor_of(req.actor.as_ref(), "actor")?;
    let locality = crate::placement::Locality::from_proto(req.locality)?;
    check_payload(req.payload.len(), max_payload)?;
    if req.method.is_empty() {
        return Err(ActorError::invalid(
            "method is empty: name the method to call",
        ));
    }
    if req.method.starts_with('$') {
        return Err(ActorError::invalid(format!(
            "method {:?} starts with `$`, which is reserved for sigx's own turn kinds (e.g. \
             reminders, set with SetReminder); rename the method",
            req.method
        )));
    }
    Ok((actor, locality))
}

#[async_trait]
impl ActorHost for AppService {
    type ServeStream = UnboundedReceiverStream<Result<v1::SidecarMessage, Status>>;
    type WatchMembersStream = BoxStream<'static, Result<v1::MembersResponse, Status>>;

    async fn serve(
        &self,
        request: Request<Streaming<v1::AppMessage>>,
    ) -> Result<Response<Self::ServeStream>, Status> {
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.next())
            .await
            .map_err(|_| {
                ActorError::invalid(format!(
                    "no Register message within {REGISTER_TIMEOUT:?} of opening Serve: the first \
                     message must register the app's types"
                ))
            })?;
        let register = match first {
            Some(Ok(v1::AppMessage {
                msg: Some(v1::app_message::Msg::Register(r)),
            })) => r,
            Some(Ok(_)) => {
                return Err(ActorError::invalid(
                    "the first message on Serve must be Register (got a turn result)",
                )
                .into());
            }
            Some(Err(status)) => return Err(status),
            None => return Err(ActorError::invalid("Serve closed before Register").into()),
        };
        let registry = Registry::from_proto(&register)
            .map_err(|e| ActorError::invalid(format!("registration refused: {e}")))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let session = self
            .runtime
            .attach(registry, tx.clone())
            .map_err(|e| match e {
                // FAILED_PRECONDITION (the SDKs retry it: the other app may be this one's own
                // previous incarnation) under the kind whose meaning it is: this host does not
                // take this app; nothing was registered.
                e @ AttachError::AlreadyAttached(_) => ActorError::wrong_host(e.to_string()),
                AttachError::Invalid(e) => ActorError::invalid(e.to_string()),
                e @ AttachError::Undeclared { .. } => ActorError::invalid(e.to_string()),
                // INVALID, not FAILED_PRECONDITION: retrying the same registration cannot help.
                e @ AttachError::TypesChanged { .. } => ActorError::invalid(e.to_string()),
            })?;
        let _ = tx.send(Ok(v1::SidecarMessage {
            msg: Some(v1::sidecar_message::Msg::Registered(v1::Registered {
                host_id: self.runtime.config().host_id.clone(),
                max_payload_bytes: self.max_payload() as u64,
            })),
        }));
        let runtime = self.runtime.clone();
        let limit = self.max_payload();
        tokio::spawn(async move {
            loop {
                match inbound.next().await {
                    Some(Ok(v1::AppMessage {
                        msg: Some(v1::app_message::Msg::Result(mut result)),
                    })) => {
                        if let Some(v1::turn_result::Outcome::Ok(bytes)) = &result.outcome
                            && bytes.len() > limit
                        {
                            result.outcome = Some(v1::turn_result::Outcome::Error(v1::TurnError {
                                kind: v1::ErrorKind::Invalid as i32,
                                message: format!(
                                    "the actor's result of {} bytes exceeds the limit of {limit} \
                                     bytes (SIGX_MAX_PAYLOAD_BYTES)",
                                    bytes.len()
                                ),
                            }));
                        }
                        session.complete(result)
                    }
                    Some(Ok(v1::AppMessage {
                        msg: Some(v1::app_message::Msg::Drain(_)),
                    })) => {
                        tracing::info!(app = %session.registry.app_name, "app asked to be drained");
                        session.request_drain();
                    }
                    Some(Ok(_)) => {
                        tracing::warn!("app sent a second Register or an empty message: ignored");
                    }
                    // After the sidecar ended its side (a completed drain), the app exiting
                    // is the expected end; how its transport says goodbye (often an h2 reset)
                    // is not a failure worth a warning.
                    Some(Err(status)) if session.has_ended() => {
                        tracing::debug!(%status, "app stream closed after the drain");
                        break;
                    }
                    Some(Err(status)) => {
                        tracing::warn!(%status, "app stream failed");
                        break;
                    }
                    None => break,
                }
            }
            runtime.detach(&session);
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn call(
        &self,
        request: Request<v1::CallRequest>,
    ) -> Result<Response<v1::CallResponse>, Status> {
        let _in_flight = self.calls.enter();
        let deadline = self.deadline(&request, request.get_ref().timeout_ms);
        // The caller's W3C trace: standard metadata first, then the request's field.
        let parent = crate::trace::extract_metadata(request.metadata()).or_else(|| {
            request
                .get_ref()
                .trace
                .as_ref()
                .and_then(crate::trace::extract)
        });
        let req = request.into_inner();
        let (actor, locality) = check_call(&req, self.max_payload())?;
        let clock = self.runtime.config().clock.clone();
        let started = clock.now();
        let cx = (parent.is_some() || crate::trace::enabled()).then(|| {
            crate::trace::child(
                &parent.unwrap_or_default(),
                "sigx.call",
                opentelemetry::trace::SpanKind::Server,
                crate::trace::actor_attrs(&actor, &req.method),
            )
        });
        let answer = crate::trace::traced(
            cx,
            self.dispatcher
                .call(actor, req.method, req.payload, deadline, locality),
        )
        .await;
        let kind = match &answer {
            Ok(_) => "ok",
            Err(e) => e.kind.as_str(),
        };
        self.runtime
            .counters()
            .histograms
            .call(kind, clock.now().duration_since(started));
        Ok(Response::new(v1::CallResponse { payload: answer? }))
    }

    async fn locate(
        &self,
        request: Request<v1::LocateRequest>,
    ) -> Result<Response<v1::LocateResponse>, Status> {
        let deadline = self.deadline(&request, request.get_ref().timeout_ms);
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        Ok(Response::new(
            self.dispatcher.locate(actor, deadline).await?,
        ))
    }

    async fn list_actors(
        &self,
        request: Request<v1::ListActorsRequest>,
    ) -> Result<Response<v1::ListActorsResponse>, Status> {
        let deadline = self.deadline(&request, request.get_ref().timeout_ms);
        let (actor_type, page_size, after) = enumerate::list_request(request.get_ref())?;
        let with_reminders = request.get_ref().with_reminders;
        let page = self
            .dispatcher
            .list_actors(actor_type, page_size, after, deadline)
            .await?;
        let mut response = enumerate::list_response(page);
        if with_reminders {
            for location in &mut response.actors {
                let actor = actor_of(location.actor.as_ref(), "actor")?;
                location.reminders = crate::reminders::api::list(&self.runtime, actor)
                    .await?
                    .reminders;
            }
        }
        Ok(Response::new(response))
    }

    async fn members(
        &self,
        request: Request<v1::MembersRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        Ok(Response::new(self.dispatcher.members(request.get_ref())))
    }

    async fn dispatch_on(
        &self,
        request: Request<v1::DispatchOnRequest>,
    ) -> Result<Response<v1::CallResponse>, Status> {
        let _in_flight = self.calls.enter();
        let deadline = self.deadline(&request, request.get_ref().timeout_ms);
        // The caller's W3C trace, from the standard metadata (as on `Call`).
        let parent = crate::trace::extract_metadata(request.metadata());
        let req = request.into_inner();
        let worker = actor_of(req.worker.as_ref(), "worker")?;
        check_payload(req.payload.len(), self.max_payload())?;
        if req.host_id.is_empty() {
            return Err(ActorError::invalid("host_id is empty: pick a host from Members").into());
        }
        let cx = (parent.is_some() || crate::trace::enabled()).then(|| {
            let mut attrs = crate::trace::actor_attrs(&worker, &req.method);
            attrs.push(opentelemetry::KeyValue::new(
                "sigx.target_host",
                req.host_id.clone(),
            ));
            crate::trace::child(
                &parent.unwrap_or_default(),
                "sigx.dispatch_on",
                opentelemetry::trace::SpanKind::Server,
                attrs,
            )
        });
        let payload = crate::trace::traced(
            cx,
            self.dispatcher
                .dispatch_on(req.host_id, worker, req.method, req.payload, deadline),
        )
        .await?;
        Ok(Response::new(v1::CallResponse { payload }))
    }

    async fn watch_members(
        &self,
        request: Request<v1::MembersRequest>,
    ) -> Result<Response<Self::WatchMembersStream>, Status> {
        let stream = self.dispatcher.watch_members(request.into_inner()).map(Ok);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn status(
        &self,
        _request: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        Ok(Response::new(self.dispatcher.status()))
    }

    async fn set_reminder(
        &self,
        request: Request<v1::SetReminderRequest>,
    ) -> Result<Response<v1::SetReminderResponse>, Status> {
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        Ok(Response::new(
            crate::reminders::api::set(&self.runtime, actor, req).await?,
        ))
    }

    async fn delete_reminder(
        &self,
        request: Request<v1::DeleteReminderRequest>,
    ) -> Result<Response<v1::DeleteReminderResponse>, Status> {
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        Ok(Response::new(
            crate::reminders::api::delete(&self.runtime, actor, &req).await?,
        ))
    }

    async fn list_reminders(
        &self,
        request: Request<v1::ListRemindersRequest>,
    ) -> Result<Response<v1::ListRemindersResponse>, Status> {
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        Ok(Response::new(
            crate::reminders::api::list(&self.runtime, actor).await?,
        ))
    }

    async fn read_state(
        &self,
        request: Request<v1::ReadStateRequest>,
    ) -> Result<Response<v1::ReadStateResponse>, Status> {
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        let selection = match (req.all, req.keys.is_empty()) {
            (true, true) => crate::state::Selection::All,
            (false, _) => crate::state::Selection::Keys(req.keys),
            (true, false) => {
                return Err(ActorError::invalid(
                    "a state read sets both `all` and `keys`: choose one",
                )
                .into());
            }
        };
        let entries = self
            .runtime
            .read_state(&actor, &req.activation_id, req.epoch, selection)
            .await?;
        Ok(Response::new(v1::ReadStateResponse {
            entries: entries
                .into_iter()
                .map(|(key, value)| v1::StateEntry {
                    key,
                    found: value.is_some(),
                    value: value.unwrap_or_default(),
                })
                .collect(),
        }))
    }

    async fn set_timer(
        &self,
        request: Request<v1::SetTimerRequest>,
    ) -> Result<Response<v1::SetTimerResponse>, Status> {
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        let spec = crate::runtime::TimerSpec::from_proto(&req, self.max_payload())?;
        let replaced = self.runtime.set_timer(&actor, &req.activation_id, spec)?;
        Ok(Response::new(v1::SetTimerResponse { replaced }))
    }

    async fn cancel_timer(
        &self,
        request: Request<v1::CancelTimerRequest>,
    ) -> Result<Response<v1::CancelTimerResponse>, Status> {
        let req = request.into_inner();
        let actor = actor_of(req.actor.as_ref(), "actor")?;
        let existed = self
            .runtime
            .cancel_timer(&actor, &req.activation_id, &req.name)?;
        Ok(Response::new(v1::CancelTimerResponse { existed }))
    }
}
