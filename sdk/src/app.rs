//! Declaring an app: its actor types and worker types, with one async handler per method.

use crate::client::Client;
use crate::context::{ActorContext, Context};
use crate::payload;
use crate::timers::TimerTick;
use crate::worker::WorkerType;
use bytes::Bytes;
use futures::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sigx_proto::v1::{self, DeactivateReason};
use sigx_proto::{ActorError, ErrorKind};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type ActivateFn<S> = Arc<dyn Fn(Context) -> BoxFuture<Result<S, ActorError>> + Send + Sync>;
type MethodFn<S> =
    Arc<dyn Fn(ActorContext<S>) -> BoxFuture<Result<Bytes, ActorError>> + Send + Sync>;
type DeactivateFn<S> = Arc<
    dyn Fn(ActorContext<S>, DeactivateReason) -> BoxFuture<Result<(), ActorError>> + Send + Sync,
>;
type TimerFn<S> =
    Arc<dyn Fn(ActorContext<S>, TimerTick) -> BoxFuture<Result<(), ActorError>> + Send + Sync>;
type ReminderFn<S> = Arc<
    dyn Fn(ActorContext<S>, crate::Reminder) -> BoxFuture<Result<(), ActorError>> + Send + Sync,
>;

/// A stateful actor type: one activation per key across the fleet, turn-based, holding state
/// `S` in memory for as long as the activation lives.
///
/// ```
/// use sigx_sdk::{ActorType, Context};
///
/// let counter = ActorType::new("Counter", |_ctx: Context| async { Ok(0i64) })
///     .json_method("increment", |ctx, by: Option<i64>| async move {
///         let mut count = ctx.state().await;
///         *count += by.unwrap_or(1);
///         Ok(*count)
///     })
///     .json_method("get", |ctx, (): ()| async move { Ok(*ctx.state().await) });
/// ```
pub struct ActorType<S> {
    name: String,
    reentrant: bool,
    idle_timeout: Option<Duration>,
    activate: ActivateFn<S>,
    deactivate: Option<DeactivateFn<S>>,
    timer: Option<TimerFn<S>>,
    reminder: Option<ReminderFn<S>>,
    methods: BTreeMap<String, MethodFn<S>>,
}

