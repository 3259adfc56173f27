//! `ActorCluster`: one sigx cluster — the sidecar every member pod runs, how members find each
//! other (Leases), how they authenticate, and how calls are routed. Its status is the fleet
//! monitor behind `kubectl get actorclusters -w`.

use std::fmt;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default seconds between membership beats (Lease renewals).
pub const DEFAULT_HEARTBEAT_SECONDS: i32 = 5;
/// Default seconds after which an unrenewed Lease expires its host.
pub const DEFAULT_TTL_SECONDS: i32 = 15;
/// Default port of the host-to-host mesh.
pub const DEFAULT_MESH_PORT: i32 = 7311;
/// The sidecar image of this release: what a cluster without `spec.sidecar.image` runs (the
/// version-skew policy: the operator of release N defaults to the sidecar of release N).
pub const DEFAULT_SIDECAR_IMAGE: &str = concat!("ghcr.io/sigx/sidecar:", env!("CARGO_PKG_VERSION"));
/// Default port of the sidecar's health, metrics and drain endpoint.
pub const DEFAULT_HEALTH_PORT: i32 = 9090;
/// Default per-call deadline (DESIGN.md §6: 30 s).
pub const DEFAULT_CALL_TIMEOUT_SECONDS: i32 = 30;
/// Default routing retries (DESIGN.md §5: 3).
pub const DEFAULT_CALL_RETRIES: i32 = 3;

/// Desired state of a sigx cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "actors.sigx.dev",
    version = "v1alpha1",
    kind = "ActorCluster",
    namespaced,
    status = "ActorClusterStatus",
    shortname = "acl",
    category = "sigx",
    validation = Rule::new("size(self.metadata.name) <= 63").message("an ActorCluster name is used as a label value, so it has at most 63 characters"),
    doc = "A sigx virtual-actor cluster: the sidecar its pods run, membership timing, authentication and routing. Pods join it through ActorRoles.",
    printcolumn(
        name = "HOSTS",
        type_ = "integer",
        json_path = ".status.hosts",
        description = "Hosts (sidecars) with a membership Lease"
    ),
    printcolumn(
        name = "NODES",
        type_ = "string",
        json_path = ".status.nodes",
        description = "Distinct machines the hosts run on; 'unknown' when no host reported one"
    ),
    printcolumn(name = "ACTIVE", type_ = "integer", json_path = ".status.active"),
    printcolumn(name = "FENCED", type_ = "integer", json_path = ".status.fenced"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "SUMMARY",
        type_ = "string",
        json_path = ".status.summary",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ActorClusterSpec {
    /// The sidecar container injected into every pod of the cluster's roles. Absent: the
    /// operator's defaults (its own release's sidecar image).
    #[serde(default)]
    pub sidecar: SidecarSpec,
    /// Membership timing of the per-host Leases.
    #[serde(default)]
    pub membership: MembershipSpec,
    /// Port of the host-to-host mesh on every pod.
    #[serde(default = "default_mesh_port")]
    #[schemars(range(min = 1024, max = 65535))]
    pub mesh_port: i32,
    /// Port of the sidecar's HTTP endpoint on every pod: probes (`/startupz`, `/livez`,
    /// `/readyz`), `/metrics`, and `/drain` (the app container's preStop). Change it when an app
    /// container already uses 9090 (Prometheus' default); a role may override it.
    #[serde(default = "default_health_port")]
    #[schemars(range(min = 1024, max = 65535))]
    pub health_port: i32,
    /// How hosts authenticate each other: a referenced Secret, a generated one (the default), or
    /// an explicit `insecure: true`.
    #[serde(default)]
    pub auth: AuthSpec,
    /// Optional mutual TLS between hosts, from a `kubernetes.io/tls` Secret that also holds
    /// `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls: Option<MtlsSpec>,
    /// Deadline and retries of actor calls.
    #[serde(default)]
    pub calls: CallSpec,
    /// How a host is chosen for an actor that is not active anywhere.
    #[serde(default)]
    pub placement: PlacementPolicy,
    /// Per-type placement, overriding `placement` for the types named (e.g. `least-loaded`
    /// for a type whose activations are heavy, `prefer-local` for one called mostly by its
    /// own host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub placement_by_type: Vec<TypePlacement>,
    /// Rebalancing: a host far above its peers' mean activations hands idle ones to less
    /// loaded hosts (their next call places them anew). On unless set to `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<bool>,
    /// Where actors' durable state lives; absent: in each sidecar's memory (single host only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::state::StateSpec>,
}

fn default_mesh_port() -> i32 {
    DEFAULT_MESH_PORT
}

fn default_health_port() -> i32 {
    DEFAULT_HEALTH_PORT
}

/// The sidecar container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSpec {
    /// Sidecar image, e.g. `ghcr.io/sigx/sidecar:0.1.0`. Absent: the image of the operator's
    /// own release (`ghcr.io/sigx/sidecar:<operator version>`), so
    /// an operator upgrade brings the sidecar it was tested with; set it to pin a version or
    /// to pull from a mirror. A role may override it (`ActorRole.spec.sidecar.image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// Pull policy of the sidecar image; Kubernetes' default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Resource requests and limits of the sidecar container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// UID the sidecar runs as. Absent: the image's user (65532 in the sigx image), or the one
    /// the platform assigns (OpenShift's `restricted-v2` assigns a UID per namespace and refuses
    /// pods that fix another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub run_as_user: Option<i64>,
    /// GID the sidecar runs as. Absent: the image's group, or the platform's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub run_as_group: Option<i64>,
}

