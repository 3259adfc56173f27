//! The fleet as the dashboard shows it, merged from what every probed sidecar answered.
//!
//! The rows are the union of (a) every sidecar the dashboard was pointed at, answering or not,
//! (b) every host it asked only for `/metrics` (a Lease's host, or a view's host that publishes
//! `meta.health`), answering or not, and (c) every other host in the membership view of any
//! sidecar that answered (or in the Leases). A sidecar that does
//! not answer stays a row, marked unreachable, under the host id it last answered with: it is
//! never dropped. The fleet count is the hosts some answering sidecar's view (or, with
//! `--kubernetes`, the Leases) holds, so a host
//! that stopped is first unreachable (still in the views until its lease lapses), then gone from
//! the count, while its row stays.

use super::probe::{CallLatency, Probe, ProbeError};
use crate::status::fleet_summary;
use serde::Serialize;
use sigx_sdk::{Host, Members};
use std::collections::{BTreeMap, BTreeSet};

/// What the node column says for a host that reports no node (the seed's wording: never a
/// guess).
pub const SAID_NOTHING: &str = "said nothing about where it runs";

/// The node column of a sidecar that never answered: nothing is known of it, not even that it
/// reports no node.
pub const NEVER_ANSWERED: &str = "unknown: it never answered";

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub calls: u64,
    pub mean_ms: Option<f64>,
    pub p50_at_most_ms: Option<f64>,
    pub p99_at_most_ms: Option<f64>,
    pub by_kind: BTreeMap<String, u64>,
}

impl From<&CallLatency> for Latency {
    fn from(l: &CallLatency) -> Self {
        Latency {
            calls: l.count,
            mean_ms: l.mean_ms(),
            p50_at_most_ms: l.quantile_at_most_ms(0.5),
            p99_at_most_ms: l.quantile_at_most_ms(0.99),
            by_kind: l.by_kind.iter().cloned().collect(),
        }
    }
}

/// One row of the fleet table.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostRow {
    /// The host id (`None`: a sidecar that never answered, so its id is unknown). For an
    /// unreachable sidecar, the id (node, types) of its last answer.
    pub id: Option<String>,
    /// The dashboard's name for the sidecar it asks (`host-2`, a socket path), if it asks one.
    pub source: Option<String>,
    /// `true`: answered now; `false`: asked and did not answer; `None`: not asked (known only
    /// from another sidecar's view).
    pub reachable: Option<bool>,
    pub error: Option<String>,
    /// Its own state when it answered (`ready`, `fenced`, `leaving`, ...), else `unreachable`
    /// or, for a host only seen in views, its membership status.
    pub state: String,
    pub fence_reason: Option<String>,
    /// Its membership status in the views (`active`, `joining`, `leaving`), `None` when no
    /// answering view holds it.
    pub view_status: Option<String>,
    /// How many of the answering sidecars' views hold it.
    pub seen_by: usize,
    pub node: Option<String>,
    /// The node column: the node, [`SAID_NOTHING`], or [`NEVER_ANSWERED`].
    pub node_text: String,
    pub types: Option<Vec<String>>,
    pub app_connected: Option<bool>,
    pub activations: Option<BTreeMap<String, u64>>,
    pub partitions_recovering: Option<u64>,
    pub counters: Option<BTreeMap<String, u64>>,
    pub latency: Option<Latency>,
    pub latency_error: Option<String>,
    pub started_at_unix_ms: Option<i64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Hosts in at least one answering sidecar's view.
    pub hosts: usize,
    /// Distinct nodes among them; `None` when none reports a node.
    pub nodes: Option<usize>,
    /// `N host(s) / M node(s)`, as `sigx status` prints it.
    pub text: String,
    pub asked: usize,
    pub reachable: usize,
    pub unreachable: usize,
    pub fenced: Vec<String>,
    pub leaving: Vec<String>,
    pub partitions_recovering: u64,
}

/// Everything `/api/fleet` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub generated_at_unix_ms: i64,
    pub summary: Summary,
    pub hosts: Vec<HostRow>,
    /// Live activations per stateful type, summed over the answering hosts.
    pub activations_by_type: BTreeMap<String, u64>,
    /// Every Status counter, summed over the answering hosts.
    pub counters: BTreeMap<String, u64>,
    /// The call latency of the answering hosts with a known metrics address, merged.
    pub latency: Option<Latency>,
    /// Hosts whose latency is in `latency`.
    pub latency_hosts: usize,
}

fn node_text(node: Option<&str>) -> String {
    node.map(str::to_string)
        .unwrap_or_else(|| SAID_NOTHING.to_string())
}

