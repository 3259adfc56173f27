//! One simulated host: the production sidecar pieces wired as `sidecar/src/host/cluster.rs`
//! (`bring_up`) wires them — membership, HeartbeatClock, the directory fed by ordered views, the
//! authenticated mesh client and server, the routing loop, the runtime behind the directory's
//! activation gate — but over turmoil sockets, a [`SimClock`] and the simulated store, with a
//! simulated app in place of the app process. `bring_up` is replicated rather than shared
//! because it binds real sockets and owns the process lifecycle; the wiring below follows it
//! step by step (keep the two in step when `bring_up` changes).

use super::SimConfig;
use super::app::{self, SimApp};
use super::clock::SimClock;
use super::net::{MESH_PORT, SimConnector, SimListener};
use super::store::SimProvider;
use super::world::{Command, Ev, HostShared, Life, Shared};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sigx_sidecar::app::Dispatcher;
use sigx_sidecar::clock::SharedClock;
use sigx_sidecar::directory::{Directory, DirectoryConfig, KnownFromViews, ViewSource};
use sigx_sidecar::health::HostState;
use sigx_sidecar::host::late::LateGate;
use sigx_sidecar::membership::{
    FenceReason, HostDescriptor, HostStatus, MembershipConfig, MembershipHandle, MemoryHub,
};
use sigx_sidecar::mesh::{
    MeshAuth, MeshClient, MeshClientConfig, MeshSecret, MeshServerConfig, MeshService, Verifier,
};
use sigx_sidecar::placement::{Inbound, Router, RouterConfig};
use sigx_sidecar::reminders::{Ownership, OwnershipSource};
use sigx_sidecar::runtime::{ActorId, Runtime, RuntimeConfig};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The actor type every simulated app registers.
pub const ACTOR_TYPE: &str = "Counter";

/// The reminder scheduler's timing on every simulated host: short, so that reminders fire and
/// retry many times within a run.
pub const REMINDER_POLL_MS: u64 = 100;
/// A reminder delivery's bound, as `SchedulerConfig::call_timeout`.
pub const REMINDER_CALL_TIMEOUT_MS: u64 = 1000;
/// The longest pause between a reminder's failed attempts, as `SchedulerConfig::retry_max`.
pub const REMINDER_RETRY_MAX_MS: u64 = 400;

/// The wall clock of simulated time zero.
pub fn epoch() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// Everything a host's own tasks need.
struct Parts {
    shared: Arc<Shared>,
    me: Arc<HostShared>,
    cfg: Arc<SimConfig>,
    clock: SimClock,
    state: Arc<HostState>,
    runtime: Runtime,
    membership: MembershipHandle,
    directory: Directory,
    router: Arc<Router>,
    /// The runtime's gate (fenced by a stop that cannot withdraw).
    late_gate: Arc<LateGate>,
    /// The app attached now (`None` while it is away).
    app: Mutex<Option<Arc<SimApp>>>,
    /// The reminder owner.
    reminders: sigx_sidecar::reminders::scheduler::Scheduler,
    /// Held across each write of this host's status, so writes land in the order they were
    /// decided: production decides its status in one loop and publishes nothing but `Leaving`
    /// once its stop began. Without it an app re-attach racing a leave could publish `Active`
    /// after `Leaving` (seed 5005383: a leaving host kept serving and its reminder shards
    /// went unserved).
    status_writes: Arc<tokio::sync::Mutex<()>>,
}

/// This incarnation's wall-clock skew within `cfg.wall_skew`, from its own seed.
fn host_skew(cfg: &SimConfig, seed: u64) -> super::clock::Skew {
    let bound = cfg.wall_skew;
    if bound == super::clock::Skew::default() {
        return bound;
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x005c_e30c_10c4);
    let (o, p) = (bound.offset_ms.abs(), bound.ppm.abs());
    super::clock::Skew {
        offset_ms: rng.random_range(-o..=o),
        ppm: rng.random_range(-p..=p),
    }
}

/// Whether this incarnation's platform has a boot clock (Linux `CLOCK_BOOTTIME`): as
/// `cfg.boot_clock` says, or half of them, from their own seeds, so the wall-clock rule that
/// guards a platform without one stays judged.
fn host_has_boot_clock(cfg: &SimConfig, seed: u64) -> bool {
    cfg.boot_clock
        .unwrap_or_else(|| StdRng::seed_from_u64(seed ^ 0x000b_007c_10c4).random_bool(0.5))
}

