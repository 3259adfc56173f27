//! One registered app: the sending half of its `Serve` stream and the turns awaiting answers.
//!
//! Every turn handed to the app is also entered in the runtime's [`Outstanding`] ledger with
//! its not-after, and leaves it only when the app answers: a fenced host withdraws its record
//! only once the ledger holds nothing the app may still be running (DESIGN.md §8).

use super::ActorId;
use super::registry::Registry;
use crate::state::StateWrite;
use bytes::Bytes;
use sigx_proto::{ActorError, ErrorKind, v1};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// What the app answered for one turn.
pub type TurnOutcome = Result<Bytes, ActorError>;

/// Which activation a turn belongs to: its id and epoch (empty and 0 for worker turns).
#[derive(Debug, Clone, Copy)]
pub struct TurnOf<'a> {
    /// The activation id.
    pub activation_id: &'a str,
    /// The activation's epoch.
    pub epoch: u64,
}

/// The app's whole answer to a turn: its outcome and the state writes it asks to commit (only
/// with an `ok` outcome; see `TurnResult.writes`).
#[derive(Debug)]
pub struct TurnAnswer {
    /// The result or the error.
    pub outcome: TurnOutcome,
    /// The turn's state batch, in order; empty when it wrote nothing.
    pub writes: Vec<StateWrite>,
}

impl TurnAnswer {
    /// An answer without writes.
    pub fn of(outcome: TurnOutcome) -> Self {
        TurnAnswer {
            outcome,
            writes: Vec::new(),
        }
    }
}

/// The writes of a `TurnResult`, or what is wrong with them.
fn writes_of(writes: Vec<v1::StateWrite>) -> Result<Vec<StateWrite>, ActorError> {
    writes
        .into_iter()
        .map(|w| match w.op {
            Some(v1::state_write::Op::Put(value)) => Ok(StateWrite::Put { key: w.key, value }),
            Some(v1::state_write::Op::Delete(_)) => Ok(StateWrite::Delete { key: w.key }),
            None => Err(ActorError::invalid(format!(
                "the app sent a state write for key {:?} with neither put nor delete; nothing \
                 of the turn's batch was stored",
                w.key
            ))),
        })
        .collect()
}

/// The kind of a turn.
#[derive(Debug, Clone)]
pub enum TurnKind {
    Activate,
    Invoke {
        method: String,
        payload: Bytes,
    },
    Deactivate(v1::DeactivateReason),
    /// A timer of the activation fired.
    Timer(v1::TimerTick),
    /// A due reminder (`$reminder` deliveries).
    Reminder(v1::Reminder),
}

impl TurnKind {
    /// The turn a delivered call becomes: a method call, or a due reminder when the method is
    /// sigx's own `$reminder` (whose payload the runtime checked before admitting the call).
    pub fn of_call(method: &str, payload: Bytes) -> TurnKind {
        if method == crate::reminders::REMINDER_METHOD
            && let Ok(reminder) = crate::reminders::decode_delivery(&payload)
        {
            return TurnKind::Reminder(reminder);
        }
        TurnKind::Invoke {
            method: method.to_string(),
            payload,
        }
    }
}

fn never_sent(app: &str) -> ActorError {
    ActorError::unreachable(format!(
        "the app {app:?} disconnected before the turn was sent: it never ran"
    ))
}

/// The phrase [`refused_late`] answers carry, by which [`is_refused_late`] knows them.
const REFUSED_LATE: &str = "refused the turn because it arrived past its not-after";

/// Whether `e` is the app's refusal of a turn that reached it past its not-after: no code ran,
/// so for a Deactivate the app still holds the activation.
pub(crate) fn is_refused_late(e: &ActorError) -> bool {
    e.kind == sigx_proto::ErrorKind::Timeout && e.message.contains(REFUSED_LATE)
}

/// The app refused the turn: it reached the app past its not-after, and no code ran.
fn refused_late(app: &str, message: &str) -> ActorError {
    ActorError::timeout(format!(
        "the app {app:?} {REFUSED_LATE} (the earlier of the call's deadline and this host's \
         lease): it never ran ({message})"
    ))
}

/// The app cancelled the turn at its not-after (or on the fence notice): it may have run in part.
fn cancelled(app: &str, message: &str) -> ActorError {
    ActorError::timeout(format!(
        "the app {app:?} cancelled the turn at its not-after (the earlier of the call's deadline \
         and this host's lease): it may have run in part; a result is never reported ({message})"
    ))
}

/// Turns handed to the app and not yet answered, with their not-after (Unix ms, wall clock),
/// across every session of the runtime: a turn of a session whose stream broke may still run
/// in the app until its not-after, so it stays here until then.
#[derive(Debug, Default)]
pub struct Outstanding {
    turns: Mutex<HashMap<(u64, u64), i64>>,
}

impl Outstanding {
    fn handed(&self, session: u64, turn_id: u64, not_after_unix_ms: i64) {
        self.turns
            .lock()
            .expect("outstanding lock")
            .insert((session, turn_id), not_after_unix_ms);
    }

