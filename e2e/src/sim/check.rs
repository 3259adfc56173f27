//! The invariant checker: judges a recorded history.
//!
//! 1. **Single activation.** An activation lives from its Activate turn until the earliest of:
//!    its Deactivate turn, its app going away (detached while the sidecar lives), its host's
//!    crash, fence or completed leave, and the instant its host's lease lapsed (true time; see
//!    `store.rs`). Two activations of one actor never overlap, and
//!    no method turn of an activation runs after its end.
//! 2. **Every call ends** with a defined answer (success or an error kind, outcome-unknown
//!    included) within its deadline plus [`ANSWER_BOUND_MS`], unless its caller crashed first.
//! 3. **Liveness.** After the faults heal and the cluster is quiet for 2×TTL, every actor
//!    answers a call (the probes).
//! 4. **No acknowledged registration lost.** Every activation still live on a serving host at
//!    the end is what its partition owner names for the actor.
//! 5. **No stale write accepted** and 6. **no acknowledged write lost** (the state store's epoch
//!    fence and the output gate): see [`state_violations`].

use super::world::{Ev, Event};
use super::{ANSWER_BOUND_MS, Promise, Violation};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

#[derive(Debug)]
struct Act {
    host: String,
    actor: String,
    start: (u64, u64),
    deactivated: Option<(u64, u64)>,
    turns: Vec<(u64, u64)>,
}

/// When each host stopped being able to run turns: crash, fence, leave, or its lease lapse.
fn host_ends(history: &[Event], lapses: &BTreeMap<String, Option<u64>>) -> BTreeMap<String, u64> {
    let mut ends: BTreeMap<String, u64> = BTreeMap::new();
    let mut put = |h: &str, t: u64| {
        let e = ends.entry(h.to_string()).or_insert(t);
        *e = (*e).min(t);
    };
    for e in history {
        match &e.ev {
            Ev::Crashed { host } | Ev::Fenced { host, .. } | Ev::Left { host } => put(host, e.t_ms),
            _ => {}
        }
    }
    for (h, lapse) in lapses {
        if let Some(l) = lapse {
            put(h, *l);
        }
    }
    ends
}

fn acts(history: &[Event]) -> BTreeMap<String, Act> {
    let mut acts: BTreeMap<String, Act> = BTreeMap::new();
    for e in history {
        let at = (e.t_ms, e.seq);
        match &e.ev {
            Ev::ActStart { host, actor, act } => {
                acts.insert(
                    act.clone(),
                    Act {
                        host: host.clone(),
                        actor: actor.clone(),
                        start: at,
                        deactivated: None,
                        turns: Vec::new(),
                    },
                );
            }
            Ev::Turn { act } => {
                if let Some(a) = acts.get_mut(act) {
                    a.turns.push(at);
                }
            }
            Ev::ActEnd { act } => {
                if let Some(a) = acts.get_mut(act) {
                    a.deactivated.get_or_insert(at);
                }
            }
            Ev::AppDetached { host } => {
                for a in acts.values_mut().filter(|a| a.host == *host) {
                    a.deactivated.get_or_insert(at);
                }
            }
            _ => {}
        }
    }
    acts
}

