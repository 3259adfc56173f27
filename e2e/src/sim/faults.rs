//! The fault schedule of one seed: what goes wrong, to which host, when, for how long.
//!
//! Hosts are named by *slot* (an index into the hosts serving when the fault fires, sorted by
//! id), so a schedule stays meaningful while incarnations come and go.

use rand::RngExt;
use rand::rngs::StdRng;
use std::fmt;

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// kill -9: the host's runtime is dropped; a new incarnation joins `restart_after` later.
    Crash {
        slot: usize,
        restart_after_ms: Option<u64>,
    },
    /// The graceful stop sequence; a replacement joins first when `replace`.
    Leave { slot: usize, replace: bool },
    /// A new incarnation joins.
    Join,
    /// The links between two hosts hold every message until healed (TCP stalls, then
    /// retransmits: nothing is lost, connections survive).
    Partition { a: usize, b: usize, dur_ms: u64 },
    /// One host is cut off from every other host.
    IsolatePeers { slot: usize, dur_ms: u64 },
    /// One host cannot reach the membership store (its calls fail).
    IsolateStore { slot: usize, dur_ms: u64 },
    /// Nobody can reach the membership store.
    StoreOutage { dur_ms: u64 },
    /// One host's change feed stops advancing (a lagging watch), its direct reads still work.
    FreezeFeed { slot: usize, dur_ms: u64 },
    /// Message delay up to `max_ms` on every link (reorders across connections).
    Latency { max_ms: u64, dur_ms: u64 },
    /// A VM suspend of one host.
    Suspend { slot: usize, dur_ms: u64 },
    /// One host's wall clock is stepped back (an NTP correction, `date -s`); its monotonic
    /// clock does not move. Only in named schedules: adding it to the random mix would change
    /// every seed's schedule.
    WallStepBack { slot: usize, back_ms: u64 },
    /// A VM suspend of one host, and on its resume its wall clock is stepped back by `back_ms`
    /// (NTP correcting a clock that ran fast) before the host reads a clock again: the step
    /// and the suspend land in one reading. Only in named schedules, as `WallStepBack`.
    SuspendThenStepBack {
        slot: usize,
        dur_ms: u64,
        back_ms: u64,
    },
    /// Every mesh connection of one host is reset (messages in flight are lost).
    ResetConnections { slot: usize },
    /// A rolling restart: each serving host in turn is replaced (join, then graceful leave).
    RollingRestart { step_ms: u64 },
    /// A join that one host's lagging watch does not see for a while (its feed is frozen
    /// first): views disagree while a partition changes owner.
    LaggingJoin { slot: usize, dur_ms: u64 },
    /// A graceful leave while another host's watch lags.
    LaggingLeave {
        slot: usize,
        leaver: usize,
        dur_ms: u64,
    },
    /// The host's app goes away (its container restarts) while the sidecar lives: the runtime
    /// drops its activations and the host goes back to `joining`; a new app attaches `dur_ms`
    /// later and the host becomes `active` again under the same id.
    AppDetach { slot: usize, dur_ms: u64 },
    /// One host's watch stalls where it is for `dur_ms`: its feed delivers nothing new, while
    /// its reads, its writes and its relists still work (a watch with no idle timeout).
    StallFeed { slot: usize, dur_ms: u64 },
    /// A third party deletes one live host's record (`kubectl delete lease`, Pod garbage
    /// collection after a force delete): the host learns it from its feed or its next renewal
    /// and fences; its peers see a deletion that is not a withdrawal (issue 12, hole D).
    DeleteRecord { slot: usize },
    /// One host's stalled watch moves on, up to and including `target`'s next `joining` record,
    /// and stalls there again for `dur_ms`: the view knows the target went back to joining,
    /// not that it came back (the model's A-B-A trace).
    FeedUntilJoining {
        slot: usize,
        target: usize,
        dur_ms: u64,
    },
}

impl Fault {
    /// How long the fault lasts once applied (0 for an instant one).
    pub fn span_ms(&self) -> u64 {
        match self {
            Fault::Partition { dur_ms, .. }
            | Fault::IsolatePeers { dur_ms, .. }
            | Fault::IsolateStore { dur_ms, .. }
            | Fault::StoreOutage { dur_ms }
            | Fault::FreezeFeed { dur_ms, .. }
            | Fault::Latency { dur_ms, .. }
            | Fault::Suspend { dur_ms, .. }
            | Fault::SuspendThenStepBack { dur_ms, .. }
            | Fault::LaggingJoin { dur_ms, .. }
            | Fault::LaggingLeave { dur_ms, .. }
            | Fault::AppDetach { dur_ms, .. }
            | Fault::StallFeed { dur_ms, .. }
            | Fault::FeedUntilJoining { dur_ms, .. } => *dur_ms,
            Fault::Crash { .. }
            | Fault::WallStepBack { .. }
            | Fault::Leave { .. }
            | Fault::Join
            | Fault::ResetConnections { .. }
            | Fault::DeleteRecord { .. }
            | Fault::RollingRestart { .. } => 0,
        }
    }
}

