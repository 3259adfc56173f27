//! Timers: per activation, in memory, delivered as turns of that activation (DESIGN.md §11,
//! issue 13 item 5; the wire contract is `SetTimer`, `CancelTimer` and `TimerTick` in app.proto).
//!
//! Each timer is a task of its own that sleeps until the tick is due and then runs the tick as a
//! turn of its activation, through the activation's own admission (so it never overlaps another
//! turn of a non-reentrant activation), bounded by the host's call timeout and the lease, and
//! through the output gate. The task awaits its tick before it schedules the next one, so a
//! periodic timer never piles ticks up: the ticks due while one was queued or running are
//! skipped, and the next one keeps the timer's rhythm.
//!
//! A timer ends with its activation: the activation's end closes its [`Timers`] (every timer
//! cancelled, no new one accepted) before its Deactivate turn is sent, and a tick checks that it
//! is still wanted at the moment it holds its admission, just before it is handed to the app.
//! Ticks do not count as activity for the idle timeout, and none starts once the activation is
//! idle-due, so the idle check finds it free at once (see `TimerTick` in app.proto).

use super::activation::{Caller, Shared};
use super::session::TurnKind;
use super::{ActorId, Runtime};
use bytes::Bytes;
use sigx_proto::{ActorError, v1};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Timers one activation may hold at once: each is a task and a payload in this host's memory.
pub const MAX_TIMERS_PER_ACTIVATION: usize = 1000;
/// Longest timer name, in bytes.
pub const MAX_TIMER_NAME_BYTES: usize = 256;
/// Longest due time or period: beyond it a timer of an in-memory activation makes no sense (a
/// reminder does), and `Instant` arithmetic stays far from overflow.
pub const MAX_TIMER_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);

/// One timer's cancellation: set once, by a cancel, a replace, or the activation's end.
#[derive(Debug)]
struct Slot {
    /// Distinguishes this timer from a later one of the same name (a replace).
    generation: u64,
    cancelled: watch::Sender<bool>,
}

impl Slot {
    fn cancel(&self) {
        self.cancelled.send_replace(true);
    }

    fn is_cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }
}

/// The timers of one activation, by name; `None` once the activation has ended.
#[derive(Debug)]
pub(crate) struct Timers {
    slots: Mutex<Option<HashMap<String, Arc<Slot>>>>,
    next_generation: AtomicU64,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            slots: Mutex::new(Some(HashMap::new())),
            next_generation: AtomicU64::new(1),
        }
    }
}

impl Timers {
    /// Cancels every timer and accepts no new one: the activation ended.
    pub(crate) fn close(&self) {
        let slots = self.slots.lock().expect("timers lock").take();
        for slot in slots.into_iter().flat_map(|s| s.into_values()) {
            slot.cancel();
        }
    }

    /// Cancels `name`; whether it existed.
    fn cancel(&self, name: &str) -> bool {
        let removed = self
            .slots
            .lock()
            .expect("timers lock")
            .as_mut()
            .and_then(|s| s.remove(name));
        removed.inspect(|slot| slot.cancel()).is_some()
    }

    /// Removes `slot` if it still holds its name (its task ended).
    fn forget(&self, name: &str, slot: &Arc<Slot>) {
        if let Some(slots) = self.slots.lock().expect("timers lock").as_mut()
            && slots
                .get(name)
                .is_some_and(|s| s.generation == slot.generation)
        {
            slots.remove(name);
        }
    }

    /// At a tick's admission: whether `slot` is still wanted. A one-shot timer leaves the table
    /// here, so its handler may set the name again as a new timer.
    fn admit(&self, name: &str, slot: &Arc<Slot>, one_shot: bool) -> bool {
        let mut slots = self.slots.lock().expect("timers lock");
        let Some(slots) = slots.as_mut() else {
            return false;
        };
        let current = slots
            .get(name)
            .is_some_and(|s| s.generation == slot.generation);
        if current && one_shot {
            slots.remove(name);
        }
        current && !slot.is_cancelled()
    }
}

/// Why a timer could not be set or cancelled.
fn not_live(rt: &Runtime, actor: &ActorId, activation_id: &str) -> ActorError {
    ActorError::invalid(format!(
        "no live activation {activation_id:?} of {actor} on host {}: timers belong to one \
         activation and end with it; set or cancel them from inside a turn of that activation, \
         with its Turn.activation_id (a new activation starts with no timers: set them again in \
         its Activate turn or a later one)",
        rt.inner.cfg.host_id
    ))
}

fn millis(field: &str, ms: u64) -> Result<Duration, ActorError> {
    let d = Duration::from_millis(ms);
    if d > MAX_TIMER_DELAY {
        return Err(ActorError::invalid(format!(
            "timer {field} of {ms} ms exceeds the limit of {} ms (366 days): timers are in \
             memory and end with their activation; use a reminder for a durable wake-up",
            MAX_TIMER_DELAY.as_millis()
        )));
    }
    Ok(d)
}

