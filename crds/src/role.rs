//! `ActorRole`: a group of identical pods in a cluster — the app's pod template plus the actor
//! and worker types its sidecars register. The operator renders it into a Deployment whose pods
//! carry the sidecar.

use k8s_openapi::api::core::v1::{EnvVar, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::TypeName;

/// Desired state of a role.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "actors.sigx.dev",
    version = "v1alpha1",
    kind = "ActorRole",
    namespaced,
    status = "ActorRoleStatus",
    shortname = "arl",
    category = "sigx",
    validation = Rule::new("size(self.metadata.name) <= 63").message("an ActorRole name is used as a label value, so it has at most 63 characters"),
    doc = "A role in a sigx cluster: an app pod template plus the stateful actor types and stateless worker types its sidecars register. Rendered into a Deployment with the sidecar injected.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "CLUSTER",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "REPLICAS", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "PODS-READY",
        type_ = "integer",
        json_path = ".status.readyReplicas"
    ),
    printcolumn(name = "HOSTS", type_ = "integer", json_path = ".status.hosts"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "True once the Deployment's rollout of the current spec completed and every host joined"
    ),
    printcolumn(
        name = "REASON",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.actors) + size(self.workers) > 0").message("a role must register at least one type in actors or workers").reason(Reason::FieldValueRequired))]
#[x_kube(validation = Rule::new("self.actors.all(t, !(t in self.workers))").message("a type name may appear in actors or in workers, not both").reason(Reason::FieldValueDuplicate))]
pub struct ActorRoleSpec {
    /// The ActorCluster (same namespace) whose members these pods are. Immutable: moving pods
    /// between clusters is a delete and a create.
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable; create a new ActorRole instead"))]
    pub cluster_ref: ClusterRef,
    /// Number of pods (hosts). Also driven by `kubectl scale` and HPAs via the scale subresource.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i32,
    /// Stateful actor types this role's hosts register (single activation, directory-placed).
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub actors: Vec<TypeName>,
    /// Stateless worker types this role's hosts register (run on the receiving host).
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub workers: Vec<TypeName>,
    /// Pod template of the app. The operator adds the sidecar, the socket volume and labels.
    /// `spec.serviceAccountName` may name the app's own ServiceAccount (IRSA, Workload Identity,
    /// Vault): the operator then binds the cluster's Lease Role to it too. Absent: the cluster's
    /// `<cluster>-sigx`.
    pub template: PodTemplateSpec,
    /// How the role's pods are replaced during a rollout and disrupted by node drains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// Per-role settings of the injected sidecar, over the cluster's `spec.sidecar`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<RoleSidecarSpec>,
}

/// What a role may change about its sidecar.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RoleSidecarSpec {
    /// Sidecar image of this role's pods, over the cluster's `spec.sidecar.image`: moves one
    /// role to a new sidecar release ahead of the others (a canary, or an upgrade paced role by
    /// role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// Requests and limits of this role's sidecars, resource by resource over the cluster's
    /// `spec.sidecar.resources` and the operator's measured default requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Mesh port of this role's sidecars, over the cluster's `spec.meshPort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 65535))]
    pub mesh_port: Option<i32>,
    /// Health (probes, metrics, drain) port of this role's sidecars, over the cluster's
    /// `spec.healthPort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 65535))]
    pub health_port: Option<i32>,
    /// UID of this role's sidecars, over the cluster's `spec.sidecar.runAsUser`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub run_as_user: Option<i64>,
    /// GID of this role's sidecars, over the cluster's `spec.sidecar.runAsGroup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub run_as_group: Option<i64>,
    /// Extra environment variables of this role's sidecar container, after the ones the
    /// operator sets (`RUST_LOG`, `OTEL_EXPORTER_OTLP_ENDPOINT`, ...; `valueFrom` works as in a
    /// container). Names starting with `SIGX_` and the downward-API names the operator sets
    /// (`POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `POD_IP`, `NODE_NAME`) are reserved: set those
    /// through the ActorCluster and ActorRole fields; a role that uses one is not rendered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub env: Vec<EnvVar>,
}

/// Rollout and disruption knobs of a role. Each absent field keeps the operator's default, which
/// hands actors over one host at a time.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Pods created above `replicas` during a rollout (a number or a percentage); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Pods that may be unavailable during a rollout; default 0 (add a pod before removing one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Seconds a new pod must be ready before the rollout counts it available; Kubernetes'
    /// default (0) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub min_ready_seconds: Option<i32>,
    /// Pods voluntary disruptions (node drains, evictions) may take at once: the
    /// PodDisruptionBudget's `maxUnavailable`; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disruption: Option<IntOrString>,
}

fn default_replicas() -> i32 {
    1
}

/// Reference to the ActorCluster a role belongs to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRef {
    /// Name of an ActorCluster in the role's namespace.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// Observed state of a role.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ActorRoleStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of the role's Deployment (the scale subresource's status replicas).
    #[serde(default)]
    pub replicas: i32,
    /// Pods that are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Hosts of this role holding a membership Lease.
    #[serde(default)]
    pub hosts: i32,
    /// Label selector of the role's pods, in string form (the scale subresource's selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// `Ready`, `Reconciling`, `Stalled` and `Degraded` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl ActorRoleSpec {
    /// All types the role registers, stateful first, in spec order.
    pub fn all_types(&self) -> impl Iterator<Item = &TypeName> {
        self.actors.iter().chain(self.workers.iter())
    }
}
