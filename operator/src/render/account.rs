//! The ServiceAccount a role's pods run as.
//!
//! By default the cluster's `<cluster>-sigx`, which the cluster's RoleBinding gives Lease
//! access. A template may name its own (`spec.template.spec.serviceAccountName`): the app's
//! cloud identity (IRSA and EKS Pod Identity, GKE Workload Identity, Azure Workload Identity)
//! and Vault's Kubernetes auth are all keyed on the pod's ServiceAccount, and a pod has only
//! one. The operator then binds the cluster's Lease Role to that account too, with a
//! RoleBinding the role owns (deleted with it, or when the template stops naming the account).
//! The operator does not create or change the named account; it must exist in the namespace.

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use sigx_crds::{ActorCluster, ActorRole, labels};

use super::{RenderError, name_of, names, namespace_of, owned_meta, owner_ref};

/// The account the pod runs as: the template's, else the cluster's.
pub fn pod_service_account(cluster_name: &str, pod: &PodSpec) -> String {
    match pod.service_account_name.as_deref() {
        Some(own) if !own.is_empty() => own.to_owned(),
        _ => names::service_account(cluster_name),
    }
}

/// The RoleBinding that gives a role's own ServiceAccount the cluster's Lease Role; `None` when
/// the role's pods run as the cluster's account (already bound).
pub fn role_lease_binding(
    cluster: &ActorCluster,
    role: &ActorRole,
) -> Result<Option<RoleBinding>, RenderError> {
    let cluster_name = name_of(cluster, "ActorCluster")?;
    let role_name = name_of(role, "ActorRole")?;
    let namespace = namespace_of(role, "ActorRole")?;
    let pod = role.spec.template.spec.clone().unwrap_or_default();
    let account = pod_service_account(&cluster_name, &pod);
    if account == names::service_account(&cluster_name) {
        return Ok(None);
    }
    let mut binding_labels = names::selector(&cluster_name, &role_name);
    binding_labels.insert(
        names::MANAGED_BY.to_owned(),
        labels::MANAGED_BY_VALUE.to_owned(),
    );
    Ok(Some(RoleBinding {
        metadata: owned_meta(
            names::role_lease_binding(&role_name),
            namespace.clone(),
            binding_labels,
            owner_ref(role, "ActorRole")?,
        ),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: names::lease_role(&cluster_name),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: account,
            namespace: Some(namespace),
            ..Subject::default()
        }]),
    }))
}
