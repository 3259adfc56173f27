//! Local activations: one activation per actor id on this host, turn-based delivery, reentrant
//! types, stateless workers, deadlines and idle deactivation.
//!
//! The runtime knows nothing of the cluster: before it activates an actor or dispatches a turn it
//! asks its [`ActivationGate`], where the directory (Rule 1: register before activate) and the
//! membership lease (fencing) plug in.

mod activation;
pub mod gate;
mod lease;
pub use lease::NotAfter;
mod output;
pub mod registry;
pub mod session;
mod timers;
mod turn;

pub use gate::{ActivationGate, OpenGate};
pub use registry::{RegistrationError, Registry};
pub use session::{AppSession, Outstanding, TurnAnswer, TurnKind, TurnOf, TurnOutcome};
pub use timers::{MAX_TIMER_DELAY, MAX_TIMER_NAME_BYTES, MAX_TIMERS_PER_ACTIVATION, TimerSpec};

use activation::Activation;
use bytes::Bytes;
use sigx_proto::{ActorError, v1};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// The identity of one actor: its type and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId {
    /// The registered type name.
    pub actor_type: Arc<str>,
    /// The key within the type.
    pub key: Arc<str>,
}

impl ActorId {
    /// An actor id from its parts.
    pub fn new(actor_type: impl Into<Arc<str>>, key: impl Into<Arc<str>>) -> Self {
        ActorId {
            actor_type: actor_type.into(),
            key: key.into(),
        }
    }

    /// The protobuf form.
    pub fn to_proto(&self) -> v1::ActorRef {
        v1::ActorRef {
            actor_type: self.actor_type.to_string(),
            key: self.key.to_string(),
        }
    }

    /// From the protobuf form.
    pub fn from_proto(r: &v1::ActorRef) -> Self {
        ActorId::new(r.actor_type.as_str(), r.key.as_str())
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.actor_type, self.key)
    }
}

/// Runtime settings.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// This host's id, used in activation ids and messages.
    pub host_id: String,
    /// This process's incarnation nonce, also in every activation id: activation ids never
    /// repeat across processes started with one host id (their counters both start at 0).
    pub incarnation: String,
    /// Largest payload accepted or delivered.
    pub max_payload_bytes: usize,
    /// A turn running longer than this logs a warning naming actor and method.
    pub slow_turn: Duration,
    /// The deadline of Activate and Deactivate turns.
    pub lifecycle_turn_timeout: Duration,
    /// The (stateful, worker) types the role declares; the app must register exactly these.
    pub declared_types: Option<(Vec<String>, Vec<String>)>,
    /// Whether the types of the first app registration are this host's for good (a clustered
    /// host publishes them in its membership descriptor at the join, and its fence policy
    /// follows them): a later app registering other types is then refused.
    pub pin_first_registration: bool,
    /// The pod's clocks: a turn's not-after is absolute wall-clock time, which the app compares
    /// with its own (same machine) wall clock.
    pub clock: crate::clock::SharedClock,
    /// The durable state store: epochs and every activation's state.
    pub state: crate::state::SharedStateStore,
    /// The host's default call timeout (SIGX_CALL_TIMEOUT_MS): the deadline of a timer tick,
    /// which no caller's deadline bounds.
    pub call_timeout: Duration,
}

impl fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("host_id", &self.host_id)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("slow_turn", &self.slow_turn)
            .field("lifecycle_turn_timeout", &self.lifecycle_turn_timeout)
            .field("declared_types", &self.declared_types)
            .finish_non_exhaustive()
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            host_id: "local".into(),
            incarnation: "0".into(),
            max_payload_bytes: 4 * 1024 * 1024,
            slow_turn: Duration::from_secs(5),
            lifecycle_turn_timeout: Duration::from_secs(30),
            declared_types: None,
            pin_first_registration: false,
            clock: crate::clock::system(),
            state: Arc::new(crate::state::memory::MemoryStateStore::new()),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// Counters of the local runtime (reported in `Status` and `/metrics`).
