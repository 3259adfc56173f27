//! The chart's optional FlowSchema (`flowSchema.enabled`, issue 20) on the real API server
//! (`sigx_e2e::controlplane`), judged by API Priority and Fairness itself: every response says
//! which FlowSchema and priority level classified its request (`X-Kubernetes-PF-FlowSchema-UID`,
//! `X-Kubernetes-PF-PriorityLevel-UID`).
//!
//! - The API server accepts the rendered FlowSchema and PriorityLevelConfiguration, and its APF
//!   controller finds the level the schema names (`Dangling=False`).
//! - A Lease request of a ServiceAccount in a configured namespace (where the sidecars run) is
//!   classified into sigx's level; a Pod request of the same account, and a Lease request of an
//!   account in a namespace the chart was not given, stay in the built-in `workload-low`. The
//!   last two are what prove the first is not vacuous.
//! - The operator's own account's Lease requests in the release namespace (its leader-election
//!   Lease) go to the built-in `leader-election` level; its other requests stay where they were.
//!
//! Needs `make controlplane` and helm (`scripts/install-tools.sh manifests` puts it in
//! `.tools/bin`; `SIGX_HELM` overrides).

use http::Request;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::real_operator::eventually;

/// Where the ActorClusters (and so the sidecars) live.
const APPS: &str = "apps";
/// A namespace the chart's FlowSchema is not told about.
const OTHER: &str = "other";
/// The release namespace (the operator and its leader Lease).
const RELEASE: &str = "sigx-system";

/// The PriorityLevelConfiguration and the two FlowSchemas (the sidecars' Leases, the operator's
/// leader Lease) `helm template` renders with the FlowSchema on for `APPS`.
fn chart_flowschema() -> (PriorityLevelConfiguration, FlowSchema, FlowSchema) {
    let namespaces = format!("flowSchema.namespaces={{{APPS}}}");
    let docs = controlplane::chart_template(&[
        "--namespace",
        RELEASE,
        "--set",
        "flowSchema.enabled=true",
        "--set",
        &namespaces,
        "--show-only",
        "templates/flowschema.yaml",
    ]);
    let mut kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["FlowSchema", "FlowSchema", "PriorityLevelConfiguration"],
        "{docs:?}"
    );
    let of = |kind: &str, suffix: &str| {
        docs.iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.ends_with(suffix))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} *{suffix} in {docs:?}"))
    };
    (
        serde_json::from_value(of("PriorityLevelConfiguration", "-sidecar-leases"))
            .expect("a PriorityLevelConfiguration"),
        serde_json::from_value(of("FlowSchema", "-sidecar-leases")).expect("a FlowSchema"),
        serde_json::from_value(of("FlowSchema", "-operator-leader")).expect("a FlowSchema"),
    )
}

/// Which (FlowSchema uid, priority level uid) APF gave a GET of `path` by `client`. The answer
/// itself may be a 403: classification comes before authorization.
async fn classified(client: &kube::Client, path: &str) -> (String, String) {
    let request = Request::get(path)
        .body(Vec::new().into())
        .expect("a GET request");
    let response = client.send(request).await.expect("an answer");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .unwrap_or_else(|| panic!("no {name} on the answer to GET {path}"))
            .to_str()
            .unwrap()
            .to_string()
    };
    (
        header("X-Kubernetes-PF-FlowSchema-UID"),
        header("X-Kubernetes-PF-PriorityLevel-UID"),
    )
}

/// A client authenticated as a fresh ServiceAccount `sidecar` of `namespace`.
async fn account_client(cp: &ControlPlane, admin: &kube::Client, namespace: &str) -> kube::Client {
    named_account_client(cp, admin, namespace, "sidecar").await
}

