//! `sigx dashboard --kubernetes`: the fleet from the Kubernetes API, not from a sidecar socket.
//!
//! Every poll reads the `ActorCluster` (its status and conditions, as `sigx status --kubernetes`
//! shows them) and the cluster's membership Leases (label `actors.sigx.dev/cluster=<name>`, each
//! with its host's descriptor in `actors.sigx.dev/descriptor`). Each host is then asked for its
//! `/metrics` at the health address its descriptor publishes (`meta.health`): there is no app
//! socket to ask for `Status`, so a row shows what `/metrics` gives (live activations, counters,
//! ready/fenced, call latency). A host stays listed after its Lease is gone, for [`FORGET_AFTER`],
//! so a host that stopped is seen to stop rather than vanish.

use super::probe::Target;
use crate::kubernetes::{KubeStatusError, fleet_from_leases};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use sigx_crds::{ActorCluster, labels};
use sigx_sdk::Host;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long a host whose Lease is gone stays on the page.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Where the dashboard reads the cluster from.
pub struct KubeSource {
    client: kube::Client,
    namespace: String,
    cluster: Option<String>,
    /// How long one poll's API read may take before the poll goes on without it (a hung API
    /// server must not freeze the page: the hosts seen before are still scraped).
    timeout: Duration,
    /// Every host seen in the Leases: its last descriptor, and when its Lease was last seen.
    seen: Mutex<BTreeMap<String, (Host, Instant)>>,
}

/// One poll's reading of the API.
pub struct Reading {
    /// The hosts to ask (every host seen in the Leases within [`FORGET_AFTER`]).
    pub targets: Vec<Target>,
    /// The fleet as the Leases hold it now (empty when the API did not answer).
    pub leases: Vec<Host>,
    /// Descriptors of every host asked, by target label (for hosts whose Lease is gone).
    pub known: BTreeMap<String, Host>,
    /// What the page shows about the cluster: its status, conditions, unreadable Leases, or
    /// why the API could not be read.
    pub info: Value,
}

impl KubeSource {
    /// Configures the client (KUBECONFIG, ~/.kube/config or the in-cluster service account).
    pub async fn connect(
        namespace: Option<String>,
        cluster: Option<String>,
        timeout: Duration,
    ) -> Result<KubeSource, KubeStatusError> {
        let client = crate::kubernetes::client().await?;
        let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
        Ok(KubeSource {
            client,
            namespace,
            cluster,
            timeout,
            seen: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn describe(&self) -> String {
        match &self.cluster {
            Some(c) => format!("the Kubernetes API for ActorCluster {}/{c}", self.namespace),
            None => format!(
                "the Kubernetes API for the ActorCluster in {}",
                self.namespace
            ),
        }
    }

    /// The ActorCluster (by name, or the namespace's only one) and its Leases.
    async fn read_api(&self) -> Result<(String, Option<ActorCluster>, Vec<Lease>), String> {
        let ns = &self.namespace;
        let clusters: Api<ActorCluster> = Api::namespaced(self.client.clone(), ns);
        let api_err = |what: String| {
            move |e: kube::Error| format!("cannot read {what} from the Kubernetes API: {e}")
        };
        let (name, cluster) = match &self.cluster {
            Some(name) => {
                let c = clusters
                    .get_opt(name)
                    .await
                    .map_err(api_err(format!("ActorCluster {ns}/{name}")))?;
                (name.clone(), c)
            }
            None => {
                let mut list = clusters
                    .list(&ListParams::default())
                    .await
                    .map_err(api_err(format!("the ActorClusters in namespace {ns}")))?
                    .items;
                match list.len() {
                    0 => return Err(KubeStatusError::NoClusters(ns.clone()).to_string()),
                    1 => {
                        let c = list.remove(0);
                        (c.metadata.name.clone().unwrap_or_default(), Some(c))
                    }
                    _ => {
                        let names: Vec<String> = list
                            .iter()
                            .filter_map(|c| c.metadata.name.clone())
                            .collect();
                        return Err(format!(
                            "namespace {ns} holds several ActorClusters ({}): pick one with \
                             --cluster",
                            names.join(", ")
                        ));
                    }
                }
            }
        };
        let selector = format!("{}={name}", labels::CLUSTER);
        let leases = Api::<Lease>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_err(format!("the Leases labelled {selector} in {ns}")))?
            .items;
        Ok((name, cluster, leases))
    }

    /// Reads the API now. An API that does not answer is said in `info`; the hosts seen before
    /// are still asked.
    pub async fn read(&self) -> Reading {
        let read = tokio::time::timeout(self.timeout, self.read_api())
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the Kubernetes API did not answer within {:?}; showing the hosts seen \
                     before",
                    self.timeout
                ))
            });
        let now = Instant::now();
        let mut seen = self.seen.lock().expect("kube seen lock");
        let (info, leases) = match read {
            Err(e) => (json!({"namespace": self.namespace, "error": e}), Vec::new()),
            Ok((name, cluster, leases)) => {
                let (fleet, unreadable) = fleet_from_leases(&leases);
                for h in &fleet.hosts {
                    seen.insert(h.id.clone(), (h.clone(), now));
                }
                let info = cluster_info(&self.namespace, &name, cluster.as_ref(), &unreadable);
                (info, fleet.hosts)
            }
        };
        seen.retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
        let mut targets = Vec::new();
        let mut known = BTreeMap::new();
        for (id, (h, _)) in seen.iter() {
            let health = h.meta.get(crate::kubernetes::HEALTH_META);
            let t = Target::metrics_only(id, health.map(String::as_str));
            known.insert(t.label.clone(), h.clone());
            targets.push(t);
        }
        Reading {
            targets,
            leases,
            known,
            info,
        }
    }
}