#[derive(Debug, Default)]
pub struct RuntimeCounters {
    pub activations: AtomicU64,
    pub deactivations: AtomicU64,
    pub turns: AtomicU64,
    pub worker_turns: AtomicU64,
    pub timeouts: AtomicU64,
    pub slow_turns: AtomicU64,
    pub app_errors: AtomicU64,
    /// Turns the app refused or cancelled at their not-after, or whose answer came back after
    /// the lease lapsed: none of them is reported as success.
    pub turns_past_not_after: AtomicU64,
    /// Turn batches committed to the state store.
    pub state_commits: AtomicU64,
    /// Writes and reads the store refused for a stale epoch (each supersedes an activation).
    pub stale_epochs: AtomicU64,
    /// Commits the store failed (each supersedes an activation).
    pub state_failures: AtomicU64,
    /// Timers set (or replaced) through SetTimer.
    pub timers_set: AtomicU64,
    /// Timer ticks handed to the app.
    pub timer_ticks: AtomicU64,
    /// Ticks that failed (an app error, a timeout, a refused commit) or could not run in time
    /// (the activation stayed busy past the tick's deadline): counted and logged, not retried.
    pub timer_failures: AtomicU64,
    /// Ticks of periodic timers skipped because the previous tick was still queued or running.
    pub timer_ticks_skipped: AtomicU64,
    /// Activations deactivated to rebalance the fleet (their next call places them anew).
    pub rebalance_moves: AtomicU64,
    /// Rebalancing rounds that asked at least one activation to move.
    pub rebalance_rounds: AtomicU64,
    /// Re-activations of moved actors refused once with `wrong-host` naming a less loaded peer.
    pub rebalance_redirects: AtomicU64,
    /// The reminder owner's counters (set through this host, delivered by it).
    pub reminders: Arc<crate::reminders::ReminderCounters>,
    /// Latency histograms (calls, turns, state commits, reminder lateness) for `/metrics`.
    pub histograms: crate::metrics::Histograms,
}

impl RuntimeCounters {
    /// Snapshot, by stable name.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BTreeMap::from([
            ("activations".to_string(), g(&self.activations)),
            ("deactivations".to_string(), g(&self.deactivations)),
            ("turns".to_string(), g(&self.turns)),
            ("workerTurns".to_string(), g(&self.worker_turns)),
            ("turnTimeouts".to_string(), g(&self.timeouts)),
            ("slowTurns".to_string(), g(&self.slow_turns)),
            ("appErrors".to_string(), g(&self.app_errors)),
            (
                "turnsPastNotAfter".to_string(),
                g(&self.turns_past_not_after),
            ),
            ("stateCommits".to_string(), g(&self.state_commits)),
            ("staleEpochs".to_string(), g(&self.stale_epochs)),
            ("stateFailures".to_string(), g(&self.state_failures)),
            ("timersSet".to_string(), g(&self.timers_set)),
            ("timerTicks".to_string(), g(&self.timer_ticks)),
            ("timerFailures".to_string(), g(&self.timer_failures)),
            (
                "timerTicksSkipped".to_string(),
                g(&self.timer_ticks_skipped),
            ),
            ("rebalanceMoves".to_string(), g(&self.rebalance_moves)),
            ("rebalanceRounds".to_string(), g(&self.rebalance_rounds)),
            (
                "rebalanceRedirects".to_string(),
                g(&self.rebalance_redirects),
            ),
        ])
        .into_iter()
        .chain(self.reminders.snapshot())
        .collect()
    }
}

/// Whether an app is attached, and which.
#[derive(Debug, Clone)]
pub enum AppState {
    /// No app is registered: the host is not ready.
    Detached,
    /// An app is registered and serving.
    Attached(Arc<AppSession>),
}

