//! Reads the counter app's trace file and finds duplicate activations.
//!
//! An activation spans from its `activation-start` to the later of its `activation-end` and its
//! last `turn-end`: an activation whose process was killed, or whose host fenced, has no end
//! line, but it can do no harm after its last turn. Two spans of one actor that overlap in time
//! (the clock is the machine's monotonic clock, shared by every process) are a violation of the
//! single-activation guarantee. An `activation-end` marked `"dropped"` (the app dropped the
//! state when its sidecar fenced or went away, running no code) counts as no end line: what
//! bounds the span is the activation's last turn, as for a killed process.
//!
//! A whole pod frozen by SIGSTOP (a VM suspend) is the one case where the span needs the
//! harness's word ([`Freeze`]): a process stopped in the middle of a turn's poll finishes that
//! poll when it resumes, after the lease lapsed and another host took the actor. No runtime can
//! stop a frozen process from doing that (a process pause is indistinguishable from a slow one
//! until it runs again); what it produces is fenced instead: its answer is never `ok` and its
//! state write is refused by the epoch, both judged by the ledger, not here. So a `turn-end`
//! the pod records within [`RESUME_RESIDUE`] of its resume, for a turn it was already running
//! when it froze, counts as ending at the freeze. Everything else still counts at its time: a
//! turn *started* after the resume, an `activation-end` (a Deactivate hook is new code), and a
//! turn still running past the residue (an SDK that failed to cancel at its not-after).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// The longest a resumed pod's app may take to end a turn it was running when it froze: the
/// rest of the poll it was stopped in, plus the SDK's cancellation (its not-after wait reads
/// the wall clock every 100 ms; the sidecar's fence notice cancels at once), on a loaded
/// 2-core machine.
pub const RESUME_RESIDUE: Duration = Duration::from_millis(250);

/// A pod the harness froze (SIGSTOP of its sidecar and app) and resumed, on CLOCK_MONOTONIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freeze {
    /// The pod's host id, as its trace lines name it.
    pub host: String,
    /// Read just before SIGSTOP was sent.
    pub stopped_ns: u64,
    /// Read just before SIGCONT was sent.
    pub resumed_ns: u64,
}

impl Freeze {
    /// The time a `turn-end` at `t` on `host` counts at (see the module docs).
    fn judged(freezes: &[Freeze], host: &str, t: u64) -> u64 {
        let residue = RESUME_RESIDUE.as_nanos() as u64;
        freezes
            .iter()
            .find(|f| f.host == host && f.resumed_ns <= t && t <= f.resumed_ns + residue)
            .map_or(t, |f| f.stopped_ns)
    }
}

#[derive(Debug, Default, Clone)]
struct Span {
    host: String,
    start: u64,
    end: u64,
}

/// The duplicate activations in the trace at `path`, one line each.
pub fn duplicate_activations(path: &Path) -> Vec<String> {
    duplicate_activations_around(path, &[])
}

/// [`duplicate_activations`] for a run in which the harness froze pods (`freezes`): a turn a
/// frozen pod was running ends at its freeze if it ends within [`RESUME_RESIDUE`] of the resume.
pub fn duplicate_activations_around(path: &Path, freezes: &[Freeze]) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return vec![format!("trace {} is unreadable", path.display())];
    };
    let mut spans: HashMap<(String, String), Span> = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(t), Some(event), Some(actor), Some(activation)) = (
            v["t_ns"].as_u64(),
            v["event"].as_str(),
            v["actor"].as_str(),
            v["activation"].as_str(),
        ) else {
            continue;
        };
        if event == "activation-end" && v["dropped"] == true {
            continue;
        }
        let span = spans
            .entry((actor.to_string(), activation.to_string()))
            .or_insert_with(|| Span {
                host: v["host"].as_str().unwrap_or("?").to_string(),
                start: u64::MAX,
                end: 0,
            });
        match event {
            "activation-start" => span.start = span.start.min(t),
            "turn-end" => span.end = span.end.max(Freeze::judged(freezes, &span.host, t)),
            _ => span.end = span.end.max(t),
        }
        span.start = span.start.min(t);
    }
    let mut by_actor: HashMap<String, Vec<(String, Span)>> = HashMap::new();
    for ((actor, activation), span) in spans {
        by_actor.entry(actor).or_default().push((activation, span));
    }
    let mut bad = Vec::new();
    for (actor, list) in by_actor {
        for (i, (a_id, a)) in list.iter().enumerate() {
            for (b_id, b) in &list[i + 1..] {
                if a.start < b.end && b.start < a.end {
                    bad.push(format!(
                        "{actor}: activation {a_id} on {} and {b_id} on {} overlap",
                        a.host, b.host
                    ));
                }
            }
        }
    }
    bad
}

