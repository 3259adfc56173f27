//! The shard owner: polls the store for due reminders of the shards this host owns, claims
//! them, delivers each as a turn at its due time through the host's dispatcher (so it reaches the
//! actor wherever it lives, activating it if needed), and settles the row after the turn.
//!
//! Delivery is at least once: a failed turn is retried with backoff (the occurrence keeps its due
//! time), up to `max_attempts`; a host that dies holding claims loses them as soon as it leaves
//! the view, and the shard's new owner delivers them. A graceful stop releases the claims of
//! deliveries not yet started, so nothing waits for a claim to lapse.

use super::store_time::StoreTime;
use super::{
    ClaimRequest, REMINDER_METHOD, ReminderRow, ReminderStore, Settle, Settlement, delivery,
    next_due,
};
use crate::app::Dispatcher;
use crate::clock::SharedClock;
use crate::runtime::ActorId;
use sigx_proto::ErrorKind;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::time::Instant;

/// How the owner polls and delivers.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Pause between polls of the store (a set on this host wakes the owner at once).
    pub poll: Duration,
    /// How far ahead of its due time a reminder is claimed, so it can fire on time.
    pub lookahead: Duration,
    /// The most rows one poll claims.
    pub batch: usize,
    /// The most deliveries running at once.
    pub max_in_flight: usize,
    /// The deadline of one delivery's turn.
    pub call_timeout: Duration,
    /// The first retry's pause; doubled per failed attempt up to `retry_max`.
    pub retry_min: Duration,
    /// The longest pause between retries.
    pub retry_max: Duration,
    /// Deliveries of one occurrence before it is abandoned (logged and counted).
    pub max_attempts: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            poll: Duration::from_millis(100),
            lookahead: Duration::from_secs(1),
            batch: 2000,
            max_in_flight: 256,
            call_timeout: Duration::from_secs(30),
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            max_attempts: 10,
        }
    }
}

/// What this host owns right now.
#[derive(Debug, Clone)]
pub struct Ownership {
    /// This host as a claim holder: `host@started_at` (a restarted host is a new holder).
    pub claimer: String,
    /// The shards it owns.
    pub shards: Arc<Vec<u32>>,
    /// Every holder still alive: a claim by anyone else is void.
    pub live: Arc<Vec<String>>,
}

/// Where the owner learns what it owns: `None` while it owns nothing (not active, no app).
pub trait OwnershipSource: Send + Sync + 'static {
    /// The current ownership.
    fn ownership(&self) -> Option<Ownership>;
}

/// A claim holder's name.
pub fn claimer_id(host: &str, started_at_unix_ms: i64) -> String {
    format!("{host}@{started_at_unix_ms}")
}

/// Reminder counters, in `Status` and `/metrics`.
#[derive(Debug, Default)]
pub struct ReminderCounters {
    /// Reminders set through this host.
    pub set: AtomicU64,
    /// Rows claimed for delivery (each occurrence or retry that came due here).
    pub due: AtomicU64,
    /// Deliveries answered `ok`.
    pub fired: AtomicU64,
    /// Failed deliveries scheduled again.
    pub retried: AtomicU64,
    /// Occurrences given up (too many failures, or a permanent error).
    pub abandoned: AtomicU64,
    /// Settles the store refused or could not take (the claim then lapses and re-delivers).
    pub settle_failures: AtomicU64,
    /// Sum and count of first-delivery lateness (turn start − due time), in ms.
    pub lateness_ms_sum: AtomicU64,
    /// Deliveries whose lateness is in the sum.
    pub lateness_count: AtomicU64,
    /// The largest lateness seen, ms.
    pub lateness_ms_max: AtomicU64,
    /// The same first-delivery lateness, as a histogram for `/metrics`.
    pub lateness: crate::metrics::LatenessHistogram,
}