pub(crate) struct Inner {
    pub(crate) cfg: RuntimeConfig,
    pub(crate) gate: Arc<dyn ActivationGate>,
    pub(crate) counters: RuntimeCounters,
    app: watch::Sender<AppState>,
    pub(crate) activations: Mutex<HashMap<ActorId, Activation>>,
    workers: Mutex<HashMap<String, Arc<Semaphore>>>,
    next_session: AtomicU64,
    next_activation: AtomicU64,
    /// Turns dispatched and not yet answered (for draining).
    pub(crate) in_flight: watch::Sender<u64>,
    /// Activation tasks still running: from the claim to the release of the claim, which comes
    /// only after the app answered its last lifecycle turn.
    pub(crate) lifecycles: watch::Sender<u64>,
    /// The same activations by id: a turn's state reads find their activation here from its
    /// Activate turn to its Deactivate turn, also once it left `activations` (ending, or taken
    /// out by a graceful stop while its Activate or last turns still run).
    pub(crate) running: Mutex<HashMap<Arc<str>, RunningActivation>>,
    /// Turns handed to the app that it may still be running (for the fenced withdrawal).
    outstanding: Arc<Outstanding>,
    /// Wakes this host's reminder owner when a reminder is set here.
    reminder_nudge: Arc<tokio::sync::Notify>,
    /// Now on the state store's clock, for reminders (set here, owned here).
    store_time: Arc<crate::reminders::store_time::StoreTime>,
    /// The (stateful, worker) types of the first registration, with `pin_first_registration`.
    pinned_types: Mutex<Option<(Vec<String>, Vec<String>)>>,
}

/// The local actor runtime of one host.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("host_id", &self.inner.cfg.host_id)
            .finish_non_exhaustive()
    }
}

/// Why an app could not attach.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(
        "another app ({0:?}) is already registered with this sidecar: one sidecar serves one app; \
         stop the other app first"
    )]
    AlreadyAttached(String),
    #[error("{0}")]
    Invalid(#[from] RegistrationError),
    #[error(
        "the app registers actors [{registered_actors}] and workers [{registered_workers}], but \
         this host's role declares actors [{declared_actors}] and workers [{declared_workers}] \
         (SIGX_ACTORS / SIGX_WORKERS, which its pod labels advertise): make the ActorRole and the \
         app agree"
    )]
    Undeclared {
        registered_actors: String,
        registered_workers: String,
        declared_actors: String,
        declared_workers: String,
    },
    #[error(
        "the app registers actors [{registered_actors}] and workers [{registered_workers}], but \
         this host published actors [{published_actors}] and workers [{published_workers}] when \
         its first app registered, and a running host's types cannot change (peers place actors \
         by them and its fence policy follows them): register the same types, or restart the \
         sidecar, which joins as a new host publishing the new ones"
    )]
    TypesChanged {
        registered_actors: String,
        registered_workers: String,
        published_actors: String,
        published_workers: String,
    },
}

impl Runtime {
    /// A runtime asking `gate` before every activation and turn.
    pub fn new(cfg: RuntimeConfig, gate: Arc<dyn ActivationGate>) -> Self {
        Runtime {
            inner: Arc::new(Inner {
                cfg,
                gate,
                counters: RuntimeCounters::default(),
                app: watch::channel(AppState::Detached).0,
                activations: Mutex::new(HashMap::new()),
                workers: Mutex::new(HashMap::new()),
                next_session: AtomicU64::new(1),
                next_activation: AtomicU64::new(1),
                in_flight: watch::channel(0).0,
                lifecycles: watch::channel(0).0,
                running: Mutex::new(HashMap::new()),
                outstanding: Arc::new(Outstanding::default()),
                reminder_nudge: Arc::default(),
                store_time: Arc::default(),
                pinned_types: Mutex::new(None),
            }),
        }
    }

