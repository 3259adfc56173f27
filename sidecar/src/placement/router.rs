//! The routing loop (DESIGN.md §5) and the inbound side of `Deliver`: where a call goes, what
//! is retried, and what reaches the caller unchanged.
//!
//! Exactly three answers are retried — `unreachable`, `wrong-host`, `unplaceable` — because each
//! proves the call never ran. Answers that carry a `retry_after` (a partition handing over, an
//! actor moving) are waited on within the call's deadline without spending a retry, so a handoff
//! delays calls but fails none. A call whose connection died in flight is `outcome-unknown` and
//! is never retried: only the caller knows whether its method is idempotent.

use super::{Locality, PlacementRng, Policy, RouteCache, choose_with, eligible};
use crate::app::Dispatcher;
use crate::health::HostState;
use crate::membership::{LoadBoard, MemberFilter, MembershipHandle, MembershipView};
use crate::mesh::{MeshCallError, MeshClient, PeerAddr};
use crate::runtime::{ActorId, Runtime};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use sigx_proto::v1;
use sigx_proto::{ActorError, ErrorKind};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The first pause before retrying a host that refused the connection while still in the view.
const UNREACHABLE_WAIT_MIN: Duration = Duration::from_millis(25);
/// The longest such pause.
const UNREACHABLE_WAIT_MAX: Duration = Duration::from_millis(400);

pub use super::locator::Locator;

/// Counters of the routing loop.
#[derive(Debug, Default)]
pub struct RouterCounters {
    pub local_dispatches: AtomicU64,
    pub remote_dispatches: AtomicU64,
    pub targeted_dispatches: AtomicU64,
    pub inbound_deliveries: AtomicU64,
    pub retries_unreachable: AtomicU64,
    pub retries_wrong_host: AtomicU64,
    pub retries_unplaceable: AtomicU64,
    pub transient_waits: AtomicU64,
}

impl RouterCounters {
    fn snapshot(&self) -> Vec<(String, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("localDispatches".into(), g(&self.local_dispatches)),
            ("remoteDispatches".into(), g(&self.remote_dispatches)),
            ("targetedDispatches".into(), g(&self.targeted_dispatches)),
            ("inboundDeliveries".into(), g(&self.inbound_deliveries)),
            ("retriesUnreachable".into(), g(&self.retries_unreachable)),
            ("retriesWrongHost".into(), g(&self.retries_wrong_host)),
            ("retriesUnplaceable".into(), g(&self.retries_unplaceable)),
            ("transientWaits".into(), g(&self.transient_waits)),
        ]
    }
}

/// Routing settings.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Retries on unreachable / wrong-host / unplaceable (default 3).
    pub retries: u32,
    /// Where new activations go.
    pub policy: Policy,
    /// Per-type policies, overriding `policy` for the types they name.
    pub type_policies: BTreeMap<String, Policy>,
    /// Pause before a retry, multiplied by the attempt number.
    pub backoff: Duration,
    /// The policy's randomness; `None` = the thread RNG. The simulator seeds it.
    pub rng: Option<PlacementRng>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            retries: 3,
            policy: Policy::Random,
            type_policies: BTreeMap::new(),
            backoff: Duration::from_millis(10),
            rng: None,
        }
    }
}

/// The cluster's dispatcher: routes calls, answers inbound deliveries, reports status.
pub struct Router {
    me: Arc<str>,
    cfg: RouterConfig,
    pub(super) membership: MembershipHandle,
    pub(super) runtime: Runtime,
    mesh: Arc<MeshClient>,
    locator: Arc<dyn Locator>,
    pub(super) state: Arc<HostState>,
    routes: RouteCache,
    pub(super) counters: RouterCounters,
    loads: Arc<LoadBoard>,
}

/// Where one attempt goes. Borrows the peer's id and address from the view the attempt was
/// chosen in (the caller holds that `Arc` across the call), so no call copies them.
enum Target<'v> {
    Local,
    Remote(PeerAddr<'v>),
}

/// Where `resolve` found the host: a cached route needs no new cache entry after the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Cached,
    Decided,
}

