//! `sigx status --kubernetes`: a cluster as the Kubernetes API records it, for when there is no
//! sidecar socket at hand (a laptop with a kube config, not a shell in a pod).
//!
//! Two sources, both read with the real `kube` client: the `ActorCluster`'s status (the
//! operator's aggregate and its conditions) and the cluster's membership Leases (label
//! `actors.sigx.dev/cluster=<name>`, each carrying its host's descriptor as JSON in the
//! `actors.sigx.dev/descriptor` annotation, DESIGN.md §3). The fleet table is rendered from the
//! Leases by the same code as `sigx status`, so both commands say the same thing the same way;
//! a Lease whose descriptor cannot be read is named, never guessed at.

use crate::status::{now_unix_ms, render_fleet};
use crate::{EXIT_FAILED, EXIT_UNREACHABLE};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use serde::Deserialize;
use sigx_crds::{ActorCluster, labels};
use sigx_sdk::{Host, HostStatus, Members};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// The Lease annotation holding the host descriptor JSON (written by the sidecar's Kubernetes
/// membership provider).
pub const DESCRIPTOR_ANNOTATION: &str = "actors.sigx.dev/descriptor";

/// The descriptor meta key under which a sidecar publishes its health/metrics address
/// (`podIP:9090`), so `sigx dashboard` can scrape every host's `/metrics`.
pub const HEALTH_META: &str = "health";