/// A timer to set, as `SetTimer` asks for it.
#[derive(Debug, Clone)]
pub struct TimerSpec {
    /// Unique per activation.
    pub name: String,
    /// Delay from now until the first tick.
    pub due: Duration,
    /// `None`: one-shot.
    pub period: Option<Duration>,
    /// Delivered in every tick.
    pub payload: Bytes,
}

impl TimerSpec {
    /// From the wire form, checked against the limits (`max_payload` bytes of payload).
    pub fn from_proto(req: &v1::SetTimerRequest, max_payload: usize) -> Result<Self, ActorError> {
        if req.name.is_empty() || req.name.len() > MAX_TIMER_NAME_BYTES {
            return Err(ActorError::invalid(format!(
                "timer name of {} bytes: names are 1..={MAX_TIMER_NAME_BYTES} bytes",
                req.name.len()
            )));
        }
        if req.payload.len() > max_payload {
            return Err(ActorError::invalid(format!(
                "timer payload of {} bytes exceeds the limit of {max_payload} bytes \
                 (SIGX_MAX_PAYLOAD_BYTES); keep large data in the actor's state",
                req.payload.len()
            )));
        }
        Ok(TimerSpec {
            name: req.name.clone(),
            due: millis("due_ms", req.due_ms)?,
            period: match req.period_ms {
                0 => None,
                ms => Some(millis("period_ms", ms)?),
            },
            payload: req.payload.clone(),
        })
    }
}

impl Runtime {
    /// The running activation `activation_id` of `actor`, in the routing table or not: a
    /// graceful stop takes every activation out of the table at once while their last turns
    /// still run, and those turns may set or cancel timers. Whether it has ended is its
    /// [`Timers`]' own answer (closed before its Deactivate turn), checked under the timers lock.
    fn live_for_timers(
        &self,
        actor: &ActorId,
        activation_id: &str,
    ) -> Result<Arc<Shared>, ActorError> {
        self.inner.gate.check_serving()?;
        self.running_activation(actor, activation_id)
            .ok_or_else(|| not_live(self, actor, activation_id))
    }

    /// Sets (or replaces, by name) a timer of the live activation `activation_id` of `actor`.
    /// Returns whether a timer of that name was replaced. On an activation that is ending but
    /// still runs turns, the timer is accepted and never ticks: timers end with their activation.
    pub fn set_timer(
        &self,
        actor: &ActorId,
        activation_id: &str,
        spec: TimerSpec,
    ) -> Result<bool, ActorError> {
        let shared = self.live_for_timers(actor, activation_id)?;
        let timers = &shared.timers;
        let generation = timers.next_generation.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            generation,
            cancelled: watch::channel(false).0,
        });
        let replaced = {
            let mut slots = timers.slots.lock().expect("timers lock");
            let Some(slots) = slots.as_mut() else {
                // The activation is ending (its last turns, its Deactivate turn): a timer set
                // now ends with it at once, as one set a moment earlier would have. Refusing it
                // would fail the turn (an `on_activate` setting its timers while a stop begins)
                // and turn a call that never ran into an app error.
                tracing::debug!(actor = %actor, activation = %activation_id, timer = %spec.name,
                    "timer set on an ending activation: it never ticks");
                return Ok(false);
            };
            if !slots.contains_key(&spec.name) && slots.len() >= MAX_TIMERS_PER_ACTIVATION {
                return Err(ActorError::invalid(format!(
                    "activation {activation_id:?} of {actor} already holds \
                     {MAX_TIMERS_PER_ACTIVATION} timers, the most one activation may hold: \
                     cancel one first, or reuse a name (setting a name again replaces it)"
                )));
            }
            let old = slots.insert(spec.name.clone(), slot.clone());
            old.inspect(|old| old.cancel()).is_some()
        };
        self.inner
            .counters
            .timers_set
            .fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("timer", actor = %actor, activation = %activation_id,
            timer = %spec.name);
        tracing::debug!(parent: &span, due = ?spec.due, period = ?spec.period, replaced, "timer set");
        let task = run_timer(
            self.clone(),
            actor.clone(),
            Arc::from(activation_id),
            Arc::downgrade(&shared),
            slot,
            spec,
        );
        tokio::spawn(tracing::Instrument::instrument(task, span));
        Ok(replaced)
    }

    /// Cancels the timer `name` of the live activation `activation_id` of `actor`. Returns
    /// whether it existed. No tick of it starts afterwards (one already running finishes).
    pub fn cancel_timer(
        &self,
        actor: &ActorId,
        activation_id: &str,
        name: &str,
    ) -> Result<bool, ActorError> {
        let shared = self.live_for_timers(actor, activation_id)?;
        Ok(shared.timers.cancel(name))
    }

    /// A caller for a tick of `activation_id`, if it is still the live activation of `actor`.
    fn tick_caller(&self, actor: &ActorId, activation_id: &Arc<str>) -> Option<Caller> {
        let table = self.inner.activations.lock().expect("activations lock");
        match table.get(actor) {
            Some(a) if *a.activation_id == **activation_id => (!a.is_closed()).then(|| a.enter()),
            _ => None,
        }
    }
}