/// Image pull policy of a container.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagePullPolicy {
    /// Always pull.
    Always,
    /// Pull when the image is not on the node.
    IfNotPresent,
    /// Never pull.
    Never,
}

impl ImagePullPolicy {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// Lease timing. A host fences when it has not confirmed a beat for `ttlSeconds`; peers expire it
/// after observing no renewal for as long. TTL must exceed two beats so that one lost write does
/// not fence a healthy host.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.ttlSeconds > 2 * self.heartbeatSeconds").message("membership.ttlSeconds must be greater than 2 × membership.heartbeatSeconds, so that one lost beat does not fence a healthy host").reason(Reason::FieldValueInvalid))]
pub struct MembershipSpec {
    /// Seconds between Lease renewals.
    #[serde(default = "default_heartbeat")]
    #[schemars(range(min = 1, max = 60))]
    pub heartbeat_seconds: i32,
    /// Seconds without a confirmed renewal after which a host fences and peers expire it.
    #[serde(default = "default_ttl")]
    #[schemars(range(min = 3, max = 600))]
    pub ttl_seconds: i32,
    /// Milliseconds the sidecar waits after a membership change before acting on it, so a burst
    /// of joins and leaves (a rollout) is applied once (`SIGX_MEMBERSHIP_COALESCE_MS`); the
    /// sidecar's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 60000))]
    pub coalesce_ms: Option<u32>,
}

fn default_heartbeat() -> i32 {
    DEFAULT_HEARTBEAT_SECONDS
}
fn default_ttl() -> i32 {
    DEFAULT_TTL_SECONDS
}

impl Default for MembershipSpec {
    fn default() -> Self {
        Self {
            heartbeat_seconds: DEFAULT_HEARTBEAT_SECONDS,
            ttl_seconds: DEFAULT_TTL_SECONDS,
            coalesce_ms: None,
        }
    }
}

/// Authentication between hosts (DESIGN.md §7). Exactly one way:
/// - `secretRef`: HMAC with the key in an existing Secret;
/// - neither field: the operator generates a Secret with 32 random bytes (never rotated silently);
/// - `insecure: true`: no authentication, a claim the user makes in writing.
///
/// `acceptSecretRef` adds a second secret every host accepts but none signs with: the middle
/// steps of a rotation (README, "Rotating the mesh secret").
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.secretRef) && has(self.insecure) && self.insecure == true)").message("auth: set either secretRef or insecure: true, not both (set neither to have the operator generate a secret)").reason(Reason::FieldValueForbidden))]
#[x_kube(validation = Rule::new("!(has(self.acceptSecretRef) && has(self.insecure) && self.insecure == true)").message("auth.acceptSecretRef is a second secret accepted during a rotation: it needs a secret to sign with (secretRef, or the generated one), not insecure: true").reason(Reason::FieldValueForbidden))]
#[x_kube(validation = Rule::new("!(has(self.acceptUnsigned) && self.acceptUnsigned == true && has(self.insecure) && self.insecure == true)").message("auth.acceptUnsigned: true means: sign with the secret and also accept unsigned requests, the middle step of a switch between insecure and a secret; it needs a secret to sign with (secretRef, or the generated one), not insecure: true").reason(Reason::FieldValueForbidden))]
pub struct AuthSpec {
    /// An existing Secret holding the cluster secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
    /// A second secret the hosts accept on inbound requests but never sign with, set only while
    /// the cluster secret is rotated: first to the new secret (every host accepts it, still
    /// signing with the old), then, with `secretRef` moved to the new secret, to the old one
    /// (every host signs with the new and still accepts the old); then removed. Each step rolls
    /// the roles' pods; start the next once the roll finished (`kubectl get actorroles`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_secret_ref: Option<SecretKeyRef>,
    /// Run without host authentication. Must be written out as `true`; never a default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// Sign every mesh request with the secret and also accept requests that carry no MAC: the
    /// middle step of switching a running cluster between `insecure: true` and a secret, set
    /// only for that switch (README, "Switching between insecure and a secret"). To add a
    /// secret: replace `insecure: true` with this (a roll), then remove it (a second roll). To
    /// drop the secret: set this (a roll), then replace it with `insecure: true`. Start each
    /// step once the previous roll finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_unsigned: Option<bool>,
}