impl<S: Send + 'static> ActorType<S> {
    /// A type named `name` whose activations start with the state `activate` returns (load it
    /// from storage here; an error fails the activation and the call that caused it).
    pub fn new<F, Fut>(name: impl Into<String>, activate: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S, ActorError>> + Send + 'static,
    {
        ActorType {
            name: name.into(),
            reentrant: false,
            idle_timeout: None,
            activate: Arc::new(move |ctx| Box::pin(activate(ctx))),
            deactivate: None,
            timer: None,
            reminder: None,
            methods: BTreeMap::new(),
        }
    }

    /// Lets one activation run several turns at once, interleaved at await points. The state
    /// lock then guards each critical section rather than each turn.
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// Deactivates an activation after `idle` without turns (the sidecar's default is 5 min).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// Handles `method` with raw payload bytes in and out.
    pub fn method<F, Fut>(mut self, method: impl Into<String>, handler: F) -> Self
    where
        F: Fn(ActorContext<S>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Bytes, ActorError>> + Send + 'static,
    {
        self.methods
            .insert(method.into(), Arc::new(move |ctx| Box::pin(handler(ctx))));
        self
    }

    /// Handles `method` with a JSON request (an empty payload reads as `null`) and a JSON reply.
    /// A payload that does not decode as `Req` answers `invalid` without running the handler.
    pub fn json_method<Req, Resp, F, Fut>(self, method: impl Into<String>, handler: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + 'static,
        F: Fn(ActorContext<S>, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, ActorError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.method(method, move |ctx: ActorContext<S>| {
            let handler = handler.clone();
            async move {
                let request: Req = ctx.json()?;
                let reply = handler(ctx, request).await?;
                payload::json(&reply)
            }
        })
    }

    /// Runs `hook` on the activation's last turn (idle timeout, host stopping, actor moving):
    /// save state here. The state is dropped right after.
    pub fn on_deactivate<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(ActorContext<S>, DeactivateReason) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ActorError>> + Send + 'static,
    {
        self.deactivate = Some(Arc::new(move |ctx, reason| Box::pin(hook(ctx, reason))));
        self
    }

    /// Handles the ticks of every timer of this type's activations (set with
    /// [`Context::set_timer`]; tell them apart by [`TimerTick::name`]). A tick is a turn of the
    /// activation like a method call, bounded by the host's call timeout; its storage writes
    /// commit when it returns `Ok`. Nobody waits for its result: an error is counted and logged
    /// by the sidecar, and the tick is not retried. Without a handler, ticks answer `invalid`.
    pub fn on_timer<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ActorContext<S>, TimerTick) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ActorError>> + Send + 'static,
    {
        self.timer = Some(Arc::new(move |ctx, tick| Box::pin(handler(ctx, tick))));
        self
    }

    /// Handles the actor's due reminders (set with `set_reminder`), one turn per delivery.
    /// Delivery is at least once: make the handler idempotent per (`name`, `due`). An error
    /// (or a timeout) has the sidecar deliver the occurrence again with backoff.
    pub fn on_reminder<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(ActorContext<S>, crate::Reminder) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ActorError>> + Send + 'static,
    {
        self.reminder = Some(Arc::new(move |ctx, r| Box::pin(handler(ctx, r))));
        self
    }
}

impl<S: Default + Send + 'static> ActorType<S> {
    /// A type whose activations start from `S::default()`.
    pub fn with_default_state(name: impl Into<String>) -> Self {
        Self::new(name, |_| async { Ok(S::default()) })
    }
}

/// What a turn asks of a type.
#[derive(Debug, Clone)]
enum TurnKind {
    Activate,
    Invoke,
    Deactivate(DeactivateReason),
    Timer(TimerTick),
    Reminder(crate::Reminder),
}

/// An actor type with its state type erased, plus its live activations.
trait ActorTypeDyn: Send + Sync {
    fn spec(&self) -> v1::ActorTypeSpec;
    fn run(self: Arc<Self>, ctx: Context, kind: TurnKind) -> BoxFuture<Result<Bytes, ActorError>>;
    fn live(&self) -> usize;
    fn drop_all(&self) -> usize;
}

struct ActorRuntime<S> {
    def: ActorType<S>,
    /// Live activations by activation id.
    live: Mutex<HashMap<Arc<str>, Arc<tokio::sync::Mutex<S>>>>,
}

fn no_such_method(ctx: &Context, known: impl Iterator<Item = impl AsRef<str>>) -> ActorError {
    let known: Vec<String> = known.map(|m| m.as_ref().to_string()).collect();
    ActorError::invalid(format!(
        "{} has no method {:?} (it has: {})",
        ctx.actor_type,
        &*ctx.method,
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    ))
}

