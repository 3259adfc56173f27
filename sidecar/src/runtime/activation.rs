//! One activation: from its Activate turn to its Deactivate turn, with its turns one at a time
//! (or concurrently, for a reentrant type).
//!
//! A turn runs in its caller's own task (turn.rs), admitted by the activation's turn semaphore (one permit,
//! or many for a reentrant type; tokio's semaphore is fair, so calls run in arrival order). The
//! activation's task runs only the lifecycle: the claim and the Activate turn, the idle timer,
//! the app going away, the stop and the Deactivate turn. A turn therefore costs no hand-off to
//! another task on its way in, and wakes one task (its caller) on its way out: on the hottest
//! path of every call, that is two thread switches fewer than a mailbox task in between.

use super::registry::ActorType;
use super::session::{AppSession, TurnAnswer, TurnKind, TurnOf};
use super::timers::Timers;
pub(crate) use super::turn::Caller;
use super::{ActorId, InFlight, Lifecycle, Runtime};
use sigx_proto::{ActorError, v1};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::time::Instant;

/// Turns a reentrant activation may run at once: its semaphore's permits.
const REENTRANT_TURNS: u32 = 1 << 16;
/// How soon an idle activation that was busy at its idle check looks again.
const IDLE_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// What callers and the activation's task share.
pub(crate) struct Shared {
    /// Admits turns. Holds no permit until the Activate turn succeeded; closed once the
    /// activation takes no more turns.
    pub(super) turns: Arc<Semaphore>,
    /// Permits of `turns` when no turn runs.
    permits: u32,
    /// Callers between the table look-up (where this is counted, under the table lock) and
    /// their permit: the idle check leaves the table only when there are none.
    pub(super) waiting: AtomicUsize,
    /// When the last turn ended (its answer, or its late answer after the caller's deadline).
    /// Timer ticks do not move it: they keep no activation alive.
    pub(super) last_turn_end: Mutex<Instant>,
    /// The type's idle timeout.
    idle_timeout: std::time::Duration,
    /// Set when the activation stops taking turns: what callers admitted afterwards answer.
    ended: Mutex<Option<ActorError>>,
    /// The app session the activation lives in.
    pub(super) app: Arc<AppSession>,
    /// The epoch taken from the state store before the Activate turn (0 until then).
    epoch: AtomicU64,
    /// Set when the state store refused the activation (or failed a commit): it takes no more
    /// turns and ends with a SUPERSEDED Deactivate whose writes are discarded.
    superseded: watch::Sender<bool>,
    /// The activation's timers: closed (every timer cancelled) when the activation ends.
    pub(crate) timers: Timers,
    /// Rebalancing asks the activation to leave this host if it is idle at that moment
    /// ([`super::Runtime::shed`]); a busy one ignores the request.
    pub(super) shed: tokio::sync::Notify,
}

impl Shared {
    pub(crate) fn ended(&self) -> Option<ActorError> {
        self.ended.lock().expect("activation lock").clone()
    }

    /// Ends the activation for callers: those waiting and those still to come answer `err`.
    /// Its timers go with it: no tick starts once the activation ends, so none follows (or
    /// overtakes) the Deactivate turn.
    fn end(&self, err: ActorError) {
        self.ended
            .lock()
            .expect("activation lock")
            .get_or_insert(err);
        self.timers.close();
    }

    /// Whether the activation has been idle for its idle timeout (it is about to deactivate, as
    /// soon as no turn runs): timer ticks are not started then, so that a busy timer cannot
    /// keep finding the activation busy at its idle check.
    pub(crate) fn idle_due(&self) -> bool {
        *self.last_turn_end.lock().expect("activation lock") + self.idle_timeout <= Instant::now()
    }

    /// How long since the last turn ended.
    pub(crate) fn idle_for(&self) -> std::time::Duration {
        Instant::now()
            .saturating_duration_since(*self.last_turn_end.lock().expect("activation lock"))
    }

