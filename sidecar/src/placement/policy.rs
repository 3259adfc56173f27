//! Placement policies: where a new activation goes among the eligible hosts.

use crate::membership::{HostDescriptor, LoadBoard};
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
    /// The less loaded of two random eligible hosts, by the activations their records publish
    /// plus what this host placed on them since (the "power of two choices": with loads that
    /// are seconds old, taking the minimum would send every caller's activations to one host
    /// at once; two choices spread them and still favour the emptier hosts strongly). Without
    /// a load board it is `random`.
    LeastLoaded,
}

impl Policy {
    /// Picks among `candidates` (already filtered for eligibility).
    pub fn pick<'v>(
        self,
        candidates: &[&'v HostDescriptor],
        self_id: &str,
    ) -> Option<&'v HostDescriptor> {
        self.pick_with(candidates, self_id, None, None)
    }

    /// [`Policy::pick`] drawing from `rng` when given (the simulator's seeded RNG), and reading
    /// loads from `loads` (`least-loaded`). A `least-loaded` pick is counted on the board, so
    /// this host's next picks see it before the peer publishes it.
    pub fn pick_with<'v>(
        self,
        candidates: &[&'v HostDescriptor],
        self_id: &str,
        rng: Option<&PlacementRng>,
        loads: Option<&LoadBoard>,
    ) -> Option<&'v HostDescriptor> {
        if candidates.is_empty() {
            return None;
        }
        if self == Policy::PreferLocal
            && let Some(me) = candidates.iter().find(|h| h.id == self_id)
        {
            return Some(me);
        }
        let draw = |n: usize| match rng {
            Some(rng) => rng.lock().expect("placement rng lock").random_range(0..n),
            None => rand::rng().random_range(0..n),
        };
        let i = draw(candidates.len());
        match (self, loads) {
            (Policy::LeastLoaded, Some(board)) if candidates.len() > 1 => {
                // A second candidate distinct from the first.
                let j = (i + 1 + draw(candidates.len() - 1)) % candidates.len();
                let (a, b) = (candidates[i], candidates[j]);
                let chosen = if board.estimate(&b.id) < board.estimate(&a.id) {
                    b
                } else {
                    a
                };
                board.placed(&chosen.id);
                Some(chosen)
            }
            _ => Some(candidates[i]),
        }
    }
}

impl From<crate::config::PlacementPolicy> for Policy {
    fn from(p: crate::config::PlacementPolicy) -> Self {
        match p {
            crate::config::PlacementPolicy::Random => Policy::Random,
            crate::config::PlacementPolicy::PreferLocal => Policy::PreferLocal,
            crate::config::PlacementPolicy::LeastLoaded => Policy::LeastLoaded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::HostLoad;
    use rand::SeedableRng;

    fn host(id: &str, activations: u64) -> HostDescriptor {
        let mut d = HostDescriptor::new(id, format!("{id}:1"), None, None);
        d.load = Some(HostLoad {
            activations,
            turns_per_sec: 0,
        });
        d
    }

    fn rng(seed: u64) -> PlacementRng {
        Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)))
    }

    /// Places `n` activations from one caller on hosts with the given published loads; returns
    /// how many each host got.
    fn place(policy: Policy, loads: &[(&str, u64)], n: usize, seed: u64) -> Vec<usize> {
        let hosts: Vec<HostDescriptor> = loads.iter().map(|(id, l)| host(id, *l)).collect();
        let board = LoadBoard::default();
        for h in &hosts {
            board.observe(h);
        }
        let candidates: Vec<&HostDescriptor> = hosts.iter().collect();
        let rng = rng(seed);
        let mut got = vec![0; hosts.len()];
        for _ in 0..n {
            let h = policy
                .pick_with(&candidates, "caller", Some(&rng), Some(&board))
                .unwrap();
            got[hosts.iter().position(|x| x.id == h.id).unwrap()] += 1;
        }
        got
    }

    #[test]
    fn least_loaded_fills_the_empty_hosts_of_a_scaled_up_fleet() {
        // Three hosts with 100 activations each, three new empty ones: 300 new activations
        // from one caller, loads never republished (the worst case of staleness).
        let loads = [
            ("a", 100),
            ("b", 100),
            ("c", 100),
            ("d", 0),
            ("e", 0),
            ("f", 0),
        ];
        let got = place(Policy::LeastLoaded, &loads, 300, 7);
        let old: usize = got[..3].iter().sum();
        let new: usize = got[3..].iter().sum();
        // Ideal: all 300 to the new hosts (each ends at 100). Two choices send an activation
        // to an old host only when both draws are old (3/6 * 2/5 = 20 % of pairs): the new
        // hosts get about 80 %, the rest of the way is rebalancing's.
        assert!(new >= 225, "new hosts got {new} of 300 ({got:?})");
        assert!(old <= 75, "{got:?}");
        // The local count keeps the new hosts level instead of herding on one of them.
        for &g in &got[3..] {
            assert!((65..=110).contains(&g), "{got:?}");
        }
        // Random, for contrast, gives the new hosts about half.
        let random = place(Policy::Random, &loads, 300, 7);
        let new_random: usize = random[3..].iter().sum();
        assert!(new_random <= 190, "{random:?}");
    }

    #[test]
    fn least_loaded_without_a_board_or_with_one_candidate_still_places() {
        let hosts = [host("a", 5)];
        let candidates: Vec<&HostDescriptor> = hosts.iter().collect();
        assert_eq!(Policy::LeastLoaded.pick(&candidates, "a").unwrap().id, "a");
        let board = LoadBoard::default();
        assert_eq!(
            Policy::LeastLoaded
                .pick_with(&candidates, "a", None, Some(&board))
                .unwrap()
                .id,
            "a"
        );
        assert!(Policy::LeastLoaded.pick(&[], "a").is_none());
    }

    #[test]
    fn least_loaded_is_deterministic_under_a_seeded_rng() {
        let loads = [("a", 3), ("b", 9), ("c", 1), ("d", 4)];
        assert_eq!(
            place(Policy::LeastLoaded, &loads, 50, 42),
            place(Policy::LeastLoaded, &loads, 50, 42)
        );
    }
}