impl<S: Send + 'static> ActorTypeDyn for ActorRuntime<S> {
    fn spec(&self) -> v1::ActorTypeSpec {
        v1::ActorTypeSpec {
            name: self.def.name.clone(),
            reentrant: self.def.reentrant,
            idle_timeout_ms: self
                .def
                .idle_timeout
                .map(|d| d.as_millis().clamp(1, u64::MAX as u128) as u64)
                .unwrap_or(0),
            methods: self.def.methods.keys().cloned().collect(),
        }
    }

    fn run(self: Arc<Self>, ctx: Context, kind: TurnKind) -> BoxFuture<Result<Bytes, ActorError>> {
        Box::pin(async move {
            match kind {
                TurnKind::Activate => {
                    if self.live.lock().unwrap().contains_key(&ctx.activation_id) {
                        return Err(ActorError::invalid(format!(
                            "activation {} of {}/{} is already live in this app",
                            ctx.activation_id, ctx.actor_type, ctx.key
                        )));
                    }
                    let state = (self.def.activate)(ctx.clone()).await?;
                    self.live.lock().unwrap().insert(
                        ctx.activation_id.clone(),
                        Arc::new(tokio::sync::Mutex::new(state)),
                    );
                    Ok(Bytes::new())
                }
                TurnKind::Invoke => {
                    let Some(handler) = self.def.methods.get(&*ctx.method).cloned() else {
                        return Err(no_such_method(&ctx, self.def.methods.keys()));
                    };
                    let state = self.live.lock().unwrap().get(&ctx.activation_id).cloned();
                    let Some(state) = state else {
                        return Err(ActorError::invalid(format!(
                            "{}/{} has no live activation {:?} in this app (no Activate turn \
                             preceded this one)",
                            ctx.actor_type, ctx.key, &*ctx.activation_id
                        )));
                    };
                    handler(ActorContext { ctx, state }).await
                }
                TurnKind::Timer(tick) => {
                    let state = self.live.lock().unwrap().get(&ctx.activation_id).cloned();
                    let (Some(state), Some(handler)) = (state, self.def.timer.clone()) else {
                        return Err(ActorError::invalid(format!(
                            "timer {:?} of {}/{} ticked, but {}",
                            tick.name(),
                            ctx.actor_type,
                            ctx.key,
                            if self.def.timer.is_none() {
                                "the type has no on_timer handler"
                            } else {
                                "its activation is not live in this app"
                            }
                        )));
                    };
                    handler(ActorContext { ctx, state }, tick).await?;
                    Ok(Bytes::new())
                }
                TurnKind::Reminder(reminder) => {
                    let Some(handler) = self.def.reminder.clone() else {
                        return Err(ActorError::invalid(format!(
                            "{} has no reminder handler, but reminder {:?} came due; add \
                             .on_reminder(..) to the type, or delete the reminder",
                            ctx.actor_type, reminder.name
                        )));
                    };
                    let state = self.live.lock().unwrap().get(&ctx.activation_id).cloned();
                    let Some(state) = state else {
                        return Err(ActorError::invalid(format!(
                            "{}/{} has no live activation {:?} in this app (no Activate turn \
                             preceded this one)",
                            ctx.actor_type, ctx.key, &*ctx.activation_id
                        )));
                    };
                    handler(ActorContext { ctx, state }, reminder).await?;
                    Ok(Bytes::new())
                }
                TurnKind::Deactivate(reason) => {
                    let state = self.live.lock().unwrap().remove(&ctx.activation_id);
                    if let (Some(state), Some(hook)) = (state, self.def.deactivate.clone()) {
                        hook(ActorContext { ctx, state }, reason).await?;
                    }
                    Ok(Bytes::new())
                }
            }
        })
    }

    fn live(&self) -> usize {
        self.live.lock().unwrap().len()
    }

    fn drop_all(&self) -> usize {
        let dropped = std::mem::take(&mut *self.live.lock().unwrap());
        dropped.len()
    }
}

/// An app: a name and its actor and worker types. Serve it with [`App::serve`] or
/// [`App::spawn`].
pub struct App {
    pub(crate) name: String,
    actors: BTreeMap<String, Arc<dyn ActorTypeDyn>>,
    workers: BTreeMap<String, Arc<WorkerType>>,
    problems: Vec<String>,
}

impl App {
    /// An app with no types yet; `name` shows in the sidecar's logs.
    pub fn new(name: impl Into<String>) -> Self {
        App {
            name: name.into(),
            actors: BTreeMap::new(),
            workers: BTreeMap::new(),
            problems: Vec::new(),
        }
    }

