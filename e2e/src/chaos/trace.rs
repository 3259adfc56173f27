//! Reads the counter app's trace file and finds duplicate activations.
//!
//! An activation spans from its `activation-start` to the later of its `activation-end` and its
//! last `turn-end`: an activation whose process was killed, or whose host fenced, has no end
//! line, but it can do no harm after its last turn. Two spans of one actor that overlap in time
//! (the clock is the machine's monotonic clock, shared by every process) are a violation of the
//! single-activation guarantee. An `activation-end` marked `"dropped"` (the app dropped the
//! state when its sidecar fenced or went away, running no code) counts as no end line: what
//! bounds the span is the activation's last turn, as for a killed process.

use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, Default, Clone)]
struct Span {
    host: String,
    start: u64,
    end: u64,
}

/// The duplicate activations in the trace at `path`, one line each.
pub fn duplicate_activations(path: &Path) -> Vec<String> {
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
