//! The deterministic simulation of a sigx cluster: the judge of the single-activation
//! guarantee (DESIGN.md §3–§5, §10; issue 5).
//!
//! Each simulated host runs the production sidecar code — membership with its HeartbeatClock
//! against the shared [`MemoryHub`] lease store, the directory, the routing loop, the runtime
//! behind the directory's activation gate, the authenticated tonic mesh — inside a
//! [turmoil](https://docs.rs/turmoil) simulation: simulated TCP, simulated time, one thread.
//! A seed chooses the cluster, the workload and the faults (crash, graceful leave, joins,
//! partitions, store isolation and outage, lagging watches, message delay, connection resets,
//! VM suspends, rolling restarts). Every activation's start and end and every call's outcome are
//! recorded; [`check`] judges the history.
//!
//! Determinism: every RNG (faults, workload, app think times, placement policy, turmoil's own)
//! is seeded from the seed, no real time is read, and the one thread polls hosts in a fixed
//! order. [`SimReport::fingerprint`] hashes the history so a test can show that a seed replays
//! exactly — it cannot yet: tokio seeds the branch choice of `select!` per runtime at random
//! (turmoil seeds it only under `--cfg tokio_unstable`), and std hash maps iterate in a per-run
//! order (the runtime's stop paths now sort; others remain). So a seed replays its verdict —
//! the same violations on the same actors, as far as observed — but not a bit-identical
//! history: event times may move by a millisecond or two between runs.
//!
//! Layout: [`world`] (shared state and the history), [`host`] (one host's wiring), [`app`]
//! (the simulated app), [`store`] (the store as a host sees it), [`net`] (turmoil sockets),
//! [`clock`] (clocks with VM suspend), [`faults`] (schedules), [`check`] (the invariants).

pub mod app;
pub mod check;
pub mod clock;
pub mod faults;
pub mod host;
pub mod net;
pub mod state;
pub mod store;
pub mod world;

use faults::{Fault, Schedule, Timed};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sigx_sidecar::directory::ProtocolFaults;
use sigx_sidecar::membership::{DeletionCheck, ExpiryCheck, MemoryHub, SelfFence};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use world::{Command, Ev, HostShared, Life, Shared};

/// What a seed runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Random faults from the seed (the suite and `make sim`).
    Random,
    /// Availability figures: one crash, nothing else; recovery probes from a survivor.
    Crash,
    /// Availability figures: one join, nothing else.
    Join,
    /// Availability figures: one graceful leave, nothing else.
    Leave,
}

/// The knobs of one run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub scenario: Scenario,
    pub initial_hosts: usize,
    /// Actors `Counter/k0..k{actors}`.
    pub actors: u32,
    pub beat: Duration,
    pub ttl: Duration,
    /// Observers' drift margin on top of the TTL before they suspect a peer.
    pub drift_margin: Duration,
    pub call_deadline: Duration,
    /// Pause between a host's calls, ms (inclusive range).
    pub call_gap_ms: (u64, u64),
    /// The app's think time per method turn, ms.
    pub turn_ms: (u64, u64),
    pub idle_timeout: Duration,
    pub max_faults: usize,
    /// Which faults the schedule draws from.
    pub mix: faults::Mix,
    /// Deliberately broken directory variants (checker tests only).
    pub faults: ProtocolFaults,
    /// Deliberately broken expiry confirmation (checker tests only).
    pub expiry_check: ExpiryCheck,
    /// Deliberately broken self-fencing (checker tests only).
    pub self_fence: SelfFence,
    /// Deliberately broken handling of a record deleted by a third party (checker tests only).
    pub deletion_check: DeletionCheck,
    /// DELIBERATELY BROKEN when set (checker tests only): each reminder owner keeps the shards
    /// of its first view forever, so a departed owner's shards are never taken over.
    pub reminder_ownership_frozen: bool,
    /// A deliberately broken state store without its epoch fence (checker tests only).
    pub state_check: state::StateCheck,
    /// Whether the store answers with its own clock (true: a server, as PostgreSQL, whose clock
    /// reminders are due by). DELIBERATELY BROKEN when false (checker tests only): each host
    /// judges due times on its own wall clock, so a skewed host fires reminders early or late.
    pub store_clock: bool,
    /// Rebalancing on (the production rebalancer and its redirect gate, as `bring_up` wires
    /// them): a host above its peers' mean hands idle activations away while faults run.
    pub rebalance: bool,
    /// Clock skew between hosts: each incarnation's wall clock starts up to `offset_ms` off true
    /// time (either way) and runs up to `ppm` fast or slow, drawn from the host's own seed (zero:
    /// every wall clock is true, and no draw is made, so seeds keep their histories).
    pub wall_skew: clock::Skew,
    /// Whether hosts have a boot clock (Linux `CLOCK_BOOTTIME`): `None` gives one to half the
    /// incarnations, drawn from each one's own seed, so the wall-clock rule a platform without
    /// one relies on stays judged; `Some` sets it for every host (the regression corpus).
    pub boot_clock: Option<bool>,
    /// An explicit fault schedule in place of the seed's random one (the regression corpus:
    /// one named schedule per hole, see [`faults::corpus`]). Random scenario only.
    pub schedule: Option<Schedule>,
}