/// The software of one simulated host (a turmoil host future).
pub async fn run(
    shared: Arc<Shared>,
    me: Arc<HostShared>,
    hub: MemoryHub,
    cfg: Arc<SimConfig>,
) -> turmoil::Result {
    let id = me.id.clone();
    let mut clock = SimClock::skewed(
        epoch() + Duration::from_millis(shared.now_ms()),
        host_skew(&cfg, me.seed),
    );
    if host_has_boot_clock(&cfg, me.seed) {
        clock = clock.with_boot_clock();
    }
    let shared_clock: SharedClock = Arc::new(clock.clone());
    // Bind before joining (DESIGN.md §8).
    let listener = SimListener::bind(me.resets.clone()).await?;
    shared.record(&me, Ev::HostStart { host: id.clone() });

    let state = Arc::new(HostState::default());
    let late_gate = Arc::new(LateGate::new(id.clone()));
    let runtime = Runtime::new(
        RuntimeConfig {
            host_id: id.clone(),
            max_payload_bytes: 64 * 1024,
            slow_turn: Duration::from_secs(5),
            lifecycle_turn_timeout: Duration::from_secs(2),
            clock: shared_clock.clone(),
            state: shared.state.clone(),
            ..RuntimeConfig::default()
        },
        late_gate.clone(),
    );
    // 1. The app registers first.
    let app = SimApp::attach(
        &runtime,
        shared.clone(),
        me.clone(),
        cfg.clone(),
        shared_clock.clone(),
    )?;

    // 2. Join as joining.
    let mut descriptor = HostDescriptor::new(
        id.clone(),
        format!("{id}:{MESH_PORT}"),
        Some(vec![ACTOR_TYPE.to_string()]),
        Some(vec![ACTOR_TYPE.to_string()]),
    );
    descriptor.started_at_unix_ms = shared_clock.wall_unix_ms();
    let provider = Arc::new(SimProvider {
        inner: hub.provider(id.clone()),
        shared: shared.clone(),
        host: me.clone(),
        ttl: cfg.ttl,
    });
    let mut mcfg = MembershipConfig::with_timing(cfg.beat, cfg.ttl);
    mcfg.expiry_check = cfg.expiry_check;
    mcfg.self_fence = cfg.self_fence;
    mcfg.deletion_check = cfg.deletion_check;
    mcfg.drift_margin = cfg.drift_margin;
    let membership = {
        let mut backoff = Duration::from_millis(50);
        loop {
            match sigx_sidecar::membership::start(
                provider.clone(),
                descriptor.clone(),
                mcfg.clone(),
                shared_clock.clone(),
            )
            .await
            {
                Ok(m) => break m,
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
            }
        }
    };

    shared.record(&me, Ev::Joined { host: id.clone() });

    // 3. The directory, fed by the membership views in order (the host's own wiring).
    let (views, feed) = sigx_sidecar::host::directory_views(&membership);
    let auth = MeshAuth::Secret(MeshSecret::new("simulated cluster secret").expect("secret"));
    let connector = Arc::new(SimConnector {
        resets: me.resets.clone(),
    });
    let mesh = Arc::new(MeshClient::new(
        id.clone(),
        auth.clone(),
        shared_clock.clone(),
        connector,
        MeshClientConfig::default(),
    ));
    let directory = Directory::start(
        views.clone() as Arc<dyn ViewSource>,
        mesh.clone(),
        DirectoryConfig {
            faults: cfg.faults.clone(),
            ..DirectoryConfig::default()
        },
    );
    me.directory.set(directory.clone());
    me.membership.set(membership.clone());
    let rng_seed = me.seed ^ 0x9e37_79b9_7f4a_7c15;
    let router = Arc::new(Router::new(
        RouterConfig {
            rng: Some(Arc::new(Mutex::new(StdRng::seed_from_u64(rng_seed)))),
            ..RouterConfig::default()
        },
        membership.clone(),
        runtime.clone(),
        mesh.clone(),
        Arc::new(sigx_sidecar::host::DirectoryLocator(directory.clone())),
        state.clone(),
    ));
    // The reminder owner, as `host::reminders` starts it: the production scheduler over the
    // shared store, owning its rendezvous share of the shards while its view shows it active
    // and it serves. Short retries, and no abandoning: the checker asks that every reminder
    // due before the quiet end fired by the end of the run.
    let scheduler = {
        let (m, me2, st) = (membership.clone(), me.clone(), state.clone());
        let view_ownership = sigx_sidecar::reminders::ownership::ViewOwnership::new(
            move || Some(m.clone()),
            move || {
                me2.life() == Life::Serving && !me2.is_suspended() && st.fence_reason().is_none()
            },
        );
        let source: Arc<dyn OwnershipSource> = if cfg.reminder_ownership_frozen {
            Arc::new(FrozenOwnership(view_ownership, Mutex::new(None)))
        } else {
            Arc::new(view_ownership)
        };
        sigx_sidecar::reminders::scheduler::Scheduler::start(
            shared.state.clone(),
            router.clone() as Arc<dyn Dispatcher>,
            source,
            shared_clock.clone(),
            sigx_sidecar::reminders::SchedulerConfig {
                poll: Duration::from_millis(REMINDER_POLL_MS),
                lookahead: Duration::from_millis(200),
                call_timeout: Duration::from_millis(REMINDER_CALL_TIMEOUT_MS),
                retry_min: Duration::from_millis(100),
                retry_max: Duration::from_millis(REMINDER_RETRY_MAX_MS),
                max_attempts: u32::MAX,
                ..Default::default()
            },
            runtime.counters().reminders.clone(),
            runtime.reminder_nudge(),
            runtime.store_time(),
        )
    };
    // Rebalancing, as `bring_up` wires it: loads on the renewals, the redirect gate in front
    // of the directory's claim, and rounds every period (recorded when they ask for moves).
    let directory_gate: Arc<dyn sigx_sidecar::runtime::gate::ActivationGate> = if cfg.rebalance {
        let rt = runtime.clone();
        membership.set_load_source(Arc::new(move || sigx_sidecar::membership::LoadSample {
            activations: rt.activation_count() as u64,
            turns_total: rt
                .counters()
                .turns
                .load(std::sync::atomic::Ordering::Relaxed),
        }));
        let rcfg = sigx_sidecar::placement::rebalance::RebalanceConfig {
            min_idle: Duration::from_millis(50),
            ..sigx_sidecar::placement::rebalance::RebalanceConfig::for_beat(cfg.beat)
        };
        let rebalancer = Arc::new(sigx_sidecar::placement::rebalance::Rebalancer::new(
            rcfg,
            membership.clone(),
            runtime.clone(),
        ));
        let (r, m, sh, host) = (
            rebalancer.clone(),
            membership.clone(),
            shared.clone(),
            me.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(rcfg.period).await;
                if m.fence_state().is_some() {
                    return;
                }
                // A suspended VM runs nothing (as the reminder owner's guard above).
                if host.is_suspended() || host.life() != Life::Serving {
                    continue;
                }
                let asked = r.round();
                if asked > 0 {
                    sh.record(
                        &host,
                        Ev::RebalanceAsked {
                            host: host.id.clone(),
                            asked,
                        },
                    );
                }
            }
        });
        Arc::new(sigx_sidecar::placement::rebalance::RebalanceGate::new(
            Arc::new(directory.gate()),
            rebalancer,
        ))
    } else {
        Arc::new(directory.gate())
    };
    late_gate.set(sigx_sidecar::host::turns::bound_by_lease(
        &runtime,
        &membership,
        directory_gate,
    ));

    // 4. The mesh server.
    let server_cfg = MeshServerConfig::default();
    let verifier = Arc::new(Verifier::new(
        auth,
        shared_clock.clone(),
        Duration::from_secs(60),
        Arc::new(KnownFromViews(views.clone() as Arc<dyn ViewSource>)),
    ));
    let service = MeshService::new(
        Arc::new(Inbound::new(router.clone())),
        Arc::new(directory.clone()),
        &server_cfg,
    );
    let (down_tx, mut down_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = down_rx.wait_for(|d| *d).await;
        };
        let _ = sigx_sidecar::mesh::serve(listener, verifier, service, server_cfg, shutdown).await;
    });

    // 5. Active — after a little start-up work (seeded): peers may observe this host as
    // `joining` for a while, as they do in production.
    let startup = {
        let mut rng = StdRng::seed_from_u64(me.seed ^ 0x7777);
        Duration::from_millis(rng.random_range(5..=60))
    };
    tokio::time::sleep(startup).await;
    let _ = membership.set_status(HostStatus::Active).await;
    if me.life() == Life::Starting {
        me.set_life(Life::Serving);
    }

    let parts = Arc::new(Parts {
        shared: shared.clone(),
        me: me.clone(),
        cfg: cfg.clone(),
        clock,
        state: state.clone(),
        runtime: runtime.clone(),
        membership: membership.clone(),
        directory,
        router,
        late_gate,
        app: Mutex::new(Some(app)),
        reminders: scheduler,
        status_writes: Arc::default(),
    });
    tokio::spawn(fence_watch(parts.clone()));
    tokio::spawn(workload(parts.clone()));
    tokio::spawn(reminder_workload(parts.clone()));

    // The command loop: faults and probes the driver asks for.
    let mut rx = me
        .cmd_rx
        .lock()
        .expect("cmd lock")
        .take()
        .expect("host software started twice");
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Suspend => parts.suspend(),
            Command::Resume { wall_back } => {
                parts.clock.resume_stepped_back(wall_back);
                parts.resume();
            }
            Command::WallStepBack(d) => parts.clock.step_wall_back(d),
            Command::ResetConnections => me.resets.reset_all(),
            Command::Probe {
                key,
                deadline_ms,
                retry_until_ok,
            } => {
                tokio::spawn(probe(parts.clone(), key, deadline_ms, retry_until_ok));
            }
            Command::CheckRegistrations => {
                tokio::spawn(check_registrations(parts.clone()));
            }
            Command::AppDetach => parts.app_detach(),
            Command::AppAttach => parts.app_attach(),
            Command::Leave => {
                parts.leave().await;
                let _ = down_tx.send(true);
                break;
            }
        }
    }
    drop(feed);
    // Stay up (answering GOAWAY'd streams) until the driver removes the host.
    std::future::pending::<()>().await;
    Ok(())
}

