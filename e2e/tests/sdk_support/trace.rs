//! Reads the counter app's trace file (`COUNTER_TRACE_FILE`) and checks the single-activation
//! and turn-based guarantees against it: for each actor, no two activations overlap in time
//! (across every host writing to the file: the stamps are CLOCK_MONOTONIC, one clock per
//! machine); within one activation, no two turns overlap and none runs outside the activation.

use std::collections::BTreeMap;
use std::path::Path;

/// One line of the trace.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Event {
    pub t_ns: u64,
    pub event: String,
    pub actor: String,
    pub activation: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub method: Option<String>,
}

/// Every event in the file, in file order.
pub fn read(path: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read the trace {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad trace line {l:?}: {e}")))
        .collect()
}

/// What the trace shows, beyond violations: enough to tell a vacuous pass from a real one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub actors: usize,
    pub activations: usize,
    pub turns: usize,
    /// Actors that were activated more than once (so single activation was tested over time).
    pub reactivated_actors: usize,
    /// Distinct hosts that ran activations.
    pub hosts: usize,
}

#[derive(Debug, Clone)]
struct Activation {
    id: String,
    host: String,
    start: u64,
    end: Option<u64>,
}

/// Checks the trace; returns the summary and every violation found (empty = the guarantees
/// held). An activation with no end event is taken as live until the end of time: a process
/// killed mid-activation leaves one, and nothing may overlap it.
pub fn check(events: &[Event]) -> (Summary, Vec<String>) {
    let mut violations = Vec::new();
    let mut by_actor: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events {
        by_actor.entry(e.actor.as_str()).or_default().push(e);
    }
    let mut summary = Summary {
        actors: by_actor.len(),
        ..Default::default()
    };
    let mut hosts = std::collections::BTreeSet::new();
    for (actor, mut evs) in by_actor {
        evs.sort_by_key(|e| e.t_ns);
        let mut acts: BTreeMap<&str, Activation> = BTreeMap::new();
        for e in &evs {
            match e.event.as_str() {
                "activation-start" => {
                    if acts.contains_key(e.activation.as_str()) {
                        violations.push(format!(
                            "{actor}: activation {} started twice",
                            e.activation
                        ));
                    }
                    acts.insert(
                        &e.activation,
                        Activation {
                            id: e.activation.clone(),
                            host: e.host.clone(),
                            start: e.t_ns,
                            end: None,
                        },
                    );
                }
                "activation-end" => match acts.get_mut(e.activation.as_str()) {
                    Some(a) => a.end = Some(e.t_ns),
                    None => violations.push(format!(
                        "{actor}: activation {} ended without starting",
                        e.activation
                    )),
                },
                _ => {}
            }
        }
        summary.activations += acts.len();
        if acts.len() > 1 {
            summary.reactivated_actors += 1;
        }
        let mut ordered: Vec<&Activation> = acts.values().collect();
        ordered.sort_by_key(|a| a.start);
        for pair in ordered.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let a_end = a.end.unwrap_or(u64::MAX);
            if b.start < a_end {
                violations.push(format!(
                    "{actor}: activation {} on host {} started at {} while activation {} on host \
                     {} was live ({}..{})",
                    b.id,
                    b.host,
                    b.start,
                    a.id,
                    a.host,
                    a.start,
                    a.end
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "never ended".into())
                ));
            }
        }
        for a in acts.values() {
            hosts.insert(a.host.clone());
        }
        // Turns: one at a time per activation, and only inside it.
        let mut depth: BTreeMap<&str, i64> = BTreeMap::new();
        for e in &evs {
            let a = acts.get(e.activation.as_str());
            match e.event.as_str() {
                "turn-start" => {
                    summary.turns += 1;
                    let d = depth.entry(&e.activation).or_default();
                    *d += 1;
                    if *d > 1 {
                        violations.push(format!(
                            "{actor}: two turns of activation {} overlap at {} ({:?})",
                            e.activation, e.t_ns, e.method
                        ));
                    }
                    match a {
                        None => violations.push(format!(
                            "{actor}: a turn ran in activation {} that never started",
                            e.activation
                        )),
                        Some(a) if e.t_ns < a.start || a.end.is_some_and(|end| e.t_ns > end) => {
                            violations.push(format!(
                                "{actor}: a turn at {} ran outside activation {} ({}..{:?})",
                                e.t_ns, a.id, a.start, a.end
                            ))
                        }
                        Some(_) => {}
                    }
                }
                "turn-end" => {
                    *depth.entry(&e.activation).or_default() -= 1;
                }
                _ => {}
            }
        }
    }
    summary.hosts = hosts.len();
    (summary, violations)
}
