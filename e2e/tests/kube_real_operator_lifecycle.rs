//! What a platform team checks before adopting the operator, on a real control plane
//! (`sigx_e2e::controlplane`: kube-apiserver with its default admission plugins — ServiceAccount,
//! ResourceQuota, PodSecurity — and the real garbage collector, Deployment and ReplicaSet
//! controllers; no scheduler, no kubelet, so pods stay Pending):
//!
//! - deleting an ActorCluster that still has roles, in the background and in the foreground,
//!   leaves the roles' pods their ServiceAccount and Secret, and re-creating it heals the roles;
//! - a namespace with a ResourceQuota on requests admits the roles' pods (the sidecar has
//!   requests), and a role can override them;
//! - `Ready` on a role means a completed rollout, and refusals — a template the API rejects,
//!   pods a Pod Security level rejects — reach the role as conditions with the server's message.
//!
//! - a change from the cluster (here its sidecar image, as an operator upgrade brings) rolls its
//!   roles one at a time, in name order, each waiting for the one before to complete, while a
//!   change to a role itself rolls at once.
//!
//! Each test starts its own control plane and operator (watching every namespace). Needs `make controlplane` and `cargo build --workspace --bins`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, ActorRole};
use sigx_e2e::real_operator::{Ns, eventually, start_in_ops};

const SIDECAR: &str = "ghcr.io/sigx/sidecar:0.1.0";

fn owner_uids<K: Resource>(obj: &K) -> Vec<(String, String)> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .map(|o| (o.kind.clone(), o.uid.clone()))
        .collect()
}

/// The uids of what the roles' pods need, by kind.
async fn pod_needs(ns: &Ns) -> Option<[String; 4]> {
    Some([
        ns.get::<ServiceAccount>("demo-sigx").await?.uid()?,
        ns.get::<Role>("demo-sigx-leases").await?.uid()?,
        ns.get::<RoleBinding>("demo-sigx-leases").await?.uid()?,
        ns.get::<Secret>("demo-sigx-secret").await?.uid()?,
    ])
}

/// Deletes the cluster with `policy` and waits until the garbage collector dealt with what it
/// owned: the cluster is gone and no object still names it as an owner. Returns whether the
/// pods' objects survived (same uids).
async fn delete_cluster(ns: &Ns, policy: PropagationPolicy, before: &[String; 4]) -> bool {
    let uid = ns.get::<ActorCluster>("demo").await.unwrap().uid().unwrap();
    let foreground = matches!(policy, PropagationPolicy::Foreground);
    let hold = json!({"metadata": {"finalizers": ["test.sigx.dev/hold"]}});
    if foreground {
        // Another controller's finalizer keeps the cluster in its deleting state long enough to
        // see what the operator does with a deletionTimestamp (Argo CD's own finalizer does so).
        ns.api::<ActorCluster>()
            .patch("demo", &PatchParams::default(), &Patch::Merge(&hold))
            .await
            .unwrap();
    }
    let dp = DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    };
    ns.api::<ActorCluster>().delete("demo", &dp).await.unwrap();
    if foreground {
        // The operator sees the deletionTimestamp, stops writing, and says which roles keep the
        // cluster's objects alive.
        let told = eventually("a Deleting Event naming the live role", || async {
            ns.events_for("demo", "Deleting")
                .await
                .into_iter()
                .find(|e| e.message.as_deref().is_some_and(|m| m.contains("engine")))
        })
        .await;
        eprintln!("foreground delete: {:?}", told.message);
        ns.api::<ActorCluster>()
            .patch(
                "demo",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
    }
    eventually(
        "the cluster's deletion to finish (no finalizer may hold it)",
        || async { ns.get::<ActorCluster>("demo").await.is_none().then_some(()) },
    )
    .await;
    eventually(
        "the garbage collector to drop the cluster's owner references",
        || async {
            let sa = ns.get::<ServiceAccount>("demo-sigx").await;
            let secret = ns.get::<Secret>("demo-sigx-secret").await;
            let named = |refs: Vec<(String, String)>| refs.iter().any(|(_, u)| *u == uid);
            let settled = sa.as_ref().is_none_or(|o| !named(owner_uids(o)))
                && secret.as_ref().is_none_or(|o| !named(owner_uids(o)));
            settled.then_some(())
        },
    )
    .await;
    pod_needs(ns).await.as_ref() == Some(before)
}