/// Merges the probes; `last_seen` maps a source label to the descriptor it last answered with
/// (or, for a host known from a Lease, the descriptor the Lease last held); `leases` is the
/// fleet as the cluster's Leases record it, when the dashboard reads them (it counts as one
/// more view).
pub fn build(
    probes: &[Probe],
    last_seen: &BTreeMap<String, Host>,
    leases: Option<&[Host]>,
    now_unix_ms: i64,
) -> Snapshot {
    // Every answering sidecar's view: host id -> (descriptor, how many views hold it).
    let mut in_views: BTreeMap<String, (Host, usize)> = BTreeMap::new();
    let mut add = |h: Host| {
        in_views
            .entry(h.id.clone())
            .and_modify(|(_, n)| *n += 1)
            .or_insert((h, 1));
    };
    for p in probes {
        if let Some(Ok(s)) = &p.status
            && let Some(view) = s.view.clone()
        {
            Members::from_proto(view)
                .hosts
                .into_iter()
                .for_each(&mut add);
        }
    }
    leases.unwrap_or_default().iter().cloned().for_each(add);
    let mut rows = Vec::new();
    let mut covered = BTreeSet::new();
    let mut activations_by_type = BTreeMap::new();
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut fleet_latency: Option<CallLatency> = None;
    let mut latency_hosts = 0;
    for p in probes {
        let (latency, latency_error) = match &p.metrics {
            None => (None, None),
            Some(Ok(m)) => (Some(&m.latency), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        match &p.status {
            None => {
                // A host the dashboard has no socket for: what its /metrics says.
                let id = p.target.host_id.clone();
                let seen = id.as_ref().and_then(|id| in_views.get(id));
                if let Some(id) = &id {
                    covered.insert(id.clone());
                }
                let known = seen.map(|(h, _)| h).or_else(|| {
                    let id = id.as_ref()?;
                    last_seen.values().find(|h| &h.id == id)
                });
                let scrape = p.metrics.as_ref().and_then(|m| m.as_ref().ok());
                if let Some(m) = scrape {
                    for (t, n) in &m.activations {
                        *activations_by_type.entry(t.clone()).or_insert(0) += n;
                    }
                    for (name, v) in &m.counters {
                        *counters.entry(name.clone()).or_insert(0) += v;
                    }
                    latency_hosts += 1;
                    fleet_latency
                        .get_or_insert_with(CallLatency::default)
                        .merge(&m.latency);
                }
                let node = known.and_then(Host::node).map(str::to_string);
                let error = match &p.metrics {
                    Some(Ok(_)) => None,
                    Some(Err(e)) => Some(e.to_string()),
                    None => Some(ProbeError::NoAddress.to_string()),
                };
                rows.push(HostRow {
                    id,
                    source: Some(p.target.label.clone()),
                    reachable: Some(scrape.is_some()),
                    error,
                    state: match scrape {
                        None => "unreachable".into(),
                        Some(m) if m.fenced == Some(true) => "fenced".into(),
                        Some(m) if m.ready == Some(true) => "ready".into(),
                        Some(_) => "not ready".into(),
                    },
                    fence_reason: None,
                    view_status: seen.map(|(h, _)| h.status.to_string()),
                    seen_by: seen.map_or(0, |(_, n)| *n),
                    node_text: match known {
                        None => NEVER_ANSWERED.to_string(),
                        Some(_) => node_text(node.as_deref()),
                    },
                    node,
                    types: known.and_then(|h| h.types.clone()),
                    app_connected: None,
                    activations: scrape.map(|m| m.activations.clone()),
                    partitions_recovering: scrape
                        .map(|m| m.counters.get("partitionsRecovering").copied().unwrap_or(0)),
                    counters: scrape.map(|m| m.counters.clone()),
                    latency: scrape.map(|m| Latency::from(&m.latency)),
                    latency_error: None,
                    started_at_unix_ms: known.map(|h| h.started_at_unix_ms),
                });
            }
            Some(Ok(s)) => {
                let own = s.host.clone().map(Host::from_proto);
                let id = own.as_ref().map(|h| h.id.clone());
                let seen = id.as_ref().and_then(|id| in_views.get(id));
                if let Some(id) = &id {
                    covered.insert(id.clone());
                }
                let acts: BTreeMap<String, u64> = s
                    .activations
                    .iter()
                    .map(|a| (a.actor_type.clone(), a.activations))
                    .collect();
                for (t, n) in &acts {
                    *activations_by_type.entry(t.clone()).or_insert(0) += n;
                }
                for (name, v) in &s.counters {
                    *counters.entry(name.clone()).or_insert(0) += v;
                }
                if let Some(l) = latency {
                    latency_hosts += 1;
                    fleet_latency
                        .get_or_insert_with(CallLatency::default)
                        .merge(l);
                }
                let node = own.as_ref().and_then(|h| h.node()).map(str::to_string);
                rows.push(HostRow {
                    id,
                    source: Some(p.target.label.clone()),
                    reachable: Some(true),
                    error: None,
                    state: s.state.clone(),
                    fence_reason: (!s.fence_reason.is_empty()).then(|| s.fence_reason.clone()),
                    view_status: seen.map(|(h, _)| h.status.to_string()),
                    seen_by: seen.map_or(0, |(_, n)| *n),
                    node_text: node_text(node.as_deref()),
                    node,
                    types: own.as_ref().and_then(|h| h.types.clone()),
                    app_connected: Some(s.app_connected),
                    activations: Some(acts),
                    partitions_recovering: Some(
                        s.counters.get("partitionsRecovering").copied().unwrap_or(0),
                    ),
                    counters: Some(s.counters.iter().map(|(k, v)| (k.clone(), *v)).collect()),
                    latency: latency.map(Latency::from),
                    latency_error,
                    started_at_unix_ms: own.map(|h| h.started_at_unix_ms),
                });
            }
            Some(Err(e)) => {
                // What is known of it: its last answer, else what a view says, else nothing.
                let last = last_seen.get(&p.target.label);
                let id = last.map(|h| h.id.clone());
                let seen = id.as_ref().and_then(|id| in_views.get(id));
                if let Some(id) = &id {
                    covered.insert(id.clone());
                }
                let known = last.or(seen.map(|(h, _)| h));
                let node = known.and_then(Host::node).map(str::to_string);
                let node_text = match (known, &node) {
                    (None, _) => NEVER_ANSWERED.to_string(),
                    (Some(_), node) => node_text(node.as_deref()),
                };
                rows.push(HostRow {
                    id,
                    source: Some(p.target.label.clone()),
                    reachable: Some(false),
                    error: Some(e.to_string()),
                    state: "unreachable".into(),
                    fence_reason: None,
                    view_status: seen.map(|(h, _)| h.status.to_string()),
                    seen_by: seen.map_or(0, |(_, n)| *n),
                    node_text,
                    node,
                    types: known.and_then(|h| h.types.clone()),
                    app_connected: None,
                    activations: None,
                    partitions_recovering: None,
                    counters: None,
                    latency: None,
                    latency_error,
                    started_at_unix_ms: known.map(|h| h.started_at_unix_ms),
                });
            }
        }
    }
    // Hosts only known from views: the dashboard has no socket for them.
    for (id, (h, n)) in &in_views {
        if covered.contains(id) {
            continue;
        }
        let node = h.node().map(str::to_string);
        rows.push(HostRow {
            id: Some(id.clone()),
            source: None,
            reachable: None,
            error: None,
            state: h.status.to_string(),
            fence_reason: None,
            view_status: Some(h.status.to_string()),
            seen_by: *n,
            node_text: node_text(node.as_deref()),
            node,
            types: h.types.clone(),
            app_connected: None,
            activations: None,
            partitions_recovering: None,
            counters: None,
            latency: None,
            latency_error: None,
            started_at_unix_ms: Some(h.started_at_unix_ms),
        });
    }
    let fleet: Vec<Host> = in_views.values().map(|(h, _)| h.clone()).collect();
    let nodes: BTreeSet<&str> = fleet.iter().filter_map(Host::node).collect();
    let reachable = rows.iter().filter(|r| r.reachable == Some(true)).count();
    let unreachable = rows.iter().filter(|r| r.reachable == Some(false)).count();
    let named = |state: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r.state == state || r.view_status.as_deref() == Some(state))
            .map(|r| r.id.clone().unwrap_or_else(|| "?".into()))
            .collect()
    };
    let summary = Summary {
        hosts: fleet.len(),
        nodes: (!nodes.is_empty()).then_some(nodes.len()),
        text: fleet_summary(&fleet),
        asked: reachable + unreachable,
        reachable,
        unreachable,
        fenced: named("fenced"),
        leaving: named("leaving"),
        partitions_recovering: counters.get("partitionsRecovering").copied().unwrap_or(0),
    };
    Snapshot {
        generated_at_unix_ms: now_unix_ms,
        summary,
        hosts: rows,
        activations_by_type,
        counters,
        latency: fleet_latency.as_ref().map(Latency::from),
        latency_hosts,
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