/// One trace line the stale-turn check reads.
#[derive(Debug, Clone)]
pub struct Event {
    /// CLOCK_MONOTONIC, nanoseconds (one clock for every process on the machine).
    pub t_ns: u64,
    pub event: String,
    pub actor: String,
    pub activation: String,
    pub host: String,
}

/// Every parseable line of the trace at `path` (an unreadable trace is no lines).
pub fn events(path: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            Some(Event {
                t_ns: v["t_ns"].as_u64()?,
                event: v["event"].as_str()?.to_string(),
                actor: v["actor"].as_str()?.to_string(),
                activation: v["activation"].as_str()?.to_string(),
                host: v["host"].as_str().unwrap_or("?").to_string(),
            })
        })
        .collect()
}

/// Turns the app ran for an activation after a newer activation of the same actor had started
/// (issue 12's "stale turns"), one line each. Only what the *app executed* counts: turn starts
/// and ends, against activation starts. Activation ends are ignored, so the check reads traces
/// of older counter-app builds (whose end lines do not say whether code ran) the same way.
pub fn stale_turns(path: &Path) -> Vec<String> {
    let evs = events(path);
    // actor → [(activation start, activation id, host)]
    let mut starts: HashMap<&str, Vec<(u64, &str, &str)>> = HashMap::new();
    for e in evs.iter().filter(|e| e.event == "activation-start") {
        starts
            .entry(&e.actor)
            .or_default()
            .push((e.t_ns, &e.activation, &e.host));
    }
    let mut bad = Vec::new();
    for e in evs
        .iter()
        .filter(|e| e.event == "turn-start" || e.event == "turn-end")
    {
        let Some(list) = starts.get(e.actor.as_str()) else {
            continue;
        };
        let Some(mine) = list.iter().find(|s| s.1 == e.activation).map(|s| s.0) else {
            continue;
        };
        if let Some(newer) = list
            .iter()
            .find(|s| s.1 != e.activation && mine < s.0 && s.0 < e.t_ns)
        {
            bad.push(format!(
                "{}: {} of activation {} on {} ran {:.1} ms after activation {} started on {}",
                e.actor,
                e.event,
                e.activation,
                e.host,
                (e.t_ns - newer.0) as f64 / 1e6,
                newer.1,
                newer.2
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(t: u64, event: &str, activation: &str) -> String {
        format!(
            r#"{{"t_ns":{t},"event":"{event}","actor":"Counter/a","activation":"{activation}","host":"h"}}"#
        )
    }

    #[test]
    fn overlapping_activations_are_caught_and_sequential_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let ok = [
            line(1, "activation-start", "x"),
            line(5, "turn-end", "x"),
            line(6, "activation-end", "x"),
            line(7, "activation-start", "y"),
            line(9, "turn-end", "y"),
        ];
        std::fs::write(&path, ok.join("\n")).unwrap();
        assert!(duplicate_activations(&path).is_empty());
        // A killed activation (no end line) whose last turn ran after another started.
        let bad = [
            line(1, "activation-start", "x"),
            line(3, "activation-start", "y"),
            line(4, "turn-end", "x"),
            line(9, "turn-end", "y"),
        ];
        std::fs::write(&path, bad.join("\n")).unwrap();
        assert_eq!(duplicate_activations(&path).len(), 1);
        // A fenced host's app drops the state later, running no code: its last turn bounds it.
        let dropped = r#"{"t_ns":8,"event":"activation-end","actor":"Counter/a","activation":"x","host":"h","dropped":true}"#.to_string();
        let fenced = [
            line(1, "activation-start", "x"),
            line(2, "turn-end", "x"),
            line(3, "activation-start", "y"),
            dropped.clone(),
            line(9, "turn-end", "y"),
        ];
        std::fs::write(&path, fenced.join("\n")).unwrap();
        assert!(duplicate_activations(&path).is_empty());
        // But a turn after the other's start still is one.
        let late = [
            line(1, "activation-start", "x"),
            line(3, "activation-start", "y"),
            line(4, "turn-end", "x"),
            dropped,
            line(9, "turn-end", "y"),
        ];
        std::fs::write(&path, late.join("\n")).unwrap();
        assert_eq!(duplicate_activations(&path).len(), 1);
    }

    #[test]
    fn a_turn_a_frozen_pod_ends_on_resume_ends_at_its_freeze_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        const MS: u64 = 1_000_000;
        let freeze = Freeze {
            host: "h".into(),
            stopped_ns: 10 * MS,
            resumed_ns: 5_000 * MS,
        };
        let on = |t: u64, event: &str, activation: &str, host: &str| {
            format!(
                r#"{{"t_ns":{t},"event":"{event}","actor":"Counter/a","activation":"{activation}","host":"{host}"}}"#
            )
        };
        let check = |lines: &[String]| {
            std::fs::write(&path, lines.join("\n")).unwrap();
            (
                duplicate_activations(&path).len(),
                duplicate_activations_around(&path, std::slice::from_ref(&freeze)).len(),
            )
        };
        let taken_over = |tail: Vec<String>| {
            let mut l = vec![
                on(MS, "activation-start", "x", "h"),
                on(9 * MS, "turn-start", "x", "h"),
                on(2_000 * MS, "activation-start", "y", "g"),
                on(2_001 * MS, "turn-end", "y", "g"),
            ];
            l.extend(tail);
            l
        };
        // The turn it froze in ends 3 ms after the resume: excused only with the harness's word.
        assert_eq!(
            check(&taken_over(vec![on(5_003 * MS, "turn-end", "x", "h")])),
            (1, 0)
        );
        // Still running a second after the resume: the SDK did not cancel it. Caught.
        assert_eq!(
            check(&taken_over(vec![on(6_000 * MS, "turn-end", "x", "h")])),
            (1, 1)
        );
        // A turn started after the resume is new code. Caught.
        assert_eq!(
            check(&taken_over(vec![
                on(5_003 * MS, "turn-end", "x", "h"),
                on(5_004 * MS, "turn-start", "x", "h"),
                on(5_005 * MS, "turn-end", "x", "h"),
            ])),
            (1, 1)
        );
        // A Deactivate hook run after the resume is new code. Caught.
        assert_eq!(
            check(&taken_over(vec![
                on(5_003 * MS, "turn-end", "x", "h"),
                on(5_004 * MS, "activation-end", "x", "h"),
            ])),
            (1, 1)
        );
        // The freeze of another pod excuses nothing here.
        let elsewhere = Freeze {
            host: "other".into(),
            ..freeze.clone()
        };
        std::fs::write(
            &path,
            taken_over(vec![on(5_003 * MS, "turn-end", "x", "h")]).join("\n"),
        )
        .unwrap();
        assert_eq!(duplicate_activations_around(&path, &[elsewhere]).len(), 1);
    }

    #[test]
    fn a_turn_after_a_newer_activation_started_is_stale_and_one_before_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let ok = [
            line(1, "activation-start", "x"),
            line(2, "turn-start", "x"),
            line(3, "turn-end", "x"),
            line(4, "activation-start", "y"),
            line(5, "turn-start", "y"),
        ];
        std::fs::write(&path, ok.join("\n")).unwrap();
        assert!(stale_turns(&path).is_empty());
        let bad = [
            line(1, "activation-start", "x"),
            line(4, "activation-start", "y"),
            line(5, "turn-start", "x"),
            line(6, "turn-end", "x"),
        ];
        std::fs::write(&path, bad.join("\n")).unwrap();
        assert_eq!(stale_turns(&path).len(), 2, "{:?}", stale_turns(&path));
    }
}
