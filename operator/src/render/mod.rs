//! Desired objects, built by pure functions: custom resource in, manifests out.
//!
//! The controllers call these and server-side-apply the result; nothing here talks to the API,
//! reads the clock or draws random numbers (the generated secret's bytes are an argument), so
//! every rule of DESIGN.md §9 about what a pod looks like is unit-tested as plain data.
//!
//! - [`cluster`]: per-cluster objects — the sidecars' ServiceAccount, a Role and RoleBinding on
//!   Leases only, and the generated Secret.
//! - [`role`]: per-role objects — the Deployment with the native sidecar, and its
//!   PodDisruptionBudget; the sidecar container itself is [`sidecar`], its ports [`ports`], its
//!   security context [`security`], the pod's stop sequence [`stop`] and its ServiceAccount
//!   (with the RoleBinding a role's own account needs) [`account`].
//! - [`names`]: the names and labels both of them (and the controllers) agree on.

pub mod account;
pub mod cluster;
pub mod names;
pub mod ports;
pub mod resources;
pub mod role;
pub mod rollout;
pub mod security;
mod sidecar;
pub mod stop;

pub use account::{pod_service_account, role_lease_binding};
pub use cluster::{
    SecretSource, co_owned_by_roles, generated_secret, lease_role, lease_role_binding,
    secret_source, service_account, state_mode,
};
pub use ports::{SidecarPorts, sidecar_ports};
pub use role::{
    HEALTH_PORT, SIDECAR_CONTAINER, SOCKET_PATH, SOCKET_VOLUME, STATE_DIR, STATE_VOLUME,
    deployment, pod_disruption_budget, selector_string,
};
pub use stop::{DRAIN_PATH, DRAIN_TOKEN_HEADER, drain_token, termination_grace_seconds};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use sigx_crds::StateSpecError;
use sigx_crds::TypeNameError;
use sigx_crds::cluster::ConflictingAuth;

/// Why an object could not be rendered. Each names the object and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The object lacks a field the API server always sets (name, namespace, uid): it did not
    /// come from the API.
    #[error(
        "{kind} {name:?} has no metadata.{field}; render only objects read from the API server"
    )]
    MissingMetadata {
        kind: &'static str,
        name: String,
        field: &'static str,
    },
    /// A name that must also be a label value is too long.
    #[error(
        "{kind} name {name:?} is longer than 63 characters and cannot be a label value; choose a shorter name"
    )]
    NameTooLong { kind: &'static str, name: String },
    /// A role references another cluster than the one it was rendered with.
    #[error("ActorRole {role:?} references ActorCluster {wanted:?}, but was rendered with {got:?}")]
    WrongCluster {
        role: String,
        wanted: String,
        got: String,
    },
    /// Role and cluster live in different namespaces.
    #[error(
        "ActorRole {role:?} is in namespace {role_ns:?} but ActorCluster {cluster:?} is in {cluster_ns:?}; a role joins a cluster of its own namespace"
    )]
    CrossNamespace {
        role: String,
        role_ns: String,
        cluster: String,
        cluster_ns: String,
    },
    /// A type name that cannot become a label key.
    #[error("ActorRole {role:?}: {source}")]
    TypeName {
        role: String,
        #[source]
        source: TypeNameError,
    },
    /// The same type registered twice (or as both actor and worker).
    #[error(
        "ActorRole {role:?} registers type {type_name:?} twice; list each type once, in actors or in workers"
    )]
    DuplicateType { role: String, type_name: String },
    /// A role that registers nothing.
    #[error("ActorRole {role:?} registers no type; list at least one in actors or workers")]
    NoTypes { role: String },
    /// Both `secretRef` and `insecure: true`.
    #[error("ActorCluster {cluster:?}: {source}")]
    Auth {
        cluster: String,
        #[source]
        source: ConflictingAuth,
    },
    /// A `spec.state` the CEL rules refuse (postgres without its Secret, or the reverse).
    #[error("ActorCluster {cluster:?}: {source}")]
    State {
        cluster: String,
        #[source]
        source: StateSpecError,
    },
    /// The pod template has no app container.
    #[error("ActorRole {role:?}: spec.template.spec.containers is empty; add the app container")]
    NoAppContainer { role: String },
    /// The template uses a name the operator reserves for the sidecar.
    #[error(
        "ActorRole {role:?}: the template already has a {what} named {name:?}, which the operator reserves for the sidecar; rename it"
    )]
    ReservedName {
        role: String,
        what: &'static str,
        name: String,
    },
    /// `spec.sidecar.env` sets a variable the operator sets on the sidecar.
    #[error(
        "ActorRole {role:?}: spec.sidecar.env sets {name:?}, which the operator sets on the sidecar (every SIGX_* variable and POD_NAME, POD_NAMESPACE, POD_UID, POD_IP, NODE_NAME); set it through the ActorCluster's or ActorRole's fields, or remove it"
    )]
    ReservedEnv { role: String, name: String },
    /// A template container declares one of the sidecar's ports (or the two sidecar ports are
    /// equal): one of them would fail to bind in the pod's shared network namespace.
    #[error(
        "ActorRole {role:?}: container {container:?} uses port {port}, which is the sidecar's {what} port; change the container's port, or move the sidecar's with spec.sidecar.meshPort / spec.sidecar.healthPort on the role (or spec.meshPort / spec.healthPort on the ActorCluster)"
    )]
    PortConflict {
        role: String,
        container: String,
        port: i32,
        what: &'static str,
    },
    /// `hostNetwork: true` in the template.
    #[error(
        "ActorRole {role:?}: spec.template.spec.hostNetwork is true, which sigx refuses: the sidecar's ports would be the node's (two pods of the role on one node collide, /drain and /metrics face the node's network) and the host would advertise the node's address; remove hostNetwork"
    )]
    HostNetwork { role: String },
}