/// Which of the three auth modes a spec selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthMode<'a> {
    /// Use the referenced Secret.
    SecretRef(&'a SecretKeyRef),
    /// The operator generates and owns the Secret.
    Generated,
    /// No authentication.
    Insecure,
}

/// A spec that selects more than one auth mode (only reachable when the schema was bypassed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "auth sets secretRef, acceptSecretRef or acceptUnsigned together with insecure: true; choose one (or neither for a generated secret)"
)]
pub struct ConflictingAuth;

impl AuthSpec {
    /// The selected mode; refuses the conflicting spec the CEL rule refuses.
    pub fn mode(&self) -> Result<AuthMode<'_>, ConflictingAuth> {
        let insecure = self.insecure.unwrap_or(false);
        if insecure && (self.accept_secret_ref.is_some() || self.accept_unsigned == Some(true)) {
            return Err(ConflictingAuth);
        }
        match (&self.secret_ref, insecure) {
            (Some(_), true) => Err(ConflictingAuth),
            (Some(r), false) => Ok(AuthMode::SecretRef(r)),
            (None, true) => Ok(AuthMode::Insecure),
            (None, false) => Ok(AuthMode::Generated),
        }
    }
}

/// A key in a Secret of the cluster's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Mutual TLS between hosts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MtlsSpec {
    /// A `kubernetes.io/tls` Secret with `tls.crt`, `tls.key` and `ca.crt`.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// Deadline and retries of actor calls.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CallSpec {
    /// Default deadline of a call, in seconds (a call may carry its own).
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: i32,
    /// Routing retries on answers that prove the call never ran.
    #[serde(default = "default_retries")]
    #[schemars(range(min = 0, max = 10))]
    pub retries: i32,
    /// Seconds a stopping host gives the app's in-flight turns and Deactivate turns before it
    /// hands over (`SIGX_DRAIN_TIMEOUT_MS`). Absent: `timeoutSeconds`, so a turn in flight may run
    /// to its deadline. The pods' `terminationGracePeriodSeconds` is sized from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub drain_timeout_seconds: Option<i32>,
}

impl CallSpec {
    /// The drain timeout in seconds: `drainTimeoutSeconds`, else the call timeout.
    pub fn drain_seconds(&self) -> i32 {
        self.drain_timeout_seconds.unwrap_or(self.timeout_seconds)
    }
}

fn default_timeout() -> i32 {
    DEFAULT_CALL_TIMEOUT_SECONDS
}
fn default_retries() -> i32 {
    DEFAULT_CALL_RETRIES
}

impl Default for CallSpec {
    fn default() -> Self {
        Self {
            timeout_seconds: DEFAULT_CALL_TIMEOUT_SECONDS,
            retries: DEFAULT_CALL_RETRIES,
            drain_timeout_seconds: None,
        }
    }
}

/// One type's placement policy (`spec.placementByType[]`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TypePlacement {
    /// The actor type.
    #[serde(rename = "type")]
    pub actor_type: crate::common::TypeName,
    /// Its policy.
    pub policy: PlacementPolicy,
}

/// Placement policy for actors that are not active anywhere (DESIGN.md §5).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementPolicy {
    /// Any eligible host, uniformly.
    #[default]
    Random,
    /// The calling host when it is eligible, else any eligible host.
    PreferLocal,
    /// The less loaded of two random eligible hosts, by the activation counts hosts publish on
    /// their renewals.
    LeastLoaded,
}