/// Time after the deadline within which every call must have been answered.
pub const ANSWER_BOUND_MS: u64 = 250;

impl SimConfig {
    /// The production protocol under random faults, shaped by `seed`.
    pub fn random(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc0ff_ee00);
        SimConfig {
            seed,
            scenario: Scenario::Random,
            initial_hosts: rng.random_range(2..=5),
            actors: rng.random_range(4..=12),
            beat: Duration::from_millis(250),
            ttl: Duration::from_millis(1000),
            drift_margin: Duration::from_millis(250),
            call_deadline: Duration::from_millis(rng.random_range(300..=1500)),
            call_gap_ms: (10, rng.random_range(30..=80)),
            turn_ms: (0, rng.random_range(1..=15)),
            idle_timeout: Duration::from_millis(rng.random_range(400..=4000)),
            max_faults: 5,
            mix: faults::Mix::All,
            faults: ProtocolFaults::default(),
            expiry_check: ExpiryCheck::FreshRead,
            self_fence: SelfFence::OnExpiry,
            deletion_check: DeletionCheck::WaitForLapse,
            reminder_ownership_frozen: false,
            state_check: state::StateCheck::Fenced,
            store_clock: true,
            rebalance: false,
            wall_skew: clock::Skew::default(),
            boot_clock: None,
            schedule: None,
        }
    }

    /// `schedule` instead of random faults, with the rest shaped by `seed` as [`Self::random`]
    /// shapes it (a regression schedule runs under a few seeds: the workload differs, the
    /// faults do not).
    pub fn scheduled(seed: u64, schedule: Schedule) -> Self {
        SimConfig {
            schedule: Some(schedule),
            ..SimConfig::random(seed)
        }
    }

    /// An availability run: `scenario` once, at [`AVAIL_EVENT_MS`], with a steady workload.
    pub fn availability(seed: u64, scenario: Scenario) -> Self {
        SimConfig {
            scenario,
            initial_hosts: 4,
            actors: 16,
            call_deadline: Duration::from_millis(3000),
            call_gap_ms: (5, 20),
            turn_ms: (0, 3),
            idle_timeout: Duration::from_secs(60),
            ..SimConfig::random(seed)
        }
    }

    /// Membership churn under lagging watches, many short-lived activations: where a broken
    /// handoff rule shows soonest (the checker tests use it).
    pub fn churn(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x00c4_0a11);
        SimConfig {
            initial_hosts: rng.random_range(2..=4),
            // Many actors, each called now and then, idling out quickly: many fresh
            // activations while ownership moves.
            actors: 64,
            call_gap_ms: (5, 25),
            idle_timeout: Duration::from_millis(rng.random_range(60..=250)),
            mix: faults::Mix::Churn,
            ..SimConfig::random(seed)
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis() as u64
    }
}

/// Phases of a run (ms of simulated time).
const LOAD_START_MS: u64 = 300;
const FAULTS_FROM_MS: u64 = 1000;
const FAULTS_UNTIL_MS: u64 = 4000;
/// When an availability scenario's event happens.
pub const AVAIL_EVENT_MS: u64 = 2500;
/// How long an availability run waits for crashed actors to answer again.
pub const RECOVERY_WINDOW_MS: u64 = 12_000;
/// How long the liveness probes may take.
const PROBE_MS: u64 = 3000;
/// A fenced host is restarted (as a new incarnation) this long after it fenced.
const RESTART_FENCED_MS: u64 = 300;
/// The run's last stretch after the probes are answered: the registration checks' answers.
const TAIL_MS: u64 = 300;
/// How much longer the tail may run for a due reminder that has not fired yet. The probes
/// prove the directory answers again, but a reminder attempt that failed on a recovering
/// partition just before that waits out its backoff (up to `retry_max`) and the scheduler's
/// next poll before it tries again (seed 6168777: the retry was due 14 ms after a 300 ms tail).
const REMINDER_TAIL_MS: u64 =
    host::REMINDER_RETRY_MAX_MS + host::REMINDER_POLL_MS + host::REMINDER_CALL_TIMEOUT_MS;

/// Which promise a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    /// Single activation, no lost registration, no conflicting reports.
    Safety,
    /// Calls answered in time; actors callable after healing.
    Liveness,
}

/// A broken invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    pub promise: Promise,
    pub what: String,
    /// The actor involved, when one is.
    pub actor: Option<String>,
}

/// Availability figures of one run (ms of simulated time).
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Crash → each affected actor answering a call again (from a caller that had routes to
    /// the crashed host cached).
    pub crash_recovery_ms: Vec<u64>,
    /// Crash → every survivor's view without the crashed host and no partition recovering.
    pub crash_converged_ms: Vec<u64>,
    /// Join/leave → no partition recovering on any host any more.
    pub handoff_ms: Vec<u64>,
    /// Workload calls that failed during the handoff window.
    pub handoff_failed_calls: u64,
    /// Workload calls issued during the handoff window.
    pub handoff_calls: u64,
}

