//! The output gate and the state reads of activations (DESIGN.md §11).
//!
//! A turn's answer reaches its caller only after the writes it carries are durable: the batch is
//! committed under the activation's epoch while the turn still holds its admission, so the next
//! turn of the activation reads what this one wrote, and nobody sees an answer whose write
//! failed. A batch the store refuses (a stale epoch: a newer activation exists) or cannot store
//! answers the caller an error instead, and supersedes the activation: the app's instance may
//! hold what it believed it wrote, so it must not take another turn.

use super::activation::Shared;
use super::session::{TurnAnswer, TurnOutcome};
use super::{ActorId, Runtime};
use crate::state::{Selection, StateError, check_batch, check_selection};
use bytes::Bytes;
use opentelemetry::KeyValue;
use sigx_proto::ActorError;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The error kind a failed commit is answered with (below), as its span's `sigx.result`.
fn state_error_kind(e: &StateError) -> &'static str {
    match e {
        StateError::StaleEpoch { .. } | StateError::UnknownEpoch { .. } => "stale-epoch",
        StateError::Invalid(_) => "invalid",
        StateError::Unavailable { .. } => "outcome-unknown",
    }
}

/// What the output gate decided about one answer.
pub(crate) struct Gated {
    /// What the caller is told.
    pub(crate) outcome: TurnOutcome,
    /// The activation must take no more turns.
    pub(crate) supersede: bool,
}

impl Runtime {
    /// Commits `answer`'s writes under `epoch` (an `ok` answer on a serving host only) and
    /// returns what the caller is told.
    pub(crate) async fn commit_answer(
        &self,
        actor: &ActorId,
        epoch: u64,
        answer: TurnAnswer,
    ) -> Gated {
        let TurnAnswer { outcome, writes } = answer;
        let pass = |outcome| Gated {
            outcome,
            supersede: false,
        };
        if writes.is_empty() || outcome.is_err() {
            return pass(outcome);
        }
        // A host that can no longer prove its lease writes nothing; `settle` then tells the
        // caller the outcome is unknown (the app ran the turn).
        if self.inner.gate.check_serving().is_err() {
            return pass(outcome);
        }
        let refused = |e: ActorError| Gated {
            outcome: Err(e),
            supersede: true,
        };
        if let Err(e) = check_batch(&writes) {
            return refused(ActorError::invalid(format!(
                "{e}; nothing of the turn's batch was stored and the activation of {actor} was \
                 dropped (its instance may hold the refused writes)"
            )));
        }
        let counters = &self.inner.counters;
        let started = self.inner.cfg.clock.now();
        let cx = crate::trace::step(
            "sigx.state.commit",
            opentelemetry::trace::SpanKind::Client,
            || {
                let mut attrs = crate::trace::actor_only_attrs(actor);
                attrs.push(KeyValue::new(
                    "sigx.state.store",
                    self.inner.cfg.state.kind(),
                ));
                attrs.push(KeyValue::new("sigx.state.writes", writes.len() as i64));
                attrs.push(KeyValue::new("sigx.epoch", epoch as i64));
                attrs
            },
        );
        let committed = self.inner.cfg.state.commit(actor, epoch, &writes).await;
        if let Some(cx) = &cx {
            let failure = committed
                .as_ref()
                .err()
                .map(|e| (state_error_kind(e), e.to_string()));
            crate::trace::finish_as(cx, failure.as_ref().map(|(k, m)| (*k, m.as_str())));
        }
        counters.histograms.state_commits.observe(
            self.inner
                .cfg
                .clock
                .now()
                .duration_since(started)
                .as_secs_f64(),
        );
        match committed {
            Ok(()) => {
                counters.state_commits.fetch_add(1, Ordering::Relaxed);
                pass(outcome)
            }
            Err(e @ (StateError::StaleEpoch { .. } | StateError::UnknownEpoch { .. })) => {
                counters.stale_epochs.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%actor, epoch, error = %e, "state write refused: stale epoch");
                refused(ActorError::stale_epoch(format!(
                    "{e}; the turn ran but none of its writes was stored; do not retry blindly: \
                     effects outside the state store may have happened"
                )))
            }
            Err(StateError::Invalid(m)) => refused(ActorError::invalid(format!(
                "{m}; nothing of the turn's batch was stored and the activation of {actor} was \
                 dropped"
            ))),
            Err(e @ StateError::Unavailable { .. }) => {
                counters.state_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%actor, epoch, error = %e, "state commit failed");
                refused(ActorError::outcome_unknown(format!(
                    "{e} while committing the turn's writes: whether they are stored is unknown, \
                     and the activation of {actor} was dropped; not retried"
                )))
            }
        }
    }

    /// Ends the live activation of `actor` on this host if it holds `epoch`: the state store
    /// refused that epoch for a reminder change, so a newer activation exists elsewhere.
    pub(crate) fn supersede_epoch(&self, actor: &ActorId, epoch: u64, err: ActorError) {
        self.inner
            .counters
            .stale_epochs
            .fetch_add(1, Ordering::Relaxed);
        let table = self.inner.activations.lock().expect("activations lock");
        if let Some(a) = table.get(actor).filter(|a| a.shared.epoch() == epoch) {
            a.shared.supersede(err);
        }
    }

    /// The running activation `activation_id` of `actor` on this host: from its Activate turn
    /// to the end of its Deactivate turn, in the routing table or not (a graceful stop takes
    /// every activation out of the table at once, while some still run their Activate or last
    /// turns, which may read state; so does an ending one's Deactivate).
    fn live(&self, actor: &ActorId, activation_id: &str) -> Result<Arc<Shared>, ActorError> {
        match self.running_activation(actor, activation_id) {
            Some(shared) => Ok(shared),
            None => Err(ActorError::invalid(format!(
                "no live activation {activation_id:?} of {actor} on this host: state is read \
                 from inside a turn, with the turn's activation id and epoch"
            ))),
        }
    }

    /// Reads `actor`'s state for its live activation `activation_id`, whose epoch the app
    /// passes back (`Turn.epoch`). A stale epoch supersedes the activation.
    pub async fn read_state(
        &self,
        actor: &ActorId,
        activation_id: &str,
        epoch: u64,
        selection: Selection,
    ) -> Result<Vec<(String, Option<Bytes>)>, ActorError> {
        let shared = self.live(actor, activation_id)?;
        let current = shared.epoch();
        if epoch != current {
            return Err(ActorError::invalid(format!(
                "the read names epoch {epoch}, but activation {activation_id:?} of {actor} holds \
                 epoch {current}: pass the turn's own epoch"
            )));
        }
        check_selection(&selection).map_err(|e| ActorError::invalid(e.to_string()))?;
        self.inner.gate.check_serving()?;
        match self.inner.cfg.state.read(actor, epoch, &selection).await {
            Ok(entries) => Ok(entries),
            Err(e @ (StateError::StaleEpoch { .. } | StateError::UnknownEpoch { .. })) => {
                self.inner
                    .counters
                    .stale_epochs
                    .fetch_add(1, Ordering::Relaxed);
                let err = ActorError::stale_epoch(e.to_string());
                shared.supersede(err.clone());
                Err(err)
            }
            Err(StateError::Invalid(m)) => Err(ActorError::invalid(m)),
            Err(e @ StateError::Unavailable { .. }) => Err(ActorError::unreachable(format!(
                "{e}; the read changed nothing: fail or retry the turn"
            ))),
        }
    }
}
