//! Starting a host's reminder owner, and what it owns: every shard on a single host, and on a
//! clustered one the shards rendezvous hashing gives it among the active stateful hosts of its
//! view, while it is itself one of them.

use super::{ClusterParts, HostOptions};
use crate::app::Dispatcher;
use crate::config::Config;
use crate::health::HostState;
use crate::reminders::ownership::ViewOwnership;
use crate::reminders::scheduler::{Scheduler, claimer_id};
use crate::reminders::{Ownership, OwnershipSource, SHARDS, SchedulerConfig};
use crate::runtime::Runtime;
use std::sync::Arc;

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
        Some(cell) => Arc::new(ViewOwnership::new(
            move || cell.get().map(|p| p.membership.clone()),
            move || state.ready(),
        )),
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
        runtime.store_time(),
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
