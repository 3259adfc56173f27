//! Rolls paced across the roles of a cluster: a change that comes from the cluster rather than
//! from the role (an operator upgrade that renders pods differently, the cluster's default
//! sidecar image moving with it, a cluster spec edit such as a secret rotation step) would roll
//! every role of the cluster at once. Each role rolls one pod at a time, but all roles together
//! restart that many hosts at once and hand all their actors over at the same moment.
//!
//! So such a roll waits its turn: one role of a cluster at a time, in name order. A role whose
//! rendered pod template differs from its Deployment's (the [`names::TEMPLATE_HASH`]
//! annotation) holds the new template while another role of its cluster is rolling, or while
//! a role before it by name still has such a change to make. A change to the role itself (its
//! `metadata.generation` moved) is not held: whoever edited the role asked for that roll.
//!
//! A role that cannot finish (its rollout past its progress deadline, pods the ReplicaSet
//! cannot create, its own apply refused) does not hold the others up: pacing waits for rolls
//! that progress, never for a stuck one.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use sigx_crds::{ActorCluster, ActorRole, condition_types, labels};

use super::Context;
use super::role_status::RoleObservation;
use crate::error::ReconcileError;
use crate::render::{self, names};

/// The roles a change of `deployment` concerns: the ActorRole that owns it, and the roles of
/// the same cluster whose roll waits for another (their `Ready` says `RollPaced`), since a
/// rollout that completes or stalls may be their turn. Without it a paced role only learned
/// its turn by polling.
pub fn roles_to_wake(
    deployment: &Deployment,
    roles: &[std::sync::Arc<ActorRole>],
) -> Vec<ObjectRef<ActorRole>> {
    let namespace = deployment.namespace();
    let mut wake: Vec<ObjectRef<ActorRole>> = deployment
        .owner_references()
        .iter()
        .filter(|o| o.kind == "ActorRole" && o.api_version == ActorRole::api_version(&()))
        .map(|o| ObjectRef::new(&o.name).within(namespace.as_deref().unwrap_or_default()))
        .collect();
    let Some(cluster) = deployment.labels().get(labels::CLUSTER) else {
        return wake;
    };
    for role in roles {
        if role.namespace() == namespace
            && &role.spec.cluster_ref.name == cluster
            && is_paced(role)
            && !wake.iter().any(|w| w.name == role.name_any())
        {
            wake.push(ObjectRef::from_obj(&**role));
        }
    }
    wake
}

/// Whether `role`'s status says its roll waits for another role.
fn is_paced(role: &ActorRole) -> bool {
    role.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == condition_types::READY && c.reason == PACED_REASON)
    })
}

/// The reason of a role's `Ready` and `Reconciling` while its roll waits.
pub const PACED_REASON: &str = "RollPaced";

/// Why `role`'s roll to `wanted` waits for another role of `cluster`, or `None` when it goes
/// now. `live` is the role's Deployment as the API server has it.
pub(super) async fn hold(
    ctx: &Context,
    cluster: &ActorCluster,
    role: &ActorRole,
    wanted: &Deployment,
    live: Option<&Deployment>,
) -> Result<Option<String>, ReconcileError> {
    let Some(live) = live else {
        return Ok(None); // a new role: nothing rolls
    };
    if template_hash(live) == template_hash(wanted) {
        return Ok(None);
    }
    let role_changed =
        role.status.as_ref().and_then(|s| s.observed_generation) != role.metadata.generation;
    if role_changed {
        return Ok(None);
    }
    let namespace = role.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    let name = role.name_any();
    let mut others: Vec<_> = ctx
        .roles
        .state()
        .into_iter()
        .filter(|r| {
            r.namespace().as_deref() == Some(namespace.as_str())
                && r.spec.cluster_ref.name == cluster_name
                && r.name_any() != name
                && r.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if others.is_empty() {
        return Ok(None);
    }
    others.sort_by_key(|r| r.name_any());
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let listed = deployments
        .list(&ListParams::default().labels(&format!("{}={cluster_name}", labels::CLUSTER)))
        .await
        .map_err(ReconcileError::kube(
            "listing",
            format!("the Deployments of ActorCluster {namespace}/{cluster_name}"),
        ))?;
    for other in &others {
        let other_name = other.name_any();
        let Some(deployment) = listed
            .items
            .iter()
            .find(|d| d.name_any() == names::deployment(&other_name))
        else {
            continue;
        };
        if stuck(other) {
            continue;
        }
        if let Some(progress) = rolling(deployment) {
            return Ok(Some(format!(
                "waiting for role {other_name} of cluster {cluster_name} to finish its roll \
                 ({progress}): a change from the cluster (operator upgrade, cluster spec) rolls \
                 its roles one at a time, in name order"
            )));
        }
        if other_name < name
            && let Ok(other_wanted) = render::deployment(cluster, other)
            && template_hash(&other_wanted) != template_hash(deployment)
        {
            return Ok(Some(format!(
                "waiting for role {other_name} of cluster {cluster_name} to roll first: a \
                 change from the cluster (operator upgrade, cluster spec) rolls its roles one \
                 at a time, in name order"
            )));
        }
    }
    Ok(None)
}

fn template_hash(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .annotations
        .as_ref()?
        .get(names::TEMPLATE_HASH)
        .map(String::as_str)
}

/// A role that cannot progress on its own (`Stalled`): it holds no other role up.
fn stuck(role: &ActorRole) -> bool {
    role.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == condition_types::STALLED && c.status == "True")
    })
}

