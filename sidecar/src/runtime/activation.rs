//! One activation: from its Activate turn to its Deactivate turn, with its turns one at a time
//! (or concurrently, for a reentrant type).
//!
//! A turn runs in its caller's own task, admitted by the activation's turn semaphore (one permit,
//! or many for a reentrant type; tokio's semaphore is fair, so calls run in arrival order). The
//! activation's task runs only the lifecycle: the claim and the Activate turn, the idle timer,
//! the app going away, the stop and the Deactivate turn. A turn therefore costs no hand-off to
//! another task on its way in, and wakes one task (its caller) on its way out: on the hottest
//! path of every call, that is two thread switches fewer than a mailbox task in between.

use super::registry::ActorType;
use super::session::{AppSession, TurnAnswer, TurnKind, TurnOf, TurnOutcome};
use super::timers::Timers;
use super::{ActorId, InFlight, Lifecycle, Runtime};
use bytes::Bytes;
use sigx_proto::{ActorError, ErrorKind, v1};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::time::Instant;

/// Turns a reentrant activation may run at once: its semaphore's permits.
const REENTRANT_TURNS: u32 = 1 << 16;
/// How soon an idle activation that was busy at its idle check looks again.
const IDLE_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// What callers and the activation's task share.
pub(crate) struct Shared {
    /// Admits turns. Holds no permit until the Activate turn succeeded; closed once the
    /// activation takes no more turns.
    turns: Arc<Semaphore>,
    /// Permits of `turns` when no turn runs.
    permits: u32,
    /// Callers between the table look-up (where this is counted, under the table lock) and
    /// their permit: the idle check leaves the table only when there are none.
    waiting: AtomicUsize,
    /// When the last turn ended (its answer, or its late answer after the caller's deadline).
    /// Timer ticks do not move it: they keep no activation alive.
    last_turn_end: Mutex<Instant>,
    /// The type's idle timeout.
    idle_timeout: std::time::Duration,
    /// Set when the activation stops taking turns: what callers admitted afterwards answer.
    ended: Mutex<Option<ActorError>>,
    /// The app session the activation lives in.
    app: Arc<AppSession>,
    /// The epoch taken from the state store before the Activate turn (0 until then).
    epoch: AtomicU64,
    /// Set when the state store refused the activation (or failed a commit): it takes no more
    /// turns and ends with a SUPERSEDED Deactivate whose writes are discarded.
    superseded: watch::Sender<bool>,
    /// The activation's timers: closed (every timer cancelled) when the activation ends.
    pub(crate) timers: Timers,
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

    fn closed_error(&self, actor: &ActorId) -> ActorError {
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
        });
        let id = activation_id.clone();
        let task_shared = shared.clone();
        let lifecycle = Lifecycle::new(&rt);
        tokio::spawn(async move {
            let _lifecycle = lifecycle;
            let span = tracing::info_span!("activation", actor = %actor, activation = %id);
            tracing::Instrument::instrument(
                run(rt, task_shared, actor, id, ty, claim_deadline, stop_rx),
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
        Caller {
            shared: self.shared.clone(),
            activation_id: self.activation_id.clone(),
            waiting: true,
        }
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
        let kind = TurnKind::Invoke {
            method: method.to_string(),
            payload,
        };
        self.turn(rt, actor, kind, method, deadline, || Ok(()), true)
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

async fn run(
    rt: Runtime,
    shared: Arc<Shared>,
    actor: ActorId,
    activation_id: Arc<str>,
    ty: ActorType,
    claim_deadline: Instant,
    mut stop_rx: oneshot::Receiver<oneshot::Sender<()>>,
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
        claimed = gate.claim(&actor, &activation_id, claim_deadline) => claimed,
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
    let turn = app.start_turn(
        &actor,
        TurnOf {
            activation_id: &activation_id,
            epoch,
        },
        TurnKind::Activate,
        deadline,
        Instant::now(),
        not_after,
    );
    let overrun = || {
        fail(ActorError::timeout(format!(
            "activation of {actor} did not finish within {lifecycle:?}"
        )))
    };
    let (answer, overran) =
        lifecycle_turn(&rt, &actor, "<activate>", deadline, turn, overrun).await;
    // Activate may initialise state: its writes pass the output gate like any turn's.
    let gated = rt.commit_answer(&actor, epoch, answer).await;
    let outcome = rt.settle(gated.outcome);
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
    tracing::debug!("activated");
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
        match rt.lease_not_after(deadline) {
            Ok(not_after) => {
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
                let (answer, _) =
                    lifecycle_turn(&rt, &actor, "<deactivate>", deadline, turn, || {}).await;
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
            Err(e) => tracing::warn!(error = %e, "deactivate turn not sent"),
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
