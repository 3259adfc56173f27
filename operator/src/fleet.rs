//! What the cluster's Leases say about its fleet: host states, nodes, per-role counts.
//!
//! Each sidecar holds one `coordination.k8s.io/v1` Lease labelled with its cluster and role and
//! carrying its descriptor as JSON in the [`DESCRIPTOR_ANNOTATION`] (DESIGN.md §3). The
//! operator reads those and nothing else: it never asks a pod, and it never guesses a node a
//! host did not report.
//!
//! Lapse is judged like the sidecars judge it: on the operator's own monotonic clock, from the
//! moment it last *saw* a Lease's `renewTime` change, never by comparing the remote timestamp
//! with the local wall clock. By DESIGN.md §3 a stateful host fences itself before any
//! observer can see its Lease lapse, so a lapsed Lease is counted as `fenced` until a peer
//! expires and deletes it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use serde::Deserialize;
use sigx_crds::{HostCounts, NodeCount, RoleSummary, labels};
use tokio::time::Instant;

/// The Lease annotation holding the host descriptor JSON (written by the sidecar's Kubernetes
/// membership provider).
pub const DESCRIPTOR_ANNOTATION: &str = "actors.sigx.dev/descriptor";

/// Slack added to a Lease's duration before the operator calls it lapsed, for watch delivery
/// delay.
pub const LAPSE_MARGIN: Duration = Duration::from_secs(1);

/// The part of the sidecar's descriptor the operator reads. Unknown fields are ignored so the
/// sidecar can add to its descriptor without breaking the operator.
#[derive(Debug, Deserialize)]
struct DescriptorView {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    meta: BTreeMap<String, String>,
}

/// A host's state as the operator reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    Joining,
    Active,
    Leaving,
    /// Reported fenced, or its Lease lapsed on the operator's clock.
    Fenced,
    /// The descriptor is missing or unreadable.
    Unknown,
}

/// One host, as read from its Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRecord {
    pub id: String,
    pub role: Option<String>,
    pub node: Option<String>,
    pub state: HostState,
}

/// Reads a host from its Lease; `lapsed` is the operator's own judgement (see
/// [`RenewTracker::lapsed`]).
pub fn host_record(lease: &Lease, lapsed: bool) -> HostRecord {
    let meta = &lease.metadata;
    let descriptor = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTOR_ANNOTATION))
        .and_then(|json| serde_json::from_str::<DescriptorView>(json).ok());
    let node = descriptor
        .as_ref()
        .and_then(|d| d.meta.get("node"))
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    let reported = match descriptor.as_ref().and_then(|d| d.status.as_deref()) {
        Some("joining") => HostState::Joining,
        Some("active") => HostState::Active,
        Some("leaving") => HostState::Leaving,
        Some("fenced") => HostState::Fenced,
        _ => HostState::Unknown,
    };
    HostRecord {
        id: meta.name.clone().unwrap_or_default(),
        role: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::ROLE))
            .cloned(),
        node,
        state: if lapsed { HostState::Fenced } else { reported },
    }
}

/// The aggregate the ActorCluster status is built from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetSummary {
    pub hosts: i32,
    pub nodes: NodeCount,
    pub counts: HostCounts,
    pub roles: Vec<RoleSummary>,
    /// Hosts whose descriptor could not be read.
    pub unreadable: i32,
}

fn bump(counts: &mut HostCounts, state: HostState) {
    match state {
        HostState::Joining => counts.joining += 1,
        HostState::Active => counts.active += 1,
        HostState::Leaving => counts.leaving += 1,
        HostState::Fenced => counts.fenced += 1,
        HostState::Unknown => {}
    }
}

/// Aggregates hosts; every role in `role_names` is listed even with no host, so a role that
/// never came up is visible.
pub fn summarize<'a>(
    hosts: &[HostRecord],
    role_names: impl IntoIterator<Item = &'a str>,
) -> FleetSummary {
    let mut summary = FleetSummary {
        hosts: i32::try_from(hosts.len()).unwrap_or(i32::MAX),
        nodes: NodeCount::from_reports(hosts.iter().map(|h| h.node.as_deref())),
        ..FleetSummary::default()
    };
    let mut roles: BTreeMap<String, RoleSummary> = role_names
        .into_iter()
        .map(|r| {
            (
                r.to_owned(),
                RoleSummary {
                    name: r.to_owned(),
                    ..RoleSummary::default()
                },
            )
        })
        .collect();
    for h in hosts {
        bump(&mut summary.counts, h.state);
        if h.state == HostState::Unknown {
            summary.unreadable += 1;
        }
        if let Some(role) = &h.role {
            let r = roles.entry(role.clone()).or_insert_with(|| RoleSummary {
                name: role.clone(),
                ..RoleSummary::default()
            });
            r.hosts += 1;
            bump(&mut r.counts, h.state);
        }
    }
    summary.roles = roles.into_values().collect();
    summary
}