    /// Whether no turn runs and no caller waits right now (a hint: the activation's task
    /// checks again under the table lock before it leaves).
    pub(crate) fn is_idle_now(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) == 0
            && self.turns.available_permits() == self.permits as usize
    }

    /// The activation's epoch.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Ends the activation because the state store refused it: callers still to come answer
    /// `err`, and its task deactivates it (SUPERSEDED).
    pub(crate) fn supersede(&self, err: ActorError) {
        self.end(err);
        self.superseded.send_replace(true);
    }

    pub(super) fn closed_error(&self, actor: &ActorId) -> ActorError {
        self.ended().unwrap_or_else(|| {
            // The actor is moving (deactivated here, about to be released): a handoff, so
            // the routing loop waits a moment within the deadline rather than spending a retry.
            ActorError::wrong_host(format!(
                "{actor} was deactivated on this host before the call ran: it never ran; \
                 re-place it"
            ))
            .with_retry_after(std::time::Duration::from_millis(20))
        })
    }
}

/// The table entry of a live activation.
pub(crate) struct Activation {
    pub(crate) activation_id: Arc<str>,
    pub(crate) shared: Arc<Shared>,
    stop: Option<oneshot::Sender<oneshot::Sender<()>>>,
}

impl Activation {
    /// Spawns the activation's task, which claims the actor until `claim_deadline` (that of
    /// the call that asked for it). The caller inserts the entry into the table.
    pub(crate) fn spawn(
        rt: Runtime,
        app: Arc<AppSession>,
        actor: ActorId,
        activation_id: Arc<str>,
        ty: ActorType,
        claim_deadline: Instant,
    ) -> Activation {
        let (stop_tx, stop_rx) = oneshot::channel();
        let shared = Arc::new(Shared {
            turns: Arc::new(Semaphore::new(0)),
            permits: if ty.reentrant { REENTRANT_TURNS } else { 1 },
            waiting: AtomicUsize::new(0),
            last_turn_end: Mutex::new(Instant::now()),
            idle_timeout: ty.idle_timeout,
            ended: Mutex::new(None),
            app,
            epoch: AtomicU64::new(0),
            superseded: watch::channel(false).0,
            timers: Timers::default(),
            shed: tokio::sync::Notify::new(),
        });
        let id = activation_id.clone();
        let task_shared = shared.clone();
        let lifecycle = Lifecycle::new(&rt, &actor, &activation_id, &shared);
        // Made in the caller's task: the activation's span is a child of the call that caused it.
        let activate_span = crate::trace::child_of_current(
            "sigx.activate",
            opentelemetry::trace::SpanKind::Internal,
            || crate::trace::actor_attrs(&actor, "<activate>"),
        );
        tokio::spawn(async move {
            let _lifecycle = lifecycle;
            let span = tracing::info_span!("activation", actor = %actor, activation = %id);
            tracing::Instrument::instrument(
                run(
                    rt,
                    task_shared,
                    actor,
                    id,
                    ty,
                    claim_deadline,
                    stop_rx,
                    activate_span,
                ),
                span,
            )
            .await;
        });
        Activation {
            activation_id,
            shared,
            stop: Some(stop_tx),
        }
    }

    /// Whether the activation takes no more turns (a caller finding it so starts a new one).
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.turns.is_closed()
    }

    /// Counts a caller that found this entry in the table; call under the table lock.
    pub(crate) fn enter(&self) -> Caller {
        self.shared.waiting.fetch_add(1, Ordering::SeqCst);
        Caller::new(self.shared.clone(), self.activation_id.clone())
    }

    /// Asks the activation to deactivate (shutdown) and resolves once it has.
    pub(crate) fn stop(mut self) -> impl std::future::Future<Output = ()> + Send {
        let (done_tx, done_rx) = oneshot::channel();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(done_tx);
        }
        async move {
            let _ = done_rx.await;
        }
    }
}

/// How long a Deactivate the app refused as late waits before it is sent again (the lease
/// renews every beat).
const LATE_DEACTIVATE_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Awaits a lifecycle turn (Activate, Deactivate) until the app answers it. At `deadline` it
/// counts a timeout, warns and runs `overrun` (which answers the waiting callers), and then keeps
/// waiting: the activation holds its claim, and counts as a turn in flight, until the app has
/// answered, exactly like a method turn whose caller gave up. Releasing the claim at the
/// deadline would let another host (or this one) activate the actor while this app still runs
/// its lifecycle code. The flag says whether the deadline passed first. An app that goes away
/// answers every pending turn (`outcome-unknown`), so this never outlives the app.
async fn lifecycle_turn<F>(
    rt: &Runtime,
    actor: &ActorId,
    what: &str,
    deadline: Instant,
    turn: F,
    overrun: impl FnOnce(),
) -> (TurnAnswer, bool)
where
    F: std::future::Future<Output = TurnAnswer> + Send,
{
    let _in_flight = InFlight::new(rt);
    let mut turn = std::pin::pin!(turn);
    tokio::select! {
        biased;
        outcome = &mut turn => return (outcome, false),
        _ = tokio::time::sleep_until(deadline) => {}
    }
    rt.inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(actor = %actor, turn = what,
        "lifecycle turn overran its timeout (SIGX_CALL_TIMEOUT_MS): the activation keeps its \
         claim until the app answers it");
    overrun();
    (turn.await, true)
}