    fn check_name(&mut self, name: &str) {
        if name.trim().is_empty() {
            self.problems.push("a type has an empty name".into());
        } else if self.actors.contains_key(name) || self.workers.contains_key(name) {
            self.problems.push(format!(
                "type {name:?} is declared twice (names are unique per app)"
            ));
        }
    }

    /// Adds a stateful actor type.
    pub fn actor<S: Send + 'static>(mut self, actor: ActorType<S>) -> Self {
        self.check_name(&actor.name);
        let name = actor.name.clone();
        self.actors.insert(
            name,
            Arc::new(ActorRuntime {
                def: actor,
                live: Mutex::new(HashMap::new()),
            }),
        );
        self
    }

    /// Adds a stateless worker type.
    pub fn worker(mut self, worker: WorkerType) -> Self {
        self.check_name(&worker.name);
        self.workers.insert(worker.name.clone(), Arc::new(worker));
        self
    }

    /// Whether the declaration is well-formed: at least one type, no empty or duplicate names.
    /// The sidecar checks the same and refuses the registration otherwise.
    pub fn validate(&self) -> Result<(), crate::ServeError> {
        let mut problems = self.problems.clone();
        if self.actors.is_empty() && self.workers.is_empty() {
            problems.push("the app declares no actor or worker type".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(crate::ServeError::Invalid(problems.join("; ")))
        }
    }

    /// The `Register` message this app sends first on its `Serve` stream.
    pub fn registration(&self) -> v1::Register {
        v1::Register {
            actors: self.actors.values().map(|a| a.spec()).collect(),
            workers: self
                .workers
                .values()
                .map(|w| v1::WorkerTypeSpec {
                    name: w.name.clone(),
                    max_concurrency: w.max_concurrency,
                    methods: w.methods.keys().cloned().collect(),
                })
                .collect(),
            app_name: self.name.clone(),
        }
    }

    /// Turns the app into a [`Dispatcher`] that answers turns directly: what [`App::serve`] runs
    /// for every turn the sidecar sends, usable on its own to unit-test handlers without a
    /// sidecar. `client` is the one handlers get from [`Context::client`].
    pub fn into_dispatcher(self, client: Client) -> Dispatcher {
        Dispatcher {
            app_name: self.name,
            actors: self.actors,
            workers: self.workers,
            client,
            host_id: Mutex::new(Arc::from("")),
            clocks: crate::bound::TurnClocks::system(),
            fence: tokio::sync::watch::channel(0).0,
        }
    }
}

/// Answers turns: finds the type and method, keeps each activation's state, maps handler
/// failures (and panics) onto `TurnError`s. Concurrency is the caller's business: the sidecar
/// sends one turn per activation at a time (unless reentrant), and [`App::serve`] runs turns of
/// different activations concurrently.
pub struct Dispatcher {
    app_name: String,
    actors: BTreeMap<String, Arc<dyn ActorTypeDyn>>,
    workers: BTreeMap<String, Arc<WorkerType>>,
    client: Client,
    host_id: Mutex<Arc<str>>,
    /// The clocks turns' not-afters are judged by.
    clocks: crate::bound::TurnClocks,
    /// Bumped by every fence notice: running handlers watch it and stop.
    fence: tokio::sync::watch::Sender<u64>,
}

impl Dispatcher {
    /// Judges not-afters by `wall` instead of the system's wall clock (for tests).
    pub fn with_wall_clock(mut self, wall: crate::bound::WallClock) -> Self {
        self.clocks.wall = wall;
        self
    }

    /// Judges not-afters by `boot` instead of the system's boot clock (for tests; `|| None`
    /// for a platform without one).
    pub fn with_boot_clock(mut self, boot: crate::bound::BootClock) -> Self {
        self.clocks.boot = boot;
        self
    }

    /// The sidecar fenced (a `FenceNotice`): every running handler is cancelled (it answers
    /// TIMEOUT, never `ok`) and every activation's state is dropped, with no Deactivate hook —
    /// another host may already hold the actors. Returns how many activations were dropped.
    pub fn fence(&self) -> usize {
        self.fence.send_modify(|n| *n += 1);
        self.drop_all()
    }