/// A fault at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub at_ms: u64,
    pub fault: Fault,
}

impl fmt::Display for Timed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={:>5}ms {:?}", self.at_ms, self.fault)
    }
}

/// A seed's whole schedule, sorted by time.
#[derive(Debug, Clone, Default)]
pub struct Schedule(pub Vec<Timed>);

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "  (no faults)");
        }
        for t in &self.0 {
            writeln!(f, "  {t}")?;
        }
        Ok(())
    }
}

impl Schedule {
    /// When the last fault has ended.
    pub fn end_ms(&self) -> u64 {
        self.0
            .iter()
            .map(|t| t.at_ms + t.fault.span_ms())
            .max()
            .unwrap_or(0)
    }
}

/// One schedule of the regression corpus: a hole of issue 12 as an explicit fault sequence.
#[derive(Debug, Clone)]
pub struct Named {
    pub name: &'static str,
    /// What it reproduces when its fix is switched off.
    pub what: &'static str,
    /// Hosts at the start (`h1`, `h2`, ...; slots index the serving hosts sorted by id).
    pub hosts: usize,
    /// Actors the workload calls.
    pub actors: u32,
    pub schedule: Schedule,
}

fn at(at_ms: u64, fault: Fault) -> Timed {
    Timed { at_ms, fault }
}

/// The first fault of the clock schedules: h1 loses the membership store for 5 s, so no write
/// of its own can tell it that its record is gone; only its clocks can.
fn h1_cut_off_from_the_store() -> Timed {
    at(
        1400,
        Fault::IsolateStore {
            slot: 0,
            dur_ms: 5000,
        },
    )
}

