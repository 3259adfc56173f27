//! Host load: what each host publishes about how busy it is ([`LoadPublisher`]), and what the
//! placement policy reads of its peers ([`LoadBoard`]).
//!
//! **No extra writes, few new records.** Load rides on the lease renewals a host writes anyway,
//! and the record's load changes only when it moved materially, and then at most every
//! [`LoadPolicy::min_beats`] beats. A busy fleet's change feed is therefore not a stream of load
//! updates (the aggregated membership view of a large fleet publishes only records that changed).
//!
//! **Not membership.** Observers keep loads on a [`LoadBoard`] beside the view, never in it: a
//! record whose only change is its load rebuilds no view, flushes no route cache and wakes no
//! directory subscriber ([`super::HostDescriptor::same_membership`]).
//!
//! **Stale by design, so placement must not herd.** A published load is seconds old. The board
//! adds to it what this host itself placed on the peer since that peer last published
//! ([`LoadBoard::placed`]), and the `least-loaded` policy compares two random candidates rather
//! than taking the global minimum (the "power of two choices"): with stale loads the minimum
//! sends every caller's next activations to one host at once, two choices spread them and still
//! favour the emptier host strongly.

use super::descriptor::{HostDescriptor, HostLoad};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::time::Instant;

/// What the host measures of itself when it renews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadSample {
    /// Activations live now.
    pub activations: u64,
    /// Turns run since the host started (a running total; the publisher takes the rate).
    pub turns_total: u64,
}

/// Where the publisher reads the host's load from (the runtime, in production).
pub type LoadSource = Arc<dyn Fn() -> LoadSample + Send + Sync>;

/// When a changed load is worth a changed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadPolicy {
    /// Renewals between two load changes of the record, at least.
    pub min_beats: u32,
    /// A change of activations smaller than this is not material...
    pub min_activation_delta: u64,
    /// ...nor one smaller than this share (percent) of the published value.
    pub activation_percent: u64,
    /// The same two bounds for the turn rate.
    pub min_rate_delta: u64,
    /// Percent of the published turn rate.
    pub rate_percent: u64,
}

impl Default for LoadPolicy {
    fn default() -> Self {
        LoadPolicy {
            min_beats: 3,
            min_activation_delta: 8,
            activation_percent: 10,
            min_rate_delta: 20,
            rate_percent: 25,
        }
    }
}

impl LoadPolicy {
    /// Whether `new` differs materially from `old`.
    pub fn material(&self, old: HostLoad, new: HostLoad) -> bool {
        let moved = |a: u64, b: u64, min: u64, pct: u64| a.abs_diff(b) >= min.max(a * pct / 100);
        moved(
            old.activations,
            new.activations,
            self.min_activation_delta,
            self.activation_percent,
        ) || moved(
            old.turns_per_sec,
            new.turns_per_sec,
            self.min_rate_delta,
            self.rate_percent,
        )
    }
}

/// Decides, at each renewal, whether the record's load changes (one per host, under the
/// membership's desired-descriptor lock).
pub struct LoadPublisher {
    policy: LoadPolicy,
    source: Option<LoadSource>,
    published: Option<HostLoad>,
    beats_since: u32,
    last_sample: Option<(u64, Instant)>,
}

impl LoadPublisher {
    /// A publisher with no source yet: it publishes nothing until [`LoadPublisher::set_source`].
    pub fn new(policy: LoadPolicy) -> Self {
        LoadPublisher {
            policy,
            source: None,
            published: None,
            beats_since: 0,
            last_sample: None,
        }
    }

    /// Where the host's load is read from from now on.
    pub fn set_source(&mut self, source: LoadSource) {
        self.source = Some(source);
    }