/// The outcome of one seed.
#[derive(Debug, Clone)]
pub struct SimReport {
    pub seed: u64,
    pub config: SimConfig,
    pub schedule: Schedule,
    pub violations: Vec<Violation>,
    pub history: Vec<world::Event>,
    pub figures: Figures,
    /// Hash of the whole history: equal for equal runs.
    pub fingerprint: u64,
    pub calls: u64,
    pub ok_calls: u64,
    pub activations: u64,
    /// Activations the rebalancers asked to move (`SimConfig::rebalance`).
    pub rebalance_asked: u64,
    /// Each host's state at the end.
    pub hosts_at_end: Vec<String>,
}

impl SimReport {
    /// The report a violation prints: seed, schedule, and the involved actor's history.
    pub fn explain(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "SIMULATION VIOLATION — seed {} (replay: make sim SEED={})",
            self.seed, self.seed
        );
        let _ = writeln!(s, "config: {:?}", self.config);
        let _ = writeln!(s, "fault schedule:\n{}", self.schedule);
        for v in &self.violations {
            let _ = writeln!(s, "violation: {}", v.what);
        }
        let _ = writeln!(s, "hosts at the end:");
        for h in &self.hosts_at_end {
            let _ = writeln!(s, "  {h}");
        }
        if let Some(actor) = self.violations.iter().find_map(|v| v.actor.clone()) {
            let _ = writeln!(s, "history of {actor} (and of the hosts):");
            for e in check::actor_history(&self.history, &actor) {
                let _ = writeln!(s, "  {e}");
            }
        }
        s
    }
}

struct Driver<'a> {
    sim: turmoil::Sim<'a>,
    shared: Arc<Shared>,
    hub: MemoryHub,
    cfg: Arc<SimConfig>,
    rng: StdRng,
    /// Host incarnations started so far (names `h1`, `h2`, ...).
    started: u64,
    /// Pending actions by time (and insertion order).
    actions: BTreeMap<(u64, u64), Action>,
    next_action: u64,
    /// Fenced hosts already scheduled for restart.
    restarting: Vec<String>,
    partitions: Vec<(String, String)>,
    isolated: Vec<String>,
    frozen: Vec<String>,
    /// Hosts whose feed is held by a [`store::FeedHold`].
    stalled: Vec<String>,
    /// Hosts whose app is away.
    detached: Vec<String>,
    /// (laggard, newcomer, freeze for, give up at): freeze the laggard's feed as soon as its
    /// view shows the newcomer.
    freeze_on_sight: Vec<(String, String, u64, u64)>,
    figures: Figures,
}

#[derive(Debug)]
enum Action {
    Fault(Fault),
    StartHost,
    Leave(String),
    Crash(String),
    Unhold(String, String),
    HealStore(String),
    EndOutage,
    Unfreeze(String),
    LatencyNormal,
    /// Resume a suspended host, its wall clock stepped back by this much in the same instant.
    Resume(String, Duration),
    AppAttach(String),
    OpenFeed(String),
}

const NORMAL_LATENCY: Duration = Duration::from_millis(3);

impl<'a> Driver<'a> {
    fn at(&mut self, t: u64, a: Action) {
        self.next_action += 1;
        self.actions.insert((t, self.next_action), a);
    }

    fn now(&self) -> u64 {
        self.sim.elapsed().as_millis() as u64
    }

    fn start_host(&mut self) -> String {
        self.started += 1;
        let id = format!("h{}", self.started);
        let me = HostShared::new(
            id.clone(),
            self.cfg.seed.wrapping_mul(1000).wrapping_add(self.started),
        );
        self.shared
            .hosts
            .lock()
            .expect("hosts lock")
            .insert(id.clone(), me.clone());
        let (shared, hub, cfg) = (self.shared.clone(), self.hub.clone(), self.cfg.clone());
        self.sim.host(id.as_str(), move || {
            host::run(shared.clone(), me.clone(), hub.clone(), cfg.clone())
        });
        // A suspended host must not see the newcomer until it resumes.
        for other in self.serving_or_suspended() {
            if let Some(h) = self.shared.host(&other)
                && h.is_suspended()
            {
                if self.shared.hold_ref(&id, &other) {
                    self.sim.hold(id.as_str(), other.as_str());
                }
                h.held.lock().expect("held lock").push(id.clone());
            }
        }
        id
    }

    fn hosts_in(&self, f: impl Fn(&HostShared) -> bool) -> Vec<String> {
        self.shared
            .hosts
            .lock()
            .expect("hosts lock")
            .values()
            .filter(|h| f(h))
            .map(|h| h.id.clone())
            .collect()
    }

    fn serving(&self) -> Vec<String> {
        self.hosts_in(|h| h.life() == Life::Serving && !h.is_suspended())
    }

    fn serving_or_suspended(&self) -> Vec<String> {
        self.hosts_in(|h| matches!(h.life(), Life::Serving | Life::Starting))
    }

    fn slot(&self, slot: usize) -> Option<String> {
        let s = self.serving();
        (!s.is_empty()).then(|| s[slot % s.len()].clone())
    }

    fn send(&self, id: &str, cmd: Command) {
        if let Some(h) = self.shared.host(id) {
            let _ = h.cmd_tx.send(cmd);
        }
    }

    /// Starts a graceful leave; the host stops counting as serving at once.
    fn leave(&mut self, id: &str) {
        if let Some(h) = self.shared.host(id) {
            h.set_life(Life::Leaving);
        }
        self.send(id, Command::Leave);
    }