impl Router {
    /// A router for this host.
    pub fn new(
        cfg: RouterConfig,
        membership: MembershipHandle,
        runtime: Runtime,
        mesh: Arc<MeshClient>,
        locator: Arc<dyn Locator>,
        state: Arc<HostState>,
    ) -> Self {
        Router {
            me: membership.self_id().into(),
            loads: membership.loads(),
            cfg,
            membership,
            runtime,
            mesh,
            locator,
            state,
            routes: RouteCache::default(),
            counters: RouterCounters::default(),
        }
    }

    /// The routing counters.
    pub fn counters(&self) -> &RouterCounters {
        &self.counters
    }

    /// Whether `actor_type` is stateful as far as this host can tell: its own registration
    /// first, then the descriptors of the view (no type list, or the type listed as stateful).
    fn is_stateful_type(&self, view: &MembershipView, actor_type: &str) -> bool {
        if let Some(stateful) = self.runtime.registers(actor_type) {
            return stateful;
        }
        eligible(view, actor_type)
            .iter()
            .any(|h| match (&h.types, &h.stateful_types) {
                (None, _) | (Some(_), None) => true,
                (Some(_), Some(s)) => s.iter().any(|t| t == actor_type),
            })
    }

    fn target<'v>(&self, view: &'v MembershipView, id: &str) -> Result<Target<'v>, ActorError> {
        if id == &*self.me {
            return Ok(Target::Local);
        }
        match view.get(id) {
            Some(h) => Ok(Target::Remote(PeerAddr {
                id: &h.id,
                advertise: &h.advertise,
            })),
            None => Err(ActorError::unreachable(format!(
                "host {id} is not in this host's membership view: the call never ran"
            ))),
        }
    }

    /// Decides where one attempt goes.
    async fn resolve(
        &self,
        view: &Arc<MembershipView>,
        actor: &ActorId,
        hint: Option<String>,
        deadline: Instant,
        locality: Locality,
    ) -> Result<(String, Found), ActorError> {
        let ty = &*actor.actor_type;
        if !self.is_stateful_type(view, ty) {
            // Workers run on the host that receives the call, when it registers them.
            if self.runtime.registers(ty) == Some(false) {
                return Ok((self.me.to_string(), Found::Decided));
            }
            return Ok((self.place(view, ty, locality)?.id.clone(), Found::Decided));
        }
        if let Some(h) = hint
            && view.get(&h).is_some_and(|d| d.registers(ty))
        {
            return Ok((h, Found::Decided));
        }
        if let Some(h) = self.routes.get(view, actor) {
            return Ok((h, Found::Cached));
        }
        let located = super::locator::locate_traced(&*self.locator, actor, deadline).await?;
        // The lookup may have waited (a partition recovering after a departure): judge its
        // answer, and place, against the view as it is now, not as it was before the lookup.
        let now = self.membership.view();
        if let Some(h) = located {
            // A host still in the view holds the activation (a leaving host too, until it has
            // unregistered). A host absent from the view departed: place anew.
            if now.get(&h).is_some_and(|d| d.registers(ty)) {
                return Ok((h, Found::Decided));
            }
        }
        Ok((self.place(&now, ty, locality)?.id.clone(), Found::Decided))
    }

    /// A host for a new activation of `ty`, by the type's policy among the eligible hosts the
    /// caller's locality keeps.
    fn place<'v>(
        &self,
        view: &'v MembershipView,
        ty: &str,
        locality: Locality,
    ) -> Result<&'v crate::membership::HostDescriptor, ActorError> {
        let policy = self
            .cfg
            .type_policies
            .get(ty)
            .copied()
            .unwrap_or(self.cfg.policy);
        choose_with(
            policy,
            view,
            ty,
            &self.me,
            self.cfg.rng.as_ref(),
            Some(&self.loads),
            locality,
        )
    }

    async fn attempt(
        &self,
        view: &Arc<MembershipView>,
        host: &str,
        actor: &ActorId,
        method: &str,
        payload: &Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        match self.target(view, host)? {
            Target::Local => {
                self.counters
                    .local_dispatches
                    .fetch_add(1, Ordering::Relaxed);
                self.runtime
                    .invoke(actor, method, payload.clone(), deadline)
                    .await
            }
            Target::Remote(peer) => {
                self.counters
                    .remote_dispatches
                    .fetch_add(1, Ordering::Relaxed);
                let req = v1::DeliverRequest {
                    actor: Some(actor.to_proto()),
                    method: method.to_string(),
                    payload: payload.clone(),
                    timeout_ms: 0,
                    targeted: false,
                    trace: None,
                };
                self.deliver(actor, peer, req, deadline).await
            }
        }
    }

    /// One mesh hop, under the caller side's `sigx.mesh.deliver` span when the call is traced:
    /// the span's context travels in `req.trace`, so the peer's spans and turn are its children.
    async fn deliver(
        &self,
        actor: &ActorId,
        peer: PeerAddr<'_>,
        mut req: v1::DeliverRequest,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        let cx = crate::trace::child_of_current(
            "sigx.mesh.deliver",
            opentelemetry::trace::SpanKind::Client,
            || {
                let mut attrs = crate::trace::actor_attrs(actor, &req.method);
                attrs.push(opentelemetry::KeyValue::new(
                    "sigx.peer",
                    peer.id.to_string(),
                ));
                attrs
            },
        );
        req.trace = cx.as_ref().and_then(crate::trace::inject);
        crate::trace::traced(cx, async {
            self.mesh
                .deliver(peer, req, deadline)
                .await
                .map_err(MeshCallError::into_actor_error)
        })
        .await
    }

    /// The routing loop, with no placement preference.
    pub async fn route(
        &self,
        actor: &ActorId,
        method: &str,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        self.route_near(actor, method, payload, deadline, Locality::Any)
            .await
    }

    /// The routing loop, a new activation going where `locality` prefers.
    ///
    /// It makes no span of its own: every caller already runs it under one that covers exactly
    /// the routing and names the same actor and method (`sigx.call` for an app's call,
    /// `sigx.reminder.fire` for a reminder), so a `sigx.route` span would time the same interval
    /// twice and cost a fifth of a traced call's span work (issue 16). What the routing learns
    /// goes on that span instead (`sigx.host`, `sigx.route.cached`, `sigx.route.attempts`); its
    /// look-ups, activation and mesh hops are that span's children, one `sigx.mesh.deliver` per
    /// attempt, so retries stay visible.
    #[tracing::instrument(level = "debug", skip(self, payload), fields(actor = %actor, method))]
    pub async fn route_near(
        &self,
        actor: &ActorId,
        method: &str,
        payload: Bytes,
        deadline: Instant,
        locality: Locality,
    ) -> Result<Bytes, ActorError> {
        if let Some(reason) = self.state.fence_reason() {
            // A worker this host registers runs here as before (seed: a fenced host keeps
            // serving its own workers): workers have no single-activation promise to break.
            if self.runtime.registers(&actor.actor_type) == Some(false) {
                return self.runtime.invoke(actor, method, payload, deadline).await;
            }
            // Terminal for everything else (seed: "Fencing"). The seed refuses only what would
            // resolve to a local activation and forwards the rest; sigx refuses those too,
            // because the forward could not work for long: a fenced host's view is frozen, and
            // peers refuse its mesh calls as an unknown peer once they have expired it.
            return Err(ActorError::fenced(format!(
                "host {} is fenced ({reason}): it serves no calls but to its own workers until \
                 it is restarted",
                self.me
            )));
        }
        let mut retries = 0u32;
        let mut attempts = 0i64;
        let mut hint: Option<String> = None;
        let mut unreachable_wait = Duration::ZERO;
        loop {
            let mut last_target = None;
            let resolved = self
                .resolve(
                    &self.membership.view(),
                    actor,
                    hint.take(),
                    deadline,
                    locality,
                )
                .await;
            // The view the target was chosen in (resolve may have waited on the directory).
            let view = self.membership.view();
            let outcome = match resolved {
                Ok((host, found)) => {
                    attempts += 1;
                    let r = self
                        .attempt(&view, &host, actor, method, &payload, deadline)
                        .await;
                    // A route read from the cache under this very view is already there;
                    // otherwise (new decision, or the view changed meanwhile) record it.
                    if r.is_ok() && (found == Found::Decided || !self.routes.holds(&view)) {
                        self.routes.put(&view, actor, &host);
                    }
                    if r.is_ok() {
                        crate::trace::annotate(|| {
                            use opentelemetry::KeyValue as Kv;
                            [
                                Kv::new("sigx.host", host.clone()),
                                Kv::new("sigx.route.cached", found == Found::Cached),
                                Kv::new("sigx.route.attempts", attempts),
                            ]
                        });
                    }
                    last_target = Some(host);
                    r
                }
                Err(e) => Err(e),
            };
            let err = match outcome {
                Ok(bytes) => return Ok(bytes),
                Err(e) => e,
            };
            // Only an answer the loop would have acted on (a retry, a wait: proof the call never
            // ran) becomes `timeout` at the deadline, since the deadline is what ended the
            // routing. Any other answer arrived and says what happened (`app`, `fenced`, ...):
            // it reaches the caller unchanged, however late.
            let would_retry = err.kind.is_retryable_route();
            if !would_retry {
                return Err(err);
            }
            if Instant::now() >= deadline {
                return Err(ActorError::timeout(format!(
                    "call {actor}.{method} passed its deadline while routing (last answer: {err})"
                )));
            }
            // A host that refuses connections but is still in the view has most likely crashed
            // and not yet expired: its actors move once membership drops it (TTL + margin). The
            // call never ran, so wait for that within the deadline instead of spending the
            // retries in a few milliseconds and failing a call a crash should only delay.
            if err.kind == ErrorKind::Unreachable
                && let Some(host) = &last_target
                && host.as_str() != &*self.me
                && self.membership.view().get(host).is_some()
            {
                self.counters
                    .transient_waits
                    .fetch_add(1, Ordering::Relaxed);
                self.routes.evict(actor);
                unreachable_wait =
                    (unreachable_wait * 2).clamp(UNREACHABLE_WAIT_MIN, UNREACHABLE_WAIT_MAX);
                let membership = self.membership.clone();
                tokio::spawn(async move {
                    let _ = membership.refresh().await;
                });
                tokio::time::sleep_until((Instant::now() + unreachable_wait).min(deadline)).await;
                continue;
            }
            // A transient answer (handoff in progress): wait within the deadline, spend no retry.
            if let Some(after) = err.retry_after
                && err.kind.is_retryable_route()
            {
                self.counters
                    .transient_waits
                    .fetch_add(1, Ordering::Relaxed);
                self.routes.evict(actor);
                hint = err.owner_hint.clone();
                tokio::time::sleep_until((Instant::now() + after).min(deadline)).await;
                continue;
            }
            self.routes.evict(actor);
            let counter = match err.kind {
                ErrorKind::Unreachable => &self.counters.retries_unreachable,
                ErrorKind::WrongHost => &self.counters.retries_wrong_host,
                _ => &self.counters.retries_unplaceable,
            };
            if retries >= self.cfg.retries {
                return Err(ActorError::activation(
                    format!(
                        "call {actor}.{method} could not be placed after {} attempts",
                        retries + 1
                    ),
                    err,
                ));
            }
            counter.fetch_add(1, Ordering::Relaxed);
            retries += 1;
            tracing::debug!(attempt = retries, error = %err, "retrying: the call never ran");
            match err.kind {
                ErrorKind::WrongHost => hint = err.owner_hint.clone(),
                ErrorKind::Unplaceable | ErrorKind::Unreachable => {
                    // Against a refreshed view: the one pod registering a type may be mid-join,
                    // or the unreachable host may already be gone.
                    let _ = tokio::time::timeout_at(deadline, self.membership.refresh()).await;
                }
                _ => {}
            }
            let pause = self.cfg.backoff * retries;
            tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
        }
    }

    fn members_of(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        members_response(&self.membership.view(), req)
    }
}

