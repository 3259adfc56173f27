//! The real `sigx-operator` binary against a real control plane (`sigx_e2e::controlplane`:
//! kube-apiserver plus the garbage collector, Deployment and ReplicaSet controllers): the
//! examples reconcile by server-side apply into owned objects, the real Deployment controller
//! turns the rendered Deployment into a ReplicaSet and Pods, the CRs get status conditions, the
//! operator holds its leader Lease, and deletions cascade through the real garbage collector.
//!
//! Needs `make controlplane` and the workspace binaries (`make test` builds both).

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use sigx_crds::{ActorCluster, ActorRole};
use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::real_operator::{Operator, eventually};

const NS: &str = "apps";
// The real controllers (GC, Deployment, ReplicaSet) and the operator's watch take seconds
// (`real_operator::PATIENCE`). With the CRDs installed after the controller manager started,
// the garbage collector watched their kinds only from its next 30 s discovery resync (40 s
// measured from an ActorRole's deletion to its Pods'); `start_with_crds` installs them first.

fn api<K>(client: &kube::Client) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(client.clone(), NS)
}

async fn get<K>(client: &kube::Client, name: &str) -> Option<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    api::<K>(client).get_opt(name).await.expect("GET")
}

/// The object is owned (controller reference) by `kind`/`name` and was written by the operator
/// with server-side apply.
fn assert_owned_and_applied<K: Resource<DynamicType = ()>>(object: &K, kind: &str, name: &str) {
    assert_owned_and_written(object, kind, name, "Apply")
}

/// The object is owned by `kind`/`name`, and the operator's field manager wrote it with
/// `operation` (`Apply`, or `Update` for a create).
fn assert_owned_and_written<K: Resource<DynamicType = ()>>(
    object: &K,
    kind: &str,
    name: &str,
    operation: &str,
) {
    let meta = object.meta();
    let what = format!("{}/{}", K::kind(&()), meta.name.as_deref().unwrap_or("?"));
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == kind && o.name == name && o.controller == Some(true)),
        "{what}: no controller owner reference to {kind}/{name}: {owners:?}"
    );
    let managers = meta.managed_fields.as_deref().unwrap_or_default();
    assert!(
        managers
            .iter()
            .any(|m| m.manager.as_deref() == Some("sigx-operator")
                && m.operation.as_deref() == Some(operation)),
        "{what}: not written ({operation}) by the field manager sigx-operator: {:?}",
        managers
            .iter()
            .map(|m| (m.manager.clone(), m.operation.clone()))
            .collect::<Vec<_>>()
    );
}