    fn crash(&mut self, id: &str) {
        let Some(h) = self.shared.host(id) else {
            return;
        };
        if h.life() == Life::Crashed {
            return;
        }
        self.sim.crash(id);
        h.set_life(Life::Crashed);
        self.shared.record_at(
            self.now(),
            Ev::Crashed {
                host: id.to_string(),
            },
        );
        // Holds this host's suspend installed go with it.
        let held = std::mem::take(&mut *h.held.lock().expect("held lock"));
        for o in held {
            if self.shared.release_ref(id, &o) {
                self.sim.release(id, o.as_str());
            }
        }
        h.suspended.send_replace(false);
    }

    fn apply_fault(&mut self, fault: Fault) {
        let now = self.now();
        let serving = self.serving();
        // Keep at least two hosts serving: a fault that would leave fewer is skipped.
        let removes = matches!(
            fault,
            Fault::Crash { .. }
                | Fault::Leave { replace: false, .. }
                | Fault::LaggingLeave { .. }
                | Fault::DeleteRecord { .. }
        );
        if removes && serving.len() <= 2 {
            return;
        }
        self.shared.record_at(now, Ev::Fault(format!("{fault:?}")));
        match fault {
            Fault::Crash {
                slot,
                restart_after_ms,
            } => {
                if let Some(id) = self.slot(slot) {
                    self.crash(&id);
                    if let Some(after) = restart_after_ms {
                        self.at(now + after, Action::StartHost);
                    }
                }
            }
            Fault::Leave { slot, replace } => {
                if let Some(id) = self.slot(slot) {
                    if replace {
                        self.start_host();
                        self.at(now + 300, Action::Leave(id));
                    } else {
                        self.leave(&id);
                    }
                }
            }
            Fault::Join => {
                self.start_host();
            }
            Fault::Partition { a, b, dur_ms } => {
                if let (Some(x), Some(y)) = (self.slot(a), self.slot(b))
                    && x != y
                {
                    self.hold(&x, &y);
                    self.at(now + dur_ms, Action::Unhold(x, y));
                }
            }
            Fault::IsolatePeers { slot, dur_ms } => {
                if let Some(x) = self.slot(slot) {
                    for y in self.hosts_in(|h| h.life() != Life::Crashed) {
                        if y != x {
                            self.hold(&x, &y);
                            self.at(now + dur_ms, Action::Unhold(x.clone(), y));
                        }
                    }
                }
            }
            Fault::IsolateStore { slot, dur_ms } => {
                if let Some(x) = self.slot(slot) {
                    self.hub.isolate(&x);
                    self.isolated.push(x.clone());
                    self.at(now + dur_ms, Action::HealStore(x));
                }
            }
            Fault::StoreOutage { dur_ms } => {
                self.hub.set_outage(true);
                self.at(now + dur_ms, Action::EndOutage);
            }
            Fault::FreezeFeed { slot, dur_ms } => {
                if let Some(x) = self.slot(slot) {
                    self.hub.freeze_feed(&x, true);
                    self.frozen.push(x.clone());
                    self.at(now + dur_ms, Action::Unfreeze(x));
                }
            }
            Fault::Latency { max_ms, dur_ms } => {
                self.sim
                    .set_max_message_latency(Duration::from_millis(max_ms));
                self.at(now + dur_ms, Action::LatencyNormal);
            }
            Fault::Suspend { slot, dur_ms } => {
                if let Some(x) = self.slot(slot) {
                    self.send(&x, Command::Suspend);
                    self.at(now + dur_ms, Action::Resume(x, Duration::ZERO));
                }
            }
            Fault::SuspendThenStepBack {
                slot,
                dur_ms,
                back_ms,
            } => {
                if let Some(x) = self.slot(slot) {
                    self.send(&x, Command::Suspend);
                    self.at(
                        now + dur_ms,
                        Action::Resume(x, Duration::from_millis(back_ms)),
                    );
                }
            }
            Fault::ResetConnections { slot } => {
                if let Some(x) = self.slot(slot) {
                    self.send(&x, Command::ResetConnections);
                }
            }
            Fault::WallStepBack { slot, back_ms } => {
                if let Some(x) = self.slot(slot) {
                    self.send(&x, Command::WallStepBack(Duration::from_millis(back_ms)));
                }
            }
            Fault::LaggingJoin { slot, dur_ms } => {
                // The laggard's watch stalls right after it has seen the newcomer's first
                // record (`joining`): it knows the peer, but not that it became active.
                if let Some(x) = self.slot(slot) {
                    let newcomer = self.start_host();
                    self.freeze_on_sight.push((x, newcomer, dur_ms, now + 2000));
                }
            }
            Fault::LaggingLeave {
                slot,
                leaver,
                dur_ms,
            } => {
                if let (Some(x), Some(y)) = (self.slot(slot), self.slot(leaver))
                    && x != y
                {
                    self.hub.freeze_feed(&x, true);
                    self.frozen.push(x.clone());
                    self.at(now + dur_ms, Action::Unfreeze(x));
                    self.at(now + 20, Action::Leave(y));
                }
            }
            Fault::AppDetach { slot, dur_ms } => {
                if let Some(x) = self.slot(slot)
                    && !self.detached.contains(&x)
                {
                    self.send(&x, Command::AppDetach);
                    self.detached.push(x.clone());
                    self.at(now + dur_ms, Action::AppAttach(x));
                }
            }
            Fault::DeleteRecord { slot } => {
                if let Some(x) = self.slot(slot) {
                    self.hub.kill(&x);
                }
            }
            Fault::StallFeed { slot, dur_ms } => {
                if let Some(x) = self.slot(slot) {
                    self.hold_feed(&x, store::FeedHold::Stall);
                    self.at(now + dur_ms, Action::OpenFeed(x));
                }
            }
            Fault::FeedUntilJoining {
                slot,
                target,
                dur_ms,
            } => {
                if let (Some(x), Some(y)) = (self.slot(slot), self.slot(target))
                    && x != y
                {
                    self.hold_feed(
                        &x,
                        store::FeedHold::Until {
                            host: y,
                            status: sigx_sidecar::membership::HostStatus::Joining,
                        },
                    );
                    self.at(now + dur_ms, Action::OpenFeed(x));
                }
            }
            Fault::RollingRestart { step_ms } => {
                let mut t = now;
                for id in serving {
                    self.at(t, Action::StartHost);
                    self.at(t + step_ms, Action::Leave(id));
                    t += step_ms;
                }
            }
        }
    }