    /// What wakes this host's reminder owner (a reminder was set here).
    pub fn reminder_nudge(&self) -> Arc<tokio::sync::Notify> {
        self.inner.reminder_nudge.clone()
    }

    /// Now on the state store's clock, as this host knows it: what reminders are due by.
    pub fn store_time(&self) -> Arc<crate::reminders::store_time::StoreTime> {
        self.inner.store_time.clone()
    }

    /// The runtime's settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.cfg
    }

    /// The runtime's counters.
    pub fn counters(&self) -> &RuntimeCounters {
        &self.inner.counters
    }

    /// The gate the runtime asks.
    pub fn gate(&self) -> &Arc<dyn ActivationGate> {
        &self.inner.gate
    }

    /// The app currently attached, if any.
    pub fn app(&self) -> Option<Arc<AppSession>> {
        match &*self.inner.app.borrow() {
            AppState::Attached(s) => Some(s.clone()),
            AppState::Detached => None,
        }
    }

    /// Watches app attach/detach.
    pub fn watch_app(&self) -> watch::Receiver<AppState> {
        self.inner.app.subscribe()
    }

    /// Attaches a registered app. Refused while another app is attached.
    pub fn attach(
        &self,
        registry: Registry,
        tx: tokio::sync::mpsc::UnboundedSender<Result<v1::SidecarMessage, tonic::Status>>,
    ) -> Result<Arc<AppSession>, AttachError> {
        if let Some((actors, workers)) = &self.inner.cfg.declared_types {
            let ra: Vec<String> = registry.actors.keys().cloned().collect();
            let rw: Vec<String> = registry.workers.keys().cloned().collect();
            if &ra != actors || &rw != workers {
                return Err(AttachError::Undeclared {
                    registered_actors: ra.join(", "),
                    registered_workers: rw.join(", "),
                    declared_actors: actors.join(", "),
                    declared_workers: workers.join(", "),
                });
            }
        }
        // Held to the end of the attach, so two apps racing cannot both pin.
        let mut pinned = self.inner.pinned_types.lock().expect("pinned types lock");
        let types = (
            registry.actors.keys().cloned().collect::<Vec<_>>(),
            registry.workers.keys().cloned().collect::<Vec<_>>(),
        );
        if self.inner.cfg.pin_first_registration
            && let Some(published) = pinned.as_ref()
            && *published != types
        {
            return Err(AttachError::TypesChanged {
                registered_actors: types.0.join(", "),
                registered_workers: types.1.join(", "),
                published_actors: published.0.join(", "),
                published_workers: published.1.join(", "),
            });
        }
        let id = self.inner.next_session.fetch_add(1, Ordering::Relaxed);
        let session = AppSession::new(id, registry, tx, self.inner.outstanding.clone());
        let mut refused = None;
        self.inner.app.send_if_modified(|state| match state {
            AppState::Attached(existing) if !existing.is_closed() => {
                refused = Some(existing.registry.app_name.clone());
                false
            }
            _ => {
                *state = AppState::Attached(session.clone());
                true
            }
        });
        if let Some(name) = refused {
            return Err(AttachError::AlreadyAttached(name));
        }
        if self.inner.cfg.pin_first_registration && pinned.is_none() {
            *pinned = Some(types);
        }
        drop(pinned);
        {
            let mut workers = self.inner.workers.lock().expect("workers lock");
            workers.clear();
            for w in session.registry.workers.values() {
                workers.insert(
                    w.name.clone(),
                    Arc::new(Semaphore::new(w.max_concurrency as usize)),
                );
            }
        }
        tracing::info!(app = %session.registry.app_name, session = id,
            actors = ?session.registry.actors.keys().collect::<Vec<_>>(),
            workers = ?session.registry.workers.keys().collect::<Vec<_>>(), "app registered");
        Ok(session)
    }

    /// Detaches the app of `session` (its stream closed): turns in flight resolve as
    /// outcome-unknown, queued calls as unreachable (they never ran), and every activation of
    /// the session is dropped.
    pub fn detach(&self, session: &Arc<AppSession>) {
        session.close();
        self.inner.app.send_if_modified(|state| match state {
            AppState::Attached(s) if s.id == session.id => {
                *state = AppState::Detached;
                true
            }
            _ => false,
        });
        tracing::warn!(app = %session.registry.app_name, session = session.id,
            "app disconnected: its activations are dropped; not ready until an app registers again");
    }

    /// Live activations per type, sorted.
    pub fn activation_counts(&self) -> Vec<(String, u64)> {
        let table = self.inner.activations.lock().expect("activations lock");
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for id in table.keys() {
            *counts.entry(id.actor_type.to_string()).or_default() += 1;
        }
        counts.into_iter().collect()
    }

    /// Whether `actor` is active here now.
    pub fn is_active(&self, actor: &ActorId) -> bool {
        self.inner
            .activations
            .lock()
            .expect("activations lock")
            .contains_key(actor)
    }

    /// The activation id and epoch of `actor`'s activation here, if it has one (the epoch is 0
    /// until its Activate turn took one from the state store).
    pub fn activation_of(&self, actor: &ActorId) -> Option<(Arc<str>, u64)> {
        self.inner
            .activations
            .lock()
            .expect("activations lock")
            .get(actor)
            .map(|a| (a.activation_id.clone(), a.shared.epoch()))
    }

    /// How many activations live here (the load a host publishes).
    pub fn activation_count(&self) -> usize {
        self.inner
            .activations
            .lock()
            .expect("activations lock")
            .len()
    }

    /// Asks up to `n` activations, idle for at least `min_idle` and longest idle first, to leave
    /// this host (rebalancing): each leaves only if, at that moment, no turn runs and no caller
    /// waits, exactly as an idle activation does, and its next call places it anew. Returns the
    /// actors asked (a busy one among them stays).
    pub fn shed(&self, n: usize, min_idle: std::time::Duration) -> Vec<ActorId> {
        let mut idle: Vec<(std::time::Duration, ActorId, Arc<activation::Shared>)> = self
            .inner
            .activations
            .lock()
            .expect("activations lock")
            .iter()
            .filter(|(_, a)| !a.is_closed() && a.shared.is_idle_now())
            .map(|(id, a)| (a.shared.idle_for(), id.clone(), a.shared.clone()))
            .filter(|(idle_for, _, _)| *idle_for >= min_idle)
            .collect();
        idle.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        idle.truncate(n);
        idle.into_iter()
            .map(|(_, id, shared)| {
                shared.shed.notify_one();
                id
            })
            .collect()
    }

    /// The activation ids live here, for the directory's Collect answers and tests.
    pub fn live_activations(&self) -> Vec<(ActorId, Arc<str>)> {
        self.inner
            .activations
            .lock()
            .expect("activations lock")
            .iter()
            .map(|(id, a)| (id.clone(), a.activation_id.clone()))
            .collect()
    }

    /// Whether this host's app registers `actor_type` as a stateful actor (`Some(true)`), as a
    /// worker (`Some(false)`), or not at all (`None`).
    pub fn registers(&self, actor_type: &str) -> Option<bool> {
        let app = self.app()?;
        if app.registry.actors.contains_key(actor_type) {
            Some(true)
        } else if app.registry.workers.contains_key(actor_type) {
            Some(false)
        } else {
            None
        }
    }

    fn check_payload(&self, payload: &Bytes) -> Result<(), ActorError> {
        let limit = self.inner.cfg.max_payload_bytes;
        if payload.len() > limit {
            return Err(ActorError::invalid(format!(
                "payload of {} bytes exceeds the limit of {limit} bytes (SIGX_MAX_PAYLOAD_BYTES); \
                 send less per call",
                payload.len()
            )));
        }
        Ok(())
    }

    /// Runs `method` on `actor` on this host: activating it here if needed (after the gate's
    /// claim), one turn at a time, answering by `deadline`.
    #[tracing::instrument(level = "debug", skip(self, payload), fields(actor = %actor))]
    pub async fn invoke(
        &self,
        actor: &ActorId,
        method: &str,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        self.check_payload(&payload)?;
        let Some(app) = self.app() else {
            return Err(ActorError::unreachable(format!(
                "no app is registered with the sidecar on host {}: the call never ran; start the \
                 app (it registers on the Serve stream)",
                self.inner.cfg.host_id
            )));
        };
        let registry = &app.registry;
        // A due reminder travels as sigx's own method; it is no app method, so the type's
        // method list does not apply, and only actor types have reminders.
        let reminder = method == crate::reminders::REMINDER_METHOD;
        if reminder {
            crate::reminders::decode_delivery(&payload)?;
            if registry.workers.contains_key(&*actor.actor_type) {
                return Err(ActorError::invalid(format!(
                    "{:?} is a worker type, and workers have no reminders (no identity to \
                     remind); set reminders on an actor type",
                    actor.actor_type
                )));
            }
        }
        if let Some(ty) = registry.actors.get(&*actor.actor_type) {
            if !reminder && !ty.methods.is_empty() && !ty.methods.contains(method) {
                return Err(unknown_method(actor, method, &ty.methods));
            }
            self.inner.gate.check_serving()?;
            self.invoke_stateful(app.clone(), actor, method, payload, deadline)
                .await
        } else if let Some(w) = registry.workers.get(&*actor.actor_type) {
            if !w.methods.is_empty() && !w.methods.contains(method) {
                return Err(unknown_method(actor, method, &w.methods));
            }
            self.invoke_worker(app.clone(), actor, method, payload, deadline)
                .await
        } else {
            Err(ActorError::invalid(format!(
                "actor type {:?} is not registered by the app on host {} (registered: {}); \
                 register it in the app or check the type name",
                actor.actor_type,
                self.inner.cfg.host_id,
                registry.all_types().join(", ")
            )))
        }
    }

    async fn invoke_stateful(
        &self,
        app: Arc<AppSession>,
        actor: &ActorId,
        method: &str,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        let caller = {
            let mut table = self.inner.activations.lock().expect("activations lock");
            match table.get(actor) {
                Some(live) if !live.is_closed() => live.enter(),
                _ => {
                    // None, or one that is ending: a new activation replaces it.
                    self.inner.gate.check_accepting()?;
                    let n = self.inner.next_activation.fetch_add(1, Ordering::Relaxed);
                    let activation_id: Arc<str> = format!(
                        "{}.{}.{}.{n}",
                        self.inner.cfg.host_id, self.inner.cfg.incarnation, app.id
                    )
                    .into();
                    let ty = app
                        .registry
                        .actors
                        .get(&*actor.actor_type)
                        .expect("type checked by caller")
                        .clone();
                    let activation = Activation::spawn(
                        self.clone(),
                        app.clone(),
                        actor.clone(),
                        activation_id,
                        ty,
                        deadline,
                    );
                    let caller = activation.enter();
                    table.insert(actor.clone(), activation);
                    caller
                }
            }
        };
        caller.call(self, actor, method, payload, deadline).await
    }

    async fn invoke_worker(
        &self,
        app: Arc<AppSession>,
        actor: &ActorId,
        method: &str,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        let sem = self
            .inner
            .workers
            .lock()
            .expect("workers lock")
            .get(&*actor.actor_type)
            .cloned()
            .ok_or_else(|| ActorError::unreachable("the worker pool is gone (app detached)"))?;
        let timeout = || {
            ActorError::timeout(format!(
                "worker call {actor}.{method} passed its deadline; a late result is discarded"
            ))
        };
        let _permit = match tokio::time::timeout_at(deadline, sem.acquire_owned()).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(ActorError::unreachable("the worker pool closed")),
            Err(_) => return Err(timeout()),
        };
        self.inner
            .counters
            .worker_turns
            .fetch_add(1, Ordering::Relaxed);
        // Workers hold no identity: their turns are bounded by the caller's deadline alone,
        // and they have no state (no epoch): writes they send are refused.
        let turn = app.start_turn(
            actor,
            session::TurnOf {
                activation_id: "",
                epoch: 0,
            },
            TurnKind::Invoke {
                method: method.to_string(),
                payload,
            },
            deadline,
            Instant::now(),
            self.not_after(deadline, None),
        );
        let turn = async move {
            let answer = turn.await;
            match answer.outcome {
                Ok(_) if !answer.writes.is_empty() => Err(ActorError::invalid(
                    "a worker turn sent state writes, but workers have no state (no identity, \
                     no epoch); keep state in an actor type",
                )),
                outcome => outcome,
            }
        };
        let result = self.run_timed(actor, method, deadline, turn).await;
        self.note_error(&result);
        match result {
            Some(r) => r,
            None => Err(timeout()),
        }
    }

    /// Awaits a turn, warning when it runs past the slow-turn threshold; `None` when the
    /// deadline passed first (the turn is then left to finish on its own).
    pub(crate) async fn run_timed<F>(
        &self,
        actor: &ActorId,
        method: &str,
        deadline: Instant,
        turn: F,
    ) -> Option<TurnOutcome>
    where
        F: std::future::Future<Output = TurnOutcome> + Send + 'static,
    {
        let _in_flight = InFlight::new(self);
        let started = Instant::now();
        let slow = self.inner.cfg.slow_turn;
        let mut turn = Box::pin(turn);
        let mut warned = false;
        loop {
            let warn_at = started + slow;
            tokio::select! {
                biased;
                outcome = &mut turn => return Some(outcome),
                _ = tokio::time::sleep_until(deadline) => {
                    self.inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                _ = tokio::time::sleep_until(warn_at), if !warned => {
                    warned = true;
                    self.inner.counters.slow_turns.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(actor = %actor, method, after_ms = slow.as_millis() as u64,
                        "slow turn: it holds its activation; long work should be chunked or moved off the turn");
                }
            }
        }
    }

    fn note_error(&self, result: &Option<TurnOutcome>) {
        if let Some(Err(e)) = result
            && e.kind == sigx_proto::ErrorKind::App
        {
            self.inner
                .counters
                .app_errors
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Turns dispatched to the app and not yet answered.
    pub fn in_flight(&self) -> u64 {
        *self.inner.in_flight.borrow()
    }

    /// Waits until no turn is in flight, or `deadline`. True when drained.
    pub async fn drain(&self, deadline: Instant) -> bool {
        let mut rx = self.inner.in_flight.subscribe();
        tokio::time::timeout_at(deadline, rx.wait_for(|n| *n == 0))
            .await
            .is_ok()
    }

    /// Drops every activation at once (the host fenced): no Deactivate turns run, because the
    /// gate refuses every turn now; queued calls are answered with the gate's refusal.
    pub fn drop_all(&self) {
        for a in self.take_all_sorted() {
            drop(a.stop());
        }
    }

    /// Empties the activation table, in actor order: the hash map's order differs per process,
    /// and the deterministic simulator needs a seed to replay the same stop sequence.
    fn take_all_sorted(&self) -> Vec<Activation> {
        let mut all: Vec<(ActorId, Activation)> = self
            .inner
            .activations
            .lock()
            .expect("activations lock")
            .drain()
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter().map(|(_, a)| a).collect()
    }

    /// Deactivates every activation (Deactivate turns, then the gate's release), waiting up to
    /// `deadline`. Used by the graceful stop. True when every activation has ended and released
    /// its claim in time; false when some app turn (a method turn or a Deactivate) is still
    /// unanswered, so that activation still holds its claim.
    pub async fn deactivate_all(&self, deadline: Instant) -> bool {
        let mut done = Vec::new();
        for a in self.take_all_sorted() {
            done.push(a.stop());
        }
        let _ = tokio::time::timeout_at(deadline, futures::future::join_all(done)).await;
        // Activations that were no longer in the table (ending idle, or awaiting the late
        // answer of a lifecycle turn) hold their claims too: wait for them as well.
        let mut lifecycles = self.inner.lifecycles.subscribe();
        let mut in_flight = self.inner.in_flight.subscribe();
        let quiet = async {
            let _ = lifecycles.wait_for(|n| *n == 0).await;
            let _ = in_flight.wait_for(|n| *n == 0).await;
        };
        tokio::time::timeout_at(deadline, quiet).await.is_ok() && self.is_quiet()
    }

    /// The activation `activation_id` of `actor` while its task runs (registered by its
    /// [`Lifecycle`]), in the routing table or not: what a turn's state reads and timers use.
    pub(crate) fn running_activation(
        &self,
        actor: &ActorId,
        activation_id: &str,
    ) -> Option<Arc<activation::Shared>> {
        let running = self.inner.running.lock().expect("running lock");
        match running.get(activation_id) {
            Some((a, shared)) if a == actor => Some(shared.clone()),
            _ => None,
        }
    }

    /// Activation tasks still running (claimed and not yet released).
    pub fn lifecycles(&self) -> u64 {
        *self.inner.lifecycles.borrow()
    }

    /// No turn in flight and no activation holding a claim: nothing handed to the app is still
    /// unanswered, so withdrawing the membership record cannot let a peer re-activate an actor
    /// whose turn this host's app is still running.
    pub fn is_quiet(&self) -> bool {
        self.in_flight() == 0 && self.lifecycles() == 0
    }
}

fn unknown_method(
    actor: &ActorId,
    method: &str,
    known: &std::collections::HashSet<String>,
) -> ActorError {
    let mut known: Vec<&String> = known.iter().collect();
    known.sort();
    ActorError::invalid(format!(
        "method {method:?} is not registered for type {:?} (registered methods: {}); check the \
         method name",
        actor.actor_type,
        known
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Counts a turn in flight for as long as it lives (also in a task of its own, awaiting the
/// late answer of a turn whose caller has given up).
pub(crate) struct InFlight(Runtime);

impl InFlight {
    pub(crate) fn new(rt: &Runtime) -> Self {
        rt.inner.in_flight.send_modify(|n| *n += 1);
        InFlight(rt.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.inner.in_flight.send_modify(|n| *n -= 1);
    }
}

/// An entry of [`Inner::running`]: the actor and the state callers share.
pub(crate) type RunningActivation = (ActorId, Arc<activation::Shared>);

/// An activation's task, counted in `lifecycles` and registered in `running` for as long as it
/// runs (made before the task is spawned, dropped when it ends, on every path).
pub(crate) struct Lifecycle {
    rt: Runtime,
    activation_id: Arc<str>,
}

impl Lifecycle {
    pub(crate) fn new(
        rt: &Runtime,
        actor: &ActorId,
        activation_id: &Arc<str>,
        shared: &Arc<activation::Shared>,
    ) -> Self {
        rt.inner.lifecycles.send_modify(|n| *n += 1);
        rt.inner
            .running
            .lock()
            .expect("running lock")
            .insert(activation_id.clone(), (actor.clone(), shared.clone()));
        Lifecycle {
            rt: rt.clone(),
            activation_id: activation_id.clone(),
        }
    }
}

impl Drop for Lifecycle {
    fn drop(&mut self) {
        self.rt
            .inner
            .running
            .lock()
            .expect("running lock")
            .remove(&self.activation_id);
        self.rt.inner.lifecycles.send_modify(|n| *n -= 1);
    }
}