    fn answered(&self, session: u64, turn_id: u64) {
        self.turns
            .lock()
            .expect("outstanding lock")
            .remove(&(session, turn_id));
    }

    /// The latest not-after of a turn the app may still be running at wall time `now_unix_ms`
    /// (`None` when every turn handed out has been answered or is past its not-after). Forgets
    /// the turns that are past.
    pub fn latest_running(&self, now_unix_ms: i64) -> Option<i64> {
        let mut turns = self.turns.lock().expect("outstanding lock");
        turns.retain(|_, not_after| *not_after > now_unix_ms);
        turns.values().copied().max()
    }
}

fn in_flight_lost(app: &str) -> ActorError {
    ActorError::outcome_unknown(format!(
        "the app {app:?} disconnected with this turn in flight: outcome unknown, not retried"
    ))
}

/// A registered app, from `Register` until its stream closes.
pub struct AppSession {
    /// Distinguishes this session from earlier and later ones.
    pub id: u64,
    /// What the app registered.
    pub registry: Arc<Registry>,
    tx: Mutex<Option<mpsc::UnboundedSender<Result<v1::SidecarMessage, tonic::Status>>>>,
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<TurnAnswer>>>>,
    next_turn: AtomicU64,
    outstanding: Arc<Outstanding>,
    closed: watch::Sender<bool>,
    drain: watch::Sender<bool>,
    ended: watch::Sender<bool>,
}

impl std::fmt::Debug for AppSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppSession")
            .field("id", &self.id)
            .field("app", &self.registry.app_name)
            .finish()
    }
}

impl AppSession {
    /// A session sending on `tx`, entering the turns it hands out in `outstanding`.
    pub fn new(
        id: u64,
        registry: Registry,
        tx: mpsc::UnboundedSender<Result<v1::SidecarMessage, tonic::Status>>,
        outstanding: Arc<Outstanding>,
    ) -> Arc<Self> {
        Arc::new(AppSession {
            id,
            registry: Arc::new(registry),
            tx: Mutex::new(Some(tx)),
            pending: Mutex::new(Some(HashMap::new())),
            next_turn: AtomicU64::new(1),
            outstanding,
            closed: watch::channel(false).0,
            drain: watch::channel(false).0,
            ended: watch::channel(false).0,
        })
    }

    /// The app asked to be drained before it goes away (`Drain`).
    pub fn request_drain(&self) {
        self.drain.send_replace(true);
    }

    /// Whether the app asked to be drained.
    pub fn drain_requested(&self) -> bool {
        *self.drain.borrow()
    }

