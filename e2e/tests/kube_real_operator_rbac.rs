//! The RBAC sigx ships, judged by the real API server's RBAC authorizer (`sigx_e2e::controlplane`)
//! instead of the admin certificate the other tests run with:
//!
//! - the operator, running as the chart's ServiceAccount with a bound token and only the chart's
//!   ClusterRole (as `helm template` renders it), reconciles an ActorCluster and an ActorRole:
//!   the cluster's ServiceAccount, Lease Role and RoleBinding, the generated Secret, the role's
//!   Deployment, both statuses, Events, its leader Lease, and the binding of a role's own
//!   ServiceAccount (created, then deleted when the template stops naming it);
//! - a real sidecar running as the cluster's ServiceAccount, with only the Role the operator
//!   rendered, creates, renews and (on a graceful stop) deletes its own Lease, and the operator
//!   sees it (the cluster turns Ready);
//! - broken variants prove the RBAC is what is judged: the chart's ClusterRole without `patch`
//!   on deployments leaves the role `Stalled` with the API server's 403; the sidecar's Role
//!   without `delete` leaves its Lease behind when it stops.
//!
//! - the chart's `rbac.scope: namespace` (a Role in the watched namespace, a leader-Lease Role in
//!   the operator's own): the operator reconciles its namespace with no cluster-wide grant, may
//!   not read ActorClusters elsewhere, and (broken variant) started to watch every namespace
//!   with only that Role, it reconciles nothing and logs the API server's refusal.
//!
//! Needs `make controlplane`, `cargo build --workspace --bins` and helm
//! (`scripts/install-tools.sh manifests` puts it in `.tools/bin`; `SIGX_HELM` overrides).

mod sdk_support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use sdk_support::Scratch;
use sdk_support::kube_host::{self, KubeHostSpec, start_kube_host};
use serde_json::{Value, json};
use sigx_crds::ActorCluster;
use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::real_operator::{Ns, Operator, eventually};

const SIDECAR: &str = "ghcr.io/sigx/sidecar:0.1.0";
/// Where the chart installs the operator (`helm install --namespace`).
const RELEASE_NS: &str = "sigx-system";
/// The verbs the sidecar uses on Leases (sidecar/src/membership/kubernetes): read and watch its
/// peers', create and renew (update) its own, delete its own on leave and an expired peer's.
const SIDECAR_LEASE_VERBS: [&str; 6] = ["get", "list", "watch", "create", "update", "delete"];

/// The chart's ServiceAccount, Roles and RoleBindings with `rbac.scope: namespace`, watching
/// `watch`, as `helm template` renders them.
fn chart_namespaced_rbac(watch: &str) -> Vec<Value> {
    let watch = format!("watchNamespace={watch}");
    let docs = controlplane::chart_template(&[
        "--namespace",
        RELEASE_NS,
        "--set",
        "rbac.scope=namespace",
        "--set",
        &watch,
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/role.yaml",
    ]);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding"
        ],
        "{docs:?}"
    );
    docs
}

/// The chart's ServiceAccount, ClusterRole and ClusterRoleBinding, as `helm template` renders
/// them with the default values.
fn chart_rbac() -> Vec<Value> {
    let docs = controlplane::chart_template(&[
        "--namespace",
        RELEASE_NS,
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/clusterrole.yaml",
        "--show-only",
        "templates/clusterrolebinding.yaml",
    ]);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"],
        "{docs:?}"
    );
    docs
}

/// Removes `verb` from the rules of `doc` (a ClusterRole or Role) that cover `resource`.
fn without_verb(mut doc: Value, resource: &str, verb: &str) -> Value {
    let mut removed = false;
    for rule in doc["rules"].as_array_mut().unwrap() {
        let covers = rule["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r == resource));
        if covers {
            let verbs = rule["verbs"].as_array_mut().unwrap();
            let before = verbs.len();
            verbs.retain(|v| v != verb);
            removed |= verbs.len() < before;
        }
    }
    assert!(removed, "no rule grants {verb} on {resource}");
    doc
}

/// Creates the chart's RBAC objects (or a variant) as the admin.
async fn install(admin: &kube::Client, docs: &[Value]) {
    let pp = PostParams::default();
    for doc in docs {
        match doc["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                Api::<ServiceAccount>::namespaced(admin.clone(), RELEASE_NS)
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .unwrap();
            }
            "ClusterRole" => {
                Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .unwrap();
            }
            "ClusterRoleBinding" => {
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .unwrap();
            }
            "Role" => {
                let ns = doc["metadata"]["namespace"].as_str().unwrap();
                Api::<Role>::namespaced(admin.clone(), ns)
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .unwrap();
            }
            "RoleBinding" => {
                let ns = doc["metadata"]["namespace"].as_str().unwrap();
                Api::<RoleBinding>::namespaced(admin.clone(), ns)
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .unwrap();
            }
            other => panic!("unexpected {other} in the chart's RBAC"),
        }
    }
}