    fn hold_feed(&mut self, id: &str, hold: store::FeedHold) {
        if let Some(h) = self.shared.host(id) {
            *h.feed_hold.lock().expect("feed hold lock") = hold;
            self.stalled.push(id.to_string());
        }
    }

    fn open_feed(&mut self, id: &str) {
        if let Some(h) = self.shared.host(id) {
            *h.feed_hold.lock().expect("feed hold lock") = store::FeedHold::Open;
        }
        self.stalled.retain(|i| i != id);
    }

    fn hold(&mut self, a: &str, b: &str) {
        if self.shared.hold_ref(a, b) {
            self.sim.hold(a, b);
        }
        self.partitions.push((a.to_string(), b.to_string()));
    }

    fn unhold(&mut self, a: &str, b: &str) {
        if let Some(i) = self.partitions.iter().position(|(x, y)| x == a && y == b) {
            self.partitions.remove(i);
            if self.shared.release_ref(a, b) {
                self.sim.release(a, b);
            }
        }
    }

    fn run_action(&mut self, a: Action) {
        match a {
            Action::Fault(f) => self.apply_fault(f),
            Action::StartHost => {
                self.start_host();
            }
            Action::Leave(id) => {
                // Like an orchestrator honouring a disruption budget: never below two serving.
                if self
                    .shared
                    .host(&id)
                    .is_some_and(|h| h.life() == Life::Serving)
                    && self.serving().len() > 2
                {
                    self.shared
                        .record_at(self.now(), Ev::Fault(format!("Leave({id})")));
                    self.leave(&id);
                }
            }
            Action::Crash(id) => self.crash(&id),
            Action::Unhold(a, b) => self.unhold(&a, &b),
            Action::HealStore(x) => {
                self.hub.heal(&x);
                self.isolated.retain(|i| *i != x);
            }
            Action::EndOutage => self.hub.set_outage(false),
            Action::Unfreeze(x) => {
                self.hub.freeze_feed(&x, false);
                self.frozen.retain(|i| *i != x);
            }
            Action::LatencyNormal => self.sim.set_max_message_latency(NORMAL_LATENCY),
            Action::Resume(x, wall_back) => self.send(&x, Command::Resume { wall_back }),
            Action::AppAttach(x) => {
                self.detached.retain(|i| *i != x);
                self.send(&x, Command::AppAttach);
            }
            Action::OpenFeed(x) => self.open_feed(&x),
        }
    }

    /// Everything back to normal.
    fn heal_all(&mut self) {
        for (a, b) in std::mem::take(&mut self.partitions) {
            if self.shared.release_ref(&a, &b) {
                self.sim.release(a.as_str(), b.as_str());
            }
        }
        for x in std::mem::take(&mut self.isolated) {
            self.hub.heal(&x);
        }
        self.freeze_on_sight.clear();
        for x in std::mem::take(&mut self.frozen) {
            self.hub.freeze_feed(&x, false);
        }
        for x in std::mem::take(&mut self.stalled) {
            self.open_feed(&x);
        }
        for x in std::mem::take(&mut self.detached) {
            self.send(&x, Command::AppAttach);
        }
        self.hub.set_outage(false);
        self.sim.set_max_message_latency(NORMAL_LATENCY);
        for id in self.hosts_in(|h| h.is_suspended() && h.life() != Life::Crashed) {
            self.send(
                &id,
                Command::Resume {
                    wall_back: Duration::ZERO,
                },
            );
        }
        // Drop pending fault actions; keep host starts/leaves already decided.
        self.actions
            .retain(|_, a| matches!(a, Action::StartHost | Action::Leave(_) | Action::Crash(_)));
    }

