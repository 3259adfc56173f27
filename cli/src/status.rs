//! `sigx status`: one sidecar's view of itself and of the fleet.

use crate::duration::human;
use crate::{EXIT_FAILED, EXIT_UNREACHABLE, SocketArg};
use sigx_sdk::proto::StatusResponse;
use sigx_sdk::{Client, Host, Members};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub socket: SocketArg,

    /// Read the cluster from the Kubernetes API instead of a sidecar: the ActorCluster's status
    /// and its hosts' Leases (the kube config from KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long)]
    pub kubernetes: bool,

    /// With --kubernetes: the namespace (default: the kube config's).
    #[arg(long, short = 'n', requires = "kubernetes")]
    pub namespace: Option<String>,

    /// With --kubernetes: the ActorCluster to show (default: every one in the namespace).
    #[arg(long, requires = "kubernetes")]
    pub cluster: Option<String>,

    /// Print the status as one JSON object (stable camelCase field names) for scripts and
    /// monitoring, instead of the table.
    #[arg(long, conflicts_with = "kubernetes")]
    pub json: bool,
}

/// Wall-clock now in Unix milliseconds, only to show host ages (`started_at` is the host's own
/// wall clock; an age is informational and never used to decide anything).
#[allow(clippy::disallowed_methods)]
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn type_list(host: &Host) -> String {
    match &host.types {
        None => "(all: publishes no type list)".to_string(),
        Some(t) if t.is_empty() => "(none)".to_string(),
        Some(t) => t.join(","),
    }
}

fn age(host: &Host, now_unix_ms: i64) -> String {
    if host.started_at_unix_ms <= 0 {
        return "-".into();
    }
    let ms = now_unix_ms.saturating_sub(host.started_at_unix_ms).max(0) as u64;
    human(Duration::from_millis(ms))
}

/// The fleet table: id, status, node, types, age; then `N host(s) / M node(s)`, or, when no host
/// reports a node, a line saying so (the fleet said nothing about where it runs: never a guess).
pub fn render_fleet(view: &Members, now_unix_ms: i64) -> String {
    let rows: Vec<[String; 5]> = view
        .hosts
        .iter()
        .map(|h| {
            [
                h.id.clone(),
                h.status.to_string(),
                h.node().unwrap_or("-").to_string(),
                type_list(h),
                age(h, now_unix_ms),
            ]
        })
        .collect();
    let header = ["HOST", "STATUS", "NODE", "TYPES", "AGE"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: [&str; 5], out: &mut String| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header, &mut out);
    for row in &rows {
        line(row.each_ref().map(String::as_str), &mut out);
    }
    out.push_str(&fleet_summary(&view.hosts));
    out.push('\n');
    out
}

/// The fleet's summary line (without a newline): `N host(s) / M node(s)`, naming the hosts that
/// report no node; when none reports one, it says the fleet said nothing about where it runs,
/// never a guess. `sigx status` and `sigx dashboard` both print this.
pub fn fleet_summary(hosts: &[Host]) -> String {
    let n = hosts.len();
    let silent = hosts.iter().filter(|h| h.node().is_none()).count();
    let nodes: std::collections::BTreeSet<&str> = hosts.iter().filter_map(Host::node).collect();
    if nodes.is_empty() {
        return format!(
            "{n} host(s); no host reports a node: the fleet said nothing about where it runs"
        );
    }
    let mut out = format!("{n} host(s) / {} node(s)", nodes.len());
    if silent > 0 {
        let _ = write!(out, " ({silent} host(s) report no node)");
    }
    out
}