/// A client authenticated as a fresh ServiceAccount `name` of `namespace`.
async fn named_account_client(
    cp: &ControlPlane,
    admin: &kube::Client,
    namespace: &str,
    name: &str,
) -> kube::Client {
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let config = cp
        .service_account_kubeconfig(admin, namespace, name, namespace)
        .await;
    ControlPlane::client_from(&config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_flowschema_takes_the_sidecars_lease_requests_out_of_workload_low() {
    let cp = ControlPlane::start();
    let admin = cp.client(APPS).await;
    controlplane::create_namespace(&admin, APPS).await;
    controlplane::create_namespace(&admin, OTHER).await;
    controlplane::create_namespace(&admin, RELEASE).await;

    let (level, schema, leader_schema) = chart_flowschema();
    let pp = PostParams::default();
    let level = Api::<PriorityLevelConfiguration>::all(admin.clone())
        .create(&pp, &level)
        .await
        .expect("the API server accepts the chart's PriorityLevelConfiguration");
    let schema = Api::<FlowSchema>::all(admin.clone())
        .create(&pp, &schema)
        .await
        .expect("the API server accepts the chart's FlowSchema");
    let (level_uid, schema_uid) = (level.uid().unwrap(), schema.uid().unwrap());
    let leader_schema = Api::<FlowSchema>::all(admin.clone())
        .create(&pp, &leader_schema)
        .await
        .expect("the API server accepts the chart's operator-leader FlowSchema");

    let schemas = Api::<FlowSchema>::all(admin.clone());
    eventually(
        "the FlowSchema's priority level found (Dangling=False)",
        || {
            let schemas = schemas.clone();
            let name = schema.name_any();
            async move {
                let s = schemas.get(&name).await.ok()?;
                s.status?
                    .conditions?
                    .into_iter()
                    .find(|c| c.type_ == "Dangling" && c.status.as_deref() == Some("False"))
            }
        },
    )
    .await;
    let workload_low = Api::<PriorityLevelConfiguration>::all(admin.clone())
        .get("workload-low")
        .await
        .expect("the built-in workload-low level")
        .uid()
        .unwrap();

    let sidecar = account_client(&cp, &admin, APPS).await;
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{APPS}/leases");
    // APF picks up a new FlowSchema through its informer: allow it a moment.
    let (fs, pl) = eventually("a sidecar account's Lease request in sigx's level", || {
        let sidecar = sidecar.clone();
        let leases = leases.clone();
        let level_uid = level_uid.clone();
        async move {
            let got = classified(&sidecar, &leases).await;
            (got.1 == level_uid).then_some(got)
        }
    })
    .await;
    assert_eq!(fs, schema_uid, "matched by the chart's FlowSchema");
    assert_eq!(pl, level_uid);

    // Only Lease requests: the same account's other traffic stays where it was.
    let (_, pods_level) = classified(&sidecar, &format!("/api/v1/namespaces/{APPS}/pods")).await;
    assert_eq!(
        pods_level, workload_low,
        "a Pod request of the sidecar's account stays in workload-low"
    );
    // Only the configured namespaces: an account elsewhere is not taken along.
    let stranger = account_client(&cp, &admin, OTHER).await;
    let (other_schema, other_level) = classified(
        &stranger,
        &format!("/apis/coordination.k8s.io/v1/namespaces/{OTHER}/leases"),
    )
    .await;
    assert_ne!(other_schema, schema_uid);
    assert_eq!(
        other_level, workload_low,
        "a Lease request of an account in a namespace the chart was not given stays in workload-low"
    );

    // The operator's leader Lease: its account (the one the chart renders) in the release
    // namespace, into the built-in leader-election level; its other requests stay put.
    let rules = leader_schema.spec.rules.as_ref();
    let subject = &rules.expect("the operator-leader FlowSchema's rules")[0].subjects[0];
    let operator_account = subject.service_account.as_ref().unwrap();
    assert_eq!(operator_account.namespace, RELEASE);
    let leader_election = Api::<PriorityLevelConfiguration>::all(admin.clone())
        .get("leader-election")
        .await
        .expect("the built-in leader-election level")
        .uid()
        .unwrap();
    let operator = named_account_client(&cp, &admin, RELEASE, &operator_account.name).await;
    let leader_uid = leader_schema.uid().unwrap();
    let release_leases = format!("/apis/coordination.k8s.io/v1/namespaces/{RELEASE}/leases");
    let (fs, pl) = eventually("the operator's Lease request in leader-election", || {
        let operator = operator.clone();
        let release_leases = release_leases.clone();
        let leader_election = leader_election.clone();
        async move {
            let got = classified(&operator, &release_leases).await;
            (got.1 == leader_election).then_some(got)
        }
    })
    .await;
    assert_eq!(
        fs, leader_uid,
        "matched by the chart's operator-leader FlowSchema"
    );
    assert_eq!(pl, leader_election);
    let (_, operator_pods) =
        classified(&operator, &format!("/api/v1/namespaces/{RELEASE}/pods")).await;
    assert_eq!(
        operator_pods, workload_low,
        "a Pod request of the operator's account stays in workload-low"
    );
}