impl ReminderCounters {
    /// The counters by stable name.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("remindersSet".into(), g(&self.set)),
            ("remindersDue".into(), g(&self.due)),
            ("remindersFired".into(), g(&self.fired)),
            ("remindersRetried".into(), g(&self.retried)),
            ("remindersAbandoned".into(), g(&self.abandoned)),
            ("reminderSettleFailures".into(), g(&self.settle_failures)),
            ("reminderLatenessMsSum".into(), g(&self.lateness_ms_sum)),
            ("reminderLatenessCount".into(), g(&self.lateness_count)),
            ("reminderLatenessMsMax".into(), g(&self.lateness_ms_max)),
        ]
    }
}

/// The claims (row and claim version) this host holds and has not settled: bounds how much one
/// host takes on at once.
type Held = Arc<Mutex<HashSet<(ActorId, String, i64)>>>;

/// The running owner of one host.
pub struct Scheduler {
    stop: watch::Sender<bool>,
    nudge: Arc<Notify>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct Ctx {
    store: Arc<dyn ReminderStore>,
    dispatcher: Arc<dyn Dispatcher>,
    clock: SharedClock,
    cfg: SchedulerConfig,
    counters: Arc<ReminderCounters>,
    held: Held,
    settle_tx: mpsc::UnboundedSender<Settlement>,
    slots: Arc<Semaphore>,
    time: Arc<StoreTime>,
}

impl Ctx {
    /// Now on the store's clock: what due times, retries and claims are judged by.
    fn now_unix_ms(&self) -> i64 {
        self.time.now_unix_ms(&self.clock)
    }
}

impl Scheduler {
    /// Starts the owner. `nudge` wakes it before its next poll (a reminder set here); `time`
    /// is the host's reading of the store's clock, which it keeps fresh.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        store: Arc<dyn ReminderStore>,
        dispatcher: Arc<dyn Dispatcher>,
        source: Arc<dyn OwnershipSource>,
        clock: SharedClock,
        cfg: SchedulerConfig,
        counters: Arc<ReminderCounters>,
        nudge: Arc<Notify>,
        time: Arc<StoreTime>,
    ) -> Scheduler {
        let (stop, stop_rx) = watch::channel(false);
        let (settle_tx, settle_rx) = mpsc::unbounded_channel();
        let held: Held = Arc::default();
        let ctx = Arc::new(Ctx {
            store: store.clone(),
            dispatcher,
            clock,
            slots: Arc::new(Semaphore::new(cfg.max_in_flight.max(1))),
            cfg,
            counters: counters.clone(),
            held: held.clone(),
            settle_tx,
            time,
        });
        let settler = tokio::spawn(settle_loop(store, settle_rx, held, counters));
        let task = tokio::spawn(poll_loop(ctx, source, nudge.clone(), stop_rx, settler));
        Scheduler {
            stop,
            nudge,
            task: Mutex::new(Some(task)),
        }
    }

