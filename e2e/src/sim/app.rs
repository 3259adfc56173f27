//! The simulated app of one host: registers the `Counter` type on the runtime exactly as an app
//! does over its `Serve` stream, records every Activate, method and Deactivate turn it receives
//! (the activations' start and end), and answers them after a short, seeded think time. While
//! its host is suspended it reads and answers nothing (it is in the same VM).
//!
//! It is a compliant app (app.proto, `Turn.not_after_unix_ms` and, where its host has a boot
//! clock, `Turn.not_after_boot_ms`): a turn it reads at or past its not-after on either clock
//! is refused without running (UNREACHABLE, not recorded), a turn whose think time
//! would pass its not-after stops there and answers TIMEOUT, and a fence notice cancels every
//! running turn the same way.
//!
//! Every activation sets a periodic timer in its Activate turn, as an SDK's `on_activate` would
//! (through the production `Runtime::set_timer`); each tick is a turn of that activation, judged
//! by the checker like any other: a tick that runs outside its activation, or after its host
//! fenced, is a violation.

use super::SimConfig;
use super::host::ACTOR_TYPE;
use super::world::{Ev, HostShared, Shared};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sigx_proto::{ActorError, v1};
use sigx_sidecar::clock::SharedClock;
use sigx_sidecar::runtime::registry::{ActorType, Registry};
use sigx_sidecar::runtime::{ActorId, AppSession, Runtime, TimerSpec};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// What a method turn of an activation writes: its call's payload (the call id) under `last`, so
/// the checker can tie every stored write to the call it answers. Workers write nothing.
fn writes_of(turn: &v1::Turn) -> Vec<v1::StateWrite> {
    match &turn.kind {
        Some(v1::turn::Kind::Invoke(i)) if turn.epoch != 0 => vec![v1::StateWrite {
            key: "last".into(),
            op: Some(v1::state_write::Op::Put(i.payload.clone())),
        }],
        _ => Vec::new(),
    }
}

/// A stable name for an error, for the history: its kind.
pub fn error_name(e: &ActorError) -> String {
    e.kind.as_str().to_string()
}

/// The app attached to one host's runtime.
pub struct SimApp {
    pub session: Arc<AppSession>,
    /// Set when the app goes away: it runs (and records) no further turn, not even one already
    /// queued on its stream.
    gone: Arc<AtomicBool>,
}

impl SimApp {
    /// The app goes away (its container stops): call before the runtime detaches it.
    pub fn go_away(&self) {
        self.gone.store(true, Ordering::SeqCst);
    }
}