/// Per Lease (namespace, name): the last `renewTime` seen and when it was first seen.
type Sightings = HashMap<(String, String), (Option<String>, Instant)>;

/// The sidecar's exact TTL annotation (milliseconds); `leaseDurationSeconds` is whole seconds,
/// rounded up.
pub const TTL_ANNOTATION: &str = "actors.sigx.dev/lease-ttl-ms";

/// A Lease's TTL: the exact annotation if present and sane, else `leaseDurationSeconds`.
fn lease_ttl(lease: &Lease) -> Option<Duration> {
    let exact = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TTL_ANNOTATION))
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    exact.or_else(|| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|d| u64::try_from(d).ok())
            .map(Duration::from_secs)
    })
}

/// Remembers, per Lease, when the operator last saw its `renewTime` change.
#[derive(Debug, Default)]
pub struct RenewTracker {
    seen: Mutex<Sightings>,
}

fn lease_key(lease: &Lease) -> (String, String) {
    (
        lease.metadata.namespace.clone().unwrap_or_default(),
        lease.metadata.name.clone().unwrap_or_default(),
    )
}

fn renew_time(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string())
}

impl RenewTracker {
    fn seen(&self) -> std::sync::MutexGuard<'_, Sightings> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an observed version of a Lease at `now`.
    pub fn observe(&self, lease: &Lease, now: Instant) {
        let renew = renew_time(lease);
        let mut seen = self.seen();
        let entry = seen.entry(lease_key(lease)).or_insert((renew.clone(), now));
        if entry.0 != renew {
            *entry = (renew, now);
        }
    }

    /// Forgets a deleted Lease.
    pub fn forget(&self, lease: &Lease) {
        self.seen().remove(&lease_key(lease));
    }