impl Parts {
    /// A VM suspend begins: nothing the host could observe moves any more.
    fn suspend(&self) {
        let others: Vec<String> = self
            .shared
            .hosts
            .lock()
            .expect("hosts lock")
            .keys()
            .filter(|h| **h != self.me.id)
            .cloned()
            .collect();
        let mut held = self.me.held.lock().expect("held lock");
        for o in others {
            if self.shared.hold_ref(&self.me.id, &o) {
                turmoil::hold(self.me.id.as_str(), o.as_str());
            }
            held.push(o);
        }
        drop(held);
        *self.me.suspended_at.lock().expect("suspend lock") = Some(self.shared.now_ms());
        self.clock.suspend();
        self.me.suspended.send_replace(true);
        self.shared.record(
            &self.me,
            Ev::Suspended {
                host: self.me.id.clone(),
            },
        );
    }

    /// The VM resumes, all at once: wall clock jumps, links and store come back, the app runs.
    fn resume(&self) {
        self.clock.resume();
        *self.me.suspended_at.lock().expect("suspend lock") = None;
        self.me.suspended.send_replace(false);
        let held = std::mem::take(&mut *self.me.held.lock().expect("held lock"));
        for o in held {
            if self.shared.release_ref(&self.me.id, &o) {
                turmoil::release(self.me.id.as_str(), o.as_str());
            }
        }
        self.shared.record(
            &self.me,
            Ev::Resumed {
                host: self.me.id.clone(),
            },
        );
    }

