//! The inbound side of the routing loop: calls delivered by peers over the mesh, run here or
//! answered with the reason they must go elsewhere (`unreachable` from a fenced host,
//! `wrong-host` from one that does not register the type or takes no new activations): every
//! refusal proves the call never ran, so the caller's router re-places it.

use super::Router;
use super::is_eligible;
use crate::membership::MembershipHandle;
use crate::mesh::DeliverHandler;
use crate::runtime::{ActorId, Runtime};
use async_trait::async_trait;
use bytes::Bytes;
use sigx_proto::ActorError;
use sigx_proto::v1;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// Runs calls delivered by peers.
pub struct Inbound {
    runtime: Runtime,
    membership: MembershipHandle,
    counters: Arc<Router>,
}

impl Inbound {
    /// The inbound side of `router`.
    pub fn new(router: Arc<Router>) -> Self {
        Inbound {
            runtime: router.runtime.clone(),
            membership: router.membership.clone(),
            counters: router,
        }
    }
}

#[async_trait]
impl DeliverHandler for Inbound {
    async fn deliver(
        &self,
        peer: &str,
        req: v1::DeliverRequest,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        let Some(actor) = req.actor.as_ref().map(ActorId::from_proto) else {
            return Err(ActorError::invalid("Deliver without an actor"));
        };
        // The receiving side of the hop: a child of the caller's `sigx.mesh.deliver` span.
        let parent = req.trace.as_ref().and_then(crate::trace::extract);
        let cx = (parent.is_some() || crate::trace::enabled()).then(|| {
            let mut attrs = crate::trace::actor_attrs(&actor, &req.method);
            attrs.push(opentelemetry::KeyValue::new("sigx.peer", peer.to_string()));
            crate::trace::child(
                &parent.unwrap_or_default(),
                "sigx.mesh.receive",
                opentelemetry::trace::SpanKind::Server,
                attrs,
            )
        });
        crate::trace::traced(cx, self.run_delivered(peer, actor, req, deadline)).await
    }
}

impl Inbound {
    /// Runs a delivered call here, or answers why it must go elsewhere.
    async fn run_delivered(
        &self,
        peer: &str,
        actor: ActorId,
        req: v1::DeliverRequest,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        self.counters
            .counters
            .inbound_deliveries
            .fetch_add(1, Ordering::Relaxed);
        let me = self.membership.self_id();
        if self.membership.check_lease().is_err() || self.counters.state.fence_reason().is_some() {
            // A peer calling into a fenced host gets the answer it can act on: go elsewhere.
            return Err(ActorError::unreachable(format!(
                "host {me} is fenced: the call never ran; re-place it"
            )));
        }
        match self.runtime.registers(&actor.actor_type) {
            // The receiving side enforces registration too: wrong-host with no owner hint, so
            // the caller evicts its route and re-places (never a terminal 404).
            None => Err(ActorError::wrong_host(format!(
                "host {me} does not register type {:?} (called by {peer}): it never ran; re-place",
                actor.actor_type
            ))),
            Some(true) if req.targeted => Err(ActorError::invalid(format!(
                "{:?} is a stateful actor type: DispatchOn targets workers only",
                actor.actor_type
            ))),
            Some(true) => {
                // Only an active host takes new activations; the gate answers for that, and
                // the runtime routes calls to live activations even while leaving.
                let view = self.membership.view();
                let self_desc = view.get(me);
                if !self.runtime.is_active(&actor)
                    && !self_desc.is_some_and(|d| is_eligible(d, &actor.actor_type))
                {
                    return Err(ActorError::wrong_host(format!(
                        "host {me} is not accepting new activations ({}): it never ran; re-place",
                        self_desc
                            .map(|d| d.status.as_str())
                            .unwrap_or("not in its own view")
                    )));
                }
                self.runtime
                    .invoke(&actor, &req.method, req.payload, deadline)
                    .await
            }
            Some(false) => {
                self.runtime
                    .invoke(&actor, &req.method, req.payload, deadline)
                    .await
            }
        }
    }
}