async fn deleting_a_cluster_keeps_its_roles_running(client: &kube::Client) {
    let ns = Ns::create(client, "del", json!({})).await;
    let cluster = ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 2, json!({})).await;
    let role_uid = ns.get::<ActorRole>("engine").await.unwrap().uid().unwrap();
    // The role co-owns the pods' ServiceAccount and Secret once the operator reconciled.
    let before = eventually("the role to co-own the cluster's objects", || async {
        let sa = ns.get::<ServiceAccount>("demo-sigx").await?;
        let secret = ns.get::<Secret>("demo-sigx-secret").await?;
        let co = |o: Vec<(String, String)>| o.iter().any(|(_, u)| *u == role_uid);
        (co(owner_uids(&sa)) && co(owner_uids(&secret))).then_some(())?;
        pod_needs(&ns).await
    })
    .await;
    let secret_bytes = ns.get::<Secret>("demo-sigx-secret").await.unwrap().data;
    eventually("2 pods of engine", || async {
        (ns.pods_of("engine").await.len() == 2).then_some(())
    })
    .await;
    let deployment_uid = ns.get::<Deployment>("engine").await.unwrap().uid();

    for (policy, label) in [
        (PropagationPolicy::Background, "background"),
        (PropagationPolicy::Foreground, "foreground"),
    ] {
        assert!(
            delete_cluster(&ns, policy, &before).await,
            "after a {label} delete of the cluster, the ServiceAccount, Lease Role, RoleBinding \
             and Secret of its live role must survive (same uids {before:?}), got {:?}",
            pod_needs(&ns).await
        );
        let stuck = eventually("the role to report its missing cluster", || async {
            ns.role_condition("engine", "Stalled")
                .await
                .filter(|c| c.status == "True" && c.reason == "ClusterNotFound")
        })
        .await;
        assert!(stuck.message.contains("keep running"), "{stuck:?}");
        // The ReplicaSet can still create the role's pods (ServiceAccount admission needs the
        // account): replace one.
        let victim = ns.pods_of("engine").await.pop().unwrap();
        ns.api::<Pod>()
            .delete(&victim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
        eventually(
            &format!("engine's pod to be replaced after a {label} delete"),
            || async {
                let pods = ns.pods_of("engine").await;
                (pods.len() == 2 && pods.iter().all(|p| p.uid() != victim.uid())).then_some(())
            },
        )
        .await;

        // Re-creating the cluster heals the role: same objects, now owned by the new cluster.
        let again = ns.cluster(json!({"image": SIDECAR})).await;
        let new_uid = again.uid().unwrap();
        eventually(
            &format!("the re-created cluster ({label}) to adopt the objects"),
            || async {
                let sa = ns.get::<ServiceAccount>("demo-sigx").await?;
                let secret = ns.get::<Secret>("demo-sigx-secret").await?;
                let adopted = |o: Vec<(String, String)>| {
                    o.contains(&("ActorCluster".into(), new_uid.clone()))
                        && o.contains(&("ActorRole".into(), role_uid.clone()))
                };
                (adopted(owner_uids(&sa)) && adopted(owner_uids(&secret))).then_some(())
            },
        )
        .await;
        assert_eq!(pod_needs(&ns).await.as_ref(), Some(&before));
        assert_eq!(
            ns.get::<Secret>("demo-sigx-secret").await.unwrap().data,
            secret_bytes,
            "the same mesh secret: running pods and new ones agree"
        );
        eventually("the role to leave ClusterNotFound", || async {
            ns.role_condition("engine", "Stalled")
                .await
                .filter(|c| c.status == "False")
        })
        .await;
        let d = ns.get::<Deployment>("engine").await.unwrap();
        assert_eq!(
            d.uid(),
            deployment_uid,
            "the role's Deployment was never replaced"
        );
        let pods = ns.pods_of("engine").await;
        for p in &pods {
            let spec = p.spec.as_ref().unwrap();
            assert_eq!(spec.service_account_name.as_deref(), Some("demo-sigx"));
            let secret_volume = spec
                .volumes
                .iter()
                .flatten()
                .find_map(|v| v.secret.as_ref()?.secret_name.clone());
            assert_eq!(secret_volume.as_deref(), Some("demo-sigx-secret"));
        }
    }
    let _ = cluster;

    // With the cluster and then its last role deleted, nothing is left behind.
    ns.api::<ActorCluster>()
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    ns.api::<ActorRole>()
        .delete("engine", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the cluster's objects to be collected after the last role",
        || async {
            pod_needs(&ns).await.is_none().then_some(())?;
            let none = ns.get::<ServiceAccount>("demo-sigx").await.is_none()
                && ns.get::<Secret>("demo-sigx-secret").await.is_none()
                && ns.get::<Role>("demo-sigx-leases").await.is_none()
                && ns.get::<RoleBinding>("demo-sigx-leases").await.is_none()
                && ns.get::<Deployment>("engine").await.is_none();
            none.then_some(())
        },
    )
    .await;
}