/// Removes this activation from the table if it is still the one recorded there.
fn remove_self(rt: &Runtime, actor: &ActorId, activation_id: &Arc<str>) {
    let mut table = rt.inner.activations.lock().expect("activations lock");
    if table
        .get(actor)
        .is_some_and(|a| Arc::ptr_eq(&a.activation_id, activation_id))
    {
        table.remove(actor);
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    rt: Runtime,
    shared: Arc<Shared>,
    actor: ActorId,
    activation_id: Arc<str>,
    ty: ActorType,
    claim_deadline: Instant,
    mut stop_rx: oneshot::Receiver<oneshot::Sender<()>>,
    activate_span: Option<opentelemetry::Context>,
) {
    let gate = rt.inner.gate.clone();
    let lifecycle = rt.inner.cfg.lifecycle_turn_timeout;
    let app = shared.app.clone();
    let fail = |e: ActorError| {
        shared.end(e);
        shared.turns.close();
        remove_self(&rt, &actor, &activation_id);
    };

    // Rule 1: register before activate. A stop (the host drains or shuts down) abandons a
    // claim still in progress: nothing has run in the app yet, so the callers are told to
    // place the actor elsewhere now. Waiting for the claim instead would hold the drain for
    // as long as the claim may take (up to the call's deadline), and the callers with it.
    let claimed = tokio::select! {
        biased;
        claimed = crate::trace::within(
            activate_span.clone(),
            gate.claim(&actor, &activation_id, claim_deadline),
        ) => claimed,
        stop = &mut stop_rx => {
            fail(
                ActorError::wrong_host(format!(
                    "host stopped while claiming {actor}: the call never ran; place the actor \
                     elsewhere"
                ))
                .with_retry_after(std::time::Duration::from_millis(20)),
            );
            // A grant the owner may already hold for this activation is withdrawn, so the
            // actor is placeable elsewhere at once. The stop does not wait for that: the
            // owner may be the very peer whose slow answers held the claim, and since the app
            // ran nothing, a grant left behind is only a leftover (removed when this host
            // leaves, or by the next claim that meets it), never a second activation.
            let (gate, actor, activation_id) = (gate.clone(), actor.clone(), activation_id.clone());
            tokio::spawn(async move { gate.release(&actor, &activation_id).await });
            if let Ok(done) = stop {
                let _ = done.send(());
            }
            return;
        }
    };
    if let Err(e) = claimed {
        fail(e);
        return;
    }
    if let Err(e) = gate.check_serving() {
        fail(e);
        gate.release(&actor, &activation_id).await;
        return;
    }
    let deadline = Instant::now() + lifecycle;
    // The epoch, after the claim (so no other activation of the actor can take a newer one
    // while this one is live, in the fault-free case) and before any app code runs: from now
    // on, every older activation's writes are refused by the store.
    let epoch = match tokio::time::timeout_at(deadline, rt.inner.cfg.state.next_epoch(&actor)).await
    {
        Ok(Ok(epoch)) => epoch,
        Ok(Err(e)) => {
            fail(ActorError::unreachable(format!(
                "activation of {actor} could not take an epoch from the state store: {e}; it \
                 never ran"
            )));
            gate.release(&actor, &activation_id).await;
            return;
        }
        Err(_) => {
            fail(ActorError::unreachable(format!(
                "activation of {actor} could not take an epoch from the {} state store within \
                 {lifecycle:?}; it never ran",
                rt.inner.cfg.state.kind()
            )));
            gate.release(&actor, &activation_id).await;
            return;
        }
    };
    shared.epoch.store(epoch, Ordering::SeqCst);
    // The lease is checked at the moment the turn is handed over (DESIGN.md §8).
    let not_after = match rt.lease_not_after(deadline) {
        Ok(not_after) => not_after,
        Err(e) => {
            fail(e);
            gate.release(&actor, &activation_id).await;
            return;
        }
    };
    let turn = {
        // The Activate turn carries the activation span's context (the guard ends before any
        // await: it only makes the context ambient while the turn is built).
        let _trace = activate_span.clone().map(opentelemetry::Context::attach);
        app.start_turn(
            &actor,
            TurnOf {
                activation_id: &activation_id,
                epoch,
            },
            TurnKind::Activate,
            deadline,
            Instant::now(),
            not_after,
        )
    };
    let overrun = || {
        fail(ActorError::timeout(format!(
            "activation of {actor} did not finish within {lifecycle:?}"
        )))
    };
    let (answer, overran) =
        lifecycle_turn(&rt, &actor, "<activate>", deadline, turn, overrun).await;
    // Activate may initialise state: its writes pass the output gate like any turn's.
    let gated = crate::trace::within(
        activate_span.clone(),
        rt.commit_answer(&actor, epoch, answer),
    )
    .await;
    let outcome = rt.settle(gated.outcome);
    if let Some(cx) = &activate_span {
        crate::trace::finish(cx, &outcome);
    }
    match outcome {
        Ok(_) if !overran => {}
        Ok(_) => {
            // The app activated the actor after its callers were told it timed out: it holds
            // an instance now, so end it the regular way before the claim goes.
            let deadline = Instant::now() + lifecycle;
            if let Ok(not_after) = rt.lease_not_after(deadline) {
                let turn = app.start_turn(
                    &actor,
                    TurnOf {
                        activation_id: &activation_id,
                        epoch,
                    },
                    TurnKind::Deactivate(v1::DeactivateReason::Shutdown),
                    deadline,
                    Instant::now(),
                    not_after,
                );
                let (answer, _) =
                    lifecycle_turn(&rt, &actor, "<deactivate>", deadline, turn, || {}).await;
                if let Err(e) = rt.commit_answer(&actor, epoch, answer).await.outcome {
                    tracing::warn!(error = %e, "deactivate turn of a late activation failed");
                }
            }
            gate.release(&actor, &activation_id).await;
            return;
        }
        Err(e) => {
            fail(ActorError::new(
                e.kind,
                format!("activation of {actor} failed: {}", e.message),
            ));
            gate.release(&actor, &activation_id).await;
            return;
        }
    }
    rt.inner
        .counters
        .activations
        .fetch_add(1, Ordering::Relaxed);
    {
        // In the activation's trace (a JSON log line then carries its trace id).
        let _trace = activate_span.clone().map(opentelemetry::Context::attach);
        tracing::debug!("activated");
    }
    *shared.last_turn_end.lock().expect("activation lock") = Instant::now();
    shared.turns.add_permits(shared.permits as usize);

    let mut done_signal: Option<oneshot::Sender<()>> = None;
    let mut idle_at = Instant::now() + ty.idle_timeout;
    let mut superseded = shared.superseded.subscribe();
    let reason = loop {
        tokio::select! {
            biased;
            stop = &mut stop_rx => {
                done_signal = stop.ok();
                break v1::DeactivateReason::Shutdown;
            }
            _ = async { let _ = superseded.wait_for(|s| *s).await; } => {
                break v1::DeactivateReason::Superseded;
            }
            _ = app.closed() => {
                // The app went away: nothing to deactivate. Turns in flight were answered
                // `outcome-unknown` by the session; every call still waiting never ran.
                fail(ActorError::unreachable(format!(
                    "the app disconnected before this call to {actor} ran: it never ran")));
                gate.release(&actor, &activation_id).await;
                return;
            }
            _ = shared.shed.notified() => {
                // Rebalancing: leave exactly as an idle activation does (no turn runs, no
                // caller waits, under the table lock so none can arrive once removed), or stay.
                let mut table = rt.inner.activations.lock().expect("activations lock");
                if shared.waiting.load(Ordering::SeqCst) == 0
                    && let Ok(all) = shared.turns.try_acquire_many(shared.permits)
                {
                    all.forget();
                    shared.turns.close();
                    if table.get(&actor).is_some_and(|a| Arc::ptr_eq(&a.activation_id, &activation_id)) {
                        table.remove(&actor);
                    }
                    rt.inner.counters.rebalance_moves.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("deactivating to rebalance the fleet");
                    // Handed to another host: a shutdown of this activation, quiesced already.
                    break v1::DeactivateReason::Shutdown;
                }
            }
            _ = tokio::time::sleep_until(idle_at) => {
                // Idle: leave the table only if no turn runs and no caller waits. Callers are
                // counted under the same lock, so none can arrive once we are removed.
                let now = Instant::now();
                let idle_since = *shared.last_turn_end.lock().expect("activation lock");
                let mut table = rt.inner.activations.lock().expect("activations lock");
                if idle_since + ty.idle_timeout <= now
                    && shared.waiting.load(Ordering::SeqCst) == 0
                    && let Ok(all) = shared.turns.try_acquire_many(shared.permits)
                {
                    all.forget();
                    shared.turns.close();
                    if table.get(&actor).is_some_and(|a| Arc::ptr_eq(&a.activation_id, &activation_id)) {
                        table.remove(&actor);
                    }
                    break v1::DeactivateReason::Idle;
                }
                // A turn ended since: look again one idle period after it ended. One runs or a
                // caller waits: look again soon. A timer tick that ends does not move
                // `last_turn_end`, and no tick starts while the activation is idle-due (see
                // `Shared::idle_due`), so a running tick delays the deactivation by about this
                // much, not by a whole idle period.
                idle_at = if idle_since + ty.idle_timeout > now {
                    idle_since + ty.idle_timeout
                } else {
                    now + ty.idle_timeout.min(IDLE_RECHECK)
                };
            }
        }
    };
    // No more turns: callers admitted from now on answer why. A fenced host runs no turn at
    // all, Deactivate included: another host may already hold the actor, and this
    // activation's state must not be written back.
    let fenced = gate.check_serving().err();
    shared.end(
        fenced
            .clone()
            .unwrap_or_else(|| shared.closed_error(&actor)),
    );
    remove_self(&rt, &actor, &activation_id);
    if reason != v1::DeactivateReason::Idle {
        // Wait for the turns still running (waiting callers are admitted one by one, find the
        // activation ended and leave), then close.
        if let Ok(all) = shared.turns.acquire_many(shared.permits).await {
            all.forget();
        }
        shared.turns.close();
    }
    if fenced.is_none() {
        let deadline = Instant::now() + lifecycle;
        // A Deactivate the app refused as past its not-after never ran, and the app still holds
        // the activation: releasing the claim now would let this actor activate again (here or
        // elsewhere) beside it (simulation seeds 350 and 351: a host suspended with its lease
        // about to lapse, resumed, its idle deactivation refused). It is handed out again
        // under the lease as renewed since, until the app runs it, the host fences or the
        // lifecycle deadline passes.
        let mut answer = None;
        while answer.is_none() {
            let not_after = match rt.lease_not_after(deadline) {
                Ok(n) => n,
                Err(e) if gate.check_serving().is_err() || Instant::now() >= deadline => {
                    tracing::warn!(error = %e, "deactivate turn not sent");
                    break;
                }
                Err(_) => {
                    tokio::time::sleep(LATE_DEACTIVATE_RETRY).await;
                    continue;
                }
            };
            let turn = app.start_turn(
                &actor,
                TurnOf {
                    activation_id: &activation_id,
                    epoch,
                },
                TurnKind::Deactivate(reason),
                deadline,
                Instant::now(),
                not_after,
            );
            let (got, _) = lifecycle_turn(&rt, &actor, "<deactivate>", deadline, turn, || {}).await;
            let refused = matches!(&got.outcome, Err(e) if super::session::is_refused_late(e));
            if refused && gate.check_serving().is_ok() && Instant::now() < deadline {
                tracing::debug!("the app refused the deactivate turn as late: sending it again");
                tokio::time::sleep(LATE_DEACTIVATE_RETRY).await;
                continue;
            }
            answer = Some(got);
        }
        if let Some(answer) = answer {
            // Deactivate saves state; a superseded activation's writes are discarded (the
            // store would refuse them, or they would overwrite what the failed commit left).
            let outcome = if reason == v1::DeactivateReason::Superseded {
                answer.outcome
            } else {
                rt.commit_answer(&actor, epoch, answer).await.outcome
            };
            if let Err(e) = rt.settle(outcome) {
                tracing::warn!(error = %e, "deactivate turn failed");
            }
        }
    }
    rt.inner
        .counters
        .deactivations
        .fetch_add(1, Ordering::Relaxed);
    gate.release(&actor, &activation_id).await;
    tracing::debug!(?reason, "deactivated");
    if let Some(done) = done_signal {
        let _ = done.send(());
    }
}