/// The whole status, as printed.
pub fn render_status(status: &StatusResponse, now_unix_ms: i64) -> String {
    let mut out = String::new();
    let host = status.host.clone().map(Host::from_proto);
    let (id, advertise) = host
        .as_ref()
        .map(|h| (h.id.as_str(), h.advertise.as_str()))
        .unwrap_or(("?", ""));
    let _ = writeln!(out, "host         {id}");
    if !advertise.is_empty() {
        let _ = writeln!(out, "mesh         {advertise}");
    }
    let _ = write!(out, "state        {}", status.state);
    if !status.fence_reason.is_empty() {
        let _ = write!(out, " ({})", status.fence_reason);
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "app          {}",
        if status.app_connected {
            "connected"
        } else {
            "not connected"
        }
    );
    if let Some(h) = &host {
        let stateful = h.stateful_types.clone().unwrap_or_default();
        let types: Vec<String> = h
            .types
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                if stateful.contains(&t) {
                    format!("{t} (actor)")
                } else {
                    format!("{t} (worker)")
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "types        {}",
            if types.is_empty() {
                "(none registered)".to_string()
            } else {
                types.join(", ")
            }
        );
    }
    let total: u64 = status.activations.iter().map(|a| a.activations).sum();
    let per_type: Vec<String> = status
        .activations
        .iter()
        .map(|a| format!("{}={}", a.actor_type, a.activations))
        .collect();
    let _ = writeln!(
        out,
        "activations  {total}{}",
        if per_type.is_empty() {
            String::new()
        } else {
            format!(" ({})", per_type.join(", "))
        }
    );
    let mut counters: Vec<(&String, &u64)> = status.counters.iter().collect();
    counters.sort();
    if counters.is_empty() {
        let _ = writeln!(out, "counters     (none)");
    } else {
        let _ = writeln!(out, "counters");
        for (name, value) in counters {
            let _ = writeln!(out, "  {name:<28} {value}");
        }
    }
    out.push('\n');
    match &status.view {
        Some(view) => {
            let view = Members::from_proto(view.clone());
            let _ = writeln!(out, "fleet (view version {})", view.version);
            out.push_str(&render_fleet(&view, now_unix_ms));
        }
        None => out.push_str("fleet: this sidecar reported no membership view\n"),
    }
    out
}

fn host_json(h: &Host) -> serde_json::Value {
    serde_json::json!({
        "id": h.id,
        "advertise": h.advertise,
        "status": h.status.to_string(),
        "node": h.node(),
        "types": h.types,
        "statefulTypes": h.stateful_types,
        "meta": h.meta,
        "startedAtUnixMs": h.started_at_unix_ms,
    })
}

/// The whole status as JSON: what `render_status` prints, with nothing left out and no
/// formatting to parse. Counters and activations are objects keyed by name, so a script reads
/// `.counters.remoteDispatches` directly.
pub fn status_json(status: &StatusResponse) -> serde_json::Value {
    let host = status.host.clone().map(Host::from_proto);
    let activations: serde_json::Map<String, serde_json::Value> = status
        .activations
        .iter()
        .map(|a| (a.actor_type.clone(), a.activations.into()))
        .collect();
    let counters: std::collections::BTreeMap<&String, &u64> = status.counters.iter().collect();
    let view = status.view.clone().map(|v| {
        let v = Members::from_proto(v);
        serde_json::json!({
            "version": v.version,
            "hosts": v.hosts.iter().map(host_json).collect::<Vec<_>>(),
            "nodes": v.node_count(),
        })
    });
    serde_json::json!({
        "host": host.as_ref().map(host_json),
        "state": status.state,
        "fenceReason": (!status.fence_reason.is_empty()).then_some(&status.fence_reason),
        "appConnected": status.app_connected,
        "activations": activations,
        "counters": counters,
        "view": view,
    })
}

