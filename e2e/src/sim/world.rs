//! State shared by the driver and the simulated hosts: true simulated time, the recorded
//! history, and each host's controls. Everything here runs on the one simulation thread, in a
//! deterministic order, so plain mutexes are enough.

use sigx_sidecar::directory::Directory;
use sigx_sidecar::membership::MembershipHandle;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What happened, as the checker needs it.
#[derive(Debug, Clone)]
pub enum Ev {
    /// A host started (a new incarnation).
    HostStart {
        host: String,
    },
    /// Its membership join succeeded.
    Joined {
        host: String,
    },
    /// The app received the Activate turn of `act`.
    ActStart {
        host: String,
        actor: String,
        act: String,
    },
    /// The app received a method turn of `act`.
    Turn {
        act: String,
    },
    /// The app received the Deactivate turn of `act`.
    ActEnd {
        act: String,
    },
    /// The host fenced (observed by its fence watcher).
    Fenced {
        host: String,
        reason: String,
    },
    /// The host crashed (turmoil dropped its runtime).
    Crashed {
        host: String,
    },
    /// The host finished its graceful leave (record withdrawn).
    Left {
        host: String,
    },
    /// A VM suspend began / ended.
    Suspended {
        host: String,
    },
    Resumed {
        host: String,
    },
    /// A call was issued.
    CallStart {
        id: u64,
        host: String,
        actor: String,
        deadline_ms: u64,
        /// A liveness probe.
        probe: bool,
        /// A recovery probe (availability figures).
        recovery: bool,
    },
    /// A call was answered (`Ok` or an error kind).
    CallEnd {
        id: u64,
        outcome: String,
    },
    /// A registration check: the directory, asked from `host`, names `found` for `actor`,
    /// whose live activation `act` is on `host`.
    RegCheck {
        host: String,
        actor: String,
        act: String,
        found: String,
    },
    /// The host's app went away while its sidecar lives: every activation of the host ends
    /// here (the app that ran them is gone).
    AppDetached {
        host: String,
    },
    /// A new app attached to the host.
    AppAttached {
        host: String,
    },
    /// The state store issued `epoch` to a new activation of `actor`.
    EpochIssued {
        actor: String,
        epoch: u64,
    },
    /// The state store judged a turn's batch of `actor` carrying `epoch` (`value`: what the sim
    /// app wrote, its call's id) and stored it (`accepted`) or refused it.
    StateCommit {
        actor: String,
        epoch: u64,
        value: Option<String>,
        accepted: bool,
    },
    /// A reminder was set (the store acknowledged it), due at `due_ms` (true ms).
    ReminderSet {
        actor: String,
        name: String,
        due_ms: u64,
    },
    /// The app received a delivery of a reminder (an occurrence may be delivered again: the
    /// promise is at least once).
    ReminderFired {
        host: String,
        actor: String,
        name: String,
    },
    /// The app received a tick of a timer its activation `act` set (a turn of that activation,
    /// also recorded as [`Ev::Turn`]).
    TimerTick {
        act: String,
    },
    /// A host's rebalancer asked `asked` idle activations to move (the production
    /// `Rebalancer::round`; only with `SimConfig::rebalance`).
    RebalanceAsked {
        host: String,
        asked: usize,
    },
    /// A fault of the schedule was applied.
    Fault(String),
}

/// One recorded event: a global sequence number (the true order), and the simulated time in ms
/// (a suspended host's events carry the instant its suspend began: to the host, no time passed).
#[derive(Debug, Clone)]
pub struct Event {
    pub seq: u64,
    pub t_ms: u64,
    pub ev: Ev,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:<6} t={:>6}ms {:?}", self.seq, self.t_ms, self.ev)
    }
}

/// The checker's record of one host's lease.
#[derive(Debug, Default)]
pub struct LeaseTrack {
    /// True simulated time at which the lease lapses unless extended (None before the first
    /// write).
    pub lapse_ms: Option<u64>,
}

/// Commands the driver sends into a host's runtime.
#[derive(Debug)]
pub enum Command {
    Suspend,
    /// Resume, the wall clock stepped back by `wall_back` in the same instant (zero: no step).
    Resume {
        wall_back: Duration,
    },
    /// The host's wall clock steps back by this much (its monotonic clock does not move).
    WallStepBack(Duration),
    Leave,
    ResetConnections,
    /// Call `key` (a probe: liveness or recovery). `retry_until_ok` keeps calling until `Ok`
    /// or the deadline.
    Probe {
        key: u32,
        deadline_ms: u64,
        retry_until_ok: bool,
    },
    CheckRegistrations,
    /// The app detaches (the sidecar lives on).
    AppDetach,
    /// A new app attaches.
    AppAttach,
}

/// Where a host is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Starting,
    Serving,
    Fenced,
    Leaving,
    Left,
    Crashed,
}

/// A handle the driver reads while the host runs, emptied when the run ends: the host's
/// handles reach back to the world through the simulated store, so holding them here for good
/// would keep every run's hosts allocated (a cycle).
pub struct Slot<T>(Mutex<Option<T>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Mutex::new(None))
    }
}

impl<T: Clone> Slot<T> {
    /// Fills the slot once; later calls are ignored.
    pub fn set(&self, value: T) {
        self.0.lock().expect("slot lock").get_or_insert(value);
    }

