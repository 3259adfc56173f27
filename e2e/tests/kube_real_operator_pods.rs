//! What the real control plane judges about a role's pods (`sigx_e2e::controlplane`: real
//! kube-apiserver with its ServiceAccount admission and RBAC authorizer, real Deployment and
//! ReplicaSet controllers; no kubelet):
//!
//! - a role whose template names its own ServiceAccount (IRSA, Workload Identity, Vault) gets
//!   pods running as it, and RBAC lets that account manage Leases (a SubjectAccessReview says
//!   so) until the template stops naming it;
//! - the pods the API server admits carry the `/drain` preStop hook and no fixed UID;
//! - a template whose ports collide with the sidecar's, or with `hostNetwork`, is refused as a
//!   Stalled condition naming the reason;
//! - a Deployment sigx did not make, with a role's name, is never taken over: the role stalls
//!   `NotOwned` naming it, and renders once the foreign object is gone;
//! - a role's `spec.sidecar.env` (RUST_LOG, OTEL_*) survives the CRD's schema and lands in the
//!   sidecar container of the Deployment and of the pods admitted; a reserved name
//!   (`SIGX_*`) stalls the role instead;
//! - a pod bound to a node gets the node's zone label from the API server's PodTopologyLabels
//!   admission, and the sidecar's `SIGX_ZONE` resolves to it (locality's `meta.zone`).
//!
//! Needs `make controlplane` and `cargo build --workspace --bins`.

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Binding, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use sigx_crds::ActorRole;
use sigx_e2e::controlplane;
use sigx_e2e::real_operator::{Ns, eventually, start_in_ops};

const SIDECAR: &str = "ghcr.io/sigx/sidecar:0.1.0";

/// Whether RBAC lets `account` of `ns` update Leases there, as the API server's authorizer says.
async fn may_renew_leases(client: &kube::Client, ns: &str, account: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": format!("system:serviceaccount:{ns}:{account}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}")],
            "resourceAttributes": {"namespace": ns, "verb": "update",
                "group": "coordination.k8s.io", "resource": "leases"}},
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