    /// The app's name.
    pub fn app_name(&self) -> &str {
        &self.app_name
    }

    /// Records the host id the sidecar reported at registration (shown to handlers).
    pub fn set_host_id(&self, host_id: &str) {
        *self.host_id.lock().unwrap() = Arc::from(host_id);
    }

    /// Live activations across every actor type.
    pub fn live_activations(&self) -> usize {
        self.actors.values().map(|a| a.live()).sum()
    }

    /// Drops every activation's state: what happens when the `Serve` stream is lost, because
    /// the sidecar has dropped them too. Returns how many there were.
    pub fn drop_all(&self) -> usize {
        self.actors.values().map(|a| a.drop_all()).sum()
    }

    /// Runs one turn and returns the answer for the sidecar.
    ///
    /// Bounded by the turn's not-after (`Turn.not_after_unix_ms`): a turn that arrives at or past
    /// it is refused without running any code (UNREACHABLE: it never ran), and a handler still
    /// running at it, or when the sidecar fences, is cancelled (TIMEOUT, never `ok`). Code that
    /// ignores cancellation — blocking calls, spawned tasks — is not stopped by this.
    pub async fn handle(&self, turn: v1::Turn) -> v1::TurnResult {
        use crate::bound::{self, Bounded};
        let turn_id = turn.turn_id;
        let not_after = bound::not_after_of(&turn);
        let now = (self.clocks.wall)();
        if let Some(late_by) = self.clocks.past(&not_after) {
            return bound::refused(turn_id, late_by);
        }
        let fence = self.fence.subscribe();
        let batch = Arc::new(std::sync::Mutex::new(crate::storage::Batch::default()));
        let outcome = match self.prepare(turn, not_after.wall, now, &batch) {
            Ok(run) => {
                let run = std::panic::AssertUnwindSafe(run).catch_unwind();
                match bound::run_bounded(run, not_after, &self.clocks, fence).await {
                    Bounded::Done(Ok(result)) => result,
                    Bounded::Done(Err(panic)) => Err(ActorError::app(format!(
                        "the handler panicked: {}",
                        panic_message(&panic)
                    ))),
                    Bounded::PastNotAfter => {
                        return bound::cancelled(turn_id, "at the turn's not-after");
                    }
                    Bounded::Fenced => {
                        return bound::cancelled(turn_id, "because the sidecar fenced");
                    }
                }
            }
            Err(e) => Err(e),
        };
        // Writes travel only with a success: a failed turn writes nothing.
        let batch = std::mem::take(&mut *batch.lock().unwrap());
        let (outcome, writes) = match outcome {
            Ok(payload) => (v1::turn_result::Outcome::Ok(payload), batch.into_writes()),
            Err(e) => (v1::turn_result::Outcome::Error(turn_error(e)), Vec::new()),
        };
        v1::TurnResult {
            turn_id,
            outcome: Some(outcome),
            writes,
        }
    }