impl SimApp {
    /// Registers with `runtime` and starts answering turns.
    pub fn attach(
        runtime: &Runtime,
        shared: Arc<Shared>,
        me: Arc<HostShared>,
        cfg: Arc<SimConfig>,
        clock: SharedClock,
    ) -> Result<Arc<SimApp>, String> {
        let registry = Registry {
            app_name: format!("sim-{}", me.id),
            actors: BTreeMap::from([(
                ACTOR_TYPE.to_string(),
                ActorType {
                    name: ACTOR_TYPE.to_string(),
                    reentrant: false,
                    idle_timeout: cfg.idle_timeout,
                    methods: HashSet::new(),
                },
            )]),
            workers: BTreeMap::new(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let session = runtime
            .attach(registry, tx)
            .map_err(|e| format!("app attach failed: {e}"))?;
        let gone = Arc::new(AtomicBool::new(false));
        tokio::spawn(serve(
            Served {
                session: session.clone(),
                runtime: runtime.clone(),
                shared,
                me,
                cfg,
                clock,
                gone: gone.clone(),
            },
            rx,
        ));
        Ok(Arc::new(SimApp { session, gone }))
    }
}

async fn unfrozen(me: &HostShared) {
    let mut rx = me.suspended.subscribe();
    let _ = rx.wait_for(|s| !*s).await;
}

fn turn_error(turn_id: u64, kind: sigx_proto::ErrorKind, message: &str) -> v1::TurnResult {
    v1::TurnResult {
        turn_id,
        outcome: Some(v1::turn_result::Outcome::Error(v1::TurnError {
            kind: kind.to_proto() as i32,
            message: message.to_string(),
        })),
        writes: Vec::new(),
    }
}

/// What the app's serve loop works with.
struct Served {
    session: Arc<AppSession>,
    /// For the timers its Activate turns set.
    runtime: Runtime,
    shared: Arc<Shared>,
    me: Arc<HostShared>,
    cfg: Arc<SimConfig>,
    clock: SharedClock,
    gone: Arc<AtomicBool>,
}

async fn serve(
    served: Served,
    mut rx: mpsc::UnboundedReceiver<Result<v1::SidecarMessage, tonic::Status>>,
) {
    let Served {
        session,
        runtime,
        shared,
        me,
        cfg,
        clock,
        gone,
    } = served;
    let mut rng = StdRng::seed_from_u64(me.seed ^ 0x5151_aaaa);
    let fenced = tokio::sync::watch::channel(false).0;
    while let Some(msg) = rx.recv().await {
        // A suspended VM's app reads nothing; on resume it finds the queued turns.
        unfrozen(&me).await;
        if gone.load(Ordering::SeqCst) {
            return;
        }
        let turn = match msg {
            Ok(v1::SidecarMessage {
                msg: Some(v1::sidecar_message::Msg::Turn(turn)),
            }) => turn,
            Ok(v1::SidecarMessage {
                msg: Some(v1::sidecar_message::Msg::Fenced(_)),
            }) => {
                fenced.send_replace(true);
                continue;
            }
            _ => continue,
        };
        let not_after = turn.not_after_unix_ms;
        let now = clock.wall_unix_ms();
        let boot_not_after = turn.not_after_boot_ms;
        let past_on_boot = move |clock: &SharedClock| {
            boot_not_after > 0
                && clock
                    .boot()
                    .is_some_and(|b| b.as_millis() as u64 >= boot_not_after)
        };
        if (not_after > 0 && now >= not_after) || past_on_boot(&clock) {
            session.complete(turn_error(
                turn.turn_id,
                sigx_proto::ErrorKind::Unreachable,
                "received past its not-after: refused, never ran",
            ));
            continue;
        }
        let actor = turn
            .actor
            .as_ref()
            .map(|a| format!("{}/{}", a.actor_type, a.key))
            .unwrap_or_default();
        let act = turn.activation_id.clone();
        let think = match &turn.kind {
            Some(v1::turn::Kind::Activate(_)) => {
                shared.record(
                    &me,
                    Ev::ActStart {
                        host: me.id.clone(),
                        actor,
                        act,
                    },
                );
                Duration::from_millis(rng.random_range(0..=2))
            }
            Some(v1::turn::Kind::Timer(_)) => {
                shared.record(&me, Ev::TimerTick { act: act.clone() });
                shared.record(&me, Ev::Turn { act });
                Duration::from_millis(rng.random_range(cfg.turn_ms.0..=cfg.turn_ms.1))
            }
            Some(v1::turn::Kind::Invoke(_) | v1::turn::Kind::Reminder(_)) => {
                if let Some(v1::turn::Kind::Reminder(r)) = &turn.kind {
                    shared.record(
                        &me,
                        Ev::ReminderFired {
                            host: me.id.clone(),
                            actor: actor.clone(),
                            name: r.name.clone(),
                        },
                    );
                }
                shared.record(&me, Ev::Turn { act });
                Duration::from_millis(rng.random_range(cfg.turn_ms.0..=cfg.turn_ms.1))
            }
            Some(v1::turn::Kind::Deactivate(_)) => {
                shared.record(&me, Ev::ActEnd { act });
                Duration::ZERO
            }
            None => Duration::ZERO,
        };
        // The timer an Activate sets: first tick soon, then a few per idle timeout.
        let timer = matches!(turn.kind, Some(v1::turn::Kind::Activate(_))).then(|| TimerSpec {
            name: "tick".into(),
            due: Duration::from_millis(rng.random_range(20..=200)),
            period: Some(Duration::from_millis(rng.random_range(150..=600))),
            payload: bytes::Bytes::new(),
        });
        // An Activate that does not complete leaves no activation in the app (an SDK keeps the
        // instance only once its on-activate returned): its interval ends with the answer.
        let activating = matches!(turn.kind, Some(v1::turn::Kind::Activate(_)))
            .then(|| turn.activation_id.clone());
        let session = session.clone();
        let runtime = runtime.clone();
        let me = me.clone();
        let shared = shared.clone();
        let clock = clock.clone();
        let mut fenced = fenced.subscribe();
        tokio::spawn(async move {
            // Stop at the not-after: the think time is capped there.
            let mut left = if not_after > 0 {
                Duration::from_millis((not_after - now).max(0) as u64)
            } else {
                Duration::MAX
            };
            if let (true, Some(b)) = (boot_not_after > 0, clock.boot()) {
                left = left.min(Duration::from_millis(
                    boot_not_after.saturating_sub(b.as_millis() as u64),
                ));
            }
            let cancelled = tokio::select! {
                _ = tokio::time::sleep(think.min(left)) => false,
                _ = fenced.wait_for(|f| *f) => true,
            };
            unfrozen(&me).await;
            let late = (not_after > 0 && clock.wall_unix_ms() >= not_after) || past_on_boot(&clock);
            let mut failed = cancelled || late || think >= left;
            if let (Some(act), Some(timer)) = (&activating, timer)
                && !failed
                && let Some(actor) = &turn.actor
            {
                // A refusal (the activation is no longer live) fails the Activate, as an
                // SDK's on_activate that raised would.
                let id = ActorId::new(actor.actor_type.as_str(), actor.key.as_str());
                failed = runtime.set_timer(&id, act, timer).is_err();
            }
            if failed && let Some(act) = activating {
                shared.record(&me, Ev::ActEnd { act });
            }
            session.complete(if failed {
                turn_error(
                    turn.turn_id,
                    sigx_proto::ErrorKind::Timeout,
                    "cancelled at its not-after (or by the fence notice)",
                )
            } else {
                v1::TurnResult {
                    turn_id: turn.turn_id,
                    outcome: Some(v1::turn_result::Outcome::Ok(bytes::Bytes::from_static(
                        b"ok",
                    ))),
                    writes: writes_of(&turn),
                }
            });
        });
    }
}