impl PlacementPolicy {
    /// The spelling used in the spec and in `SIGX_PLACEMENT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::PreferLocal => "prefer-local",
            Self::LeastLoaded => "least-loaded",
        }
    }
}

/// Observed state of a cluster, aggregated by the operator from the cluster's Leases.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ActorClusterStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Hosts with a membership Lease.
    #[serde(default)]
    pub hosts: i32,
    /// Distinct nodes the hosts run on: a number, `N+` when some hosts did not say, or `unknown`
    /// when none did — never a guess.
    #[serde(default)]
    pub nodes: NodeCount,
    /// Hosts by membership status.
    #[serde(flatten)]
    pub counts: HostCounts,
    /// Per-role summary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub roles: Vec<RoleSummary>,
    /// Version of the membership view the operator last aggregated (per operator process; only
    /// comparable with earlier values from the same process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership_version: Option<i64>,
    /// `Ready`, `Degraded` and `SecretReady` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// One line for humans, e.g. `3 host(s) / 1 node(s)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Hosts by membership status (DESIGN.md §3; `fenced` counts hosts that fenced themselves and
/// have not yet been expired).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HostCounts {
    /// Hosts whose record says `active`.
    #[serde(default)]
    pub active: i32,
    /// Hosts whose record says `joining`.
    #[serde(default)]
    pub joining: i32,
    /// Hosts whose record says `leaving`.
    #[serde(default)]
    pub leaving: i32,
    /// Hosts that fenced.
    #[serde(default)]
    pub fenced: i32,
}

/// One role's share of the cluster.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RoleSummary {
    /// The ActorRole's name.
    pub name: String,
    /// Hosts of this role with a Lease.
    #[serde(default)]
    pub hosts: i32,
    /// Hosts by membership status.
    #[serde(flatten)]
    pub counts: HostCounts,
}

/// How many machines a cluster's hosts run on, as far as they said.
///
/// Serialized as a string so the `NODES` printer column shows every form: `"3"`, `"2+"` (two
/// distinct nodes reported, and some hosts said nothing), `"unknown"` (no host said).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NodeCount {
    /// Every host reported its node; this many distinct ones.
    Known(u32),
    /// Some hosts reported this many distinct nodes; others said nothing.
    AtLeast(u32),
    /// No host reported a node (also: no hosts at all).
    #[default]
    Unknown,
}

impl NodeCount {
    /// Counts distinct nodes from each host's `meta.node`, without guessing for hosts that said
    /// nothing.
    pub fn from_reports<'a>(nodes: impl IntoIterator<Item = Option<&'a str>>) -> Self {
        let mut seen = std::collections::BTreeSet::new();
        let mut silent = 0usize;
        for node in nodes {
            match node {
                Some(n) if !n.trim().is_empty() => {
                    seen.insert(n);
                }
                _ => silent += 1,
            }
        }
        let n = u32::try_from(seen.len()).unwrap_or(u32::MAX);
        match (n, silent) {
            (0, _) => Self::Unknown,
            (n, 0) => Self::Known(n),
            (n, _) => Self::AtLeast(n),
        }
    }
}

impl fmt::Display for NodeCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Known(n) => write!(f, "{n}"),
            Self::AtLeast(n) => write!(f, "{n}+"),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

impl Serialize for NodeCount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NodeCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "unknown" {
            return Ok(Self::Unknown);
        }
        let (digits, at_least) = match s.strip_suffix('+') {
            Some(d) => (d, true),
            None => (s.as_str(), false),
        };
        let n: u32 = digits.parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "nodes {s:?} is neither a count, a count followed by '+', nor \"unknown\""
            ))
        })?;
        Ok(if at_least {
            Self::AtLeast(n)
        } else {
            Self::Known(n)
        })
    }
}

impl JsonSchema for NodeCount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NodeCount".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "Distinct nodes: a count, a count followed by '+' when some hosts did not report a node, or 'unknown' when none did.",
            "pattern": r"^(unknown|(0|[1-9][0-9]*)\+?)$",
            "default": "unknown",
        })
    }
}

