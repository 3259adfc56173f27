//! Starting a host's reminder owner, and what it owns: every shard on a single host, and on a
//! clustered one the shards rendezvous hashing gives it among the active stateful hosts of its
//! view, while it is itself one of them.

use super::{ClusterParts, HostOptions};
use crate::app::Dispatcher;
use crate::config::Config;
use crate::health::HostState;
use crate::reminders::scheduler::{Scheduler, claimer_id};
use crate::reminders::{Ownership, OwnershipSource, SHARDS, SchedulerConfig, owned_shards};
use crate::runtime::Runtime;
use std::sync::{Arc, Mutex};

/// Starts the owner of `runtime`'s reminders.
pub(super) fn start(
    cfg: &Config,
    opts: &HostOptions,
    runtime: &Runtime,
    dispatcher: Arc<dyn Dispatcher>,
    state: Arc<HostState>,
    cluster: Option<Arc<tokio::sync::OnceCell<ClusterParts>>>,
    started_at_unix_ms: i64,
) -> Scheduler {
    let source: Arc<dyn OwnershipSource> = match cluster {
        Some(cell) => Arc::new(ClusterOwnership {
            cell,
            state,
            cache: Mutex::default(),
        }),
        None => Arc::new(SingleOwnership {
            state,
            claimer: claimer_id(&cfg.host_id, started_at_unix_ms),
            shards: Arc::new((0..SHARDS).collect()),
        }),
    };
    let sched_cfg = opts.reminders.clone().unwrap_or_else(|| SchedulerConfig {
        call_timeout: cfg.call_timeout,
        ..SchedulerConfig::default()
    });
    Scheduler::start(
        runtime.config().state.clone(),
        dispatcher,
        source,
        opts.clock.clone(),
        sched_cfg,
        runtime.counters().reminders.clone(),
        runtime.reminder_nudge(),
    )
}

/// A host without a cluster owns every shard while it is ready (an app is registered).
struct SingleOwnership {
    state: Arc<HostState>,
    claimer: String,
    shards: Arc<Vec<u32>>,
}

impl OwnershipSource for SingleOwnership {
    fn ownership(&self) -> Option<Ownership> {
        self.state.ready().then(|| Ownership {
            claimer: self.claimer.clone(),
            shards: self.shards.clone(),
            live: Arc::new(vec![self.claimer.clone()]),
        })
    }
}

/// A clustered host owns its rendezvous share of the shards while its own view shows it active
/// (a joining or leaving host owns none: its share stays with the others).
struct ClusterOwnership {
    cell: Arc<tokio::sync::OnceCell<ClusterParts>>,
    state: Arc<HostState>,
    /// The shards computed for the last view's active stateful hosts.
    cache: Mutex<Option<(u64, Arc<Vec<u32>>)>>,
}

impl OwnershipSource for ClusterOwnership {
    fn ownership(&self) -> Option<Ownership> {
        let parts = self.cell.get()?;
        if !self.state.ready() {
            return None;
        }
        let view = parts.membership.view();
        let me = parts.membership.self_id();
        let mine = view.get(me)?;
        let eligible = view.active_stateful_ids();
        if !eligible.contains(&me) {
            return None;
        }
        let fingerprint = view.fingerprint();
        let shards = {
            let mut cache = self.cache.lock().expect("ownership cache lock");
            match &*cache {
                Some((f, shards)) if *f == fingerprint => shards.clone(),
                _ => {
                    let shards = Arc::new(owned_shards(&eligible, me));
                    *cache = Some((fingerprint, shards.clone()));
                    shards
                }
            }
        };
        Some(Ownership {
            claimer: claimer_id(me, mine.started_at_unix_ms),
            shards,
            live: Arc::new(
                view.hosts()
                    .iter()
                    .map(|h| claimer_id(&h.id, h.started_at_unix_ms))
                    .collect(),
            ),
        })
    }
}
