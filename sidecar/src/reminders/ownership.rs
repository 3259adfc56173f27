//! What a clustered host owns: the shards rendezvous hashing gives it among the active stateful
//! hosts of its own view, while it is itself one of them and ready. Shared by the host and the
//! deterministic simulator, which wire it to their own membership and readiness.

use super::scheduler::claimer_id;
use super::{Ownership, OwnershipSource, owned_shards};
use crate::membership::MembershipHandle;
use std::sync::{Arc, Mutex};

type MembershipFn = Box<dyn Fn() -> Option<MembershipHandle> + Send + Sync>;
type ReadyFn = Box<dyn Fn() -> bool + Send + Sync>;

/// A joining or leaving host owns none: its share stays with the others.
pub struct ViewOwnership {
    membership: MembershipFn,
    ready: ReadyFn,
    /// The shards computed for the last view's active stateful hosts.
    cache: Mutex<Option<(u64, Arc<Vec<u32>>)>>,
}

impl ViewOwnership {
    /// Ownership from `membership` (`None` until joined) while `ready` holds.
    pub fn new(
        membership: impl Fn() -> Option<MembershipHandle> + Send + Sync + 'static,
        ready: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        ViewOwnership {
            membership: Box::new(membership),
            ready: Box::new(ready),
            cache: Mutex::default(),
        }
    }
}

impl OwnershipSource for ViewOwnership {
    fn ownership(&self) -> Option<Ownership> {
        let membership = (self.membership)()?;
        if !(self.ready)() {
            return None;
        }
        let view = membership.view();
        let me = membership.self_id();
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