impl RenderError {
    /// The condition and Event reason for this error: `PortConflict` and `HostNetwork` for
    /// those, `InvalidSpec` for every other spec the operator cannot render.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::PortConflict { .. } => "PortConflict",
            Self::HostNetwork { .. } => "HostNetwork",
            _ => "InvalidSpec",
        }
    }
}

/// The name, or a [`RenderError::MissingMetadata`].
pub(crate) fn name_of<K: Resource>(obj: &K, kind: &'static str) -> Result<String, RenderError> {
    obj.meta()
        .name
        .clone()
        .ok_or_else(|| RenderError::MissingMetadata {
            kind,
            name: String::new(),
            field: "name",
        })
}

/// The namespace, or a [`RenderError::MissingMetadata`].
pub(crate) fn namespace_of<K: Resource>(
    obj: &K,
    kind: &'static str,
) -> Result<String, RenderError> {
    obj.namespace().ok_or_else(|| RenderError::MissingMetadata {
        kind,
        name: obj.name_any(),
        field: "namespace",
    })
}

/// A controller owner reference to `owner`, so deleting it garbage-collects what it owns.
pub(crate) fn owner_ref<K: Resource<DynamicType = ()>>(
    owner: &K,
    kind: &'static str,
) -> Result<OwnerReference, RenderError> {
    owner
        .controller_owner_ref(&())
        .ok_or_else(|| RenderError::MissingMetadata {
            kind,
            name: owner.name_any(),
            field: "uid",
        })
}

/// Metadata of an owned object: name, namespace, labels, a controller owner reference.
pub(crate) fn owned_meta(
    name: String,
    namespace: String,
    labels: std::collections::BTreeMap<String, String>,
    owner: OwnerReference,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    }
}

/// Shared fixtures of the render unit tests: objects as the API server would return them.
#[cfg(test)]
pub(crate) mod fixtures {
    use sigx_crds::{ActorCluster, ActorRole};

    pub fn cluster(spec: serde_json::Value) -> ActorCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "actors.sigx.dev/v1alpha1",
            "kind": "ActorCluster",
            "metadata": {"name": "demo", "namespace": "apps", "uid": "c-uid-1", "generation": 1},
            "spec": spec,
        }))
        .expect("fixture cluster")
    }

    pub fn default_cluster() -> ActorCluster {
        cluster(serde_json::json!({"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}}))
    }

    pub fn role(name: &str, spec: serde_json::Value) -> ActorRole {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "actors.sigx.dev/v1alpha1",
            "kind": "ActorRole",
            "metadata": {"name": name, "namespace": "apps", "uid": format!("r-uid-{name}"), "generation": 3},
            "spec": spec,
        }))
        .expect("fixture role")
    }

    pub fn engine_role() -> ActorRole {
        role(
            "engine",
            serde_json::json!({
                "clusterRef": {"name": "demo"},
                "replicas": 3,
                "actors": ["Counter"],
                "workers": [],
                "template": {
                    "metadata": {"labels": {"app": "counter"}},
                    "spec": {"containers": [{"name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0"}]}
                }
            }),
        )
    }
}
