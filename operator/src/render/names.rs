//! Names and labels of the objects the operator creates. One place, so the controllers, the
//! render functions and the tests agree.

use std::collections::BTreeMap;

use sigx_crds::labels;

/// `app.kubernetes.io/managed-by`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The ServiceAccount the cluster's sidecars run as.
pub fn service_account(cluster: &str) -> String {
    format!("{cluster}-sigx")
}

/// The Role (and RoleBinding) granting that account access to Leases.
pub fn lease_role(cluster: &str) -> String {
    format!("{cluster}-sigx-leases")
}

/// The RoleBinding giving a role's own ServiceAccount (named in its template) the cluster's
/// Lease Role.
pub fn role_lease_binding(role: &str) -> String {
    format!("{role}-sigx-role-leases")
}

/// The Secret the operator generates when `spec.auth` names none.
pub fn generated_secret(cluster: &str) -> String {
    format!("{cluster}-sigx-secret")
}

/// The key of the cluster secret in a generated Secret.
pub const GENERATED_SECRET_KEY: &str = "secret";

/// The Deployment (and PodDisruptionBudget) of a role: the role's own name, so
/// `kubectl get deploy <role>` finds it.
pub fn deployment(role: &str) -> String {
    role.to_owned()
}

/// Labels on every object of a cluster: the cluster label and `managed-by`.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::CLUSTER.to_owned(), cluster.to_owned()),
        (MANAGED_BY.to_owned(), labels::MANAGED_BY_VALUE.to_owned()),
    ])
}

/// The selector of a role's pods: cluster and role. Deliberately without the type labels, which
/// may change while a Deployment's selector may not.
pub fn selector(cluster: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::CLUSTER.to_owned(), cluster.to_owned()),
        (labels::ROLE.to_owned(), role.to_owned()),
    ])
}

/// Annotation on a role's Deployment: a digest of the pod template the operator rendered, so a
/// change that would roll the role's pods is seen without comparing the live template, which
/// the API server fills with defaults (controller/pacing.rs paces such rolls across roles).
pub const TEMPLATE_HASH: &str = "actors.sigx.dev/template-hash";

/// The [`TEMPLATE_HASH`] value of `template`: the first 16 hex digits of the SHA-256 of its JSON
/// (fields in declaration order, maps sorted: the same template gives the same digest in every
/// operator process).
pub fn template_hash(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> String {
    use sha2::Digest;
    let json = serde_json::to_vec(template).expect("a pod template serializes");
    let digest = sha2::Sha256::digest(&json);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