async fn own_account_and_admitted_pods(client: &kube::Client) {
    let ns = Ns::create(client, "iam", json!({})).await;
    let _: ServiceAccount = ns
        .create_json(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "billing-irsa",
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/billing"}}}))
        .await;
    ns.cluster(json!({"image": SIDECAR})).await;
    let role = ns
        .role(
            "engine",
            1,
            json!({"template": {"spec": {"serviceAccountName": "billing-irsa", "containers": [{
                "name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}),
        )
        .await;
    let pods = eventually("a pod of engine admitted", || async {
        Some(ns.pods_of("engine").await).filter(|p| !p.is_empty())
    })
    .await;
    let spec = pods[0].spec.as_ref().unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("billing-irsa"));
    assert!(
        !may_renew_leases(client, "iam", "default").await,
        "the authorizer is really asked: an unbound account may not"
    );
    eventually(
        "the role's own account to be bound to the Lease Role",
        || async {
            may_renew_leases(client, "iam", "billing-irsa")
                .await
                .then_some(())
        },
    )
    .await;
    assert!(may_renew_leases(client, "iam", "demo-sigx").await);

    // What the API server admitted: the drain hook on the app, no fixed UID on the sidecar.
    let hook = spec.containers[0]
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|p| p.http_get.as_ref())
        .expect("the admitted pod has the /drain preStop hook");
    assert_eq!(hook.path.as_deref(), Some("/drain"));
    assert_eq!(hook.port, IntOrString::Int(9090));
    let uid = role.metadata.uid.clone().unwrap();
    assert_eq!(hook.http_headers.as_ref().unwrap()[0].value, uid);
    let sidecar = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "sigx-sidecar")
        .unwrap();
    let sc = sidecar.security_context.as_ref().unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_group), (None, None));
    assert!(
        spec.security_context
            .as_ref()
            .and_then(|s| s.fs_group)
            .is_none()
    );

    // The template stops naming its own account: the binding goes, and with it the access.
    ns.api::<ActorRole>()
        .patch(
            "engine",
            &PatchParams::default(),
            // A merge patch's null removes the field.
            &Patch::Merge(json!({"spec": {"template": {"spec": {"serviceAccountName": null}}}})),
        )
        .await
        .unwrap();
    eventually("the role's Lease RoleBinding to be removed", || async {
        ns.get::<RoleBinding>("engine-sigx-role-leases")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    eventually("the authorizer to refuse the unbound account", || async {
        (!may_renew_leases(client, "iam", "billing-irsa").await).then_some(())
    })
    .await;
}

async fn colliding_ports_and_host_network_stall_the_role(client: &kube::Client) {
    let ns = Ns::create(client, "ports", json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    let app = |extra: serde_json::Value| {
        let mut pod = json!({"containers": [{"name": "app", "image": "a",
            "ports": [{"name": "prom", "containerPort": 9090}]}]});
        for (k, v) in extra.as_object().unwrap() {
            pod[k] = v.clone();
        }
        json!({"template": {"spec": pod}})
    };
    ns.role("prom", 1, app(json!({}))).await;
    let stalled = eventually("the port conflict to stall the role", || async {
        ns.role_condition("prom", "Stalled")
            .await
            .filter(|c| c.status == "True" && c.reason == "PortConflict")
    })
    .await;
    assert!(
        stalled.message.contains("9090") && stalled.message.contains("healthPort"),
        "{stalled:?}"
    );
    ns.role("hostnet", 1, app(json!({"hostNetwork": true})))
        .await;
    eventually("hostNetwork to stall the role", || async {
        ns.role_condition("hostnet", "Stalled")
            .await
            .filter(|c| c.status == "True" && c.reason == "HostNetwork")
    })
    .await;
    // Moving the sidecar's health port clears the conflict.
    ns.api::<ActorRole>()
        .patch(
            "prom",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sidecar": {"healthPort": 9191}}})),
        )
        .await
        .unwrap();
    let pods = eventually("prom's pod once the health port moved", || async {
        Some(ns.pods_of("prom").await).filter(|p| !p.is_empty())
    })
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
        .clone();
    let health = sidecar
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("health"))
        .unwrap();
    assert_eq!(health.container_port, 9191);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_runs_as_its_own_service_account_with_lease_access() {
    let (_cp, client, _operator) = start_in_ops().await;
    own_account_and_admitted_pods(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_ports_and_host_network_are_refused_as_stalled() {
    let (_cp, client, _operator) = start_in_ops().await;
    colliding_ports_and_host_network_stall_the_role(&client).await;
}

/// The zone reaches the sidecar without the operator reading Nodes: the downward API cannot
/// read a Node's labels, but the API server copies the node's `topology.kubernetes.io/zone`
/// onto the Pod when the scheduler binds it (PodTopologyLabels, on by default since 1.35), and
/// the sidecar's `SIGX_ZONE` is a downward-API reference to that Pod label. Before 1.35 the API
/// server copies nothing, so the label and the sidecar's zone stay empty, as the README says.
async fn a_bound_pod_carries_its_nodes_zone_to_the_sidecar(client: &kube::Client) {
    let copied_zone = (controlplane::server_minor(client).await >= 35).then_some("eu-west-1b");
    // The node exists before its pod is bound, as in a real cluster: the admission plugin
    // reads nodes from its informer, which a node created a moment before the binding may not
    // have reached yet.
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-zb-1", "labels": {
            "topology.kubernetes.io/zone": "eu-west-1b",
            "topology.kubernetes.io/region": "eu-west-1"}},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let ns = Ns::create(client, "zones", json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 1, json!({})).await;
    let pods = eventually("a pod of engine admitted", || async {
        Some(ns.pods_of("engine").await).filter(|p| !p.is_empty())
    })
    .await;
    let name = pods[0].name_any();
    // What kube-scheduler does: a Binding of the pod to the node.
    let binding: Binding = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "worker-zb-1"},
    }))
    .unwrap();
    let pods_api = ns.api::<Pod>();
    let _: serde_json::Value = pods_api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await
        .unwrap();
    let pod = pods_api.get(&name).await.unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("worker-zb-1")
    );
    assert_eq!(
        pod.labels()
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        copied_zone,
        "the API server copies the node's zone onto the pod from 1.35 on: {:?}",
        pod.labels()
    );
    let sidecar = pod
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "sigx-sidecar")
        .unwrap();
    let path = sidecar
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "SIGX_ZONE")
        .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
        .map(|f| f.field_path.clone())
        .expect("SIGX_ZONE from the downward API");
    // Resolve the reference as the kubelet does: `metadata.labels['<key>']`.
    let key = path
        .strip_prefix("metadata.labels['")
        .and_then(|k| k.strip_suffix("']"))
        .unwrap_or_else(|| panic!("SIGX_ZONE reads a pod label, not {path}"));
    assert_eq!(pod.labels().get(key).map(String::as_str), copied_zone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_to_a_node_gets_the_nodes_zone_for_its_sidecar() {
    let (_cp, client, _operator) = start_in_ops().await;
    a_bound_pod_carries_its_nodes_zone_to_the_sidecar(&client).await;
}

/// A Deployment someone else made, named like a role (a role's Deployment is the role's own
/// name): the operator must not apply over it (its pods, image and replicas would be replaced).
async fn a_foreign_deployment_is_refused_not_adopted(client: &kube::Client) {
    use k8s_openapi::api::apps::v1::Deployment;
    let ns = Ns::create(client, "foreign", json!({})).await;
    let foreign: Deployment = ns
        .create_json(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "engine", "labels": {"app": "legacy"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "legacy"}},
                "template": {"metadata": {"labels": {"app": "legacy"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}))
        .await;
    ns.cluster(json!({"image": SIDECAR})).await;
    ns.role("engine", 1, json!({})).await;
    let stalled = eventually("the role to stall NotOwned", || async {
        ns.role_condition("engine", "Stalled")
            .await
            .filter(|c| c.status == "True" && c.reason == "NotOwned")
    })
    .await;
    assert!(
        stalled.message.contains("Deployment foreign/engine")
            && stalled.message.contains("not managed by sigx"),
        "{stalled:?}"
    );
    let now: Deployment = ns.get("engine").await.unwrap();
    assert_eq!(
        now.metadata.uid, foreign.metadata.uid,
        "the same object, untouched"
    );
    let spec = &now.spec;
    assert_eq!(spec.replicas, Some(2));
    let containers = &spec.template.spec.as_ref().unwrap().containers;
    assert_eq!(
        containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["web"],
        "no sigx container was applied onto it"
    );
    assert!(!now.labels().contains_key("app.kubernetes.io/managed-by"));
    // Its owner removes it: the role renders its own.
    ns.api::<Deployment>()
        .delete("engine", &Default::default())
        .await
        .unwrap();
    eventually("the role's own Deployment", || async {
        ns.get::<Deployment>("engine").await.filter(|d| {
            d.labels()
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some("sigx-operator")
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_deployment_with_the_roles_name_is_not_taken_over() {
    let (_cp, client, _operator) = start_in_ops().await;
    a_foreign_deployment_is_refused_not_adopted(&client).await;
}

/// The cluster's condition `type_`, if the cluster `demo` has one.
async fn cluster_condition(
    ns: &Ns,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    ns.get::<sigx_crds::ActorCluster>("demo")
        .await?
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
}

/// A ServiceAccount someone else made with the name the cluster's sidecars run as
/// (`<cluster>-sigx`): the operator must not apply over it, nor bind the Lease Role to it; the
/// cluster says so in its status until the account is gone.
async fn a_foreign_service_account_stalls_the_cluster(client: &kube::Client) {
    let ns = Ns::create(client, "foreign-sa", json!({})).await;
    let foreign: ServiceAccount = ns
        .create_json(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "demo-sigx", "labels": {"team": "payments"},
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/payments"}}}))
        .await;
    ns.cluster(json!({"image": SIDECAR})).await;
    let stalled = eventually("the cluster to stall NotOwned", || async {
        cluster_condition(&ns, "Stalled")
            .await
            .filter(|c| c.status == "True" && c.reason == "NotOwned")
    })
    .await;
    assert!(
        stalled.message.contains("ServiceAccount foreign-sa/demo-sigx")
            && stalled.message.contains("not managed by sigx")
            // The manager that created it: the test's client (kube-rs' default agent).
            && stalled.message.contains("its fields belong to "),
        "{stalled:?}"
    );
    let ready = cluster_condition(&ns, "Ready").await.unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NotOwned")
    );
    assert_eq!(ready.message, stalled.message);
    let warnings = eventually("a NotOwned Warning Event on the cluster", || async {
        Some(ns.events_for("demo", "NotOwned").await).filter(|e| !e.is_empty())
    })
    .await;
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(warnings.len(), 1, "one Event, not one per retry");
    let now: ServiceAccount = ns.get("demo-sigx").await.unwrap();
    assert_eq!(now.metadata.uid, foreign.metadata.uid, "the same object");
    assert_eq!(now.labels(), foreign.labels(), "its labels untouched");
    assert!(
        now.owner_references().is_empty(),
        "no owner reference added"
    );
    assert_eq!(now.annotations(), foreign.annotations());
    assert!(
        ns.get::<RoleBinding>("demo-sigx-leases").await.is_none(),
        "the Lease Role is not bound to someone else's account"
    );
    assert!(!may_renew_leases(client, "foreign-sa", "demo-sigx").await);

    // Its owner removes it: the cluster renders its own and the stall clears.
    ns.api::<ServiceAccount>()
        .delete("demo-sigx", &Default::default())
        .await
        .unwrap();
    eventually("the cluster to stop being stalled", || async {
        cluster_condition(&ns, "Stalled")
            .await
            .filter(|c| c.status == "False")
    })
    .await;
    let own: ServiceAccount = ns
        .get("demo-sigx")
        .await
        .expect("the cluster's own account");
    assert_eq!(
        own.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("sigx-operator")
    );
    assert_eq!(own.owner_references()[0].kind, "ActorCluster");
    let ready = cluster_condition(&ns, "Ready").await.unwrap();
    // Without a kubelet no sidecar runs: what is left missing is a host, nothing of ours.
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NoActiveHosts"),
        "{ready:?}"
    );
    eventually(
        "the Lease Role bound to the cluster's own account",
        || async {
            may_renew_leases(client, "foreign-sa", "demo-sigx")
                .await
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_service_account_with_the_clusters_name_is_not_taken_over() {
    let (_cp, client, _operator) = start_in_ops().await;
    a_foreign_service_account_stalls_the_cluster(&client).await;
}

/// A role's extra sidecar environment, through the real API server (the CRD's schema prunes
/// unknown fields) and the real ReplicaSet controller into the pods.
async fn a_roles_sidecar_env_reaches_its_pods(client: &kube::Client) {
    use k8s_openapi::api::apps::v1::Deployment;
    let ns = Ns::create(client, "sidecar-env", json!({})).await;
    ns.cluster(json!({"image": SIDECAR})).await;
    let env = json!([
        {"name": "RUST_LOG", "value": "sigx_sidecar=debug"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector:4317"},
    ]);
    let role = ns
        .role("engine", 1, json!({"sidecar": {"env": env.clone()}}))
        .await;
    assert_eq!(
        serde_json::to_value(&role.spec.sidecar.as_ref().unwrap().env).unwrap(),
        env,
        "the API server kept spec.sidecar.env"
    );
    let sidecar_env = |spec: &k8s_openapi::api::core::v1::PodSpec| -> Vec<(String, String)> {
        spec.init_containers
            .iter()
            .flatten()
            .find(|c| c.name == "sigx-sidecar")
            .and_then(|c| c.env.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.name == "RUST_LOG" || e.name.starts_with("OTEL_"))
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    };
    let want = vec![
        ("RUST_LOG".to_owned(), "sigx_sidecar=debug".to_owned()),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            "http://otel-collector:4317".to_owned(),
        ),
    ];
    let deployment: Deployment =
        eventually("the role's Deployment", || async { ns.get("engine").await }).await;
    assert_eq!(
        sidecar_env(deployment.spec.template.spec.as_ref().unwrap()),
        want
    );
    let pods = eventually("a pod of engine admitted", || async {
        Some(ns.pods_of("engine").await).filter(|p| !p.is_empty())
    })
    .await;
    assert_eq!(sidecar_env(pods[0].spec.as_ref().unwrap()), want);
    let app = &pods[0].spec.as_ref().unwrap().containers[0];
    assert!(
        app.env.iter().flatten().all(|e| e.name != "RUST_LOG"),
        "only the sidecar gets it"
    );

    // A name the operator sets is refused, naming it; the role renders nothing.
    ns.role(
        "web",
        1,
        json!({"sidecar": {"env": [{"name": "SIGX_TTL_MS", "value": "1"}]}}),
    )
    .await;
    let stalled = eventually("web to stall on the reserved name", || async {
        ns.role_condition("web", "Stalled")
            .await
            .filter(|c| c.status == "True")
    })
    .await;
    assert_eq!(stalled.reason, "InvalidSpec", "{stalled:?}");
    assert!(stalled.message.contains("SIGX_TTL_MS"), "{stalled:?}");
    assert!(ns.get::<Deployment>("web").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_sidecar_env_lands_in_its_deployment_and_pods() {
    let (_cp, client, _operator) = start_in_ops().await;
    a_roles_sidecar_env_reaches_its_pods(&client).await;
}