    /// Wakes the owner now.
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Stops claiming, releases the claims of deliveries not yet started, and waits (until
    /// `deadline`) for the started ones to settle.
    pub async fn stop(&self, deadline: Instant) {
        let _ = self.stop.send(true);
        let task = self.task.lock().expect("scheduler lock").take();
        if let Some(task) = task
            && tokio::time::timeout_at(deadline, task).await.is_err()
        {
            tracing::warn!(
                "reminder deliveries still running at the stop deadline; their claims lapse"
            );
        }
    }
}

#[tracing::instrument(level = "debug", skip_all)]
async fn poll_loop(
    ctx: Arc<Ctx>,
    source: Arc<dyn OwnershipSource>,
    nudge: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    settler: tokio::task::JoinHandle<()>,
) {
    let mut deliveries = tokio::task::JoinSet::new();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            _ = nudge.notified() => {}
            _ = tokio::time::sleep(ctx.cfg.poll) => {}
        }
        while deliveries.try_join_next().is_some() {}
        let Some(own) = source.ownership() else {
            continue;
        };
        let room = ctx
            .cfg
            .batch
            .saturating_sub(ctx.held.lock().expect("held lock").len());
        if own.shards.is_empty() || room == 0 {
            continue;
        }
        ctx.time.refresh(ctx.store.as_ref(), &ctx.clock).await;
        let now = ctx.now_unix_ms();
        let lookahead = ctx.cfg.lookahead.as_millis() as i64;
        let req = ClaimRequest {
            shards: &own.shards,
            due_by_ms: now + lookahead,
            now_ms: now,
            claimer: &own.claimer,
            live: &own.live,
            // Long enough for the delivery and its settle; only a holder that looks alive but
            // is not (a restart that kept its id and start time) ever waits this out.
            claim_until_ms: now + lookahead + 2 * ctx.cfg.call_timeout.as_millis() as i64,
            limit: room,
        };
        let claimed = match ctx.store.claim_due(&req).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim due reminders; retrying at the next poll");
                continue;
            }
        };
        for row in claimed {
            let key = (row.actor.clone(), row.name.clone(), row.version);
            if !ctx.held.lock().expect("held lock").insert(key) {
                continue;
            }
            ctx.counters.due.fetch_add(1, Ordering::Relaxed);
            deliveries.spawn(deliver(ctx.clone(), row, cancel_rx.clone()));
        }
    }
    // Stopping: deliveries still waiting for their due time give their claims back; started
    // ones finish and settle.
    let _ = cancel_tx.send(true);
    while deliveries.join_next().await.is_some() {}
    drop(ctx);
    let _ = settler.await;
}

/// Waits for `row`'s next attempt, delivers it, and hands the outcome to the settler.
async fn deliver(ctx: Arc<Ctx>, row: ReminderRow, mut cancel: watch::Receiver<bool>) {
    let settle = |settle| Settlement {
        actor: row.actor.clone(),
        name: row.name.clone(),
        version: row.version,
        settle,
    };
    let wait = (row.next_attempt_ms - ctx.now_unix_ms()).max(0) as u64;
    let slot = tokio::select! {
        biased;
        _ = cancel.wait_for(|c| *c) => None,
        slot = async {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            ctx.slots.clone().acquire_owned().await.ok()
        } => slot,
    };
    let Some(_slot) = slot else {
        let _ = ctx.settle_tx.send(settle(Settle::Release));
        return;
    };
    // Claimed ahead of its due time: deleted or replaced since? Then it is not delivered (a
    // store that cannot answer gets the delivery anyway: at least once).
    if wait > 0
        && let Ok(false) = ctx.store.holds(&row.actor, &row.name, row.version).await
    {
        ctx.held.lock().expect("held lock").remove(&(
            row.actor.clone(),
            row.name.clone(),
            row.version,
        ));
        return;
    }
    let started = ctx.now_unix_ms();
    if row.attempts == 0 {
        let late = (started - row.due_unix_ms).max(0) as u64;
        let c = &ctx.counters;
        c.lateness_ms_sum.fetch_add(late, Ordering::Relaxed);
        c.lateness_count.fetch_add(1, Ordering::Relaxed);
        c.lateness_ms_max.fetch_max(late, Ordering::Relaxed);
        c.lateness.0.observe(late as f64 / 1000.0);
    }
    // A call's deadline lives where every other deadline does: on the timer clock the router,
    // `timeout_at` and the turn's not-after read (tokio's, virtual in the simulator). Not the
    // injectable clock's monotonic side, which judges the lease and so loses a VM suspend's
    // span: after a suspend the two differ by it, and a deadline built on the lease clock was
    // already past on the timer clock, so every delivery of a host that had been suspended
    // failed at once, retried, and was abandoned (found by `make sim`, seed 2003028).
    let deadline = Instant::now() + ctx.cfg.call_timeout;
    // Each firing is a trace of its own (no call caused it): routing, activation and the turn
    // are its children.
    let fire = crate::trace::root(
        "sigx.reminder.fire",
        opentelemetry::trace::SpanKind::Internal,
        || {
            use opentelemetry::KeyValue;
            let mut attrs = crate::trace::actor_attrs(&row.actor, REMINDER_METHOD);
            attrs.push(KeyValue::new("sigx.reminder.name", row.name.clone()));
            attrs.push(KeyValue::new("sigx.reminder.due_unix_ms", row.due_unix_ms));
            attrs.push(KeyValue::new(
                "sigx.reminder.attempt",
                i64::from(row.attempts) + 1,
            ));
            attrs
        },
    );
    let outcome = crate::trace::traced(
        fire,
        ctx.dispatcher.call(
            row.actor.clone(),
            REMINDER_METHOD.to_string(),
            delivery(&row),
            deadline,
            crate::placement::Locality::Any,
        ),
    )
    .await;
    let now = ctx.now_unix_ms();
    let next_occurrence = |row: &ReminderRow| Settle::Reschedule {
        due_unix_ms: next_due(row.due_unix_ms, row.period_ms, now),
        next_attempt_ms: next_due(row.due_unix_ms, row.period_ms, now),
        attempts: 0,
    };
    let done = |row: &ReminderRow| {
        if row.period_ms == 0 {
            Settle::Delete
        } else {
            next_occurrence(row)
        }
    };
    let outcome = match outcome {
        Ok(_) => {
            ctx.counters.fired.fetch_add(1, Ordering::Relaxed);
            done(&row)
        }
        Err(e) => {
            let attempts = row.attempts + 1;
            // INVALID is permanent (the type is no actor type, or the app refused the turn as
            // malformed): retrying cannot help.
            if e.kind == ErrorKind::Invalid || attempts >= ctx.cfg.max_attempts {
                ctx.counters.abandoned.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(actor = %row.actor, reminder = %row.name, due = row.due_unix_ms,
                    attempts, error = %e,
                    "reminder occurrence abandoned; a periodic reminder goes on at its next due time");
                done(&row)
            } else {
                ctx.counters.retried.fetch_add(1, Ordering::Relaxed);
                let backoff = ctx
                    .cfg
                    .retry_min
                    .saturating_mul(1 << (attempts - 1).min(16))
                    .min(ctx.cfg.retry_max);
                tracing::debug!(actor = %row.actor, reminder = %row.name, attempts, error = %e,
                    retry_in_ms = backoff.as_millis() as u64, "reminder delivery failed; retrying");
                Settle::Reschedule {
                    due_unix_ms: row.due_unix_ms,
                    next_attempt_ms: now + backoff.as_millis() as i64,
                    attempts,
                }
            }
        }
    };
    let _ = ctx.settle_tx.send(settle(outcome));
}

