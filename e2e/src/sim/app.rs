//! The simulated app of one host: registers the `Counter` type on the runtime exactly as an app
//! does over its `Serve` stream, records every Activate, method and Deactivate turn it receives
//! (the activations' start and end), and answers them after a short, seeded think time. While
//! its host is suspended it answers nothing (it is in the same VM).

use super::SimConfig;
use super::host::ACTOR_TYPE;
use super::world::{Ev, HostShared, Shared};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sigx_proto::{ActorError, v1};
use sigx_sidecar::runtime::registry::{ActorType, Registry};
use sigx_sidecar::runtime::{AppSession, Runtime};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

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
        tokio::spawn(serve(session.clone(), rx, shared, me, cfg, gone.clone()));
        Ok(Arc::new(SimApp { session, gone }))
    }
}

async fn unfrozen(me: &HostShared) {
    let mut rx = me.suspended.subscribe();
    let _ = rx.wait_for(|s| !*s).await;
}

async fn serve(
    session: Arc<AppSession>,
    mut rx: mpsc::UnboundedReceiver<Result<v1::SidecarMessage, tonic::Status>>,
    shared: Arc<Shared>,
    me: Arc<HostShared>,
    cfg: Arc<SimConfig>,
    gone: Arc<AtomicBool>,
) {
    let mut rng = StdRng::seed_from_u64(me.seed ^ 0x5151_aaaa);
    while let Some(msg) = rx.recv().await {
        if gone.load(Ordering::SeqCst) {
            return;
        }
        let Ok(v1::SidecarMessage {
            msg: Some(v1::sidecar_message::Msg::Turn(turn)),
        }) = msg
        else {
            continue;
        };
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
            Some(v1::turn::Kind::Invoke(_)) => {
                shared.record(&me, Ev::Turn { act });
                Duration::from_millis(rng.random_range(cfg.turn_ms.0..=cfg.turn_ms.1))
            }
            Some(v1::turn::Kind::Deactivate(_)) => {
                shared.record(&me, Ev::ActEnd { act });
                Duration::ZERO
            }
            None => Duration::ZERO,
        };
        let session = session.clone();
        let me = me.clone();
        tokio::spawn(async move {
            if !think.is_zero() {
                tokio::time::sleep(think).await;
            }
            unfrozen(&me).await;
            session.complete(v1::TurnResult {
                turn_id: turn.turn_id,
                outcome: Some(v1::turn_result::Outcome::Ok(bytes::Bytes::from_static(
                    b"ok",
                ))),
            });
        });
    }
}