    /// Resolves once the app asks to be drained.
    pub async fn drain_wanted(&self) {
        let mut rx = self.drain.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Ends the sidecar's side of the `Serve` stream (after a drain): the app sees end-of-stream
    /// and may exit. No turn can be sent afterwards.
    pub fn end_stream(&self) {
        self.tx.lock().expect("tx lock").take();
        self.ended.send_replace(true);
    }

    /// Resolves once the sidecar ended its side of the stream ([`AppSession::end_stream`]): a
    /// drain is over.
    pub async fn stream_ended(&self) {
        let mut rx = self.ended.subscribe();
        let _ = rx.wait_for(|e| *e).await;
    }

    /// Whether the sidecar ended its side of the stream ([`AppSession::end_stream`]).
    pub fn has_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Whether the app's stream has closed.
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the app's stream has closed.
    pub async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Marks the session closed: every turn awaiting an answer resolves with `outcome-unknown`
    /// (the app may have run it before it went away).
    pub fn close(&self) {
        let pending = self.pending.lock().expect("pending lock").take();
        self.closed.send_replace(true);
        for waiter in pending.into_iter().flat_map(|p| p.into_values()) {
            let _ = waiter.send(TurnAnswer::of(Err(in_flight_lost(&self.registry.app_name))));
        }
    }

    /// Delivers the app's answer to a turn. Answers to turns nobody awaits (already timed out,
    /// or unknown ids) are dropped.
    pub fn complete(&self, result: v1::TurnResult) {
        self.outstanding.answered(self.id, result.turn_id);
        let waiter = self
            .pending
            .lock()
            .expect("pending lock")
            .as_mut()
            .and_then(|p| p.remove(&result.turn_id));
        let Some(waiter) = waiter else {
            tracing::debug!(
                turn_id = result.turn_id,
                "answer for a turn nobody awaits: dropped"
            );
            return;
        };
        let outcome = match result.outcome {
            Some(v1::turn_result::Outcome::Ok(bytes)) => Ok(bytes),
            Some(v1::turn_result::Outcome::Error(e)) => {
                let app = &self.registry.app_name;
                Err(match ErrorKind::from_proto(e.kind) {
                    ErrorKind::Invalid => ActorError::invalid(e.message),
                    ErrorKind::Unreachable => refused_late(app, &e.message),
                    ErrorKind::Timeout => cancelled(app, &e.message),
                    _ => ActorError::app(e.message),
                })
            }
            None => Err(ActorError::invalid(
                "the app answered a turn with neither a result nor an error",
            )),
        };
        let answer = match (outcome, writes_of(result.writes)) {
            (Ok(payload), Ok(writes)) => TurnAnswer {
                outcome: Ok(payload),
                writes,
            },
            (Ok(_), Err(e)) => TurnAnswer::of(Err(e)),
            // A failed turn writes nothing: its batch is dropped with it.
            (Err(e), _) => TurnAnswer::of(Err(e)),
        };
        let _ = waiter.send(answer);
    }

    /// Sends a turn to the app and returns the future of its answer. The answer future has no
    /// timeout of its own: callers race it against their deadline, and the runtime keeps waiting
    /// for a late answer so that turns of one activation never overlap in the app.
    /// `not_after` is the turn's absolute bound (see `Turn.not_after_unix_ms` and
    /// `Turn.not_after_boot_ms`); the caller has checked the lease just before.
    pub fn start_turn(
        &self,
        actor: &ActorId,
        of: TurnOf<'_>,
        kind: TurnKind,
        deadline: Instant,
        now: Instant,
        not_after: super::NotAfter,
    ) -> impl std::future::Future<Output = TurnAnswer> + Send + 'static {
        let not_after_unix_ms = not_after.unix_ms;
        let TurnOf {
            activation_id,
            epoch,
        } = of;
        let turn_id = self.next_turn.fetch_add(1, Ordering::Relaxed);
        let (waiter, rx) = oneshot::channel();
        let (registered, mut unregistered) = {
            let mut pending = self.pending.lock().expect("pending lock");
            match pending.as_mut() {
                Some(p) => {
                    p.insert(turn_id, waiter);
                    (true, None)
                }
                None => (false, Some(waiter)),
            }
        };
        let kind_proto = match kind {
            TurnKind::Activate => v1::turn::Kind::Activate(v1::Activate {}),
            TurnKind::Invoke { method, payload } => {
                v1::turn::Kind::Invoke(v1::Invoke { method, payload })
            }
            TurnKind::Deactivate(reason) => v1::turn::Kind::Deactivate(v1::Deactivate {
                reason: reason as i32,
            }),
            TurnKind::Timer(tick) => v1::turn::Kind::Timer(tick),
            TurnKind::Reminder(reminder) => v1::turn::Kind::Reminder(reminder),
        };
        let msg = v1::SidecarMessage {
            msg: Some(v1::sidecar_message::Msg::Turn(v1::Turn {
                turn_id,
                actor: Some(actor.to_proto()),
                activation_id: activation_id.to_string(),
                timeout_ms: deadline.saturating_duration_since(now).as_millis() as u64,
                not_after_unix_ms,
                not_after_boot_ms: not_after.boot_ms,
                epoch,
                kind: Some(kind_proto),
                // The ambient trace: the turn span's (runtime/turn.rs), or the caller's.
                trace: crate::trace::current(),
            })),
        };
        // Worker turns hold no identity: nothing waits for them before the record goes.
        let tracked = !activation_id.is_empty();
        let sent = registered && {
            let tx = self.tx.lock().expect("tx lock");
            // Entered before the send, under the send lock: an answer can never overtake it.
            if tracked {
                self.outstanding.handed(self.id, turn_id, not_after_unix_ms);
            }
            let sent = tx.as_ref().is_some_and(|tx| tx.send(Ok(msg)).is_ok());
            if !sent && tracked {
                self.outstanding.answered(self.id, turn_id);
            }
            sent
        };
        if !sent {
            // Not sent, so nobody will answer it: answer it now (the session may already have
            // closed and answered it as in flight; then this finds nothing).
            if registered {
                unregistered = self
                    .pending
                    .lock()
                    .expect("pending lock")
                    .as_mut()
                    .and_then(|p| p.remove(&turn_id));
            }
            if let Some(waiter) = unregistered {
                let _ = waiter.send(TurnAnswer::of(Err(never_sent(&self.registry.app_name))));
            }
        }
        let app = self.registry.app_name.clone();
        async move {
            if !sent {
                return TurnAnswer::of(Err(never_sent(&app)));
            }
            match rx.await {
                Ok(answer) => answer,
                Err(_) => TurnAnswer::of(Err(in_flight_lost(&app))),
            }
        }
    }

    /// Tells the app that the host fenced (`FenceNotice`): it drops every activation and
    /// cancels its running turns. The stream stays open for their answers.
    pub fn notify_fenced(&self, reason: &str) {
        if let Some(tx) = self.tx.lock().expect("tx lock").as_ref() {
            let _ = tx.send(Ok(v1::SidecarMessage {
                msg: Some(v1::sidecar_message::Msg::Fenced(v1::FenceNotice {
                    reason: reason.to_string(),
                })),
            }));
        }
    }

    /// Stops the `Serve` stream with an error status (e.g. when the host fences).
    pub fn abort(&self, status: tonic::Status) {
        if let Some(tx) = self.tx.lock().expect("tx lock").take() {
            let _ = tx.send(Err(status));
        }
    }
}
