//! One turn of an activation, run in its caller's task: admitted by the activation's turn
//! semaphore, bounded by the caller's deadline and the lease, its writes through the output gate,
//! and its late answer awaited before the next turn is admitted (see activation.rs).

use super::activation::Shared;
use super::session::{TurnAnswer, TurnKind, TurnOf, TurnOutcome};
use super::{ActorId, InFlight, Runtime};
use bytes::Bytes;
use sigx_proto::{ActorError, ErrorKind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

/// A caller of one activation, counted as waiting until it is admitted or gives up.
pub(crate) struct Caller {
    shared: Arc<Shared>,
    activation_id: Arc<str>,
    waiting: bool,
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.admitted();
    }
}

impl Caller {
    /// A caller counted in `shared.waiting` (by the table look-up that found the activation).
    pub(super) fn new(shared: Arc<Shared>, activation_id: Arc<str>) -> Self {
        Caller {
            shared,
            activation_id,
            waiting: true,
        }
    }

    /// The activation this caller entered.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    fn admitted(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Runs one call's turn in the caller's task, once the activation admits it. The caller
    /// is answered at its deadline at the latest; the turn's late answer is still awaited (by
    /// a task of its own) before the next turn is admitted, so turns never overlap in the app.
    pub(crate) async fn call(
        self,
        rt: &Runtime,
        actor: &ActorId,
        method: &str,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        let kind = TurnKind::of_call(method, payload);
        // The turn's span (admission wait included); its context is what the app receives.
        let cx = crate::trace::child_of_current(
            "sigx.turn",
            opentelemetry::trace::SpanKind::Internal,
            || crate::trace::actor_attrs(actor, method),
        );
        crate::trace::traced(
            cx,
            self.turn(rt, actor, kind, method, deadline, || Ok(()), true),
        )
        .await
    }

    /// Runs one turn of `kind` (`what` names it in errors and logs) like a call: admitted in
    /// order, bounded by `deadline` and the lease, its writes through the output gate. `admit`
    /// runs once the turn holds its admission, just before it is handed to the app, and may
    /// still refuse it (a timer cancelled while its tick waited). A turn with `idle` false
    /// (a timer tick) does not count as activity for the idle timeout.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn turn(
        mut self,
        rt: &Runtime,
        actor: &ActorId,
        kind: TurnKind,
        what: &str,
        deadline: Instant,
        admit: impl FnOnce() -> Result<(), ActorError>,
        idle: bool,
    ) -> Result<Bytes, ActorError> {
        let method = what;
        let shared = self.shared.clone();
        let waited = tokio::time::timeout_at(deadline, shared.turns.clone().acquire_owned()).await;
        self.admitted();
        let permit = match waited {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => return Err(shared.closed_error(actor)),
            Err(_) => {
                rt.inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err(ActorError::timeout(format!(
                    "call {actor}.{method} waited past its deadline for its turn; it never ran"
                )));
            }
        };
        if let Some(ended) = shared.ended() {
            return Err(ended);
        }
        // Fencing is checked at every turn dispatch (DESIGN.md §3), and the lease bounds how
        // long the app may run the turn (§8).
        let not_after = rt.lease_not_after(deadline)?;
        admit()?;
        rt.inner.counters.turns.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let epoch = shared.epoch();
        let turn = shared.app.start_turn(
            actor,
            TurnOf {
                activation_id: &self.activation_id,
                epoch,
            },
            kind,
            deadline,
            now,
            not_after,
        );
        let mut running = RunningTurn {
            turn: Some(Box::pin(turn)),
            permit: Some(permit),
            in_flight: Some(InFlight::new(rt)),
            shared: shared.clone(),
            rt: rt.clone(),
            actor: actor.clone(),
            method: method.to_string(),
            epoch,
            started: now,
            slow_at: now + rt.inner.cfg.slow_turn,
            idle,
        };
        let outcome = {
            let turn = running.turn.as_mut().expect("turn");
            tokio::select! {
                biased;
                outcome = turn => Some(outcome),
                _ = tokio::time::sleep_until(deadline) => None,
                _ = tokio::time::sleep_until(running.slow_at) => {
                    running.warn_slow();
                    tokio::select! {
                        biased;
                        outcome = running.turn.as_mut().expect("turn") => Some(outcome),
                        _ = tokio::time::sleep_until(deadline) => None,
                    }
                }
            }
        };
        match outcome {
            Some(answer) => {
                // The output gate: the writes are durable before the answer goes out, and
                // before the next turn is admitted (this one still holds the permit).
                let outcome = gate(rt, &shared, actor, epoch, answer).await;
                running.finished(&outcome);
                rt.settle(outcome)
            }
            None => {
                // `running` is dropped here: its late answer is awaited by a task of its own.
                rt.inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(ActorError::timeout(format!(
                    "call {actor}.{method} passed its deadline; a late result is discarded"
                )))
            }
        }
    }
}