/// How far a Deployment's rollout is, while one progresses; `None` once it completed, when it
/// cannot progress (past its deadline, pods refused), or when no Deployment controller reports
/// on it at all (no `observedGeneration`: nothing would ever finish it).
pub(super) fn rolling(deployment: &Deployment) -> Option<String> {
    let o = RoleObservation::of(deployment, 0);
    let want = deployment.spec.replicas.unwrap_or(1);
    let observed = o.observed_generation?;
    if o.deadline_exceeded.is_some() || o.replica_failure.is_some() {
        return None;
    }
    if o.generation.is_some_and(|g| observed < g) {
        return Some("its new generation not yet observed".to_owned());
    }
    (o.updated_replicas < want || o.replicas > o.updated_replicas || o.available_replicas < want)
        .then(|| {
            format!(
                "{} of {want} pod(s) updated, {} available",
                o.updated_replicas, o.available_replicas
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn deployment(generation: i64, status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "engine", "generation": generation},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    fn role(namespace: &str, name: &str, cluster: &str, ready_reason: &str) -> Arc<ActorRole> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterRef": {"name": cluster}, "actors": ["Counter"],
                         "template": {"spec": {"containers": [{"name": "app", "image": "a"}]}}},
                "status": {"conditions": [{"type": "Ready", "status": "False",
                    "reason": ready_reason, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_deployment_change_wakes_its_role_and_the_paced_roles_of_its_cluster() {
        let web: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "a-web", "namespace": "apps",
                "labels": {"actors.sigx.dev/cluster": "demo"},
                "ownerReferences": [{"apiVersion": "actors.sigx.dev/v1alpha1",
                    "kind": "ActorRole", "name": "a-web", "uid": "u1"}]},
            "spec": {"selector": {}, "template": {}},
        }))
        .unwrap();
        let roles = [
            role("apps", "a-web", "demo", "RolloutInProgress"),
            role("apps", "b-engine", "demo", PACED_REASON),
            role("apps", "c-idle", "demo", "Ready"),
            role("apps", "d-other", "other", PACED_REASON),
            role("elsewhere", "e-web", "demo", PACED_REASON),
        ];
        let woken: Vec<String> = roles_to_wake(&web, &roles)
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        assert_eq!(woken, ["apps/a-web", "apps/b-engine"]);
    }

    #[test]
    fn a_rollout_is_rolling_until_every_pod_is_updated_and_available() {
        let done = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2});
        assert_eq!(rolling(&deployment(3, done)), None);
        let unobserved = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2});
        assert!(rolling(&deployment(3, unobserved)).is_some());
        let halfway = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 1,
            "availableReplicas": 2});
        assert_eq!(
            rolling(&deployment(3, halfway)).as_deref(),
            Some("1 of 2 pod(s) updated, 2 available")
        );
        let old_pod_left = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 2,
            "availableReplicas": 2});
        assert!(rolling(&deployment(3, old_pod_left)).is_some());
    }

    #[test]
    fn a_stuck_or_unreported_rollout_holds_nobody_up() {
        let past_deadline = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 1,
            "availableReplicas": 1, "conditions": [{"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded", "message": "too slow"}]});
        assert_eq!(rolling(&deployment(3, past_deadline)), None);
        let refused = json!({"observedGeneration": 3, "replicas": 0, "conditions": [
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "message": "quota"}]});
        assert_eq!(rolling(&deployment(3, refused)), None);
        assert_eq!(rolling(&deployment(3, json!({}))), None);
    }
}