async fn a_resource_quota_admits_the_pods(client: &kube::Client) {
    let ns = Ns::create(client, "quota", json!({})).await;
    let hard = json!({"requests.cpu": "4", "requests.memory": "4Gi"});
    let _: ResourceQuota = ns
        .create_json(json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "compute"}, "spec": {"hard": hard},
        }))
        .await;
    // This control plane runs no resourcequota controller; the test publishes what it would
    // (status.hard, and usage 0), after which quota admission enforces the quota for real.
    ns.api::<ResourceQuota>()
        .patch_status(
            "compute",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": hard,
                "used": {"requests.cpu": "0", "requests.memory": "0"}}})),
        )
        .await
        .unwrap();
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 2, json!({})).await;
    ns.role(
        "web",
        1,
        json!({"sidecar": {"resources": {"requests": {"memory": "48Mi"}, "limits": {"memory": "96Mi"}}}}),
    )
    .await;
    for (role, replicas) in [("engine", 2), ("web", 1)] {
        let pods = eventually(
            &format!("the quota to admit {replicas} pod(s) of {role}"),
            || async { Some(ns.pods_of(role).await).filter(|p| p.len() == replicas) },
        )
        .await;
        let sidecar = pods[0]
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == "sigx-sidecar")
            .unwrap()
            .resources
            .clone()
            .unwrap();
        let requests = sidecar.requests.unwrap();
        assert_eq!(requests["cpu"].0, "25m", "{role}: the default CPU request");
        let memory = if role == "web" { "48Mi" } else { "32Mi" };
        assert_eq!(requests["memory"].0, memory, "{role}: memory request");
        let limits = sidecar.limits.unwrap_or_default();
        assert!(
            !limits.contains_key("cpu"),
            "{role}: no CPU limit: {limits:?}"
        );
    }
    let used = ns
        .get::<ResourceQuota>("compute")
        .await
        .unwrap()
        .status
        .unwrap()
        .used;
    assert_ne!(
        used.unwrap()["requests.cpu"].0,
        "0",
        "quota admission counted the pods"
    );
}