    /// Whether the Lease has not been seen renewed for its duration (plus [`LAPSE_MARGIN`]).
    /// A Lease never observed is not lapsed: the operator has no evidence yet.
    pub fn lapsed(&self, lease: &Lease, now: Instant) -> bool {
        let Some(ttl) = lease_ttl(lease) else {
            return false;
        };
        let seen = self.seen();
        let Some((renew, since)) = seen.get(&lease_key(lease)) else {
            return false;
        };
        *renew == renew_time(lease) && now.saturating_duration_since(*since) > ttl + LAPSE_MARGIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(name: &str, role: &str, descriptor: Option<&str>, renew_secs: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("apps".into()),
                labels: Some(BTreeMap::from([
                    (labels::CLUSTER.into(), "demo".into()),
                    (labels::ROLE.into(), role.into()),
                ])),
                annotations: descriptor
                    .map(|d| BTreeMap::from([(DESCRIPTOR_ANNOTATION.into(), d.into())])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(
                    k8s_openapi::jiff::Timestamp::from_second(renew_secs).unwrap(),
                )),
                ..Default::default()
            }),
        }
    }

    fn desc(status: &str, node: Option<&str>) -> String {
        let meta = node
            .map(|n| format!(r#","meta":{{"node":"{n}"}}"#))
            .unwrap_or_default();
        format!(
            r#"{{"id":"x","advertise":"10.0.0.1:7311","status":"{status}","startedAtUnixMs":1{meta}}}"#
        )
    }

    #[test]
    fn three_hosts_on_one_node() {
        let hosts: Vec<HostRecord> = ["a", "b", "c"]
            .iter()
            .map(|h| {
                host_record(
                    &lease(h, "engine", Some(&desc("active", Some("n1"))), 0),
                    false,
                )
            })
            .collect();
        let s = summarize(&hosts, ["engine", "web"]);
        assert_eq!(s.hosts, 3);
        assert_eq!(s.nodes, NodeCount::Known(1));
        assert_eq!(s.counts.active, 3);
        assert_eq!(s.roles.len(), 2, "a role without hosts is listed");
        assert_eq!(s.roles[0].hosts, 3);
        assert_eq!(s.roles[1].hosts, 0);
        assert_eq!(
            sigx_crds::ActorClusterStatus::summary_line(s.hosts, s.nodes),
            "3 host(s) / 1 node(s)"
        );
    }

    #[test]
    fn silent_hosts_never_become_a_guess() {
        let hosts: Vec<HostRecord> = ["a", "b"]
            .iter()
            .map(|h| host_record(&lease(h, "web", Some(&desc("joining", None)), 0), false))
            .collect();
        let s = summarize(&hosts, []);
        assert_eq!(s.nodes, NodeCount::Unknown);
        assert_eq!(s.counts.joining, 2);
        let bad = host_record(&lease("z", "web", Some("{not json"), 0), false);
        assert_eq!(bad.state, HostState::Unknown);
        assert_eq!(summarize(&[bad], []).unreadable, 1);
    }

    #[test]
    fn lapse_is_judged_on_the_observers_clock() {
        let tracker = RenewTracker::default();
        let t0 = Instant::now();
        let l = lease("a", "web", Some(&desc("active", Some("n1"))), 100);
        assert!(!tracker.lapsed(&l, t0), "never observed: no evidence");
        tracker.observe(&l, t0);
        assert!(!tracker.lapsed(&l, t0 + Duration::from_secs(15)));
        assert!(tracker.lapsed(&l, t0 + Duration::from_secs(17)));
        // A renewal seen late restarts the window, whatever the remote timestamp says.
        let renewed = lease("a", "web", Some(&desc("active", Some("n1"))), 50);
        tracker.observe(&renewed, t0 + Duration::from_secs(17));
        assert!(!tracker.lapsed(&renewed, t0 + Duration::from_secs(20)));
        assert_eq!(host_record(&renewed, true).state, HostState::Fenced);
    }

    #[test]
    fn the_exact_ttl_annotation_wins_over_whole_seconds() {
        let tracker = RenewTracker::default();
        let t0 = Instant::now();
        let mut l = lease("a", "web", None, 100);
        l.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(TTL_ANNOTATION.into(), "500".into());
        tracker.observe(&l, t0);
        assert!(!tracker.lapsed(&l, t0 + Duration::from_millis(1400)));
        assert!(
            tracker.lapsed(&l, t0 + Duration::from_millis(1600)),
            "500 ms + 1 s margin, not 15 s"
        );
    }
}

/// The `membershipVersion` the operator reports per cluster: bumped whenever the set of hosts
/// or any host's state, node or role changes — never by a mere heartbeat, which would make
/// every renewal a status write (and, through the watches on the status, a reconcile storm).
///
/// It continues from the version in the status, so it only grows; after an operator restart
/// the first reconciliation bumps it once, since the operator cannot know what changed while
/// it was away.
#[derive(Debug, Default)]
pub struct MembershipVersions {
    seen: Mutex<HashMap<(String, String), u64>>,
}

fn digest(hosts: &[HostRecord]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut keys: Vec<_> = hosts
        .iter()
        .map(|h| (&h.id, &h.role, &h.node, format!("{:?}", h.state)))
        .collect();
    keys.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    keys.hash(&mut hasher);
    hasher.finish()
}

impl MembershipVersions {
    /// The version for `hosts` of cluster `namespace/name`, given the one last written.
    pub fn version(
        &self,
        namespace: &str,
        name: &str,
        hosts: &[HostRecord],
        previous: Option<i64>,
    ) -> i64 {
        let d = digest(hosts);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        let previous = previous.unwrap_or(0);
        if seen.get(&key) == Some(&d) {
            previous
        } else {
            seen.insert(key, d);
            previous + 1
        }
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    fn host(id: &str, state: HostState) -> HostRecord {
        HostRecord {
            id: id.into(),
            role: Some("r".into()),
            node: Some("n".into()),
            state,
        }
    }

    #[test]
    fn bumps_on_membership_changes_only() {
        let v = MembershipVersions::default();
        let a = [host("a", HostState::Active)];
        assert_eq!(v.version("ns", "c", &a, None), 1);
        assert_eq!(
            v.version("ns", "c", &a, Some(1)),
            1,
            "same hosts, same version"
        );
        let ab = [host("b", HostState::Joining), host("a", HostState::Active)];
        assert_eq!(v.version("ns", "c", &ab, Some(1)), 2);
        let ab2 = [host("a", HostState::Active), host("b", HostState::Active)];
        assert_eq!(
            v.version("ns", "c", &ab2, Some(2)),
            3,
            "a status change is a change"
        );
        assert_eq!(v.version("ns", "other", &ab2, Some(7)), 8, "per cluster");
    }
}