/// A turn sent to the app and its admission. Dropped before its answer (the caller's deadline
/// passed, or the caller itself was dropped), it hands the turn to a task of its own that
/// awaits the answer and only then lets the next turn in.
struct RunningTurn {
    turn: Option<Pin<Box<dyn std::future::Future<Output = TurnAnswer> + Send>>>,
    permit: Option<OwnedSemaphorePermit>,
    in_flight: Option<InFlight>,
    shared: Arc<Shared>,
    rt: Runtime,
    actor: ActorId,
    method: String,
    epoch: u64,
    /// When the turn was handed to the app (for the turn-duration histogram).
    started: Instant,
    slow_at: Instant,
    /// Whether the turn's end counts as activity for the idle timeout (not for timer ticks).
    idle: bool,
}

/// Commits a turn's writes (the output gate); a refusal supersedes the activation.
async fn gate(
    rt: &Runtime,
    shared: &Shared,
    actor: &ActorId,
    epoch: u64,
    answer: TurnAnswer,
) -> TurnOutcome {
    let gated = rt.commit_answer(actor, epoch, answer).await;
    if gated.supersede
        && let Err(e) = &gated.outcome
    {
        shared.supersede(e.clone());
    }
    gated.outcome
}

impl RunningTurn {
    fn warn_slow(&self) {
        let rt = &self.rt;
        rt.inner.counters.slow_turns.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(actor = %self.actor, method = %self.method,
            after_ms = rt.inner.cfg.slow_turn.as_millis() as u64,
            "slow turn: it holds its activation; chunk long work or move it off the turn");
    }

    /// The turn answered: count it and admit the next.
    fn finished(&mut self, outcome: &TurnOutcome) {
        self.turn = None;
        self.rt
            .inner
            .counters
            .histograms
            .turn(&self.actor.actor_type, self.started.elapsed());
        if let Err(e) = outcome
            && e.kind == ErrorKind::App
        {
            self.rt
                .inner
                .counters
                .app_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        if self.idle {
            *self.shared.last_turn_end.lock().expect("activation lock") = Instant::now();
        }
        self.in_flight = None;
        self.permit = None;
    }
}

impl Drop for RunningTurn {
    fn drop(&mut self) {
        let Some(mut turn) = self.turn.take() else {
            return;
        };
        let mut rest = RunningTurn {
            turn: None,
            permit: self.permit.take(),
            in_flight: self.in_flight.take(),
            shared: self.shared.clone(),
            rt: self.rt.clone(),
            actor: self.actor.clone(),
            method: std::mem::take(&mut self.method),
            epoch: self.epoch,
            started: self.started,
            slow_at: self.slow_at,
            idle: self.idle,
        };
        // Outside a runtime (the process is going down) there is nothing left to wait for.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let answer = tokio::select! {
                biased;
                answer = &mut turn => answer,
                _ = tokio::time::sleep_until(rest.slow_at) => {
                    rest.warn_slow();
                    turn.await
                }
            };
            // The caller gave up, but the turn ran: its writes are committed like any other
            // turn's (the caller was told the outcome is unknown, which stays true).
            let (rt, shared, actor) = (rest.rt.clone(), rest.shared.clone(), rest.actor.clone());
            let outcome = gate(&rt, &shared, &actor, rest.epoch, answer).await;
            rest.finished(&outcome);
        });
    }
}