/// One timer's task: sleeps until each tick is due, runs it as a turn, and ends when the timer
/// is cancelled (or replaced), fired once (one-shot), or its activation ended.
async fn run_timer(
    rt: Runtime,
    actor: ActorId,
    activation_id: Arc<str>,
    owner: Weak<Shared>,
    slot: Arc<Slot>,
    spec: TimerSpec,
) {
    ticks(&rt, &actor, &activation_id, &slot, &spec).await;
    // However it ended (a one-shot tick that never got its turn, say), the name is free again.
    if let Some(owner) = owner.upgrade() {
        owner.timers.forget(&spec.name, &slot);
    }
}

async fn ticks(
    rt: &Runtime,
    actor: &ActorId,
    activation_id: &Arc<str>,
    slot: &Arc<Slot>,
    spec: &TimerSpec,
) {
    let mut cancelled = slot.cancelled.subscribe();
    let mut due = Instant::now() + spec.due;
    let mut skipped = 0u64;
    let what = format!("<timer {}>", spec.name);
    let counters = &rt.inner.counters;
    loop {
        tokio::select! {
            biased;
            _ = cancelled.wait_for(|c| *c) => return,
            _ = tokio::time::sleep_until(due) => {}
        }
        let Some(caller) = rt.tick_caller(actor, activation_id) else {
            return;
        };
        let shared = caller.shared();
        // A stopping host sends no ticks (a fenced one is refused at the turn's lease check):
        // this one is skipped, and the activation's end (the stop deactivates it) ends the timer.
        let outcome = if let Err(e) = rt.inner.gate.check_accepting() {
            drop(caller);
            tracing::debug!(error = %e, "timer tick skipped: the host takes no new work");
            counters.timer_ticks_skipped.fetch_add(1, Ordering::Relaxed);
            Ok(Bytes::new())
        } else {
            let now = Instant::now();
            let tick = v1::TimerTick {
                name: spec.name.clone(),
                payload: spec.payload.clone(),
                period_ms: spec.period.map_or(0, |p| p.as_millis() as u64),
                due_unix_ms: rt.inner.cfg.clock.wall_unix_ms()
                    - now.saturating_duration_since(due).as_millis() as i64,
                skipped,
            };
            let ran = AtomicBool::new(false);
            let idle = AtomicBool::new(false);
            let admit = || {
                // Idle-due: the activation deactivates as soon as it is free; a tick would only
                // hold it (ticks keep no activation alive), so this one is skipped.
                if shared.idle_due() {
                    idle.store(true, Ordering::Relaxed);
                    return Err(ActorError::unreachable(
                        "the activation is idle: tick skipped",
                    ));
                }
                if !shared.timers.admit(&spec.name, slot, spec.period.is_none()) {
                    return Err(ActorError::unreachable("the timer was cancelled: no tick"));
                }
                ran.store(true, Ordering::Relaxed);
                counters.timer_ticks.fetch_add(1, Ordering::Relaxed);
                Ok(())
            };
            let deadline = now + rt.inner.cfg.call_timeout;
            let kind = TurnKind::Timer(tick);
            let outcome = caller
                .turn(rt, actor, kind, &what, deadline, admit, false)
                .await;
            let gone = slot.is_cancelled() || shared.ended().is_some();
            if outcome.is_err() && !ran.load(Ordering::Relaxed) && gone {
                // Refused before it ran because the timer or its activation is gone.
                return;
            }
            if idle.load(Ordering::Relaxed) {
                counters.timer_ticks_skipped.fetch_add(1, Ordering::Relaxed);
                Ok(Bytes::new())
            } else {
                outcome
            }
        };
        if let Err(e) = outcome {
            counters.timer_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "timer tick failed: counted (timerFailures), not retried");
        }
        let Some(period) = spec.period else {
            return;
        };
        if slot.is_cancelled() || shared.ended().is_some() {
            return;
        }
        // Keep the rhythm; ticks that fell due while this one was queued or running are skipped.
        due += period;
        let now = Instant::now();
        skipped = 0;
        if due < now {
            let period_ns = period.as_nanos().max(1);
            let behind = (now - due).as_nanos().div_ceil(period_ns);
            skipped = u64::try_from(behind).unwrap_or(u64::MAX);
            due += period * u32::try_from(behind).unwrap_or(u32::MAX);
            counters
                .timer_ticks_skipped
                .fetch_add(skipped, Ordering::Relaxed);
        }
    }
}