/// Judges `history`. `lapses` holds each host's final lease lapse (true ms), `end_ms` the end
/// of the run, `probe_at` when the liveness probes went out.
pub fn check(
    history: &[Event],
    lapses: &BTreeMap<String, Option<u64>>,
    end_ms: u64,
    probe_at: u64,
    nobody_serving: bool,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let ends = host_ends(history, lapses);
    let acts = acts(history);
    // The end of each activation, as (ms, seq): an event's own seq, or u64::MAX for an end
    // derived from a lapse (it happened at that ms, after nothing in particular).
    let end_of = |a: &Act| -> (u64, u64) {
        let host_end = ends.get(&a.host).map(|t| (*t, u64::MAX));
        match (a.deactivated, host_end) {
            (Some(d), Some(h)) => d.min(h),
            (Some(d), None) => d,
            (None, Some(h)) => h,
            (None, None) => (u64::MAX, u64::MAX),
        }
    };
    let mut by_actor: BTreeMap<&str, Vec<(&String, &Act)>> = BTreeMap::new();
    for (id, a) in &acts {
        by_actor.entry(a.actor.as_str()).or_default().push((id, a));
        let end = end_of(a);
        if let Some(t) = a
            .turns
            .iter()
            .find(|t| t.0 > end.0 || (t.0 == end.0 && end.1 != u64::MAX && t.1 > end.1))
        {
            out.push(Violation {
                promise: Promise::Safety,
                what: format!(
                    "activation {id} of {} on {} ran a turn at t={}ms after it ended at t={}ms \
                     (deactivated, or its host crashed, fenced, left or its lease lapsed)",
                    a.actor, a.host, t.0, end.0
                ),
                actor: Some(a.actor.clone()),
            });
        }
    }
    for (actor, mut list) in by_actor {
        list.sort_by_key(|(_, a)| a.start);
        for i in 0..list.len() {
            for j in (i + 1)..list.len() {
                let (ia, a) = list[i];
                let (ib, b) = list[j];
                let a_end = end_of(a);
                // b starts before a ends: both live at once.
                let overlap = if a_end.1 == u64::MAX {
                    b.start.0 < a_end.0
                } else {
                    b.start < a_end
                };
                if overlap {
                    out.push(Violation {
                        promise: Promise::Safety,
                        what: format!(
                            "two activations of {actor} overlap: {ia} on {} (t={}..{}ms) and {ib} \
                             on {} (from t={}ms)",
                            a.host,
                            a.start.0,
                            if a_end.0 == u64::MAX {
                                "live".to_string()
                            } else {
                                a_end.0.to_string()
                            },
                            b.host,
                            b.start.0
                        ),
                        actor: Some(actor.to_string()),
                    });
                }
            }
        }
    }
    // Calls.
    let mut starts: BTreeMap<u64, (&Event, &str, &str, u64, bool)> = BTreeMap::new();
    let mut answered: BTreeMap<u64, (&Event, &str)> = BTreeMap::new();
    let mut crashed: BTreeMap<&str, u64> = BTreeMap::new();
    for e in history {
        match &e.ev {
            Ev::CallStart {
                id,
                host,
                actor,
                deadline_ms,
                probe,
                ..
            } => {
                starts.insert(*id, (e, host, actor, *deadline_ms, *probe));
            }
            Ev::CallEnd { id, outcome } => {
                answered.insert(*id, (e, outcome));
            }
            Ev::Crashed { host } => {
                crashed.entry(host).or_insert(e.t_ms);
            }
            _ => {}
        }
    }
    for (id, (start, host, actor, deadline, probe)) in &starts {
        let bound = deadline + ANSWER_BOUND_MS;
        let caller_gone = crashed.get(host).copied();
        match answered.get(id) {
            Some((end, outcome)) => {
                if end.t_ms > bound {
                    out.push(Violation {
                        promise: Promise::Liveness,
                        what: format!(
                            "call #{id} from {host} to {actor} (t={}ms, deadline {deadline}ms) was \
                             answered {outcome} only at t={}ms",
                            start.t_ms, end.t_ms
                        ),
                        actor: Some(actor.to_string()),
                    });
                }
                if *probe && start.t_ms >= probe_at && *outcome != "ok" {
                    out.push(Violation {
                        promise: Promise::Liveness,
                        what: format!(
                            "liveness: after the faults healed and 2×TTL of quiet, {actor} did \
                             not answer a call from {host}: {outcome}"
                        ),
                        actor: Some(actor.to_string()),
                    });
                }
            }
            None => {
                let exempt = caller_gone.is_some_and(|c| c <= bound);
                if !exempt && end_ms > bound {
                    out.push(Violation {
                        promise: Promise::Liveness,
                        what: format!(
                            "call #{id} from {host} to {actor} (t={}ms, deadline {deadline}ms) \
                             was never answered",
                            start.t_ms
                        ),
                        actor: Some(actor.to_string()),
                    });
                }
            }
        }
    }
    if nobody_serving {
        out.push(Violation {
            promise: Promise::Liveness,
            what: "liveness: no host was serving after the faults healed and 2×TTL of quiet".into(),
            actor: None,
        });
    }
    // Registrations.
    for e in history {
        if let Ev::RegCheck {
            host,
            actor,
            act,
            found,
        } = &e.ev
        {
            let expected = format!("{host} ({act})");
            if *found != expected {
                out.push(Violation {
                    promise: Promise::Safety,
                    what: format!(
                        "acknowledged registration lost: {actor} is live on {host} as {act} but \
                         its directory owner answers {found}"
                    ),
                    actor: Some(actor.clone()),
                });
            }
        }
    }
    out.extend(state_violations(history));
    out.extend(reminder_violations(history, probe_at));
    out
}