    /// The app goes away while the sidecar lives (a container restart): the runtime drops its
    /// activations, and the host goes back to `joining`, as `bring_up`'s status loop does
    /// (`host/cluster.rs`: joining while no app is registered).
    fn app_detach(&self) {
        let Some(app) = self.app.lock().expect("app lock").take() else {
            return;
        };
        app.go_away();
        self.runtime.detach(&app.session);
        self.shared.record(
            &self.me,
            Ev::AppDetached {
                host: self.me.id.clone(),
            },
        );
        self.publish_status(HostStatus::Joining);
    }

    /// A new app attaches: the host becomes `active` again under the same id.
    fn app_attach(&self) {
        let mut slot = self.app.lock().expect("app lock");
        if slot.is_some() {
            return;
        }
        match SimApp::attach(
            &self.runtime,
            self.shared.clone(),
            self.me.clone(),
            self.cfg.clone(),
            Arc::new(self.clock.clone()),
        ) {
            Ok(app) => *slot = Some(app),
            Err(e) => {
                tracing::warn!(host = %self.me.id, error = %e, "sim: app re-attach failed");
                return;
            }
        }
        drop(slot);
        self.shared.record(
            &self.me,
            Ev::AppAttached {
                host: self.me.id.clone(),
            },
        );
        self.publish_status(HostStatus::Active);
    }

