//! The seam between local activations and the cluster: what the runtime asks before it
//! activates an actor or dispatches a turn. A single host with no directory uses [`OpenGate`];
//! a clustered host plugs in the directory's gate (Rule 1: register before activate) and the
//! membership's lease check (fencing).

use super::ActorId;
use async_trait::async_trait;
use sigx_proto::ActorError;
use std::time::SystemTime;
use tokio::time::Instant;

/// Asked by the runtime at every activation and every turn dispatch.
#[async_trait]
pub trait ActivationGate: Send + Sync + 'static {
    /// Synchronous, cheap, and called before *every* turn dispatch and activation: may this host
    /// run turns right now? A clustered host answers `fenced` once its lease is no longer valid
    /// on both clocks (DESIGN.md §3: a queued turn that wakes after a suspend must find the host
    /// already fenced).
    fn check_serving(&self) -> Result<(), ActorError>;

    /// [`ActivationGate::check_serving`], and until when a turn handed to the app now may run:
    /// the lease's validity minus the drift margin, on the wall clock (`None`: no lease bounds
    /// this host's turns). Asked at the moment a stateful turn is handed to the app; the answer
    /// becomes part of the turn's not-after (DESIGN.md §8).
    fn serving_until(&self) -> Result<Option<SystemTime>, ActorError> {
        self.check_serving().map(|()| None)
    }

    /// May this host accept a *new* activation now? Called before `claim`. A leaving host
    /// answers `wrong-host` (the call never ran; the caller re-places).
    fn check_accepting(&self) -> Result<(), ActorError> {
        Ok(())
    }

    /// Claims `actor` for this host under `activation_id` before it is activated (Rule 1),
    /// trying until `deadline`: the deadline of the call that asked for the activation, so a
    /// claim gives up when nobody waits for it any more. On success the activation counts as
    /// live for the directory until [`ActivationGate::release`]. An error aborts the activation
    /// and is returned to the caller (e.g. `wrong-host` naming the winner when another host
    /// holds the actor).
    async fn claim(
        &self,
        actor: &ActorId,
        activation_id: &str,
        deadline: Instant,
    ) -> Result<(), ActorError>;

    /// The activation ended (deactivated, dropped, or failed to activate): release the claim.
    async fn release(&self, actor: &ActorId, activation_id: &str);
}

/// The gate of a single host with no cluster: always serving, every claim granted.
#[derive(Debug, Default, Clone, Copy)]
pub struct OpenGate;

#[async_trait]
impl ActivationGate for OpenGate {
    fn check_serving(&self) -> Result<(), ActorError> {
        Ok(())
    }
    async fn claim(
        &self,
        _actor: &ActorId,
        _activation_id: &str,
        _deadline: Instant,
    ) -> Result<(), ActorError> {
        Ok(())
    }
    async fn release(&self, _actor: &ActorId, _activation_id: &str) {}
}