impl ActorClusterStatus {
    /// The human line shown in `summary`: `3 host(s) / 1 node(s)`, or with the node part
    /// `node(s) unknown` when no host said where it runs.
    pub fn summary_line(hosts: i32, nodes: NodeCount) -> String {
        match nodes {
            NodeCount::Unknown => format!("{hosts} host(s) / node(s) unknown"),
            other => format!("{hosts} host(s) / {other} node(s)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_count_never_guesses() {
        let three_on_one = [Some("n1"), Some("n1"), Some("n1")];
        let nodes = NodeCount::from_reports(three_on_one);
        assert_eq!(nodes, NodeCount::Known(1));
        assert_eq!(
            ActorClusterStatus::summary_line(3, nodes),
            "3 host(s) / 1 node(s)"
        );

        let silent = NodeCount::from_reports([None, None, Some(" ")]);
        assert_eq!(silent, NodeCount::Unknown);
        assert_eq!(
            ActorClusterStatus::summary_line(3, silent),
            "3 host(s) / node(s) unknown"
        );

        let partial = NodeCount::from_reports([Some("a"), None, Some("b")]);
        assert_eq!(partial, NodeCount::AtLeast(2));
        assert_eq!(partial.to_string(), "2+");
        assert_eq!(NodeCount::from_reports([]), NodeCount::Unknown);
    }

    #[test]
    fn node_count_round_trips_as_string() {
        for n in [
            NodeCount::Known(0),
            NodeCount::Known(12),
            NodeCount::AtLeast(2),
            NodeCount::Unknown,
        ] {
            let v = serde_json::to_value(n).unwrap();
            assert!(v.is_string());
            assert_eq!(serde_json::from_value::<NodeCount>(v).unwrap(), n);
        }
        assert!(serde_json::from_value::<NodeCount>(serde_json::json!("three")).is_err());
    }

    #[test]
    fn auth_mode_is_exactly_one() {
        let r = SecretKeyRef {
            name: "s".into(),
            key: "k".into(),
        };
        let mode = |secret_ref: Option<SecretKeyRef>, insecure| {
            AuthSpec {
                secret_ref,
                insecure,
                accept_secret_ref: None,
                accept_unsigned: None,
            }
            .mode()
            .map(|m| format!("{m:?}"))
        };
        assert_eq!(mode(None, None).unwrap(), "Generated");
        assert_eq!(mode(None, Some(false)).unwrap(), "Generated");
        assert_eq!(mode(None, Some(true)).unwrap(), "Insecure");
        assert!(
            mode(Some(r.clone()), None)
                .unwrap()
                .starts_with("SecretRef")
        );
        assert_eq!(mode(Some(r.clone()), Some(true)), Err(ConflictingAuth));
        // A rotation's accepted secret goes with either secret source, never with insecure.
        let rotating = |secret_ref: Option<SecretKeyRef>, insecure| AuthSpec {
            secret_ref,
            insecure,
            accept_secret_ref: Some(r.clone()),
            accept_unsigned: None,
        };
        assert!(rotating(Some(r.clone()), None).mode().is_ok());
        assert_eq!(rotating(None, None).mode(), Ok(AuthMode::Generated));
        assert_eq!(rotating(None, Some(true)).mode(), Err(ConflictingAuth));
        // Accepting unsigned requests goes with a secret too, never with insecure.
        let switching = |insecure| AuthSpec {
            insecure,
            accept_unsigned: Some(true),
            ..AuthSpec::default()
        };
        assert_eq!(switching(None).mode(), Ok(AuthMode::Generated));
        assert_eq!(switching(Some(false)).mode(), Ok(AuthMode::Generated));
        assert_eq!(switching(Some(true)).mode(), Err(ConflictingAuth));
    }

    #[test]
    fn defaults_match_the_design() {
        let spec: ActorClusterSpec =
            serde_json::from_value(serde_json::json!({"sidecar": {"image": "x"}})).unwrap();
        assert_eq!(
            spec.membership,
            MembershipSpec {
                heartbeat_seconds: 5,
                ttl_seconds: 15,
                coalesce_ms: None
            }
        );
        assert_eq!(spec.mesh_port, 7311);
        assert_eq!(
            spec.calls,
            CallSpec {
                timeout_seconds: 30,
                retries: 3,
                drain_timeout_seconds: None
            }
        );
        assert_eq!(
            spec.calls.drain_seconds(),
            30,
            "the drain defaults to the call deadline"
        );
        assert_eq!(spec.health_port, 9090);
        assert_eq!(spec.sidecar.run_as_user, None, "no fixed UID unless asked");
        assert_eq!(spec.placement, PlacementPolicy::Random);
        assert_eq!(spec.auth.mode().unwrap(), AuthMode::Generated);
    }
}
