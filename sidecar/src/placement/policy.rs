//! Placement policies: where a new activation goes among the eligible hosts.

use crate::membership::HostDescriptor;
use rand::RngExt;
use std::sync::{Arc, Mutex};

/// A seeded source of placement randomness. Production leaves it unset and uses the thread RNG;
/// the deterministic simulator seeds one per host, so a failing seed replays the same choices.
pub type PlacementRng = Arc<Mutex<rand::rngs::StdRng>>;

/// A placement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// A uniformly random eligible host (the default: spreads load with no coordination).
    #[default]
    Random,
    /// This host when it is eligible (saves the hop), otherwise random.
    PreferLocal,
}

impl Policy {
    /// Picks among `candidates` (already filtered for eligibility).
    pub fn pick<'v>(
        self,
        candidates: &[&'v HostDescriptor],
        self_id: &str,
    ) -> Option<&'v HostDescriptor> {
        self.pick_with(candidates, self_id, None)
    }

    /// [`Policy::pick`] drawing from `rng` when given (the simulator's seeded RNG).
    pub fn pick_with<'v>(
        self,
        candidates: &[&'v HostDescriptor],
        self_id: &str,
        rng: Option<&PlacementRng>,
    ) -> Option<&'v HostDescriptor> {
        if candidates.is_empty() {
            return None;
        }
        if self == Policy::PreferLocal
            && let Some(me) = candidates.iter().find(|h| h.id == self_id)
        {
            return Some(me);
        }
        let i = match rng {
            Some(rng) => rng
                .lock()
                .expect("placement rng lock")
                .random_range(0..candidates.len()),
            None => rand::rng().random_range(0..candidates.len()),
        };
        Some(candidates[i])
    }
}

impl From<crate::config::PlacementPolicy> for Policy {
    fn from(p: crate::config::PlacementPolicy) -> Self {
        match p {
            crate::config::PlacementPolicy::Random => Policy::Random,
            crate::config::PlacementPolicy::PreferLocal => Policy::PreferLocal,
        }
    }
}