    /// Called at each renewal: the load the record should carry from now on, when it changes.
    /// The first sample is always published (a new host announces it is empty at once).
    pub fn next(&mut self, now: Instant) -> Option<HostLoad> {
        let source = self.source.as_ref()?;
        let sample = source();
        let turns_per_sec = match self.last_sample {
            Some((turns, at)) => {
                let elapsed = now
                    .saturating_duration_since(at)
                    .max(Duration::from_millis(1));
                sample.turns_total.saturating_sub(turns) * 1000 / elapsed.as_millis() as u64
            }
            None => 0,
        };
        self.last_sample = Some((sample.turns_total, now));
        let load = HostLoad {
            activations: sample.activations,
            turns_per_sec,
        };
        self.beats_since = self.beats_since.saturating_add(1);
        let publish = match self.published {
            None => true,
            Some(old) => {
                self.beats_since >= self.policy.min_beats && self.policy.material(old, load)
            }
        };
        if publish {
            self.published = Some(load);
            self.beats_since = 0;
            Some(load)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    load: Option<HostLoad>,
    /// Activations this host placed on the peer since the peer's load last changed.
    placed_since: u64,
}

/// The loads of the hosts in this host's view, as their records last said, plus what this host
/// placed on each since. Cheap to read from the placement path (one short read lock).
#[derive(Debug, Default)]
pub struct LoadBoard {
    hosts: RwLock<HashMap<String, Entry>>,
}

impl LoadBoard {
    /// The feed delivered `descriptor`: a new load replaces the old and forgets the placements
    /// counted against it (the peer's own count includes them now).
    pub fn observe(&self, descriptor: &HostDescriptor) {
        let mut hosts = self.hosts.write().expect("load board lock");
        match hosts.get_mut(&descriptor.id) {
            Some(e) if e.load == descriptor.load => {}
            Some(e) => {
                e.load = descriptor.load;
                e.placed_since = 0;
            }
            None => {
                hosts.insert(
                    descriptor.id.clone(),
                    Entry {
                        load: descriptor.load,
                        placed_since: 0,
                    },
                );
            }
        }
    }

    /// The host left the view.
    pub fn remove(&self, id: &str) {
        self.hosts.write().expect("load board lock").remove(id);
    }

    /// Keeps only the hosts `keep` names (after a snapshot).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.hosts
            .write()
            .expect("load board lock")
            .retain(|id, _| keep(id));
    }

    /// This host just placed an activation on `id`.
    pub fn placed(&self, id: &str) {
        if let Some(e) = self.hosts.write().expect("load board lock").get_mut(id) {
            e.placed_since += 1;
        }
    }

    /// The best estimate of `id`'s activations: its published count plus what this host placed
    /// there since. A host that never published (just joined, or an older version) counts only
    /// what this host placed there.
    pub fn estimate(&self, id: &str) -> u64 {
        self.hosts
            .read()
            .expect("load board lock")
            .get(id)
            .map(|e| e.load.map_or(0, |l| l.activations) + e.placed_since)
            .unwrap_or(0)
    }

    /// The published load of `id`, if any.
    pub fn published(&self, id: &str) -> Option<HostLoad> {
        self.hosts
            .read()
            .expect("load board lock")
            .get(id)
            .and_then(|e| e.load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn source(activations: Arc<AtomicU64>, turns: Arc<AtomicU64>) -> LoadSource {
        Arc::new(move || LoadSample {
            activations: activations.load(Ordering::SeqCst),
            turns_total: turns.load(Ordering::SeqCst),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_first_then_only_material_changes_at_most_every_few_beats() {
        let (acts, turns) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut p = LoadPublisher::new(LoadPolicy::default());
        assert_eq!(p.next(Instant::now()), None, "no source, nothing published");
        p.set_source(source(acts.clone(), turns.clone()));
        assert_eq!(
            p.next(Instant::now()),
            Some(HostLoad::default()),
            "the first renewal announces the host's load"
        );
        // Small moves are not material, however many beats pass.
        acts.store(5, Ordering::SeqCst);
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(p.next(Instant::now()), None);
        }
        // A material move is published at once when enough beats passed...
        acts.store(100, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(1)).await;
        let published = p.next(Instant::now()).expect("material change published");
        assert_eq!(published.activations, 100);
        // ...and the next one waits out min_beats even when material.
        acts.store(300, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(p.next(Instant::now()), None, "1 beat after a publication");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(p.next(Instant::now()), None, "2 beats after");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(p.next(Instant::now()).map(|l| l.activations), Some(300));
        // 10% of 300 is 30: a move of 20 is not material, one of 40 is.
        acts.store(320, Ordering::SeqCst);
        for _ in 0..4 {
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(p.next(Instant::now()), None);
        }
        acts.store(340, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(p.next(Instant::now()).map(|l| l.activations), Some(340));
    }

    #[tokio::test(start_paused = true)]
    async fn the_turn_rate_is_measured_over_the_sampling_interval() {
        let (acts, turns) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut p = LoadPublisher::new(LoadPolicy {
            min_beats: 1,
            ..LoadPolicy::default()
        });
        p.set_source(source(acts, turns.clone()));
        p.next(Instant::now());
        turns.store(1_000, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(p.next(Instant::now()).map(|l| l.turns_per_sec), Some(500));
    }

    fn desc(id: &str, activations: Option<u64>) -> HostDescriptor {
        let mut d = HostDescriptor::new(id, format!("{id}:1"), None, None);
        d.load = activations.map(|activations| HostLoad {
            activations,
            turns_per_sec: 0,
        });
        d
    }

    #[test]
    fn the_board_adds_local_placements_until_the_peer_publishes_again() {
        let board = LoadBoard::default();
        board.observe(&desc("a", Some(10)));
        board.observe(&desc("b", None));
        assert_eq!(board.estimate("a"), 10);
        assert_eq!(board.estimate("b"), 0, "never published counts as empty");
        board.placed("a");
        board.placed("a");
        board.placed("b");
        assert_eq!((board.estimate("a"), board.estimate("b")), (12, 1));
        // The same load again (a plain renewal) keeps the local count...
        board.observe(&desc("a", Some(10)));
        assert_eq!(board.estimate("a"), 12);
        // ...a new one replaces it: the peer's own count includes our placements now.
        board.observe(&desc("a", Some(13)));
        assert_eq!(board.estimate("a"), 13);
        board.remove("a");
        assert_eq!(board.estimate("a"), 0);
        board.retain(|id| id != "b");
        assert_eq!(board.published("b"), None);
        assert_eq!(board.estimate("b"), 0);
    }
}