    fn publish_status(&self, status: HostStatus) {
        let m = self.membership.clone();
        let (state, writes) = (self.state.clone(), self.status_writes.clone());
        tokio::spawn(async move {
            let _in_order = writes.lock().await;
            if state.leaving() {
                return; // the stop's `Leaving` is the last word
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), m.set_status(status)).await;
        });
    }

    /// The graceful stop of `Host::stop`, in its order: leaving, drain, deactivate (and
    /// unregister), hand over, withdraw — or, when something handed to the app is still
    /// unanswered, fence and let the record lapse instead of withdrawing it.
    async fn leave(&self) {
        self.me.set_life(Life::Leaving);
        self.state.set_leaving();
        {
            // After any status write already decided (it lands first), before any later one
            // (which sees `leaving` and publishes nothing).
            let _in_order = self.status_writes.lock().await;
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                self.membership.set_status(HostStatus::Leaving),
            )
            .await;
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        // As the host's stop does: claim nothing more, hand back what has not started.
        self.reminders.stop(deadline).await;
        self.runtime.drain(deadline).await;
        self.runtime.deactivate_all(deadline).await;
        let me = self.membership.self_id().to_string();
        let mut rx = self.membership.subscribe();
        let _ = tokio::time::timeout_at(
            deadline,
            rx.wait_for(|v| v.get(&me).is_some_and(|d| d.status == HostStatus::Leaving)),
        )
        .await;
        if !self.runtime.is_quiet() {
            let reason = "stopped with turns unanswered by the app".to_string();
            self.late_gate.fence(reason.clone());
            self.state.set_fenced(reason.clone());
            self.membership.abort();
            self.runtime.drop_all();
            self.me.set_life(Life::Fenced);
            self.shared.record(
                &self.me,
                Ev::Fenced {
                    host: self.me.id.clone(),
                    reason,
                },
            );
            return;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.membership.leave()).await;
        self.me.set_life(Life::Left);
        self.shared.record(
            &self.me,
            Ev::Left {
                host: self.me.id.clone(),
            },
        );
    }
}