    /// The orchestrator: a host that left is removed; a fenced host is restarted as a new
    /// incarnation.
    fn housekeeping(&mut self) {
        let now = self.now();
        for id in self.hosts_in(|h| h.life() == Life::Left) {
            self.crash(&id);
        }
        for id in self.hosts_in(|h| h.life() == Life::Fenced) {
            if !self.restarting.contains(&id) {
                self.restarting.push(id.clone());
                self.at(now + RESTART_FENCED_MS, Action::Crash(id));
                self.at(now + RESTART_FENCED_MS, Action::StartHost);
            }
        }
    }

    fn step(&mut self) {
        self.shared.set_now_ms(self.now());
        if let Err(e) = self.sim.step() {
            panic!(
                "seed {}: the simulation itself failed (a harness bug, not a verdict): {e}",
                self.cfg.seed
            );
        }
    }

    fn run_until(&mut self, until: u64, mut each: impl FnMut(&mut Self) -> bool) {
        while self.now() < until {
            let now = self.now();
            self.shared.set_now_ms(now);
            while let Some(entry) = self.actions.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let a = entry.remove();
                self.run_action(a);
            }
            if now.is_multiple_of(10) {
                self.housekeeping();
            }
            self.freeze_on_sight(now);
            if now.is_multiple_of(100) && std::env::var("SIGX_SIM_DIAG").is_ok() {
                self.diag_dual_owners(now);
            }
            if each(self) {
                return;
            }
            self.step();
        }
    }

    fn freeze_on_sight(&mut self, now: u64) {
        let pending = std::mem::take(&mut self.freeze_on_sight);
        for (laggard, newcomer, dur, give_up) in pending {
            let sees = self
                .shared
                .host(&laggard)
                .and_then(|h| {
                    h.membership
                        .get()
                        .map(|m| m.view().get(&newcomer).is_some())
                })
                .unwrap_or(false);
            if sees {
                self.hub.freeze_feed(&laggard, true);
                self.frozen.push(laggard.clone());
                self.at(now + dur, Action::Unfreeze(laggard));
            } else if now < give_up {
                self.freeze_on_sight.push((laggard, newcomer, dur, give_up));
            }
        }
    }

    /// Debug aid: partitions that two hosts both hold as ready owners right now.
    fn diag_dual_owners(&self, now: u64) {
        let dirs: Vec<(String, sigx_sidecar::directory::Directory)> = self
            .shared
            .hosts
            .lock()
            .expect("hosts lock")
            .values()
            .filter(|h| h.life() == Life::Serving)
            .filter_map(|h| h.directory.get().map(|d| (h.id.clone(), d)))
            .collect();
        let mut dual = 0;
        let mut example = None;
        for p in 0..sigx_sidecar::directory::PARTITIONS {
            let owners: Vec<&str> = dirs
                .iter()
                .filter(|(_, d)| d.is_ready(p))
                .map(|(id, _)| id.as_str())
                .collect();
            if owners.len() > 1 {
                dual += 1;
                example.get_or_insert(format!("p{p}: {owners:?}"));
            }
        }
        if dual > 0 {
            let actors: Vec<String> = (0..self.cfg.actors)
                .filter(|k| {
                    let p = sigx_sidecar::directory::partition(host::ACTOR_TYPE, &format!("k{k}"));
                    dirs.iter().filter(|(_, d)| d.is_ready(p)).count() > 1
                })
                .map(|k| format!("k{k}"))
                .collect();
            eprintln!(
                "t={now}ms: {dual} partitions with two ready owners, e.g. {example:?}; actors there: {actors:?}"
            );
        }
    }

    /// When a host last started, joined, crashed, fenced or left.
    fn last_host_event(&self) -> u64 {
        let h = self.shared.history.lock().expect("history lock");
        h.iter()
            .rev()
            .find(|e| {
                matches!(
                    e.ev,
                    Ev::HostStart { .. }
                        | Ev::Joined { .. }
                        | Ev::Crashed { .. }
                        | Ev::Fenced { .. }
                        | Ev::Left { .. }
                )
            })
            .map(|e| e.t_ms)
            .unwrap_or(0)
    }

    fn total_recovering(&self) -> u64 {
        let hosts: Vec<Arc<HostShared>> = self
            .shared
            .hosts
            .lock()
            .expect("hosts lock")
            .values()
            .filter(|h| h.life() != Life::Crashed)
            .cloned()
            .collect();
        hosts
            .iter()
            .filter_map(|h| h.directory.get())
            .map(|d| d.counters().partitions_recovering)
            .sum()
    }
}