/// How much earlier than its due time (true ms) a reminder may reach an app: the simulator's
/// step, not a clock's error.
pub const REMINDER_EARLY_SLACK_MS: u64 = 50;

/// 7. **Every due reminder fires once faults heal**: a reminder the store acknowledged, due
///    before the quiet end (faults healed, 2×TTL without a host event), reached some app by the
///    end of the run. Deliveries are at least once: a repeat is not a violation.
/// 8. **No reminder fires before it is due** (true time): due times are judged on one clock,
///    the store's, whatever the hosts' wall clocks say.
pub fn reminder_violations(history: &[Event], probe_at: u64) -> Vec<Violation> {
    let mut out = late_reminders(history, probe_at);
    // A name set twice (a host restarted under its id counts its names again) is judged by its
    // earliest due time: a fire before that is early whichever set it came from.
    let mut due: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for e in history {
        if let Ev::ReminderSet {
            actor,
            name,
            due_ms,
        } = &e.ev
        {
            let d = due
                .entry((actor.as_str(), name.as_str()))
                .or_insert((e.t_ms, *due_ms));
            if *due_ms < d.1 {
                *d = (e.t_ms, *due_ms);
            }
        }
    }
    let mut early = BTreeSet::new();
    for e in history {
        if let Ev::ReminderFired { host, actor, name } = &e.ev
            && let Some(&(set_at, due_ms)) = due.get(&(actor.as_str(), name.as_str()))
            && e.t_ms + REMINDER_EARLY_SLACK_MS < due_ms
            && early.insert((actor.as_str(), name.as_str()))
        {
            out.push(Violation {
                promise: Promise::Safety,
                what: format!(
                    "reminder {name:?} of {actor}, set at t={set_at}ms and due at \
                     t={due_ms}ms, fired on {host} at t={}ms, {} ms early",
                    e.t_ms,
                    due_ms - e.t_ms
                ),
                actor: Some(actor.clone()),
            });
        }
    }
    out
}