/// A fresh control plane with the CRDs, the release namespace, `rbac` installed, and the
/// operator running as the chart's ServiceAccount with a bound token; the admin client.
async fn operator_under(rbac: &[Value]) -> (ControlPlane, kube::Client, Operator) {
    let cp = ControlPlane::start_with_crds();
    let admin = cp.client(RELEASE_NS).await;
    let operator = operator_as(&cp, &admin, rbac, None).await;
    (cp, admin, operator)
}

/// Installs `rbac` (the release namespace first) and starts the operator as the chart's
/// ServiceAccount with a bound token, watching `watch` (`None`: every namespace).
async fn operator_as(
    cp: &ControlPlane,
    admin: &kube::Client,
    rbac: &[Value],
    watch: Option<&str>,
) -> Operator {
    let admin = admin.clone();
    if Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .get_opt(RELEASE_NS)
        .await
        .unwrap()
        .is_none()
    {
        controlplane::create_namespace(&admin, RELEASE_NS).await;
    }
    install(&admin, rbac).await;
    let account = rbac[0]["metadata"]["name"].as_str().unwrap();
    let config = cp
        .service_account_kubeconfig(&admin, RELEASE_NS, account, RELEASE_NS)
        .await;
    // The token is not the admin: what the ClusterRole does not grant is refused.
    let as_operator = ControlPlane::client_from(&config).await;
    let refused = Api::<ConfigMap>::namespaced(as_operator, RELEASE_NS)
        .list(&ListParams::default())
        .await
        .expect_err("the operator's account may not list ConfigMaps");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused}"
    );
    Operator::spawn_watching(cp, &config, RELEASE_NS, watch)
}

async fn cluster_condition(
    ns: &Ns,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    ns.get::<ActorCluster>("demo")
        .await?
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
}