/// The cluster as the page shows it: what the operator reports (or that it has not).
fn cluster_info(ns: &str, name: &str, c: Option<&ActorCluster>, unreadable: &[String]) -> Value {
    let mut v = json!({
        "namespace": ns,
        "cluster": name,
        "unreadableLeases": unreadable,
    });
    match c {
        None => {
            v["note"] = json!(format!(
                "no ActorCluster {ns}/{name}: showing the Leases labelled {}={name}",
                labels::CLUSTER
            ))
        }
        Some(c) => match &c.status {
            None => {
                v["note"] = json!("the operator has not reported on this cluster yet");
            }
            Some(s) => {
                v["summary"] = json!(s.summary);
                v["hosts"] = json!(s.hosts);
                v["nodes"] = json!(s.nodes);
                v["conditions"] = s
                    .conditions
                    .iter()
                    .map(|c| {
                        json!({"type": c.type_, "status": c.status, "reason": c.reason,
                            "message": c.message})
                    })
                    .collect();
            }
        },
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(status: Value) -> ActorCluster {
        serde_json::from_value(json!({
            "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
            "metadata": {"name": "demo", "namespace": "apps"},
            "spec": {"sidecar": {"image": "sidecar:1"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_cluster_line_says_what_the_operator_reports_or_that_it_has_not() {
        let c = cluster(
            json!({"hosts": 3, "nodes": "2", "summary": "3 host(s) / 2 node(s)",
            "conditions": [{"type": "Ready", "status": "True", "reason": "HostsActive",
                "message": "3 of 3", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let v = cluster_info("apps", "demo", Some(&c), &["Lease x: broken".into()]);
        assert_eq!(v["summary"], json!("3 host(s) / 2 node(s)"));
        assert_eq!(v["conditions"][0]["reason"], json!("HostsActive"));
        assert_eq!(v["unreadableLeases"], json!(["Lease x: broken"]));
        let mut quiet = cluster(json!({}));
        quiet.status = None;
        let v = cluster_info("apps", "demo", Some(&quiet), &[]);
        assert!(v["note"].as_str().unwrap().contains("not reported"), "{v}");
        let v = cluster_info("apps", "demo", None, &[]);
        assert!(
            v["note"]
                .as_str()
                .unwrap()
                .contains("actors.sigx.dev/cluster=demo"),
            "{v}"
        );
    }

    #[test]
    fn an_unreadable_meta_health_is_no_address_not_a_guess() {
        let t = Target::metrics_only("h1", Some("not-an-address"));
        assert_eq!(t.health, None);
        assert_eq!(t.socket, None);
        assert!(t.label.contains("is not HOST:PORT"), "{}", t.label);
    }
}