/// The reminders due by `probe_at` (the quiet point) that no app has received yet, as their
/// `ReminderSet` events. The run's tail waits on this list emptying, and what is left at the
/// end is a liveness violation.
pub fn unfired_due_reminders(history: &[Event], probe_at: u64) -> Vec<&Event> {
    let fired: BTreeSet<(&str, &str)> = history
        .iter()
        .filter_map(|e| match &e.ev {
            Ev::ReminderFired { actor, name, .. } => Some((actor.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    history
        .iter()
        .filter(|e| match &e.ev {
            Ev::ReminderSet {
                actor,
                name,
                due_ms,
            } => *due_ms <= probe_at && !fired.contains(&(actor.as_str(), name.as_str())),
            _ => false,
        })
        .collect()
}

fn late_reminders(history: &[Event], probe_at: u64) -> Vec<Violation> {
    unfired_due_reminders(history, probe_at)
        .into_iter()
        .filter_map(|e| match &e.ev {
            Ev::ReminderSet {
                actor,
                name,
                due_ms,
            } => Some(Violation {
                promise: Promise::Liveness,
                what: format!(
                    "reminder {name:?} of {actor}, set at t={}ms and due at t={due_ms}ms, \
                     never fired, though the faults healed and the fleet was quiet by \
                     t={probe_at}ms",
                    e.t_ms
                ),
                actor: Some(actor.clone()),
            }),
            _ => None,
        })
        .collect()
}

/// 5. **No stale write accepted**: the store never stores a batch whose epoch is older than an
///    epoch it already issued for that actor (a superseded activation's write).
/// 6. **No acknowledged write lost**: a call answered `ok` had its turn's write stored before
///    the answer (the output gate); the sim app writes each call's id, so the write is the
///    call's own.
pub fn state_violations(history: &[Event]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut newest: BTreeMap<&str, u64> = BTreeMap::new();
    let mut stored: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut calls: BTreeMap<u64, &str> = BTreeMap::new();
    for e in history {
        match &e.ev {
            Ev::EpochIssued { actor, epoch } => {
                let n = newest.entry(actor).or_default();
                *n = (*n).max(*epoch);
            }
            Ev::StateCommit {
                actor,
                epoch,
                value,
                accepted: true,
            } => {
                let current = newest.get(actor.as_str()).copied().unwrap_or(0);
                if *epoch < current {
                    out.push(Violation {
                        promise: Promise::Safety,
                        what: format!(
                            "stale write accepted: at t={}ms the store stored a batch of {actor}                              under epoch {epoch}, after it had issued epoch {current} to a newer                              activation",
                            e.t_ms
                        ),
                        actor: Some(actor.clone()),
                    });
                }
                if let Some(v) = value {
                    stored.insert((actor, v));
                }
            }
            Ev::CallStart { id, actor, .. } => {
                calls.insert(*id, actor);
            }
            Ev::CallEnd { id, outcome } if outcome == "ok" => {
                let Some(actor) = calls.get(id) else { continue };
                let call = id.to_string();
                if !stored.contains(&(*actor, call.as_str())) {
                    out.push(Violation {
                        promise: Promise::Safety,
                        what: format!(
                            "acknowledged write lost: call {id} to {actor} was answered ok at                              t={}ms, but the store never stored its turn's write",
                            e.t_ms
                        ),
                        actor: Some(actor.to_string()),
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The events that concern `actor`: its activations and calls, and every host-level event.
pub fn actor_history(history: &[Event], actor: &str) -> Vec<Event> {
    let mut acts = BTreeSet::new();
    let mut calls = BTreeSet::new();
    let mut out = Vec::new();
    for e in history {
        let keep = match &e.ev {
            Ev::ActStart { actor: a, act, .. } if a == actor => {
                acts.insert(act.clone());
                true
            }
            Ev::Turn { act } | Ev::ActEnd { act } => acts.contains(act),
            Ev::CallStart { id, actor: a, .. } if a == actor => {
                calls.insert(*id);
                true
            }
            Ev::CallEnd { id, .. } => calls.contains(id),
            Ev::RegCheck { actor: a, .. } => a == actor,
            Ev::ActStart { .. } | Ev::CallStart { .. } => false,
            _ => true,
        };
        if keep {
            out.push(e.clone());
        }
    }
    out
}

/// Actors with an activation live on one of `hosts` (not deactivated), by the history.
pub fn live_actors_on(history: &[Event], hosts: &[String]) -> Vec<String> {
    let acts = acts(history);
    let mut out: BTreeSet<String> = BTreeSet::new();
    for a in acts.values() {
        if hosts.contains(&a.host) && a.deactivated.is_none() {
            out.insert(a.actor.clone());
        }
    }
    out.into_iter().collect()
}

/// For every actor probed after `since`: ms from `since` to its first successful probe answer.
pub fn recovery_times(history: &[Event], since: u64) -> Vec<u64> {
    let mut probe_actor: BTreeMap<u64, String> = BTreeMap::new();
    let mut first_ok: BTreeMap<String, u64> = BTreeMap::new();
    for e in history {
        match &e.ev {
            Ev::CallStart {
                id,
                actor,
                recovery,
                ..
            } if *recovery && e.t_ms >= since => {
                probe_actor.insert(*id, actor.clone());
            }
            Ev::CallEnd { id, outcome } if outcome == "ok" => {
                if let Some(a) = probe_actor.get(id) {
                    first_ok.entry(a.clone()).or_insert(e.t_ms - since);
                }
            }
            _ => {}
        }
    }
    first_ok.into_values().collect()
}

/// Calls issued in `[from, to)`, and how many of them failed.
pub fn calls_between(history: &[Event], from: u64, to: u64) -> (u64, u64) {
    let mut ids = BTreeSet::new();
    let mut failed = 0;
    for e in history {
        match &e.ev {
            Ev::CallStart { id, .. } if e.t_ms >= from && e.t_ms < to => {
                ids.insert(*id);
            }
            Ev::CallEnd { id, outcome } if ids.contains(id) && outcome != "ok" => failed += 1,
            _ => {}
        }
    }
    (ids.len() as u64, failed)
}

/// A hash of the whole history (event kinds, order, times): equal runs, equal fingerprints.
pub fn fingerprint(history: &[Event]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for e in history {
        e.seq.hash(&mut h);
        e.t_ms.hash(&mut h);
        format!("{:?}", e.ev).hash(&mut h);
    }
    h.finish()
}