async fn owned_by<K>(client: &kube::Client, owner_uid: &str) -> Vec<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    api::<K>(client)
        .list(&ListParams::default())
        .await
        .expect("LIST")
        .items
        .into_iter()
        .filter(|o| o.owner_references().iter().any(|r| r.uid == owner_uid))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_reconciles_the_examples_on_a_real_api_server() {
    let cp = ControlPlane::start_with_crds();
    let client = cp.client(NS).await;
    controlplane::create_namespace(&client, NS).await;
    let _operator = Operator::spawn_in(&cp, NS, true);

    let pp = PostParams::default();
    let cluster: ActorCluster = controlplane::repo_yaml("examples/k8s/cluster.yaml");
    api::<ActorCluster>(&client)
        .create(&pp, &cluster)
        .await
        .unwrap();
    for file in ["role-engine.yaml", "role-web.yaml"] {
        let role: ActorRole = controlplane::repo_yaml(&format!("examples/k8s/{file}"));
        api::<ActorRole>(&client).create(&pp, &role).await.unwrap();
    }

    // What the cluster owns, by server-side apply.
    let secret: Secret =
        eventually("the generated Secret", || get(&client, "demo-sigx-secret")).await;
    // The Secret is immutable and created once (a POST), not applied; a real server records
    // the create under the PostParams' field manager ("unknown" when none is given).
    assert_owned_and_written(&secret, "ActorCluster", "demo", "Update");
    let sa: ServiceAccount = eventually("the ServiceAccount", || get(&client, "demo-sigx")).await;
    assert_owned_and_applied(&sa, "ActorCluster", "demo");
    let role: Role = eventually("the Lease Role", || get(&client, "demo-sigx-leases")).await;
    assert_owned_and_applied(&role, "ActorCluster", "demo");
    let binding: RoleBinding =
        eventually("the RoleBinding", || get(&client, "demo-sigx-leases")).await;
    assert_owned_and_applied(&binding, "ActorCluster", "demo");

    // What each role owns, and what the real Deployment and ReplicaSet controllers make of it:
    // the real ServiceAccount admission accepts the Pods only because the operator created the
    // ServiceAccount they name.
    for (name, replicas) in [("engine", 3usize), ("web", 2)] {
        let d: Deployment =
            eventually(&format!("the {name} Deployment"), || get(&client, name)).await;
        assert_owned_and_applied(&d, "ActorRole", name);
        let d_uid = d.uid().unwrap();
        let rs: ReplicaSet = eventually(&format!("{name}'s ReplicaSet"), || async {
            owned_by::<ReplicaSet>(&client, &d_uid).await.pop()
        })
        .await;
        let rs_uid = rs.uid().unwrap();
        let pods = eventually(&format!("{replicas} pods of {name}"), || async {
            Some(owned_by::<Pod>(&client, &rs_uid).await).filter(|p| p.len() == replicas)
        })
        .await;
        for pod in &pods {
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.service_account_name.as_deref(), Some("demo-sigx"));
            // The sidecar is a native sidecar (an init container that keeps running), which
            // the real server's Pod validation accepts.
            let sidecar = spec
                .init_containers
                .iter()
                .flatten()
                .find(|c| c.name == "sigx-sidecar")
                .expect("the sidecar is injected");
            assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
        }
    }

    // Status conditions on the CRs, written through the real /status subresource. No pod runs
    // (there is no kubelet), so no host holds a Lease: Ready is False for that reason.
    let status = eventually("the ActorCluster's conditions", || async {
        get::<ActorCluster>(&client, "demo")
            .await
            .and_then(|c| c.status)
            .filter(|s| s.conditions.iter().any(|c| c.type_ == "Ready"))
    })
    .await;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False", "{ready:?}");
    assert_eq!(status.hosts, 0);
    let role_status = eventually("the engine role's conditions", || async {
        get::<ActorRole>(&client, "engine")
            .await
            .and_then(|r| r.status)
            .filter(|s| !s.conditions.is_empty())
    })
    .await;
    assert!(
        role_status.conditions.iter().any(|c| c.type_ == "Ready"),
        "{:?}",
        role_status.conditions
    );

    // Leader election on a real Lease.
    let lease: Lease = eventually("the operator's leader Lease", || {
        get(&client, "sigx-operator")
    })
    .await;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert_eq!(holder, "op-a");

    // Deleting a role: the real garbage collector removes its Deployment, then the ReplicaSet
    // and the Pods (each owned by the one before).
    let web: Deployment = get(&client, "web").await.unwrap();
    let web_uid = web.uid().unwrap();
    let web_rs = owned_by::<ReplicaSet>(&client, &web_uid).await;
    api::<ActorRole>(&client)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    eventually(
        "web's Deployment, ReplicaSet and Pods to be collected",
        || async {
            let d = get::<Deployment>(&client, "web").await;
            let rs = owned_by::<ReplicaSet>(&client, &web_uid).await;
            let mut pods = Vec::new();
            for r in &web_rs {
                pods.extend(owned_by::<Pod>(&client, &r.uid().unwrap()).await);
            }
            (d.is_none() && rs.is_empty() && pods.is_empty()).then_some(())
        },
    )
    .await;
    eprintln!(
        "ActorRole deleted → its Deployment, ReplicaSet and Pods collected after {:?}",
        t0.elapsed()
    );

    // Deleting the cluster while the engine role lives: the objects its pods need stay (the
    // role co-owns them; kube_real_operator_lifecycle tests this in depth), and the role says
    // what happened. Deleting the role then lets the garbage collector take them.
    let cluster_uid = get::<ActorCluster>(&client, "demo")
        .await
        .unwrap()
        .uid()
        .unwrap();
    api::<ActorCluster>(&client)
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the engine role to report its missing cluster", || async {
        get::<ActorRole>(&client, "engine")
            .await
            .and_then(|r| r.status)
            .filter(|s| s.conditions.iter().any(|c| c.reason == "ClusterNotFound"))
    })
    .await;
    eventually(
        "the collector to drop the cluster's owner reference",
        || async {
            get::<ServiceAccount>(&client, "demo-sigx")
                .await
                .filter(|sa| sa.owner_references().iter().all(|o| o.uid != cluster_uid))
        },
    )
    .await;
    assert!(get::<Secret>(&client, "demo-sigx-secret").await.is_some());
    api::<ActorRole>(&client)
        .delete("engine", &DeleteParams::default())
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    eventually("the cluster's objects to be collected", || async {
        let gone = get::<Secret>(&client, "demo-sigx-secret").await.is_none()
            && get::<ServiceAccount>(&client, "demo-sigx").await.is_none()
            && get::<Role>(&client, "demo-sigx-leases").await.is_none()
            && get::<RoleBinding>(&client, "demo-sigx-leases")
                .await
                .is_none();
        gone.then_some(())
    })
    .await;
    eprintln!(
        "ActorCluster and its last ActorRole deleted → the cluster's objects collected after {:?}",
        t0.elapsed()
    );
}
