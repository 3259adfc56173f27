//! Turns bounded by the lease (DESIGN.md §8): the directory's gate, plus the lease's validity as
//! every stateful turn's not-after, and the fenced host's withdrawal held until its turns are
//! over. Shared by the host's `bring_up` and the simulator's copy of it.

use crate::membership::MembershipHandle;
use crate::runtime::{ActivationGate, ActorId, Runtime};
use async_trait::async_trait;
use futures::FutureExt;
use sigx_proto::ActorError;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;

/// The directory's gate (Rule 1 claims, the lease check) with the lease's validity, minus the
/// drift margin, as the bound of every turn handed to the app.
pub struct LeaseBoundGate {
    inner: Arc<dyn ActivationGate>,
    membership: MembershipHandle,
}

/// The error for a turn or activation refused because this host's lease no longer holds. One
/// wording for every path that asks the lease: callers and SDK tests match the host id in it.
pub(crate) fn lease_fenced(me: &str, reason: impl std::fmt::Display) -> ActorError {
    ActorError::fenced(format!("host {me} is fenced: {reason}"))
}

impl LeaseBoundGate {
    /// Bounds `inner`'s turns by `membership`'s lease.
    pub fn new(inner: Arc<dyn ActivationGate>, membership: MembershipHandle) -> Self {
        LeaseBoundGate { inner, membership }
    }
}

#[async_trait]
impl ActivationGate for LeaseBoundGate {
    fn check_serving(&self) -> Result<(), ActorError> {
        self.inner.check_serving()
    }

    fn serving_until(&self) -> Result<Option<SystemTime>, ActorError> {
        self.inner.check_serving()?;
        self.membership
            .turn_bound()
            .map_err(|reason| lease_fenced(self.membership.self_id(), reason))
    }

    fn check_accepting(&self) -> Result<(), ActorError> {
        self.inner.check_accepting()
    }

    async fn claim(
        &self,
        actor: &ActorId,
        activation_id: &str,
        deadline: Instant,
    ) -> Result<(), ActorError> {
        self.inner.claim(actor, activation_id, deadline).await
    }

    async fn release(&self, actor: &ActorId, activation_id: &str) {
        self.inner.release(actor, activation_id).await
    }
}

/// Wires a host's turns to its lease: `directory_gate` wrapped in a [`LeaseBoundGate`] (set it
/// as the runtime's gate), and the fenced withdrawal of `membership` held until every turn
/// `runtime` handed out was answered or is past its not-after.
pub fn bound_by_lease(
    runtime: &Runtime,
    membership: &MembershipHandle,
    directory_gate: Arc<dyn ActivationGate>,
) -> Arc<dyn ActivationGate> {
    let rt = runtime.clone();
    membership.hold_withdrawal_until(move || {
        let rt = rt.clone();
        async move { rt.turns_settled().await }.boxed()
    });
    Arc::new(LeaseBoundGate::new(directory_gate, membership.clone()))
}