/// Runs one seed of `cfg` and judges it.
pub fn run(cfg: SimConfig) -> SimReport {
    let seed = cfg.seed;
    let mut rng = StdRng::seed_from_u64(seed);
    let schedule = match cfg.scenario {
        Scenario::Random if cfg.schedule.is_some() => cfg.schedule.clone().unwrap_or_default(),
        Scenario::Random => faults::random(
            &mut rng,
            cfg.mix,
            FAULTS_FROM_MS,
            FAULTS_UNTIL_MS,
            cfg.ttl_ms(),
            cfg.max_faults,
        ),
        Scenario::Crash => Schedule(vec![Timed {
            at_ms: AVAIL_EVENT_MS,
            fault: Fault::Crash {
                slot: rng.random_range(0..8),
                restart_after_ms: None,
            },
        }]),
        Scenario::Join => Schedule(vec![Timed {
            at_ms: AVAIL_EVENT_MS,
            fault: Fault::Join,
        }]),
        Scenario::Leave => Schedule(vec![Timed {
            at_ms: AVAIL_EVENT_MS,
            fault: Fault::Leave {
                slot: rng.random_range(0..8),
                replace: false,
            },
        }]),
    };
    let sim = turmoil::Builder::new()
        .tick_duration(Duration::from_millis(1))
        .simulation_duration(Duration::from_secs(3600))
        .min_message_latency(Duration::ZERO)
        .max_message_latency(NORMAL_LATENCY)
        .epoch(host::epoch())
        .rng_seed(seed)
        .build();
    let cfg = Arc::new(cfg);
    let shared = Arc::new(Shared::default());
    shared.state.bind(&shared, cfg.state_check, cfg.store_clock);
    let mut d = Driver {
        sim,
        shared,
        hub: MemoryHub::new(),
        cfg: cfg.clone(),
        rng,
        started: 0,
        actions: BTreeMap::new(),
        next_action: 0,
        restarting: Vec::new(),
        partitions: Vec::new(),
        isolated: Vec::new(),
        frozen: Vec::new(),
        stalled: Vec::new(),
        detached: Vec::new(),
        freeze_on_sight: Vec::new(),
        figures: Figures::default(),
    };
    for _ in 0..cfg.initial_hosts {
        d.start_host();
    }
    for t in &schedule.0 {
        d.at(t.at_ms, Action::Fault(t.fault.clone()));
    }
    d.run_until(LOAD_START_MS, |_| false);
    d.shared.load.store(true, Ordering::SeqCst);

    let heal_at = match cfg.scenario {
        Scenario::Random => FAULTS_UNTIL_MS.max(schedule.end_ms()),
        Scenario::Crash => {
            d.run_until(AVAIL_EVENT_MS, |_| false);
            // Which actors live on the victim right now, from the history.
            let victims_before = d.serving();
            d.run_until(AVAIL_EVENT_MS + 1, |_| false);
            let crashed: Vec<String> = victims_before
                .into_iter()
                .filter(|h| d.shared.host(h).is_some_and(|x| x.life() == Life::Crashed))
                .collect();
            let affected = check::live_actors_on(&d.shared.history.lock().unwrap(), &crashed);
            let prober = d.serving().first().cloned();
            if let Some(prober) = prober {
                for actor in &affected {
                    let key: u32 = actor
                        .rsplit_once("/k")
                        .and_then(|(_, k)| k.parse().ok())
                        .unwrap_or(0);
                    d.send(
                        &prober,
                        Command::Probe {
                            key,
                            deadline_ms: AVAIL_EVENT_MS + RECOVERY_WINDOW_MS,
                            retry_until_ok: true,
                        },
                    );
                }
            }
            // Until every affected actor answered again (or the window closes: an actor that
            // never answered counts as the whole window, so it cannot flatter the figure).
            let want = affected.len();
            let mut converged: Option<u64> = None;
            d.run_until(AVAIL_EVENT_MS + RECOVERY_WINDOW_MS, |d| {
                if converged.is_none() && d.now().is_multiple_of(5) {
                    let gone = d.serving().iter().all(|h| {
                        d.shared.host(h).is_some_and(|x| {
                            x.membership
                                .get()
                                .is_some_and(|m| crashed.iter().all(|c| m.view().get(c).is_none()))
                        })
                    });
                    if gone && d.total_recovering() == 0 {
                        converged = Some(d.now() - (AVAIL_EVENT_MS + 1));
                    }
                }
                converged.is_some()
                    && d.now().is_multiple_of(10)
                    && check::recovery_times(
                        &d.shared.history.lock().expect("history lock"),
                        AVAIL_EVENT_MS + 1,
                    )
                    .len()
                        >= want
            });
            let mut times =
                check::recovery_times(&d.shared.history.lock().unwrap(), AVAIL_EVENT_MS + 1);
            while times.len() < want {
                times.push(RECOVERY_WINDOW_MS);
            }
            d.figures.crash_recovery_ms = times;
            d.figures.crash_converged_ms = converged.into_iter().collect();
            d.now().max(AVAIL_EVENT_MS + 3000)
        }
        Scenario::Join | Scenario::Leave => {
            d.run_until(AVAIL_EVENT_MS, |_| false);
            let mut first: Option<u64> = None;
            let mut done: Option<u64> = None;
            d.run_until(AVAIL_EVENT_MS + 4000, |d| {
                let now = d.now();
                if now < AVAIL_EVENT_MS || !now.is_multiple_of(5) || done.is_some() {
                    return false;
                }
                let r = d.total_recovering();
                match (first, r) {
                    (None, r) if r > 0 => first = Some(now),
                    (Some(_), 0) => done = Some(now),
                    _ => {}
                }
                false
            });
            let window_end = done.unwrap_or(AVAIL_EVENT_MS + 4000);
            d.figures.handoff_ms = vec![match (first, done) {
                (Some(f), Some(e)) => e - f,
                (None, _) => 0,
                (Some(f), None) => AVAIL_EVENT_MS + 4000 - f,
            }];
            let (calls, failed) = check::calls_between(
                &d.shared.history.lock().unwrap(),
                AVAIL_EVENT_MS,
                window_end.max(AVAIL_EVENT_MS + 1),
            );
            d.figures.handoff_calls = calls;
            d.figures.handoff_failed_calls = failed;
            AVAIL_EVENT_MS + 4000
        }
    };
    d.run_until(heal_at, |_| false);
    d.heal_all();
    d.shared.load.store(false, Ordering::SeqCst);
    // Quiet: no host started, joined, crashed, fenced or left for 2×TTL (restarts of fenced
    // hosts still happen meanwhile: that is the orchestrator). Bounded, so a cluster that
    // never settles is judged too.
    let quiet = 2 * cfg.ttl_ms();
    d.run_until(heal_at + 6 * quiet, |d| {
        let last = d.last_host_event().max(heal_at);
        d.now() >= last + quiet
    });
    // Make sure some host serves: if every host fenced, the orchestrator restarts them.
    // Liveness: every actor answers a call from some serving host.
    let probe_at = d.now();
    let serving = d.serving();
    if serving.is_empty() {
        d.shared.record_at(
            probe_at,
            Ev::Fault("liveness: no host serving after heal + quiet".into()),
        );
    } else {
        for key in 0..cfg.actors {
            let h = serving[d.rng.random_range(0..serving.len())].clone();
            d.send(
                &h,
                Command::Probe {
                    key,
                    deadline_ms: probe_at + PROBE_MS,
                    retry_until_ok: false,
                },
            );
        }
    }
    // Until every probe is answered (or its deadline and the bound passed).
    let probes_from = d.shared.history.lock().expect("history lock").len();
    let want = if serving.is_empty() {
        0
    } else {
        cfg.actors as usize
    };
    let mut answered = 0;
    d.run_until(probe_at + PROBE_MS + ANSWER_BOUND_MS, |d| {
        if d.now().is_multiple_of(5) {
            let h = d.shared.history.lock().expect("history lock");
            answered = h[probes_from..]
                .iter()
                .filter(|e| matches!(e.ev, Ev::CallEnd { .. }))
                .count();
        }
        answered >= want
    });
    for h in d.serving() {
        d.send(&h, Command::CheckRegistrations);
    }
    let end = d.now() + TAIL_MS;
    d.run_until(end, |_| false);
    d.run_until(end + REMINDER_TAIL_MS, |d| {
        (d.now() == end || d.now().is_multiple_of(10))
            && check::unfired_due_reminders(
                &d.shared.history.lock().expect("history lock"),
                probe_at,
            )
            .is_empty()
    });
    let conflicting: u64 = d
        .shared
        .hosts
        .lock()
        .expect("hosts lock")
        .values()
        .filter(|h| h.life() != Life::Crashed)
        .filter_map(|h| h.directory.get().map(|d| d.counters().conflicting_reports))
        .sum();
    let hosts_at_end: Vec<String> = d
        .shared
        .hosts
        .lock()
        .expect("hosts lock")
        .values()
        .map(|h| h.describe())
        .collect();
    let history = std::mem::take(&mut *d.shared.history.lock().expect("history lock"));
    let lapses: BTreeMap<String, Option<u64>> = d
        .shared
        .hosts
        .lock()
        .expect("hosts lock")
        .values()
        .map(|h| (h.id.clone(), h.lease.lock().expect("lease lock").lapse_ms))
        .collect();
    let mut violations = check::check(&history, &lapses, d.now(), probe_at, serving.is_empty());
    if conflicting > 0 {
        violations.push(Violation {
            promise: Promise::Safety,
            what: format!(
                "{conflicting} conflicting Collect report(s): an actor reported live on two hosts"
            ),
            actor: None,
        });
    }
    let fingerprint = check::fingerprint(&history);
    let calls = history
        .iter()
        .filter(|e| matches!(e.ev, Ev::CallStart { .. }))
        .count() as u64;
    let ok_calls = history
        .iter()
        .filter(|e| matches!(&e.ev, Ev::CallEnd { outcome, .. } if outcome == "ok"))
        .count() as u64;
    let activations = history
        .iter()
        .filter(|e| matches!(e.ev, Ev::ActStart { .. }))
        .count() as u64;
    let rebalance_asked = history
        .iter()
        .map(|e| match e.ev {
            Ev::RebalanceAsked { asked, .. } => asked as u64,
            _ => 0,
        })
        .sum();
    let figures = d.figures.clone();
    // The hosts' handles (membership, directory) reach back to their `HostShared` through the
    // simulated store: break that cycle, or every run's hosts (4096 directory partitions each)
    // stay allocated and a 10,000-seed batch runs out of memory.
    for h in std::mem::take(&mut *d.shared.hosts.lock().expect("hosts lock")).into_values() {
        h.directory.clear();
        h.membership.clear();
    }
    // Drop the simulation (and every host runtime) before returning.
    drop(d);
    SimReport {
        seed,
        config: (*cfg).clone(),
        schedule,
        violations,
        history,
        figures,
        fingerprint,
        calls,
        ok_calls,
        activations,
        rebalance_asked,
        hosts_at_end,
    }
}