/// As the tail of `bring_up`: a fenced host drops every activation and refuses new ones.
async fn fence_watch(p: Arc<Parts>) {
    let mut rx = p.membership.fenced_signal();
    loop {
        if let Some(reason) = rx.borrow_and_update().clone()
            && reason != FenceReason::Left
        {
            p.state.set_fenced(reason.to_string());
            p.runtime.fence(&reason.to_string());
            p.me.set_life(Life::Fenced);
            p.shared.record(
                &p.me,
                Ev::Fenced {
                    host: p.me.id.clone(),
                    reason: reason.to_string(),
                },
            );
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

fn actor(key: u32) -> ActorId {
    ActorId::new(ACTOR_TYPE, format!("k{key}"))
}

/// One call through the routing loop, recorded.
async fn call(
    p: &Parts,
    key: u32,
    deadline: Instant,
    deadline_ms: u64,
    probe: bool,
    recovery: bool,
) -> bool {
    let id = p.shared.next_call_id();
    let a = actor(key);
    p.shared.record(
        &p.me,
        Ev::CallStart {
            id,
            host: p.me.id.clone(),
            actor: a.to_string(),
            deadline_ms,
            probe,
            recovery,
        },
    );
    let r = p
        .router
        .call(
            a.clone(),
            "work".into(),
            Bytes::from(id.to_string()),
            deadline,
            sigx_sidecar::placement::Locality::Any,
        )
        .await;
    tracing::debug!(host = %p.me.id, actor = %a, ?r, "sim: call done");
    let outcome = match &r {
        Ok(_) => "ok".to_string(),
        Err(e) => app::error_name(e),
    };
    p.shared.record(&p.me, Ev::CallEnd { id, outcome });
    r.is_ok()
}

/// Random calls to a bounded set of actors, with deadlines, while the driver says so.
async fn workload(p: Arc<Parts>) {
    let mut rng = StdRng::seed_from_u64(p.me.seed);
    loop {
        let gap = rng.random_range(p.cfg.call_gap_ms.0..=p.cfg.call_gap_ms.1);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        if !p.shared.load.load(std::sync::atomic::Ordering::SeqCst)
            || p.me.is_suspended()
            || p.me.life() != Life::Serving
        {
            continue;
        }
        let key = rng.random_range(0..p.cfg.actors);
        let p2 = p.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + p2.cfg.call_deadline;
            let deadline_ms = p2.shared.now_ms() + p2.cfg.call_deadline.as_millis() as u64;
            call(&p2, key, deadline, deadline_ms, false, false).await;
        });
    }
}

/// The deliberately broken reminder ownership ([`SimConfig::reminder_ownership_frozen`]): the
/// first ownership the view gave, kept whatever the view says since.
struct FrozenOwnership(
    sigx_sidecar::reminders::ownership::ViewOwnership,
    Mutex<Option<Ownership>>,
);

impl OwnershipSource for FrozenOwnership {
    fn ownership(&self) -> Option<Ownership> {
        let mut first = self.1.lock().expect("frozen ownership lock");
        if first.is_none() {
            *first = self.0.ownership();
        }
        first.clone()
    }
}

/// Now and then, a one-shot reminder on a random actor, due soon, through the production
/// `SetReminder` path; recorded once the store acknowledged it (its own seeded stream, so the
/// call workload draws what it drew before).
async fn reminder_workload(p: Arc<Parts>) {
    let mut rng = StdRng::seed_from_u64(p.me.seed ^ 0x5eed_7e11);
    let mut n = 0u64;
    loop {
        let gap = rng.random_range(150..=600);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        if !p.shared.load.load(std::sync::atomic::Ordering::SeqCst)
            || p.me.is_suspended()
            || p.me.life() != Life::Serving
        {
            continue;
        }
        n += 1;
        let key = rng.random_range(0..p.cfg.actors);
        let due_in = rng.random_range(0..=1500u64);
        let name = format!("r-{}-{n}", p.me.id);
        let actor = ActorId::new(ACTOR_TYPE, format!("k{key}").as_str());
        let req = sigx_proto::v1::SetReminderRequest {
            name: name.clone(),
            due: Some(sigx_proto::v1::set_reminder_request::Due::DueInMs(due_in)),
            ..Default::default()
        };
        let due_ms = p.shared.now_ms() + due_in;
        if sigx_sidecar::reminders::api::set(&p.runtime, actor.clone(), req)
            .await
            .is_ok()
        {
            p.shared.record(
                &p.me,
                Ev::ReminderSet {
                    actor: actor.to_string(),
                    name,
                    due_ms,
                },
            );
        }
    }
}

/// A probe: one call, or calls until `Ok`, within `deadline_ms` (true time).
async fn probe(p: Arc<Parts>, key: u32, deadline_ms: u64, retry_until_ok: bool) {
    loop {
        let now = p.shared.now_ms();
        if now >= deadline_ms {
            return;
        }
        let deadline = Instant::now() + Duration::from_millis(deadline_ms - now);
        if call(
            &p,
            key,
            deadline,
            deadline_ms,
            !retry_until_ok,
            retry_until_ok,
        )
        .await
            || !retry_until_ok
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Asks the directory where each live activation of this host is registered.
async fn check_registrations(p: Arc<Parts>) {
    if p.membership.check_lease().is_err() {
        return;
    }
    let mut live = p.runtime.live_activations();
    live.sort();
    for (a, act) in live {
        let deadline = Instant::now() + Duration::from_secs(1);
        let found = match p.directory.lookup(&a, deadline).await {
            Ok(Some(l)) => format!("{} ({})", l.host, l.activation_id),
            Ok(None) => "nowhere".to_string(),
            Err(e) => format!("error: {}", app::error_name(&e)),
        };
        // Only a host still serving (and still holding the activation) is judged.
        if p.membership.check_lease().is_err() || !p.runtime.is_active(&a) {
            continue;
        }
        p.shared.record(
            &p.me,
            Ev::RegCheck {
                host: p.me.id.clone(),
                actor: a.to_string(),
                act: act.to_string(),
                found,
            },
        );
    }
}