async fn leases_of(ns: &Ns, pod: &str) -> Vec<Lease> {
    ns.api::<Lease>()
        .list(&ListParams::default().labels("actors.sigx.dev/cluster=demo"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|l| l.name_any().starts_with(&format!("{pod}-")))
        .collect()
}

fn renewed_at(lease: &Lease) -> Option<String> {
    let time = lease.spec.as_ref()?.renew_time.as_ref()?;
    Some(time.0.to_string())
}

/// A real sidecar of role `engine` of cluster `demo` in `ns`, as pod `pod`, with the
/// credentials of `config`.
async fn sidecar(
    ns: &Ns,
    scratch: &Scratch,
    config: &std::path::Path,
    pod: &str,
) -> kube_host::KubeHost {
    let uid = kube_host::pod_object(&ns.client, ns.name, pod).await;
    start_kube_host(
        scratch,
        config,
        KubeHostSpec {
            namespace: ns.name,
            pod,
            uid: &uid,
            node: "node-1",
            zone: None,
            beat_ms: 300,
            ttl_ms: 3000,
            health_on_any: false,
        },
    )
}

/// Waits for and checks what the operator writes for cluster `demo` and role `engine` in `ns`:
/// the Deployment, both statuses, the generated Secret, the Lease RoleBinding, an Event, and its
/// own leader Lease in the release namespace.
async fn the_operator_reconciled(ns: &Ns, admin: &kube::Client) {
    let deployment = eventually("the role's Deployment", || async {
        ns.get::<Deployment>("engine").await
    })
    .await;
    assert_eq!(
        deployment.labels()["app.kubernetes.io/managed-by"],
        "sigx-operator"
    );
    eventually("the role's status", || async {
        ns.role_condition("engine", "Ready").await
    })
    .await;
    let stalled = eventually("the cluster's status", || async {
        cluster_condition(ns, "Stalled").await
    })
    .await;
    assert_eq!(stalled.status, "False", "{stalled:?}");
    let secret = cluster_condition(ns, "SecretReady").await.unwrap();
    assert_eq!(
        (secret.status.as_str(), secret.reason.as_str()),
        ("True", "Generated")
    );
    assert!(ns.get::<ServiceAccount>("demo-sigx").await.is_some());
    assert!(ns.get::<RoleBinding>("demo-sigx-leases").await.is_some());
    assert!(
        !ns.events_for("demo", "SecretGenerated").await.is_empty(),
        "Events are allowed"
    );
    let leader: Lease = Api::namespaced(admin.clone(), RELEASE_NS)
        .get("sigx-operator")
        .await
        .expect("the operator's leader Lease");
    assert_eq!(
        leader.spec.unwrap().holder_identity.as_deref(),
        Some("op-a")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_runs_the_operator_and_the_rendered_role_runs_the_sidecar() {
    let (cp, admin, operator) = operator_under(&chart_rbac()).await;
    let ns = Ns::create(&admin, "apps", json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 1, json!({})).await;

    // The operator's writes, each allowed by the chart's ClusterRole.
    the_operator_reconciled(&ns, &admin).await;

    // A role whose template names its own account: the operator binds the Lease Role to it,
    // and deletes that binding once the template stops naming it (delete on rolebindings).
    let _: ServiceAccount = ns
        .create_json(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "billing-irsa"}}))
        .await;
    ns.role(
        "billing",
        1,
        json!({"template": {"spec": {"serviceAccountName": "billing-irsa", "containers": [{
            "name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0"}]}}}),
    )
    .await;
    eventually("the binding of billing's own account", || async {
        ns.get::<RoleBinding>("billing-sigx-role-leases").await
    })
    .await;
    ns.api::<sigx_crds::ActorRole>()
        .patch(
            "billing",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"template": {"spec": {"serviceAccountName": null}}}}),
            ),
        )
        .await
        .unwrap();
    eventually("that binding deleted", || async {
        ns.get::<RoleBinding>("billing-sigx-role-leases")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // The Role the operator grants the sidecars: the verbs the sidecar uses, no more.
    let role: Role = ns.get("demo-sigx-leases").await.unwrap();
    let rules = role.rules.clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["leases".to_owned()][..])
    );
    let mut verbs = rules[0].verbs.clone();
    verbs.sort();
    let mut want: Vec<String> = SIDECAR_LEASE_VERBS.iter().map(|v| v.to_string()).collect();
    want.sort();
    assert_eq!(verbs, want);

    // A real sidecar with the cluster's account and only that Role: join, renew, leave.
    let scratch = Scratch::new("krbac");
    let config = cp
        .service_account_kubeconfig(&admin, "apps", "demo-sigx", "apps")
        .await;
    let mut host = sidecar(&ns, &scratch, &config, "engine-a").await;
    let first = eventually("the sidecar's Lease", || async {
        leases_of(&ns, "engine-a")
            .await
            .pop()
            .and_then(|l| renewed_at(&l))
    })
    .await;
    eventually("the sidecar to renew its Lease", || async {
        let now = leases_of(&ns, "engine-a")
            .await
            .pop()
            .and_then(|l| renewed_at(&l));
        now.filter(|t| *t != first)
    })
    .await;
    // The operator reads the Lease through its own watch (list/watch on leases).
    let ready = eventually("the cluster Ready with the host", || async {
        cluster_condition(&ns, "Ready")
            .await
            .filter(|c| c.status == "True")
    })
    .await;
    assert_eq!(ready.reason, "HostsActive", "{ready:?}");
    let exit = host.sidecar.terminate(Duration::from_secs(20));
    assert!(
        exit.is_some_and(|s| s.success()),
        "{}",
        host.sidecar.log_text()
    );
    eventually("the Lease deleted on leave", || async {
        leases_of(&ns, "engine-a").await.is_empty().then_some(())
    })
    .await;
    assert!(
        !host.sidecar.log_text().contains("forbidden"),
        "{}",
        host.sidecar.log_text()
    );

    // Broken variant: the same Role without `delete`, for another account: its sidecar joins
    // and renews, but its Lease stays behind when it stops, and it says why.
    let mut narrow = without_verb(serde_json::to_value(&role).unwrap(), "leases", "delete");
    narrow["metadata"] = json!({"name": "narrow-leases"});
    let _: Role = ns.create_json(narrow).await;
    let _: ServiceAccount = ns
        .create_json(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "narrow"}}))
        .await;
    let _: RoleBinding = ns
        .create_json(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "narrow-leases"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                "name": "narrow-leases"},
            "subjects": [{"kind": "ServiceAccount", "name": "narrow", "namespace": "apps"}]}),
        )
        .await;
    let config = cp
        .service_account_kubeconfig(&admin, "apps", "narrow", "apps")
        .await;
    let mut host = sidecar(&ns, &scratch, &config, "engine-b").await;
    eventually("the narrow sidecar's Lease", || async {
        leases_of(&ns, "engine-b").await.pop()
    })
    .await;
    let _ = host.sidecar.terminate(Duration::from_secs(20));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        leases_of(&ns, "engine-b").await.len(),
        1,
        "without delete the Lease stays"
    );
    let log = host.sidecar.log_text();
    assert!(
        log.contains("forbidden") && log.contains("delete"),
        "the sidecar names the refused delete: {log}"
    );
    drop(operator);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_patch_on_deployments_the_role_stalls_with_the_servers_refusal() {
    let mut rbac = chart_rbac();
    rbac[1] = without_verb(rbac[1].clone(), "deployments", "patch");
    let (_cp, admin, operator) = operator_under(&rbac).await;
    let ns = Ns::create(&admin, "apps", json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 1, json!({})).await;
    let stalled = eventually("the role Stalled by the refused apply", || async {
        ns.role_condition("engine", "Stalled")
            .await
            .filter(|c| c.status == "True")
    })
    .await;
    assert_eq!(stalled.reason, "ApplyRejected", "{stalled:?}");
    assert!(
        stalled.message.contains("Deployment apps/engine (403")
            && stalled
                .message
                .contains("cannot patch resource \"deployments\""),
        "{stalled:?}"
    );
    assert!(ns.get::<Deployment>("engine").await.is_none());
    // Only the removed verb is missing: the cluster's own objects are applied.
    let cluster = eventually("the cluster's status", || async {
        cluster_condition(&ns, "Stalled").await
    })
    .await;
    assert_eq!(cluster.status, "False", "{cluster:?}");
    assert!(
        operator.log_text().contains("cannot patch resource"),
        "the operator logs the refusal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_namespaced_rbac_runs_the_operator_in_its_namespace_alone() {
    let cp = ControlPlane::start_with_crds();
    let admin = cp.client(RELEASE_NS).await;
    let ns = Ns::create(&admin, "apps", json!({})).await;
    let elsewhere = Ns::create(&admin, "elsewhere", json!({})).await;
    let rbac = chart_namespaced_rbac("apps");
    let operator = operator_as(&cp, &admin, &rbac, Some("apps")).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 1, json!({})).await;
    elsewhere.cluster(json!({"image": SIDECAR})).await;

    // Everything the cluster-wide install does in its namespace, with Roles alone.
    the_operator_reconciled(&ns, &admin).await;
    // No grant reaches past the namespace: the token may not read ActorClusters elsewhere, and
    // the cluster there is left alone.
    let config = cp
        .service_account_kubeconfig(&admin, RELEASE_NS, "sigx-operator", RELEASE_NS)
        .await;
    let as_operator = ControlPlane::client_from(&config).await;
    let refused = Api::<ActorCluster>::namespaced(as_operator, "elsewhere")
        .list(&ListParams::default())
        .await
        .expect_err("no grant outside the watched namespace");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused}"
    );
    let untouched = elsewhere.get::<ActorCluster>("demo").await.unwrap();
    assert!(untouched.status.is_none(), "{:?}", untouched.status);
    assert!(elsewhere.get::<ServiceAccount>("demo-sigx").await.is_none());
    drop(operator);

    // Broken variant: the same Roles, the operator watching every namespace. Its cluster-wide
    // list is refused: it reconciles nothing (a new role gets no Deployment) and says why.
    let operator = Operator::spawn_watching(&cp, &config, RELEASE_NS, None);
    ns.role("billing", 1, json!({})).await;
    eventually("the refused cluster-wide watch in the log", || async {
        let log = operator.log_text();
        (log.contains("forbidden") && log.contains("actorclusters")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        ns.get::<Deployment>("billing").await.is_none(),
        "reconciled without a grant"
    );
}