async fn ready_means_the_rollout_completed(client: &kube::Client) {
    let ns = Ns::create(client, "status", json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 2, json!({})).await;
    // No kubelet: the pods exist but never become available, a rollout in progress.
    let ready = eventually("engine to read Ready=False for its rollout", || async {
        ns.role_condition("engine", "Ready")
            .await
            .filter(|c| c.status == "False" && c.reason == "RolloutInProgress")
    })
    .await;
    assert!(ready.message.contains("0 available"), "{ready:?}");
    let reconciling = ns.role_condition("engine", "Reconciling").await.unwrap();
    assert_eq!(reconciling.status, "True", "{reconciling:?}");
    assert_eq!(ns.pods_of("engine").await.len(), 2);

    // The test plays the kubelet (pods Running and Ready): the rollout completes, and the role
    // waits for its hosts; then it plays the sidecars (one Lease per host): Ready turns True.
    pods_ready(&ns, "engine").await;
    eventually("engine to wait for its hosts after the rollout", || async {
        ns.role_condition("engine", "Ready")
            .await
            .filter(|c| c.reason == "HostsNotJoined")
    })
    .await;
    for host in ["engine-host-0", "engine-host-1"] {
        let _: Lease = ns
            .create_json(json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": host, "labels": {
                    "actors.sigx.dev/cluster": "demo", "actors.sigx.dev/role": "engine"}},
                "spec": {"holderIdentity": host, "leaseDurationSeconds": 15},
            }))
            .await;
    }
    let ready = eventually("engine to read Ready=True", || async {
        ns.role_condition("engine", "Ready")
            .await
            .filter(|c| c.status == "True")
    })
    .await;
    assert_eq!(ready.reason, "RolloutComplete", "{ready:?}");
    let reconciling = ns.role_condition("engine", "Reconciling").await.unwrap();
    assert_eq!(reconciling.status, "False", "{reconciling:?}");

    // A template the API server's Deployment validation refuses (the CRD's schema cannot check
    // container names): the role says so with the server's message.
    let bad = json!({"template": {"spec": {"containers": [{
        "name": "Not_A_Label", "image": "x",
    }]}}});
    ns.role("bad", 1, bad).await;
    let stalled = eventually("the refused Deployment to reach the role", || async {
        ns.role_condition("bad", "Stalled")
            .await
            .filter(|c| c.status == "True" && c.reason == "ApplyRejected")
    })
    .await;
    assert!(
        stalled.message.contains("Not_A_Label") && stalled.message.contains("422"),
        "the API server's own message: {stalled:?}"
    );
    assert_eq!(
        ns.role_condition("bad", "Ready").await.unwrap().status,
        "False"
    );
    eventually("a Warning Event about the refusal", || async {
        Some(ns.events_for("bad", "ApplyRejected").await).filter(|e| !e.is_empty())
    })
    .await;

    // A restricted Pod Security level refuses the pods (the app container sets no
    // securityContext): the ReplicaSet's FailedCreate reaches the role.
    let strict = Ns::create(
        client,
        "strict",
        json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await;
    strict.cluster(json!({"image": SIDECAR})).await;
    strict.role("engine", 1, json!({})).await;
    let rejected = eventually("the Pod Security rejection to reach the role", || async {
        strict
            .role_condition("engine", "Stalled")
            .await
            .filter(|c| c.status == "True" && c.reason == "PodsRejected")
    })
    .await;
    assert!(
        rejected.message.contains("PodSecurity") && rejected.message.contains("FailedCreate"),
        "{rejected:?}"
    );
    let ready = strict.role_condition("engine", "Ready").await.unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "PodsRejected")
    );
    eventually("a Warning Event about the rejected pods", || async {
        Some(strict.events_for("engine", "PodsRejected").await).filter(|e| !e.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_cluster_with_live_roles_background_and_foreground() {
    let (_cp, client, _operator) = start_in_ops().await;
    deleting_a_cluster_keeps_its_roles_running(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_with_a_resource_quota_admits_the_pods() {
    let (_cp, client, _operator) = start_in_ops().await;
    a_resource_quota_admits_the_pods(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_status_reports_rollouts_and_refusals() {
    let (_cp, client, _operator) = start_in_ops().await;
    ready_means_the_rollout_completed(&client).await;
}

/// Plays the kubelet for `role`'s pods: each Running and Ready.
async fn pods_ready(ns: &Ns, role: &str) {
    let ready = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    for pod in ns.pods_of(role).await {
        let _ = ns
            .api::<Pod>()
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&ready),
            )
            .await;
    }
}

/// The sidecar image in `role`'s Deployment.
async fn sidecar_image(ns: &Ns, role: &str) -> Option<String> {
    let d: Deployment = ns.get(role).await?;
    d.spec
        .template
        .spec?
        .init_containers?
        .into_iter()
        .find(|c| c.name == "sigx-sidecar")?
        .image
}

/// Plays the kubelet until `role`'s rollout completes (every pod updated and available).
async fn complete_rollout(ns: &Ns, role: &str) {
    eventually(&format!("{role}'s rollout to complete"), || async {
        pods_ready(ns, role).await;
        let d: Deployment = ns.get(role).await?;
        let s = d.status?;
        let want = d.spec.replicas.unwrap_or(1);
        (s.observed_generation >= d.metadata.generation
            && s.updated_replicas == Some(want)
            && s.replicas == Some(want)
            && s.available_replicas == Some(want))
        .then_some(())
    })
    .await;
}

async fn set_cluster_image(ns: &Ns, image: &str) {
    ns.api::<ActorCluster>()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sidecar": {"image": image}}})),
        )
        .await
        .unwrap();
}

/// Namespace `name` with cluster `demo` and two roles, `a-web` and `b-engine`, rolled out.
async fn two_rolled_out_roles(client: &kube::Client, name: &'static str) -> Ns {
    let ns = Ns::create(client, name, json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("a-web", 1, json!({})).await;
    ns.role("b-engine", 1, json!({})).await;
    complete_rollout(&ns, "a-web").await;
    complete_rollout(&ns, "b-engine").await;
    ns
}

async fn cluster_changes_roll_one_role_at_a_time(client: &kube::Client) {
    let ns = two_rolled_out_roles(client, "pacing").await;

    // The cluster's image moves: a-web rolls first, b-engine holds the old template and says why.
    set_cluster_image(&ns, "ghcr.io/sigx/sidecar:0.2.0").await;
    eventually("a-web to roll to the new image", || async {
        (sidecar_image(&ns, "a-web").await? == "ghcr.io/sigx/sidecar:0.2.0").then_some(())
    })
    .await;
    let paced = eventually("b-engine to say its roll waits for a-web", || async {
        ns.role_condition("b-engine", "Ready")
            .await
            .filter(|c| c.reason == "RollPaced")
    })
    .await;
    assert!(
        paced.message.contains("a-web") && paced.message.contains("one at a time"),
        "{paced:?}"
    );
    let reconciling = ns.role_condition("b-engine", "Reconciling").await.unwrap();
    assert_eq!(reconciling.status, "True", "{reconciling:?}");
    // Past a few of its rechecks, while a-web's new pod is not available: still held.
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    assert_eq!(
        sidecar_image(&ns, "b-engine").await.as_deref(),
        Some(SIDECAR),
        "b-engine rolled while a-web was still rolling"
    );

    // a-web's rollout completes: b-engine's turn, woken by a-web's Deployment (its own
    // recheck is a minute away).
    complete_rollout(&ns, "a-web").await;
    let completed = tokio::time::Instant::now();
    eventually("b-engine to roll once a-web completed", || async {
        (sidecar_image(&ns, "b-engine").await? == "ghcr.io/sigx/sidecar:0.2.0").then_some(())
    })
    .await;
    assert!(
        completed.elapsed() < std::time::Duration::from_secs(5),
        "b-engine took {:?} to roll after a-web completed: it waited for a poll",
        completed.elapsed()
    );
    complete_rollout(&ns, "b-engine").await;

    // A change to a role itself is not paced: b-engine's own edit rolls at once, although the
    // cluster's next change has a-web rolling.
    set_cluster_image(&ns, "ghcr.io/sigx/sidecar:0.3.0").await;
    eventually("a-web to roll to 0.3.0", || async {
        (sidecar_image(&ns, "a-web").await? == "ghcr.io/sigx/sidecar:0.3.0").then_some(())
    })
    .await;
    eventually("b-engine held again", || async {
        ns.role_condition("b-engine", "Ready")
            .await
            .filter(|c| c.reason == "RollPaced")
    })
    .await;
    ns.api::<ActorRole>()
        .patch(
            "b-engine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"tier": "2"}}}}})),
        )
        .await
        .unwrap();
    eventually("b-engine's own edit to roll at once", || async {
        let d: Deployment = ns.get("b-engine").await?;
        let labels = d.spec.template.metadata?.labels?;
        (labels.get("tier").map(String::as_str) == Some("2")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_change_rolls_its_roles_one_at_a_time() {
    let (_cp, client, _operator) = start_in_ops().await;
    cluster_changes_roll_one_role_at_a_time(&client).await;
}

/// The image of the `sigx-sidecar` init container of `pod`.
fn pod_sidecar_image(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == "sigx-sidecar")?
        .image
        .as_deref()
}

/// A roll whose new pods crash-loop is reported by its Deployment as progressing until the
/// progress deadline (600 s by default); pacing must not hold the cluster's other roles behind
/// it for that long. The operator reads the rolling role's pods while another waits.
async fn a_crash_looping_roll_holds_no_role_up(client: &kube::Client) {
    let ns = two_rolled_out_roles(client, "crashloop").await;

    let next = "ghcr.io/sigx/sidecar:0.2.0";
    set_cluster_image(&ns, next).await;
    eventually("b-engine to wait for a-web's roll", || async {
        ns.role_condition("b-engine", "Ready")
            .await
            .filter(|c| c.reason == "RollPaced")
    })
    .await;
    let new_pod = eventually("a pod of a-web's new template", || async {
        ns.pods_of("a-web")
            .await
            .into_iter()
            .find(|p| pod_sidecar_image(p) == Some(next))
    })
    .await;
    // Play the kubelet: the sidecar runs, the app container crashes over and over.
    let crash_looping = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "False",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "initContainerStatuses": [{"name": "sigx-sidecar", "ready": true, "restartCount": 0,
            "image": next, "imageID": "", "started": true, "state": {"running": {}}}],
        "containerStatuses": [{"name": "app", "ready": false, "restartCount": 5,
            "image": "app", "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff",
            "message": "back-off 2m40s restarting failed container=app"}}}]}});
    ns.api::<Pod>()
        .patch_status(
            &new_pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&crash_looping),
        )
        .await
        .unwrap();
    let crashed = tokio::time::Instant::now();
    eventually(
        "b-engine to roll although a-web's roll crash-loops",
        || async { (sidecar_image(&ns, "b-engine").await? == next).then_some(()) },
    )
    .await;
    // Well within the paced role's recheck (15 s) plus a reconcile, not the 600 s deadline.
    assert!(
        crashed.elapsed() < std::time::Duration::from_secs(30),
        "b-engine waited {:?} behind a crash-looping roll",
        crashed.elapsed()
    );
    // a-web's roll did not complete: the crash loop, not a completion, let b-engine go.
    let web: Deployment = ns.get("a-web").await.unwrap();
    let status = web.status.unwrap_or_default();
    let completed = status.updated_replicas == Some(1)
        && status.replicas == Some(1)
        && status.available_replicas == Some(1);
    assert!(!completed, "a-web's roll completed: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_roll_holds_no_other_role_up() {
    let (_cp, client, _operator) = start_in_ops().await;
    a_crash_looping_roll_holds_no_role_up(&client).await;
}
