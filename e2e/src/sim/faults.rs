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

/// Draws a schedule of 1..=`max_faults` faults inside `[from_ms, until_ms)`, with `ttl_ms`
/// setting the scale of durations (some shorter than the TTL, some longer).
pub fn random(
    rng: &mut StdRng,
    mix: Mix,
    from_ms: u64,
    until_ms: u64,
    ttl_ms: u64,
    max_faults: usize,
) -> Schedule {
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
        let roll = match mix {
            Mix::All => rng.random_range(0..116u32),
            // Joins, leaves, partitions, frozen feeds, latency, and the lagging composites.
            Mix::Churn => [12, 12, 22, 22, 30, 47, 61, 61, 70, 100, 100, 100, 108, 108]
                [rng.random_range(0..14usize)],
        };
        let fault = match roll {
            100..108 => Fault::LaggingJoin { slot, dur_ms },
            108..116 => Fault::LaggingLeave {
                slot,
                leaver: other,
                dur_ms,
            },
            0..12 => Fault::Crash {
                slot,
                restart_after_ms: rng.random_bool(0.7).then(|| rng.random_range(50..1500)),
            },
            12..22 => Fault::Leave {
                slot,
                replace: rng.random_bool(0.6),
            },
            22..30 => Fault::Join,
            30..40 => Fault::Partition {
                a: slot,
                b: other,
                dur_ms,
            },
            40..47 => Fault::IsolatePeers { slot, dur_ms },
            47..56 => Fault::IsolateStore { slot, dur_ms },
            56..61 => Fault::StoreOutage { dur_ms },
            61..70 => Fault::FreezeFeed { slot, dur_ms },
            70..76 => Fault::Latency {
                max_ms: rng.random_range(20..150),
                dur_ms,
            },
            76..88 => Fault::Suspend { slot, dur_ms },
            88..95 => Fault::ResetConnections { slot },
            _ => Fault::RollingRestart {
                step_ms: rng.random_range(150..600),
            },
        };
        let span = match &fault {
            Fault::Partition { dur_ms, .. }
            | Fault::IsolatePeers { dur_ms, .. }
            | Fault::IsolateStore { dur_ms, .. }
            | Fault::StoreOutage { dur_ms }
            | Fault::FreezeFeed { dur_ms, .. }
            | Fault::Latency { dur_ms, .. }
            | Fault::Suspend { dur_ms, .. }
            | Fault::LaggingJoin { dur_ms, .. }
            | Fault::LaggingLeave { dur_ms, .. } => *dur_ms,
            _ => 0,
        };
        let latest = until_ms.saturating_sub(span).max(from_ms + 1);
        let at_ms = rng.random_range(from_ms..latest);
        out.push(Timed { at_ms, fault });
    }
    out.sort_by_key(|t| t.at_ms);
    Schedule(out)
}
