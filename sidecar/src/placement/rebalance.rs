//! Rebalancing a lumpy fleet (issue 19): a host far above its peers' mean hands idle
//! activations away, so a scaled-up fleet's new pods take their share of the actors that exist
//! instead of only of those created after they joined.
//!
//! **How an activation moves.** Nothing is migrated. The host deactivates an activation that is
//! idle at that moment, exactly as the idle timeout would (no turn runs, no caller waits, checked
//! under the activation table's lock, then its Deactivate turn saves its state and its directory
//! claim is released: [`crate::runtime::Runtime::shed`]). Its next call places it anew. Callers
//! whose route cache still names this host would bring it straight back, so for a while the
//! host refuses to re-activate a moved actor once, with `wrong-host` naming a less loaded peer
//! ([`RebalanceGate`]); `wrong-host` proves the call never ran, and the caller's router retries
//! there. Once only: a second placement here (the peer went away, say) is accepted, so a
//! redirect can never loop.
//!
//! **Bounded.** A host sheds only when its activations exceed the mean of its peers (hosts with
//! the same stateful types, as their records publish them) by more than
//! [`RebalanceConfig::tolerance_percent`], at most [`RebalanceConfig::max_share_percent`] of its
//! own activations per round and [`RebalanceConfig::max_per_round`] in all, one round per
//! [`RebalanceConfig::period`]: a host below the mean never sheds, so no round moves more than
//! that share of the fleet, and loads are republished between rounds. Never an activation in a
//! turn, never one that ran a turn in the last [`RebalanceConfig::min_idle`].