/// The regression corpus of views and eligibility (issue 12, holes A and B).
pub fn corpus() -> Vec<Named> {
    vec![
        Named {
            name: "A_stalled_watch_newcomer_departure",
            what: "h1's watch stalls; h3 joins (h1 never sees it) and activates actors in h2's \
                   partitions; h2 dies; h1 confirms h2 gone by a fresh read. Published ahead of \
                   the feed, h1's view is {h1}: it owns every partition with an empty wait set \
                   and activates actors h3 holds.",
            hosts: 2,
            // Many, so that some are first activated by the newcomer, after it joined.
            actors: 200,
            schedule: Schedule(vec![
                at(
                    1000,
                    Fault::StallFeed {
                        slot: 0,
                        dur_ms: 3000,
                    },
                ),
                at(1010, Fault::Join),
                at(
                    1500,
                    Fault::Crash {
                        slot: 1,
                        restart_after_ms: None,
                    },
                ),
            ]),
        },
        Named {
            name: "B_app_detach_reattach",
            what: "h1's app detaches (h1 goes joining), h2 takes h1's partitions over and \
                   activates actors there, h1's app re-attaches. Ready across the re-activation, \
                   h1 serves its stale table and activates actors h2 holds.",
            hosts: 2,
            actors: 16,
            schedule: Schedule(vec![at(
                1500,
                Fault::AppDetach {
                    slot: 0,
                    dur_ms: 600,
                },
            )]),
        },
        Named {
            name: "B_fingerprint_aba",
            what: "The model's A-B-A trace (shared/model/B_fingerprint_aba.txt): h2's watch \
                   stalls; h1's app detaches and re-attaches; h1 collects from h2, which still \
                   shows h1's earlier active record; h2's feed then delivers h1's joining record \
                   and stalls again: h2 owns every partition with an empty wait set and \
                   activates actors h1 holds.",
            hosts: 2,
            actors: 16,
            schedule: Schedule(vec![
                at(
                    1000,
                    Fault::StallFeed {
                        slot: 1,
                        dur_ms: 3000,
                    },
                ),
                at(
                    1010,
                    Fault::AppDetach {
                        slot: 0,
                        dur_ms: 500,
                    },
                ),
                at(
                    2500,
                    Fault::FeedUntilJoining {
                        slot: 1,
                        target: 0,
                        dur_ms: 1500,
                    },
                ),
            ]),
        },
        Named {
            name: "D_third_party_deletion",
            what: "h1's watch stalls, then a third party deletes h1's live record: h1 learns it \
                   only at its next renewal and keeps serving its activations until then. Peers \
                   that drop h1 as soon as their feed shows the deletion re-activate actors \
                   whose turns h1 still runs.",
            hosts: 3,
            actors: 12,
            schedule: Schedule(vec![
                at(
                    1000,
                    Fault::StallFeed {
                        slot: 0,
                        dur_ms: 2000,
                    },
                ),
                at(1010, Fault::DeleteRecord { slot: 0 }),
            ]),
        },
        Named {
            name: "D_deletion_found_by_a_lagging_reader",
            what: "h2's watch stalls; h1 renews (h2 does not see it), loses the store and has \
                   its record deleted by a third party. h2's expiry check reads the store and \
                   finds no record. Taken as proof of expiry, h2 drops h1 before h1 fences and \
                   activates actors whose turns h1 still runs (seed 6020430). h3 sees the \
                   deletion in its feed and waits it out.",
            hosts: 3,
            actors: 32,
            schedule: Schedule(vec![
                at(
                    600,
                    Fault::StallFeed {
                        slot: 1,
                        dur_ms: 3000,
                    },
                ),
                at(
                    1600,
                    Fault::IsolateStore {
                        slot: 0,
                        dur_ms: 5000,
                    },
                ),
                at(1650, Fault::DeleteRecord { slot: 0 }),
            ]),
        },
        Named {
            name: "S_wall_step_back_then_suspend",
            what: "h1 loses the membership store (no write confirms after this); its wall clock \
                   is stepped back by 30 s; then its VM is suspended for three TTLs and resumes \
                   still cut off from the store, so no write tells it its record is gone. Judged \
                   on two readings of each clock, the wall side resumes behind where the lease \
                   window started and the monotonic side lost the suspend: h1 counts its lease \
                   valid and runs its callers' turns on actors h2 re-activated meanwhile.",
            hosts: 2,
            actors: 16,
            schedule: Schedule(vec![
                h1_cut_off_from_the_store(),
                at(
                    1500,
                    Fault::WallStepBack {
                        slot: 0,
                        back_ms: 30_000,
                    },
                ),
                at(
                    1800,
                    Fault::Suspend {
                        slot: 0,
                        dur_ms: 3000,
                    },
                ),
            ]),
        },
        Named {
            name: "S_wall_step_back_inside_a_suspend",
            what: "h1 loses the membership store; its VM is suspended for three TTLs, and on \
                   the resume its wall clock is stepped back by 30 s before it reads a clock \
                   again: the first reading after the resume has the wall side behind the last \
                   one and the monotonic side unmoved, so the step hides the suspend from both, \
                   whatever the odometer. Only a boot clock (Linux CLOCK_BOOTTIME) sees it; \
                   without one h1 counts its lease valid and runs turns on actors h2 \
                   re-activated meanwhile.",
            hosts: 2,
            actors: 16,
            schedule: Schedule(vec![
                h1_cut_off_from_the_store(),
                at(
                    1800,
                    Fault::SuspendThenStepBack {
                        slot: 0,
                        dur_ms: 3000,
                        back_ms: 30_000,
                    },
                ),
            ]),
        },
        Named {
            name: "R_serving_host_wall_step_back",
            what: "h1 serves throughout, in the view and reachable, when its wall clock is \
                   stepped back by 30 s. Judged on the hosts' own wall clocks, a reminder set \
                   through h1 afterwards is stored due 30 s early and fires early on whichever \
                   host owns its shard, and the reminders of h1's own shards wait 30 s past \
                   their due time.",
            hosts: 2,
            actors: 16,
            schedule: Schedule(vec![at(
                1500,
                Fault::WallStepBack {
                    slot: 0,
                    back_ms: 30_000,
                },
            )]),
        },
    ]
}

/// Which faults a schedule draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mix {
    /// Every kind of fault.
    #[default]
    All,
    /// Membership churn while watches lag: joins, leaves, frozen feeds, delays. Where the
    /// directory's ownership handoff (Rules 1 and 2) is exercised hardest.
    Churn,
}

/// The kinds of fault a random schedule draws from, with their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Crash,
    Leave,
    Join,
    Partition,
    IsolatePeers,
    IsolateStore,
    StoreOutage,
    FreezeFeed,
    Latency,
    Suspend,
    ResetConnections,
    RollingRestart,
    LaggingJoin,
    LaggingLeave,
    AppDetach,
    StallFeed,
    DeleteRecord,
}

const ALL: &[(Kind, u32)] = &[
    (Kind::Crash, 12),
    (Kind::Leave, 10),
    (Kind::Join, 8),
    (Kind::Partition, 10),
    (Kind::IsolatePeers, 7),
    (Kind::IsolateStore, 9),
    (Kind::StoreOutage, 5),
    (Kind::FreezeFeed, 9),
    (Kind::Latency, 6),
    (Kind::Suspend, 12),
    (Kind::ResetConnections, 7),
    (Kind::RollingRestart, 5),
    (Kind::LaggingJoin, 8),
    (Kind::LaggingLeave, 8),
    (Kind::AppDetach, 8),
    (Kind::StallFeed, 8),
    (Kind::DeleteRecord, 6),
];

