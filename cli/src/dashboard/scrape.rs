//! What one sidecar's `/metrics` says, for a host the dashboard has no socket for: its live
//! activations per type (`sigx_live_activations{actor_type}`), its Status counters (each
//! `sigx_<name>_total` counter and plain gauge, named back in Status's camelCase), its
//! `sigx_ready` / `sigx_fenced` gauges and its call-latency histogram.

use super::probe::{CallLatency, sample};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    pub latency: CallLatency,
    /// Live activations per actor type.
    pub activations: BTreeMap<String, u64>,
    /// Status counters and levels, under their Status names (`turns`, `directoryEntries`).
    pub counters: BTreeMap<String, u64>,
    /// `sigx_ready`, when the scrape has it.
    pub ready: Option<bool>,
    /// `sigx_fenced`, when the scrape has it.
    pub fenced: Option<bool>,
}

const PREFIX: &str = "sigx_";

/// `snake_case` to `camelCase` (the sidecar's metric names are its Status names in snake case).
fn camel(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

impl Scrape {
    /// Reads a Prometheus/OpenMetrics text scrape of a sigx sidecar.
    pub fn parse(text: &str) -> Scrape {
        let mut out = Scrape {
            latency: CallLatency::parse(text),
            ..Scrape::default()
        };
        // `# TYPE sigx_turns counter`: which families are counters and which are plain gauges.
        let mut counters = BTreeSet::new();
        let mut gauges = BTreeSet::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
                (words.next(), words.next(), words.next(), words.next())
            {
                match kind {
                    "counter" => counters.insert(name),
                    "gauge" => gauges.insert(name),
                    _ => false,
                };
            }
        }
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, labels, value)) = sample(line) else {
                continue;
            };
            let n = value.max(0.0) as u64;
            if name == "sigx_live_activations" {
                if let Some((_, t)) = labels.iter().find(|(k, _)| *k == "actor_type") {
                    *out.activations.entry(t.to_string()).or_insert(0) += n;
                }
                continue;
            }
            if name == "sigx_ready" {
                out.ready = Some(value > 0.0);
                continue;
            }
            if name == "sigx_fenced" {
                out.fenced = Some(value > 0.0);
                continue;
            }
            if !labels.is_empty() {
                continue;
            }
            let family = name.strip_suffix("_total").filter(|f| counters.contains(f));
            let family = family.or_else(|| gauges.contains(name).then_some(name));
            if let Some(short) = family.and_then(|f| f.strip_prefix(PREFIX)) {
                out.counters.insert(camel(short), n);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = r#"# HELP sigx_turns the host's turns (as reported in Status).
# TYPE sigx_turns counter
sigx_turns_total 7
# TYPE sigx_local_dispatches counter
sigx_local_dispatches_total 5
# TYPE sigx_partitions_recovering gauge
sigx_partitions_recovering 2
# TYPE sigx_live_activations gauge
sigx_live_activations{actor_type="Counter"} 3
sigx_live_activations{actor_type="Echo"} 1
# TYPE sigx_ready gauge
sigx_ready 1
# TYPE sigx_fenced gauge
sigx_fenced 0
# TYPE sigx_call_duration_seconds histogram
sigx_call_duration_seconds_sum{kind="ok"} 0.004
sigx_call_duration_seconds_count{kind="ok"} 2
sigx_call_duration_seconds_bucket{le="0.002",kind="ok"} 1
sigx_call_duration_seconds_bucket{le="+Inf",kind="ok"} 2
# TYPE sigx_turn_duration_seconds histogram
sigx_turn_duration_seconds_count{actor_type="Counter"} 99
# EOF
"#;

    #[test]
    fn a_scrape_gives_activations_counters_state_and_latency() {
        let s = Scrape::parse(SCRAPE);
        assert_eq!(
            s.activations,
            BTreeMap::from([("Counter".into(), 3), ("Echo".into(), 1)])
        );
        assert_eq!(
            s.counters,
            BTreeMap::from([
                ("localDispatches".into(), 5),
                ("partitionsRecovering".into(), 2),
                ("turns".into(), 7),
            ]),
            "histograms and the state gauges are not counters"
        );
        assert_eq!((s.ready, s.fenced), (Some(true), Some(false)));
        assert_eq!(s.latency.count, 2);
        let empty = Scrape::parse("");
        assert_eq!((empty.ready, empty.fenced), (None, None));
        assert!(empty.activations.is_empty());
    }
}