    /// A clone of the handle, if the host got that far.
    pub fn get(&self) -> Option<T> {
        self.0.lock().expect("slot lock").clone()
    }

    /// Empties the slot.
    pub fn clear(&self) {
        self.0.lock().expect("slot lock").take();
    }
}

/// One simulated host, as the driver and its own tasks see it.
pub struct HostShared {
    pub id: String,
    /// Seed of this host's RNGs.
    pub seed: u64,
    pub suspended: watch::Sender<bool>,
    pub suspended_at: Mutex<Option<u64>>,
    pub lease: Mutex<LeaseTrack>,
    pub resets: Arc<super::net::Resets>,
    pub cmd_tx: mpsc::UnboundedSender<Command>,
    pub cmd_rx: Mutex<Option<mpsc::UnboundedReceiver<Command>>>,
    pub life: Mutex<Life>,
    pub directory: Slot<Directory>,
    pub membership: Slot<MembershipHandle>,
    /// Held links this host's suspend installed (released on resume).
    pub held: Mutex<Vec<String>>,
    /// Whether this host's change feed is stalled (see [`super::store::FeedHold`]).
    pub feed_hold: Mutex<super::store::FeedHold>,
}

impl HostShared {
    pub fn new(id: String, seed: u64) -> Arc<Self> {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        Arc::new(HostShared {
            id,
            seed,
            suspended: watch::channel(false).0,
            suspended_at: Mutex::new(None),
            lease: Mutex::default(),
            resets: Arc::default(),
            cmd_tx,
            cmd_rx: Mutex::new(Some(cmd_rx)),
            life: Mutex::new(Life::Starting),
            directory: Slot::default(),
            membership: Slot::default(),
            held: Mutex::default(),
            feed_hold: Mutex::default(),
        })
    }

    /// The host's effective time: true time, or the start of its current suspend.
    pub fn eff_now(&self, shared: &Shared) -> u64 {
        self.suspended_at
            .lock()
            .expect("suspend lock")
            .unwrap_or_else(|| shared.now_ms())
    }

    pub fn life(&self) -> Life {
        *self.life.lock().expect("life lock")
    }

    pub fn set_life(&self, life: Life) {
        *self.life.lock().expect("life lock") = life;
    }

    pub fn is_suspended(&self) -> bool {
        *self.suspended.borrow()
    }
}

/// The whole simulation's shared state.
pub struct Shared {
    now: AtomicU64,
    seq: AtomicU64,
    next_call: AtomicU64,
    pub history: Mutex<Vec<Event>>,
    pub hosts: Mutex<BTreeMap<String, Arc<HostShared>>>,
    /// Whether the random workload runs.
    pub load: AtomicBool,
    /// Reference counts of held links (a partition and a suspend may hold the same pair).
    pub holds: Mutex<BTreeMap<(String, String), u32>>,
    /// The fleet's state store, shared by every host as a real cluster shares its database:
    /// epochs are fleet-wide.
    pub state: Arc<super::state::RecordedState>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            now: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            next_call: AtomicU64::new(1),
            history: Mutex::default(),
            hosts: Mutex::default(),
            load: AtomicBool::new(false),
            holds: Mutex::default(),
            state: Arc::default(),
        }
    }
}

impl Shared {
    /// True simulated time, ms (set by the driver before every step).
    pub fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    pub fn set_now_ms(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }

    /// Records an event at `t_ms`.
    pub fn record_at(&self, t_ms: u64, ev: Ev) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        self.history
            .lock()
            .expect("history lock")
            .push(Event { seq, t_ms, ev });
    }

    /// Records an event of `host` at its effective time.
    pub fn record(&self, host: &HostShared, ev: Ev) {
        self.record_at(host.eff_now(self), ev);
    }

    pub fn next_call_id(&self) -> u64 {
        self.next_call.fetch_add(1, Ordering::Relaxed)
    }

    pub fn host(&self, id: &str) -> Option<Arc<HostShared>> {
        self.hosts.lock().expect("hosts lock").get(id).cloned()
    }

    /// Takes a hold on the link a–b; true when the link was not held before (hold it now).
    pub fn hold_ref(&self, a: &str, b: &str) -> bool {
        let key = pair(a, b);
        let mut holds = self.holds.lock().expect("holds lock");
        let n = holds.entry(key).or_insert(0);
        *n += 1;
        *n == 1
    }

    /// Drops a hold on a–b; true when it was the last one (release the link now).
    pub fn release_ref(&self, a: &str, b: &str) -> bool {
        let key = pair(a, b);
        let mut holds = self.holds.lock().expect("holds lock");
        match holds.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                holds.remove(&key);
                true
            }
            None => false,
        }
    }
}

fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

impl HostShared {
    /// One line about the host's state, for reports.
    pub fn describe(&self) -> String {
        let mut s = format!("{} {:?}", self.id, self.life());
        if let Some(m) = self.membership.get() {
            let v = m.view();
            let hosts: Vec<String> = v
                .hosts()
                .iter()
                .map(|h| format!("{}:{}", h.id, h.status.as_str()))
                .collect();
            s += &format!(
                " view v{} [{}] fence={:?}",
                v.version,
                hosts.join(" "),
                m.fence_state()
            );
        }
        if let Some(d) = self.directory.get() {
            let c = d.counters();
            s += &format!(
                " recovering={} entries={} collections={}",
                c.partitions_recovering, c.entries, c.collections_run
            );
        }
        s
    }
}
