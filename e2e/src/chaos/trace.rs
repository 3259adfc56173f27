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
}