fn members_response(view: &MembershipView, req: &v1::MembersRequest) -> v1::MembersResponse {
    let filter = MemberFilter {
        any_status: req.status == v1::MemberStatusFilter::Any as i32,
        registers: (!req.registers.is_empty()).then(|| req.registers.clone()),
    };
    v1::MembersResponse {
        version: view.version,
        hosts: view
            .members(&filter)
            .into_iter()
            .map(|h| h.to_proto())
            .collect(),
    }
}

#[async_trait]
impl Dispatcher for Router {
    async fn call(
        &self,
        actor: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
        locality: Locality,
    ) -> Result<Bytes, ActorError> {
        self.route_near(&actor, &method, payload, deadline, locality)
            .await
    }

    async fn dispatch_on(
        &self,
        host_id: String,
        worker: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        let view = self.membership.view();
        if self.runtime.registers(&worker.actor_type) == Some(true)
            || view
                .get(&host_id)
                .and_then(|h| h.stateful_types.as_ref())
                .is_some_and(|s| s.iter().any(|t| **t == *worker.actor_type))
        {
            return Err(ActorError::invalid(format!(
                "{:?} is a stateful actor type: DispatchOn targets workers only (placement decides \
                 where an actor lives); use Call",
                worker.actor_type
            )));
        }
        self.counters
            .targeted_dispatches
            .fetch_add(1, Ordering::Relaxed);
        // Self-targets run in process: a host often cannot reach its own advertised address,
        // and a fenced host can still serve its own workers.
        if host_id == *self.me {
            return self
                .runtime
                .invoke(&worker, &method, payload, deadline)
                .await;
        }
        let Some(host) = view.get(&host_id) else {
            return Err(ActorError::unreachable(format!(
                "host {host_id:?} is not in this host's membership view (departed, or never \
                 joined); pick one from Members"
            )));
        };
        let req = v1::DeliverRequest {
            actor: Some(worker.to_proto()),
            method,
            payload,
            timeout_ms: 0,
            targeted: true,
            trace: None,
        };
        let peer = PeerAddr {
            id: &host.id,
            advertise: &host.advertise,
        };
        self.deliver(&worker, peer, req, deadline).await
    }