pub async fn run(args: StatusArgs) -> ExitCode {
    if args.kubernetes {
        return crate::kubernetes::run(args.namespace.as_deref(), args.cluster.as_deref()).await;
    }
    let client = match Client::connect(&args.socket.socket).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sigx status: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    match client.with_timeout(Duration::from_secs(10)).status().await {
        Ok(status) if args.json => {
            println!("{:#}", status_json(&status));
            ExitCode::SUCCESS
        }
        Ok(status) => {
            print!("{}", render_status(&status, now_unix_ms()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sigx status: {}", crate::call::render_error(&e));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigx_sdk::proto as v1;

    fn desc(id: &str, node: Option<&str>, types: Option<&[&str]>) -> v1::HostDescriptor {
        v1::HostDescriptor {
            id: id.into(),
            advertise: "127.0.0.1:7311".into(),
            types: types.map(|t| v1::TypeList {
                names: t.iter().map(|s| s.to_string()).collect(),
            }),
            meta: node
                .map(|n| [("node".to_string(), n.to_string())].into())
                .unwrap_or_default(),
            status: v1::HostStatus::Active as i32,
            started_at_unix_ms: 1_000_000,
            stateful_types: Some(v1::TypeList {
                names: vec!["Counter".into()],
            }),
        }
    }

    fn view(hosts: Vec<v1::HostDescriptor>) -> Members {
        Members::from_proto(v1::MembersResponse { version: 7, hosts })
    }

    #[test]
    fn the_summary_counts_hosts_and_nodes() {
        let v = view(vec![
            desc("a", Some("node-1"), Some(&["Counter"])),
            desc("b", Some("node-1"), Some(&["Counter"])),
            desc("c", Some("node-1"), Some(&["Counter", "Echo"])),
        ]);
        let out = render_fleet(&v, 1_000_000 + 187_000);
        assert!(out.ends_with("3 host(s) / 1 node(s)\n"), "{out}");
        assert!(out.contains("Counter,Echo"), "{out}");
        assert!(out.contains("3m07s"), "{out}");
        assert!(out.starts_with("HOST"), "{out}");
    }

    #[test]
    fn a_fleet_that_reports_no_node_is_not_given_one() {
        let v = view(vec![desc("a", None, None), desc("b", None, None)]);
        let out = render_fleet(&v, 0);
        assert!(
            out.contains("the fleet said nothing about where it runs"),
            "{out}"
        );
        assert!(!out.contains("node(s)"), "never a guess: {out}");
        assert!(out.contains("(all: publishes no type list)"), "{out}");
    }

    #[test]
    fn hosts_that_are_silent_about_their_node_are_named_as_such() {
        let v = view(vec![desc("a", Some("n1"), None), desc("b", None, None)]);
        let out = render_fleet(&v, 0);
        assert!(
            out.ends_with("2 host(s) / 1 node(s) (1 host(s) report no node)\n"),
            "{out}"
        );
    }

    #[test]
    fn the_status_names_host_state_types_activations_and_counters() {
        let status = v1::StatusResponse {
            host: Some(desc("dev-1-abc", Some("box"), Some(&["Counter", "Echo"]))),
            state: "ready".into(),
            fence_reason: String::new(),
            app_connected: true,
            activations: vec![v1::TypeActivations {
                actor_type: "Counter".into(),
                activations: 12,
            }],
            counters: [("localDispatches".to_string(), 40)].into(),
            view: Some(v1::MembersResponse {
                version: 3,
                hosts: vec![desc("dev-1-abc", Some("box"), Some(&["Counter", "Echo"]))],
            }),
        };
        let out = render_status(&status, 1_000_000);
        for needle in [
            "host         dev-1-abc",
            "state        ready",
            "app          connected",
            "types        Counter (actor), Echo (worker)",
            "activations  12 (Counter=12)",
            "localDispatches",
            "1 host(s) / 1 node(s)",
        ] {
            assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
        }
    }

    #[test]
    fn the_json_status_carries_every_field_under_stable_names() {
        let status = v1::StatusResponse {
            host: Some(desc("dev-1-abc", Some("box"), Some(&["Counter", "Echo"]))),
            state: "fenced".into(),
            fence_reason: "lease lost".into(),
            app_connected: false,
            activations: vec![v1::TypeActivations {
                actor_type: "Counter".into(),
                activations: 12,
            }],
            counters: [("remoteDispatches".to_string(), 40)].into(),
            view: Some(v1::MembersResponse {
                version: 3,
                hosts: vec![
                    desc("dev-1-abc", Some("box"), Some(&["Counter"])),
                    desc("dev-2-def", None, None),
                ],
            }),
        };
        let j = status_json(&status);
        assert_eq!(j["host"]["id"], "dev-1-abc");
        assert_eq!(j["host"]["node"], "box");
        assert_eq!(j["host"]["types"], serde_json::json!(["Counter", "Echo"]));
        assert_eq!(j["host"]["statefulTypes"], serde_json::json!(["Counter"]));
        assert_eq!(j["state"], "fenced");
        assert_eq!(j["fenceReason"], "lease lost");
        assert_eq!(j["appConnected"], false);
        assert_eq!(j["activations"]["Counter"], 12);
        assert_eq!(j["counters"]["remoteDispatches"], 40);
        assert_eq!(j["view"]["version"], 3);
        assert_eq!(j["view"]["hosts"][1]["id"], "dev-2-def");
        assert_eq!(j["view"]["hosts"][1]["node"], serde_json::Value::Null);
        assert_eq!(j["view"]["hosts"][1]["types"], serde_json::Value::Null);
        assert_eq!(j["view"]["nodes"], 1);
        // A healthy host has no fence reason at all, not an empty string.
        let mut ok = status.clone();
        ok.fence_reason.clear();
        assert_eq!(status_json(&ok)["fenceReason"], serde_json::Value::Null);
    }
}