/// Joins, leaves, partitions, frozen feeds, latency, and the lagging composites.
const CHURN: &[(Kind, u32)] = &[
    (Kind::Leave, 2),
    (Kind::Join, 2),
    (Kind::Partition, 1),
    (Kind::IsolateStore, 1),
    (Kind::FreezeFeed, 2),
    (Kind::Latency, 1),
    (Kind::LaggingJoin, 3),
    (Kind::LaggingLeave, 2),
];

/// Swarm testing: a seed of the full mix enables a random subset of the kinds (each with even
/// odds, at least one), so that rare combinations get whole schedules to themselves instead of
/// being diluted by every other kind.
fn swarm(rng: &mut StdRng, mix: Mix) -> Vec<(Kind, u32)> {
    match mix {
        Mix::Churn => CHURN.to_vec(),
        Mix::All => {
            let mut on: Vec<(Kind, u32)> = ALL
                .iter()
                .copied()
                .filter(|_| rng.random_bool(0.5))
                .collect();
            if on.is_empty() {
                on.push(ALL[rng.random_range(0..ALL.len())]);
            }
            on
        }
    }
}

fn pick(rng: &mut StdRng, kinds: &[(Kind, u32)]) -> Kind {
    let total: u32 = kinds.iter().map(|(_, w)| w).sum();
    let mut roll = rng.random_range(0..total);
    for &(k, w) in kinds {
        if roll < w {
            return k;
        }
        roll -= w;
    }
    unreachable!("the roll is below the total weight")
}

/// Draws a schedule of 1..=`max_faults` faults inside `[from_ms, until_ms)`, with `ttl_ms`
/// setting the scale of durations (some shorter than the TTL, some longer), from the kinds this
/// seed's swarm enables.
pub fn random(
    rng: &mut StdRng,
    mix: Mix,
    from_ms: u64,
    until_ms: u64,
    ttl_ms: u64,
    max_faults: usize,
) -> Schedule {
    let kinds = swarm(rng, mix);
    let n = rng.random_range(1..=max_faults);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let slot = rng.random_range(0..8usize);
        let other = rng.random_range(0..8usize);
        // Short (under the TTL: nobody should be expired) or long (past TTL + drift).
        let dur_ms = if rng.random_bool(0.5) {
            rng.random_range(50..ttl_ms)
        } else {
            rng.random_range(ttl_ms..=(3 * ttl_ms))
        };
        let fault = match pick(rng, &kinds) {
            Kind::LaggingJoin => Fault::LaggingJoin { slot, dur_ms },
            Kind::LaggingLeave => Fault::LaggingLeave {
                slot,
                leaver: other,
                dur_ms,
            },
            Kind::Crash => Fault::Crash {
                slot,
                restart_after_ms: rng.random_bool(0.7).then(|| rng.random_range(50..1500)),
            },
            Kind::Leave => Fault::Leave {
                slot,
                replace: rng.random_bool(0.6),
            },
            Kind::Join => Fault::Join,
            Kind::Partition => Fault::Partition {
                a: slot,
                b: other,
                dur_ms,
            },
            Kind::IsolatePeers => Fault::IsolatePeers { slot, dur_ms },
            Kind::IsolateStore => Fault::IsolateStore { slot, dur_ms },
            Kind::StoreOutage => Fault::StoreOutage { dur_ms },
            Kind::FreezeFeed => Fault::FreezeFeed { slot, dur_ms },
            Kind::Latency => Fault::Latency {
                max_ms: rng.random_range(20..150),
                dur_ms,
            },
            Kind::Suspend => Fault::Suspend { slot, dur_ms },
            Kind::ResetConnections => Fault::ResetConnections { slot },
            Kind::RollingRestart => Fault::RollingRestart {
                step_ms: rng.random_range(150..600),
            },
            Kind::AppDetach => Fault::AppDetach { slot, dur_ms },
            Kind::StallFeed => Fault::StallFeed { slot, dur_ms },
            Kind::DeleteRecord => Fault::DeleteRecord { slot },
        };
        let span = fault.span_ms();
        let latest = until_ms.saturating_sub(span).max(from_ms + 1);
        let at_ms = rng.random_range(from_ms..latest);
        out.push(Timed { at_ms, fault });
    }
    out.sort_by_key(|t| t.at_ms);
    Schedule(out)
}