    fn prepare(
        &self,
        turn: v1::Turn,
        not_after: Option<std::time::SystemTime>,
        now: std::time::SystemTime,
        batch: &Arc<std::sync::Mutex<crate::storage::Batch>>,
    ) -> Result<BoxFuture<Result<Bytes, ActorError>>, ActorError> {
        let actor = turn
            .actor
            .ok_or_else(|| ActorError::invalid("the turn names no actor"))?;
        let (kind, method, payload) = match turn.kind {
            Some(v1::turn::Kind::Activate(_)) => (TurnKind::Activate, String::new(), Bytes::new()),
            Some(v1::turn::Kind::Invoke(i)) => (TurnKind::Invoke, i.method, i.payload),
            Some(v1::turn::Kind::Deactivate(d)) => (
                TurnKind::Deactivate(
                    DeactivateReason::try_from(d.reason).unwrap_or(DeactivateReason::Unspecified),
                ),
                String::new(),
                Bytes::new(),
            ),
            Some(v1::turn::Kind::Timer(t)) => {
                let tick = TimerTick::from_proto(t);
                let payload = tick.payload().clone();
                (TurnKind::Timer(tick), String::new(), payload)
            }
            Some(v1::turn::Kind::Reminder(r)) => {
                let payload = r.payload.clone();
                (
                    TurnKind::Reminder(crate::Reminder::from_proto(r)),
                    String::new(),
                    payload,
                )
            }
            None => return Err(ActorError::invalid("the turn has no kind")),
        };
        let storage = crate::storage::Storage {
            client: self.client.clone(),
            actor: actor.clone(),
            activation_id: Arc::from(turn.activation_id.as_str()),
            epoch: turn.epoch,
            batch: batch.clone(),
        };
        let ctx = Context {
            storage,
            actor_type: Arc::from(actor.actor_type.as_str()),
            key: Arc::from(actor.key.as_str()),
            activation_id: Arc::from(turn.activation_id.as_str()),
            method: Arc::from(method.as_str()),
            payload,
            // The not-after, when set, is the real end of the turn (the caller's deadline
            // capped by the host's lease); older sidecars send only the deadline.
            deadline: match not_after {
                Some(at) => Some(Instant::now() + at.duration_since(now).unwrap_or_default()),
                None => (turn.timeout_ms > 0)
                    .then(|| Instant::now() + Duration::from_millis(turn.timeout_ms)),
            },
            host_id: self.host_id.lock().unwrap().clone(),
            // Calls made from inside the turn continue its trace.
            client: match &turn.trace {
                Some(trace) => self.client.with_trace(Some(trace.clone())),
                None => self.client.clone(),
            },
        };
        if let Some(actor_type) = self.actors.get(&actor.actor_type) {
            return Ok(actor_type.clone().run(ctx, kind));
        }
        if let Some(worker) = self.workers.get(&actor.actor_type) {
            return match kind {
                // Workers have no activations; nothing to set up or tear down.
                TurnKind::Activate | TurnKind::Deactivate(_) => {
                    Ok(Box::pin(async { Ok(Bytes::new()) }))
                }
                TurnKind::Timer(_) => Err(ActorError::invalid(
                    "a timer ticked on a worker type: workers have no activations, so no timers",
                )),
                TurnKind::Invoke => match worker.methods.get(&*ctx.method) {
                    Some(handler) => Ok(handler(ctx)),
                    None => Err(no_such_method(&ctx, worker.methods.keys())),
                },
                TurnKind::Reminder(_) => Err(ActorError::invalid(format!(
                    "{} is a worker type: workers have no reminders",
                    ctx.actor_type
                ))),
            };
        }
        let known: BTreeSet<&str> = self
            .actors
            .keys()
            .chain(self.workers.keys())
            .map(String::as_str)
            .collect();
        Err(ActorError::invalid(format!(
            "app {:?} has no type {:?} (it has: {})",
            self.app_name,
            actor.actor_type,
            known.into_iter().collect::<Vec<_>>().join(", ")
        )))
    }
}

/// The wire form of a handler's error. `TurnError` carries `app` or `invalid`; any other kind
/// (say, a nested call's `timeout` passed up with `?`) is the actor's own failure as far as its
/// caller is concerned, so it travels as `app`, with the original kind kept in the message.
fn turn_error(e: ActorError) -> v1::TurnError {
    match e.kind {
        ErrorKind::App | ErrorKind::Invalid => v1::TurnError {
            kind: e.kind.to_proto() as i32,
            message: e.message,
        },
        _ => v1::TurnError {
            kind: ErrorKind::App.to_proto() as i32,
            message: e.to_string(),
        },
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".to_string()
    }
}