    async fn locate(
        &self,
        actor: ActorId,
        deadline: Instant,
    ) -> Result<v1::LocateResponse, ActorError> {
        crate::app::refuse_worker(self.runtime.registers(&actor.actor_type), &actor)?;
        let Some(at) = self.locator.where_is(&actor, deadline).await? else {
            return Ok(v1::LocateResponse::default());
        };
        // The epoch is known only where the activation runs.
        let epoch = if at.host == *self.me {
            crate::app::local_epoch(&self.runtime, &actor, &at.activation_id)
        } else {
            0
        };
        Ok(v1::LocateResponse {
            active: true,
            host_id: at.host,
            activation_id: at.activation_id,
            epoch,
        })
    }

    async fn list_actors(
        &self,
        actor_type: String,
        page_size: usize,
        after: Option<v1::ListCursor>,
        deadline: Instant,
    ) -> Result<crate::directory::ListPage, ActorError> {
        self.locator
            .list(&actor_type, page_size, after, deadline)
            .await
    }

    fn members(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        self.members_of(req)
    }

    fn watch_members(&self, req: v1::MembersRequest) -> BoxStream<'static, v1::MembersResponse> {
        let rx = self.membership.subscribe();
        tokio_stream::wrappers::WatchStream::new(rx)
            .map(move |view| members_response(&view, &req))
            .boxed()
    }

    fn status(&self) -> v1::StatusResponse {
        let view = self.membership.view();
        let mut counters: BTreeMap<String, u64> = self.runtime.counters().snapshot();
        counters.extend(self.counters.snapshot());
        counters.extend(self.locator.counters());
        for (name, value) in self.membership.counters().named() {
            counters.insert(name.to_string(), value);
        }
        let mut host = self.membership.descriptor().to_proto();
        if let Some(me) = view.get(&self.me) {
            host.status = me.status.to_proto() as i32;
        }
        crate::app::status_response(
            &self.state,
            &self.runtime,
            host,
            counters,
            members_response(
                &view,
                &v1::MembersRequest {
                    status: v1::MemberStatusFilter::Any as i32,
                    registers: String::new(),
                },
            ),
        )
    }
}