/// A status command has no business waiting minutes for an apiserver.
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the cluster could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum KubeStatusError {
    #[error(
        "cannot configure a Kubernetes client (from KUBECONFIG, ~/.kube/config or the in-cluster \
         service account): {0}"
    )]
    Config(#[source] kube::Error),
    #[error("cannot read {what} from the Kubernetes API: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "no ActorCluster {name:?} in namespace {namespace:?}: check the name with `kubectl get \
         actorclusters -n {namespace}`, or pass --namespace"
    )]
    NotFound { name: String, namespace: String },
    #[error(
        "no ActorCluster in namespace {0:?}: apply one, or name its namespace with --namespace"
    )]
    NoClusters(String),
}

impl KubeStatusError {
    /// 3 when the API could not be reached or configured at all, 1 when it answered and what
    /// was asked for is not there (or was refused).
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            KubeStatusError::Config(_) => EXIT_UNREACHABLE,
            KubeStatusError::Api {
                source: kube::Error::Api(_),
                ..
            } => EXIT_FAILED,
            KubeStatusError::Api { .. } => EXIT_UNREACHABLE,
            KubeStatusError::NotFound { .. } | KubeStatusError::NoClusters(_) => EXIT_FAILED,
        }
    }
}

/// The part of the sidecar's descriptor the table shows. Every field is optional so a
/// descriptor from a newer (or older) sidecar still shows what it does say.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    id: String,
    #[serde(default)]
    advertise: String,
    #[serde(default)]
    types: Option<Vec<String>>,
    #[serde(default)]
    stateful_types: Option<Vec<String>>,
    #[serde(default)]
    meta: BTreeMap<String, String>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    started_at_unix_ms: i64,
}

/// The fleet from a cluster's Leases, and a line for each Lease whose descriptor is missing or
/// unreadable (those hosts are left out of the table rather than shown with invented fields).
pub fn fleet_from_leases(leases: &[Lease]) -> (Members, Vec<String>) {
    let mut hosts = Vec::new();
    let mut unreadable = Vec::new();
    for lease in leases {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let Some(json) = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DESCRIPTOR_ANNOTATION))
        else {
            unreadable.push(format!(
                "Lease {name}: no {DESCRIPTOR_ANNOTATION} annotation"
            ));
            continue;
        };
        match serde_json::from_str::<Descriptor>(json) {
            Ok(d) => hosts.push(Host {
                id: if d.id.is_empty() { name } else { d.id },
                advertise: d.advertise,
                types: d.types,
                stateful_types: d.stateful_types,
                meta: d.meta,
                status: match d.status.as_str() {
                    "joining" => HostStatus::Joining,
                    "active" => HostStatus::Active,
                    "leaving" => HostStatus::Leaving,
                    _ => HostStatus::Unknown,
                },
                started_at_unix_ms: d.started_at_unix_ms,
            }),
            Err(e) => unreadable.push(format!(
                "Lease {name}: the {DESCRIPTOR_ANNOTATION} annotation is not a host descriptor: {e}"
            )),
        }
    }
    hosts.sort_by(|a, b| a.id.cmp(&b.id));
    (Members { version: 0, hosts }, unreadable)
}

/// Left-aligned columns, two spaces apart, no trailing blanks.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<w$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One cluster: what the operator says (summary, counts, roles, conditions), then the fleet
/// table from its Leases with the same summary line as `sigx status`.
pub fn render_cluster(cluster: &ActorCluster, leases: &[Lease], now_unix_ms: i64) -> String {
    let mut out = String::new();
    let name = cluster.metadata.name.as_deref().unwrap_or("?");
    let ns = cluster.metadata.namespace.as_deref().unwrap_or("?");
    let _ = writeln!(out, "cluster      {name} (namespace {ns})");
    match &cluster.status {
        None => {
            let _ = writeln!(
                out,
                "status       (none: the operator has not reported on this cluster yet; is it running?)"
            );
        }
        Some(s) => {
            if let Some(summary) = &s.summary {
                let _ = writeln!(out, "status       {summary}");
            }
            let c = &s.counts;
            let _ = writeln!(
                out,
                "hosts        {} ({} active, {} joining, {} leaving, {} fenced), nodes {}",
                s.hosts, c.active, c.joining, c.leaving, c.fenced, s.nodes
            );
            if let (Some(observed), Some(generation)) =
                (s.observed_generation, cluster.metadata.generation)
                && observed != generation
            {
                let _ = writeln!(
                    out,
                    "observed     generation {observed} of {generation}: the operator has not caught up"
                );
            }
            if !s.roles.is_empty() {
                let roles: Vec<String> = s
                    .roles
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {} host(s) ({} active, {} fenced)",
                            r.name, r.hosts, r.counts.active, r.counts.fenced
                        )
                    })
                    .collect();
                let _ = writeln!(out, "roles        {}", roles.join("; "));
            }
            if s.conditions.is_empty() {
                let _ = writeln!(out, "conditions   (none)");
            } else {
                let _ = writeln!(out, "conditions");
                let mut rows = vec![
                    ["TYPE", "STATUS", "REASON", "MESSAGE"]
                        .map(String::from)
                        .to_vec(),
                ];
                for c in &s.conditions {
                    rows.push(vec![
                        c.type_.clone(),
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                    ]);
                }
                for line in table(&rows).lines() {
                    let _ = writeln!(out, "  {line}");
                }
            }
        }
    }
    out.push('\n');
    let (fleet, unreadable) = fleet_from_leases(leases);
    let _ = writeln!(
        out,
        "fleet ({} Lease(s) labelled {}={name})",
        leases.len(),
        labels::CLUSTER
    );
    out.push_str(&render_fleet(&fleet, now_unix_ms));
    for line in unreadable {
        let _ = writeln!(out, "unreadable: {line}");
    }
    out
}

pub(crate) async fn client() -> Result<kube::Client, KubeStatusError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| KubeStatusError::Config(kube::Error::InferConfig(e)))?;
    config.connect_timeout = Some(API_TIMEOUT);
    config.read_timeout = Some(API_TIMEOUT);
    kube::Client::try_from(config).map_err(KubeStatusError::Config)
}

/// Every cluster asked for (one by name, or all in the namespace), rendered.
async fn read(namespace: Option<&str>, cluster: Option<&str>) -> Result<String, KubeStatusError> {
    let client = client().await?;
    let ns = namespace
        .map(String::from)
        .unwrap_or_else(|| client.default_namespace().to_string());
    let clusters_api: Api<ActorCluster> = Api::namespaced(client.clone(), &ns);
    let leases_api: Api<Lease> = Api::namespaced(client, &ns);
    let api_err = |what: String| move |source| KubeStatusError::Api { what, source };
    let clusters = match cluster {
        Some(name) => match clusters_api
            .get_opt(name)
            .await
            .map_err(api_err(format!("ActorCluster {ns}/{name}")))?
        {
            Some(c) => vec![c],
            None => {
                return Err(KubeStatusError::NotFound {
                    name: name.into(),
                    namespace: ns,
                });
            }
        },
        None => {
            let list = clusters_api
                .list(&ListParams::default())
                .await
                .map_err(api_err(format!("the ActorClusters in namespace {ns}")))?;
            if list.items.is_empty() {
                return Err(KubeStatusError::NoClusters(ns));
            }
            list.items
        }
    };
    let now = now_unix_ms();
    let mut out = String::new();
    for (i, c) in clusters.iter().enumerate() {
        let name = c.metadata.name.clone().unwrap_or_default();
        let selector = format!("{}={name}", labels::CLUSTER);
        let leases = leases_api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_err(format!("the Leases labelled {selector} in {ns}")))?;
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&render_cluster(c, &leases.items, now));
    }
    Ok(out)
}

pub async fn run(namespace: Option<&str>, cluster: Option<&str>) -> ExitCode {
    match read(namespace, cluster).await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sigx status: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn lease(name: &str, descriptor: Option<String>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: descriptor
                    .map(|d| BTreeMap::from([(DESCRIPTOR_ANNOTATION.to_string(), d)])),
                ..Default::default()
            },
            spec: None,
        }
    }

    fn descriptor(id: &str, node: Option<&str>) -> String {
        let mut d = json!({
            "id": id,
            "advertise": "10.0.0.1:7311",
            "types": ["Counter"],
            "statefulTypes": ["Counter"],
            "meta": {},
            "status": "active",
            "startedAtUnixMs": 1_000_000,
        });
        if let Some(n) = node {
            d["meta"]["node"] = json!(n);
        }
        d.to_string()
    }

    fn cluster(status: serde_json::Value) -> ActorCluster {
        serde_json::from_value(json!({
            "apiVersion": "actors.sigx.dev/v1alpha1",
            "kind": "ActorCluster",
            "metadata": {"name": "demo", "namespace": "apps", "generation": 2},
            "spec": {"sidecar": {"image": "sidecar:1"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn leases_become_the_same_fleet_table_as_sigx_status() {
        let leases = [
            lease("b", Some(descriptor("b", Some("n1")))),
            lease("a", Some(descriptor("a", Some("n1")))),
            lease("broken", Some("{not json".into())),
            lease("bare", None),
        ];
        let c = cluster(json!({
            "observedGeneration": 2, "hosts": 2, "nodes": "1", "active": 2,
            "summary": "2 host(s) / 1 node(s)",
            "conditions": [{"type": "Ready", "status": "True", "reason": "HostsActive",
                "message": "2 of 2 hosts active", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }));
        let out = render_cluster(&c, &leases, 1_000_000 + 61_000);
        for needle in [
            "cluster      demo (namespace apps)",
            "status       2 host(s) / 1 node(s)",
            "hosts        2 (2 active, 0 joining, 0 leaving, 0 fenced), nodes 1",
            "  Ready  True    HostsActive  2 of 2 hosts active",
            "fleet (4 Lease(s) labelled actors.sigx.dev/cluster=demo)",
            "a     active  n1    Counter  1m01s",
            "2 host(s) / 1 node(s)\n",
            "unreadable: Lease broken: the actors.sigx.dev/descriptor annotation is not a host descriptor",
            "unreadable: Lease bare: no actors.sigx.dev/descriptor annotation",
        ] {
            assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
        }
        assert!(
            out.find("\na ").unwrap() < out.find("\nb ").unwrap(),
            "sorted: {out}"
        );
        assert!(!out.contains("observed     generation"), "{out}");
    }

    #[test]
    fn no_node_reported_is_said_and_a_missing_status_is_named() {
        let leases = [lease("a", Some(descriptor("a", None)))];
        let mut c = cluster(json!({}));
        c.status = None;
        let out = render_cluster(&c, &leases, 0);
        assert!(
            out.contains("1 host(s); no host reports a node: the fleet said nothing"),
            "{out}"
        );
        assert!(!out.contains("node(s)\n"), "never a guess: {out}");
        assert!(out.contains("the operator has not reported"), "{out}");
    }

    #[test]
    fn a_status_for_an_older_generation_is_flagged() {
        let c = cluster(json!({"observedGeneration": 1, "hosts": 0}));
        let out = render_cluster(&c, &[], 0);
        assert!(
            out.contains("generation 1 of 2: the operator has not caught up"),
            "{out}"
        );
        assert!(out.contains("conditions   (none)"), "{out}");
    }
}
