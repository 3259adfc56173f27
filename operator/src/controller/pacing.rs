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
//! cannot create, its own apply refused, pods whose containers crash-loop or cannot pull their
//! image) does not hold the others up: pacing waits for rolls that progress, never for a stuck
//! one. The Deployment reports a crash-looping roll as progressing until its progress deadline
//! (600 s by default), so the pods of a rolling role are read, only while another role waits
//! behind it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
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
            if let Some(why) =
                pods_that_cannot_start(ctx, &namespace, &cluster_name, &other_name).await?
            {
                tracing::info!(
                    role = %other_name,
                    why = %why,
                    "not waiting for a roll whose pods cannot start"
                );
                continue;
            }
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

/// Why the pods of role `role` cannot start as they are, read from the pods themselves (see
/// [`cannot_start`]); `None` when nothing says so.
async fn pods_that_cannot_start(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    role: &str,
) -> Result<Option<String>, ReconcileError> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}={cluster},{}={role}", labels::CLUSTER, labels::ROLE);
    let listed = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(ReconcileError::kube(
            "listing",
            format!("the pods of ActorRole {namespace}/{role}"),
        ))?;
    Ok(cannot_start(&listed.items))
}

/// The kubelet's reasons for a container that waits and will keep waiting without a change to
/// the pod template or the image registry: the roll that made it cannot complete.
const CANNOT_START: [&str; 5] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
];

/// The first container (app or sidecar, init containers included) among `pods` that waits for
/// one of the [`CANNOT_START`] reasons, described for the log. An old pod crash-looping counts
/// too: the roll may well replace it, and the cost of not waiting is only that two roles roll
/// at once, which is what the cluster did before pacing.
pub(super) fn cannot_start(pods: &[Pod]) -> Option<String> {
    pods.iter().find_map(|pod| {
        let status = pod.status.as_ref()?;
        status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .find_map(|c| {
                let waiting = c.state.as_ref()?.waiting.as_ref()?;
                let reason = waiting.reason.as_deref()?;
                CANNOT_START.contains(&reason).then(|| {
                    format!(
                        "pod {} container {}: {reason} after {} restart(s){}",
                        pod.metadata.name.as_deref().unwrap_or("?"),
                        c.name,
                        c.restart_count,
                        waiting
                            .message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    )
                })
            })
    })
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

    fn pod(name: &str, init: serde_json::Value, app: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"initContainerStatuses": init, "containerStatuses": app},
        }))
        .unwrap()
    }

    fn container(name: &str, state: serde_json::Value, restarts: i32) -> serde_json::Value {
        json!({"name": name, "ready": false, "restartCount": restarts, "image": "x",
               "imageID": "", "state": state})
    }

    #[test]
    fn a_crash_looping_or_unpullable_container_is_a_roll_that_cannot_start() {
        let starting = pod(
            "web-1",
            json!([container("sigx-sidecar", json!({"running": {}}), 0)]),
            json!([container(
                "app",
                json!({"waiting": {"reason": "ContainerCreating"}}),
                0
            )]),
        );
        assert_eq!(cannot_start(std::slice::from_ref(&starting)), None);
        let looping = pod(
            "web-2",
            json!([container("sigx-sidecar", json!({"running": {}}), 0)]),
            json!([container(
                "app",
                json!({"waiting": {"reason": "CrashLoopBackOff",
                "message": "back-off 40s restarting failed container"}}),
                4
            )]),
        );
        assert_eq!(
            cannot_start(&[starting.clone(), looping]).as_deref(),
            Some(
                "pod web-2 container app: CrashLoopBackOff after 4 restart(s) (back-off 40s \
                 restarting failed container)"
            )
        );
        let bad_sidecar_image = pod(
            "web-3",
            json!([container(
                "sigx-sidecar",
                json!({"waiting": {"reason": "ImagePullBackOff"}}),
                0
            )]),
            json!(null),
        );
        assert!(
            cannot_start(&[bad_sidecar_image])
                .unwrap()
                .starts_with("pod web-3 container sigx-sidecar: ImagePullBackOff")
        );
        let no_status: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(cannot_start(&[no_status]), None);
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