/// Settles outcomes in batches (one store transaction per batch), retrying a batch the store
/// could not take a few times before leaving those rows to their claims' lapse.
async fn settle_loop(
    store: Arc<dyn ReminderStore>,
    mut rx: mpsc::UnboundedReceiver<Settlement>,
    held: Held,
    counters: Arc<ReminderCounters>,
) {
    const MAX_BATCH: usize = 1000;
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        // One settle per row in a batch (the last wins), so a batch never fights itself.
        let unique: BTreeMap<(ActorId, String), Settlement> = batch
            .drain(..)
            .map(|s| ((s.actor.clone(), s.name.clone()), s))
            .collect();
        let batch_rows: Vec<Settlement> = unique.into_values().collect();
        let mut tries = 0;
        loop {
            match store.settle(&batch_rows).await {
                Ok(()) => break,
                Err(e) if tries < 5 => {
                    tries += 1;
                    tracing::warn!(error = %e, rows = batch_rows.len(), "cannot settle reminders; retrying");
                    tokio::time::sleep(Duration::from_millis(200 * tries)).await;
                }
                Err(e) => {
                    counters
                        .settle_failures
                        .fetch_add(batch_rows.len() as u64, Ordering::Relaxed);
                    tracing::error!(error = %e, rows = batch_rows.len(),
                        "reminder settles lost; their claims lapse and they are delivered again");
                    break;
                }
            }
        }
        let mut held = held.lock().expect("held lock");
        for s in &batch_rows {
            held.remove(&(s.actor.clone(), s.name.clone(), s.version));
        }
    }
}