use crate::membership::{HostDescriptor, HostStatus, MembershipHandle};
use crate::runtime::gate::ActivationGate;
use crate::runtime::{ActorId, Runtime};
use async_trait::async_trait;
use sigx_proto::ActorError;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Rebalancing settings (`--rebalance`, `--rebalance-period-ms`, `--rebalance-min-idle-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebalanceConfig {
    /// Off: activations stay where they were placed until they go idle.
    pub enabled: bool,
    /// Time between two rounds.
    pub period: Duration,
    /// Shed only above the peers' mean by more than this share (percent).
    pub tolerance_percent: u64,
    /// At most this share (percent) of this host's activations per round (at least one).
    pub max_share_percent: u64,
    /// At most this many per round.
    pub max_per_round: usize,
    /// Only activations whose last turn ended at least this long ago.
    pub min_idle: Duration,
    /// How long a moved actor is redirected (once) rather than re-activated here.
    pub redirect_for: Duration,
}

impl RebalanceConfig {
    /// The defaults for a host beating every `beat`: a round every four beats (a peer's load
    /// is republished at most every three), so each round sees the last one's effect.
    pub fn for_beat(beat: Duration) -> Self {
        let period = (beat * 4).max(Duration::from_millis(500));
        RebalanceConfig {
            enabled: true,
            period,
            tolerance_percent: 10,
            max_share_percent: 10,
            max_per_round: 256,
            min_idle: Duration::from_millis(250),
            redirect_for: (period * 4).max(Duration::from_secs(10)),
        }
    }
}

/// How many activations a host holding `own` should shed, given its peers' published counts
/// (`peers`, excluding itself). Pure: the whole policy, tested on its own.
pub fn excess(own: u64, peers: &[u64], cfg: &RebalanceConfig) -> usize {
    if peers.is_empty() {
        return 0;
    }
    let n = peers.len() as u64 + 1;
    let total = own + peers.iter().sum::<u64>();
    let mean = total.div_ceil(n);
    if own * 100 <= mean * (100 + cfg.tolerance_percent) || own <= mean + 1 {
        return 0;
    }
    let share = (own * cfg.max_share_percent / 100).max(1);
    (own - mean).min(share).min(cfg.max_per_round as u64) as usize
}

/// One host's rebalancer: the rounds, and the memory of what it moved.
pub struct Rebalancer {
    cfg: RebalanceConfig,
    membership: MembershipHandle,
    runtime: Runtime,
    moved: Mutex<HashMap<ActorId, Instant>>,
}

impl Rebalancer {
    /// A rebalancer for this host.
    pub fn new(cfg: RebalanceConfig, membership: MembershipHandle, runtime: Runtime) -> Self {
        Rebalancer {
            cfg,
            membership,
            runtime,
            moved: Mutex::new(HashMap::new()),
        }
    }

    /// The peers this host compares itself with: active hosts with the same stateful types.
    fn peers<'v>(
        &self,
        hosts: &'v [HostDescriptor],
        me: &HostDescriptor,
    ) -> Vec<&'v HostDescriptor> {
        hosts
            .iter()
            .filter(|h| {
                h.id != me.id
                    && h.status == HostStatus::Active
                    && h.stateful_types == me.stateful_types
            })
            .collect()
    }

    /// One round: how many activations were asked to move.
    pub fn round(&self) -> usize {
        let view = self.membership.view();
        let Some(me) = view.get(self.membership.self_id()) else {
            return 0;
        };
        if me.status != HostStatus::Active || !me.is_stateful() {
            return 0;
        }
        let loads = self.membership.loads();
        let mut peers = Vec::new();
        for p in self.peers(view.hosts(), me) {
            match loads.published(&p.id) {
                Some(l) => peers.push(l.activations),
                // A peer that has not published yet (just joined): wait for it rather than
                // count it as empty and overshoot.
                None => return 0,
            }
        }
        let own = self.runtime.activation_count() as u64;
        let n = excess(own, &peers, &self.cfg);
        if n == 0 {
            return 0;
        }
        let asked = self.runtime.shed(n, self.cfg.min_idle);
        if asked.is_empty() {
            return 0;
        }
        let until = Instant::now() + self.cfg.redirect_for;
        let mut moved = self.moved.lock().expect("moved lock");
        let now = Instant::now();
        moved.retain(|_, t| *t > now);
        for a in &asked {
            moved.insert(a.clone(), until);
        }
        self.runtime
            .counters()
            .rebalance_rounds
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            own,
            peers = peers.len(),
            asked = asked.len(),
            "rebalancing: idle activations asked to move to less loaded hosts"
        );
        asked.len()
    }

    /// Runs rounds until the membership handle's host stops (the task is aborted with it).
    pub fn spawn(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            if !self.cfg.enabled {
                return;
            }
            let mut tick = tokio::time::interval(self.cfg.period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                if self.membership.fence_state().is_some() {
                    return;
                }
                self.round();
            }
        })
    }

    /// Whether a new activation of `actor` here should instead go to a peer: once per move,
    /// within [`RebalanceConfig::redirect_for`], and only when a peer registering its type is
    /// active. Returns that peer (the less loaded of two, as `least-loaded` picks).
    pub fn redirect(&self, actor: &ActorId) -> Option<String> {
        let until = self.moved.lock().expect("moved lock").remove(actor)?;
        if until <= Instant::now() {
            return None;
        }
        let view = self.membership.view();
        let me = self.membership.self_id();
        let candidates: Vec<&HostDescriptor> = super::eligible(&view, &actor.actor_type)
            .into_iter()
            .filter(|h| h.id != me)
            .collect();
        let loads = self.membership.loads();
        let target = super::Policy::LeastLoaded.pick_with(&candidates, me, None, Some(&loads))?;
        self.runtime
            .counters()
            .rebalance_redirects
            .fetch_add(1, Ordering::Relaxed);
        Some(target.id.clone())
    }
}

/// The activation gate with rebalancing's redirect in front of the directory's claim.
pub struct RebalanceGate {
    inner: Arc<dyn ActivationGate>,
    rebalancer: Arc<Rebalancer>,
}

impl RebalanceGate {
    /// Wraps `inner` (the directory's gate).
    pub fn new(inner: Arc<dyn ActivationGate>, rebalancer: Arc<Rebalancer>) -> Self {
        RebalanceGate { inner, rebalancer }
    }
}

#[async_trait]
impl ActivationGate for RebalanceGate {
    fn check_serving(&self) -> Result<(), ActorError> {
        self.inner.check_serving()
    }

    fn serving_until(&self) -> Result<Option<std::time::SystemTime>, ActorError> {
        self.inner.serving_until()
    }

    fn check_accepting(&self) -> Result<(), ActorError> {
        self.inner.check_accepting()
    }

    async fn claim(
        &self,
        actor: &ActorId,
        activation_id: &str,
        deadline: Instant,
    ) -> Result<(), ActorError> {
        if let Some(target) = self.rebalancer.redirect(actor) {
            return Err(ActorError::wrong_host(format!(
                "{actor} was moved off this host to rebalance the fleet; it is placed on {target} \
                 instead (the call never ran)"
            ))
            .with_owner_hint(target));
        }
        self.inner.claim(actor, activation_id, deadline).await
    }

    async fn release(&self, actor: &ActorId, activation_id: &str) {
        self.inner.release(actor, activation_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RebalanceConfig {
        RebalanceConfig::for_beat(Duration::from_millis(250))
    }

    #[test]
    fn only_a_host_well_above_the_mean_sheds_and_never_below_it() {
        let c = cfg();
        assert_eq!(excess(100, &[], &c), 0, "alone: nothing to compare with");
        assert_eq!(excess(100, &[100, 100], &c), 0, "level");
        assert_eq!(excess(105, &[100, 100], &c), 0, "within the tolerance");
        assert_eq!(excess(0, &[100, 100], &c), 0, "below the mean never sheds");
        // 3 old hosts at 100, 3 new at 0: mean 50, each old host sheds 10 % of its own.
        assert_eq!(excess(100, &[100, 100, 0, 0, 0], &c), 10);
        // Near the mean the step is what is left above it.
        assert_eq!(excess(60, &[50, 50, 40, 40, 40], &c), 6);
        assert_eq!(
            excess(50, &[50, 50, 45, 45, 45], &c),
            0,
            "within 10 % of 46"
        );
        assert_eq!(excess(55, &[50, 50, 45, 45, 45], &c), 5, "10 % of its own");
        // Bounded per round.
        assert_eq!(excess(100_000, &[0], &c), 256);
        // A tiny fleet: one activation above the mean is noise.
        assert_eq!(excess(2, &[1], &c), 0);
    }

    #[test]
    fn shedding_converges_to_within_the_tolerance_without_overshooting() {
        // Six hosts, three holding 100 each; the three new ones receive what is shed, evenly,
        // and republish before the next round.
        let c = cfg();
        let mut hosts = [100u64, 100, 100, 0, 0, 0];
        for _round in 0..30 {
            let mut shed = 0;
            for i in 0..6 {
                let peers: Vec<u64> = (0..6).filter(|&j| j != i).map(|j| hosts[j]).collect();
                let n = excess(hosts[i], &peers, &c) as u64;
                hosts[i] -= n;
                shed += n;
            }
            for h in hosts.iter_mut().skip(3) {
                *h += shed / 3;
            }
        }
        let mean = hosts.iter().sum::<u64>() as f64 / 6.0;
        for h in hosts {
            assert!(
                (h as f64 - mean).abs() <= mean * 0.2,
                "{hosts:?} not within 20 % of {mean}"
            );
        }
    }
}
