//! The operator against the Kubernetes API double, with the real kube client and the real
//! controller loop: example CRs in, Deployment/RBAC/Secret/PDB out; fake hosts writing Leases
//! drive the ActorCluster status; scaling, cascade on delete, and surviving an API outage.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, ActorRole, NodeCount};
use sigx_e2e::kube_double::{KubeDouble, Mode, ResourceRef};
use sigx_operator::{Operator, Settings};

const NS: &str = "apps";
const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `probe` until it returns Some, or panics naming `what` after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn example<T: serde::de::DeserializeOwned>(file: &str) -> T {
    // The crate's directory at run time (a reused target dir may come from another checkout).
    let root =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let path = format!("{root}/../examples/k8s/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parse {path}: {e}"))
}

/// The CRDs' CEL rules as the double's admission for `actors.sigx.dev`, as a real API server
/// evaluates them.
fn admit_sigx(double: &KubeDouble) {
    double.admit_with("actors.sigx.dev", |object, old| {
        let kind = object["kind"].as_str().unwrap_or_default();
        match sigx_crds::cel::admit(kind, object, old) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refusal)) => Err(refusal.to_string()),
            Err(e) => Err(e.to_string()),
        }
    });
}

fn settings() -> Settings {
    let mut s = Settings::single("op-test");
    s.namespace = Some(NS.into());
    s.debounce = Duration::from_millis(10);
    s.backoff_base = Duration::from_millis(50);
    s.backoff_max = Duration::from_millis(400);
    s.watch_backoff = (Duration::from_millis(50), Duration::from_millis(300));
    s
}

struct Harness {
    double: KubeDouble,
    client: Client,
    operator: tokio::task::JoinHandle<()>,
    metrics: std::sync::Arc<sigx_operator::metrics::Metrics>,
}

impl Harness {
    /// The double, and an operator on its own named client (so it can be partitioned).
    async fn start() -> Self {
        Self::start_with(true).await
    }

    /// Without admission, the double takes objects a real API server would refuse (objects
    /// that predate a rule).
    async fn start_with(admission: bool) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let double = KubeDouble::start().await;
        double.collect_orphans(true);
        if admission {
            admit_sigx(&double);
        }
        let client = double.client();
        let operator =
            Operator::new(double.client_named("operator"), settings()).with_random(|| [7u8; 32]);
        let metrics = operator.metrics();
        let operator = tokio::spawn(async move {
            operator
                .run(std::future::pending())
                .await
                .expect("operator runs");
        });
        Harness {
            double,
            client,
            operator,
            metrics,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn apply_examples(&self) -> (ActorCluster, ActorRole, ActorRole) {
        let pp = PostParams::default();
        let cluster = self
            .api::<ActorCluster>()
            .create(&pp, &example("cluster.yaml"))
            .await
            .unwrap();
        let engine = self
            .api::<ActorRole>()
            .create(&pp, &example("role-engine.yaml"))
            .await
            .unwrap();
        let web = self
            .api::<ActorRole>()
            .create(&pp, &example("role-web.yaml"))
            .await
            .unwrap();
        (cluster, engine, web)
    }

    async fn get<K>(&self, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.api::<K>().get_opt(name).await.unwrap()
    }

    async fn cluster_status(&self, name: &str) -> Option<sigx_crds::ActorClusterStatus> {
        self.get::<ActorCluster>(name).await.and_then(|c| c.status)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.operator.abort();
    }
}

fn descriptor(id: &str, status: &str, node: Option<&str>) -> String {
    let mut d = json!({
        "id": id,
        "advertise": format!("{id}.pods:7311"),
        "types": ["Counter"],
        "statefulTypes": ["Counter"],
        "meta": {},
        "status": status,
        "startedAtUnixMs": 1_700_000_000_000i64,
    });
    if let Some(n) = node {
        d["meta"]["node"] = json!(n);
    }
    d.to_string()
}

/// A Lease as the sidecar's Kubernetes membership provider writes it (DESIGN.md §3).
fn host_lease(id: &str, role: &str, status: &str, node: Option<&str>, ttl: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(id.into()),
            labels: Some(BTreeMap::from([
                ("actors.sigx.dev/cluster".into(), "demo".into()),
                ("actors.sigx.dev/role".into(), role.into()),
            ])),
            annotations: Some(BTreeMap::from([(
                "actors.sigx.dev/descriptor".into(),
                descriptor(id, status, node),
            )])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(id.into()),
            lease_duration_seconds: Some(ttl),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    }
}

fn condition<'a>(
    s: &'a sigx_crds::ActorClusterStatus,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == t)
}

#[tokio::test]
async fn example_crs_produce_deployment_rbac_secret_and_pdb() {
    let h = Harness::start().await;
    let (cluster, engine, _web) = h.apply_examples().await;
    let cluster_uid = cluster.uid().unwrap();

    let deployment: Deployment = eventually("the engine Deployment", || h.get("engine")).await;
    assert_eq!(deployment.spec.replicas, Some(3));
    let owner = &deployment.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("ActorRole", engine.uid().unwrap().as_str(), Some(true))
    );
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    let sidecar = pod
        .init_containers
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.name == "sigx-sidecar"))
        .expect("the sidecar is an init container");
    assert_eq!(
        sidecar.restart_policy.as_deref(),
        Some("Always"),
        "a native sidecar"
    );
    assert_eq!(sidecar.image.as_deref(), Some("ghcr.io/sigx/sidecar:0.1.0"));
    let pod_labels = deployment
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(pod_labels["actors.sigx.dev/cluster"], "demo");
    assert_eq!(pod_labels["actors.sigx.dev/role"], "engine");
    assert_eq!(pod_labels["actors.sigx.dev/type.Counter"], "true");
    let managers = h
        .double
        .field_managers(
            &ResourceRef::new("apps", "v1", "deployments"),
            Some(NS),
            "engine",
        )
        .unwrap();
    assert_eq!(
        managers,
        ["sigx-operator"],
        "written by server-side apply under one field manager"
    );
    let _web: Deployment = eventually("the web Deployment", || h.get("web")).await;

    let pdb: PodDisruptionBudget = eventually("the engine PDB", || h.get("engine")).await;
    let pdb_spec = pdb.spec.unwrap();
    assert_eq!(
        pdb_spec.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );

    let sa: ServiceAccount = eventually("the sidecar ServiceAccount", || h.get("demo-sigx")).await;
    assert_eq!(sa.owner_references()[0].uid, cluster_uid);
    let role: Role = eventually("the Lease Role", || h.get("demo-sigx-leases")).await;
    let rules = role.rules.unwrap();
    assert!(
        rules
            .iter()
            .all(|r| r.resources.as_deref() == Some(&["leases".to_string()][..])),
        "sidecars may touch Leases and nothing else: {rules:?}"
    );
    let binding: RoleBinding = eventually("the RoleBinding", || h.get("demo-sigx-leases")).await;
    assert_eq!(binding.subjects.unwrap()[0].name, "demo-sigx");

    let secret: Secret = eventually("the generated Secret", || h.get("demo-sigx-secret")).await;
    let value = &secret.data.as_ref().unwrap()["secret"];
    assert_eq!(
        value.0,
        "07".repeat(32).into_bytes(),
        "32 bytes from the generator, hex-encoded"
    );
    assert_eq!(secret.immutable, Some(true));
    assert_eq!(secret.owner_references()[0].uid, cluster_uid);

    let status = eventually("SecretReady on the cluster", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| condition(s, "SecretReady").is_some_and(|c| c.status == "True"))
    })
    .await;
    assert_eq!(status.observed_generation, cluster.metadata.generation);
    assert_eq!(
        condition(&status, "SecretReady").unwrap().reason,
        "Generated"
    );
    assert_eq!(
        status.summary.as_deref(),
        Some("0 host(s) / node(s) unknown")
    );
    let role_status = eventually("the role's selector", || async {
        h.get::<ActorRole>("engine")
            .await
            .and_then(|r| r.status)
            .filter(|s| s.selector.is_some())
    })
    .await;
    assert_eq!(
        role_status.selector.as_deref(),
        Some("actors.sigx.dev/cluster=demo,actors.sigx.dev/role=engine")
    );

    let events = h
        .double
        .list_json(&ResourceRef::new("events.k8s.io", "v1", "events"), Some(NS));
    assert!(
        events.iter().any(|e| e["reason"] == "SecretGenerated"),
        "an Event tells the user the secret was generated: {events:?}"
    );
    assert!(
        events
            .iter()
            .all(|e| !e.to_string().contains(&"07".repeat(32))),
        "the secret never appears in an Event"
    );

    // A spec change re-renders, but the secret is never rotated.
    let secret_rv = secret.resource_version();
    h.api::<ActorCluster>()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.2.0"}}})),
        )
        .await
        .unwrap();
    let sidecar_image = |role: &'static str| {
        let h = &h;
        async move {
            let d: Deployment = h.get(role).await?;
            d.spec
                .template
                .spec?
                .init_containers?
                .into_iter()
                .find(|c| c.name == "sigx-sidecar")?
                .image
        }
    };
    eventually("the new sidecar image in the Deployment", || async {
        (sidecar_image("engine").await? == "ghcr.io/sigx/sidecar:0.2.0").then_some(())
    })
    .await;
    // One role moves ahead (a canary); the other keeps the cluster's image.
    h.api::<ActorRole>()
        .patch(
            "engine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.3.0"}}})),
        )
        .await
        .unwrap();
    eventually("the role's own sidecar image in its Deployment", || async {
        (sidecar_image("engine").await? == "ghcr.io/sigx/sidecar:0.3.0").then_some(())
    })
    .await;
    // web's roll of the cluster's change was paced behind engine's (name order); it follows.
    eventually("web to follow with the cluster's image", || async {
        (sidecar_image("web").await? == "ghcr.io/sigx/sidecar:0.2.0").then_some(())
    })
    .await;
    // A cluster that names no image runs the operator's own release.
    h.api::<ActorCluster>()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sidecar": {"image": null}}})),
        )
        .await
        .unwrap();
    eventually("the operator's default sidecar image", || async {
        (sidecar_image("web").await? == sigx_crds::DEFAULT_SIDECAR_IMAGE).then_some(())
    })
    .await;
    assert_eq!(
        sidecar_image("engine").await.as_deref(),
        Some("ghcr.io/sigx/sidecar:0.3.0")
    );
    let again: Secret = h.get("demo-sigx-secret").await.unwrap();
    assert_eq!(
        again.resource_version(),
        secret_rv,
        "the generated secret is never rewritten"
    );
    assert_eq!(h.metrics.secrets_generated.get(), 1);
}

#[tokio::test]
async fn fleet_status_counts_hosts_and_nodes_from_leases() {
    let h = Harness::start().await;
    h.apply_examples().await;
    let leases = h.api::<Lease>();
    let pp = PostParams::default();
    for id in ["engine-0-a", "engine-1-a", "engine-2-a"] {
        leases
            .create(&pp, &host_lease(id, "engine", "active", Some("node-1"), 15))
            .await
            .unwrap();
    }
    // Both roles: a reconciliation triggered by a Lease may run before the role cache holds
    // `web` (the role controller's store fills from its own watch); a later one lists it.
    let status = eventually("3 host(s) / 1 node(s) of both roles", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| s.summary.as_deref() == Some("3 host(s) / 1 node(s)") && s.roles.len() == 2)
    })
    .await;
    assert_eq!(status.hosts, 3);
    assert_eq!(status.nodes, NodeCount::Known(1));
    assert_eq!(status.counts.active, 3);
    assert_eq!(status.counts.fenced, 0);
    assert_eq!(condition(&status, "Ready").unwrap().status, "True");
    let roles: BTreeMap<_, _> = status
        .roles
        .iter()
        .map(|r| (r.name.as_str(), r.hosts))
        .collect();
    assert_eq!(
        roles,
        BTreeMap::from([("engine", 3), ("web", 0)]),
        "every role listed, even one with no host"
    );
    let engine = eventually("the engine role counting its hosts", || async {
        h.get::<ActorRole>("engine")
            .await
            .and_then(|r| r.status)
            .filter(|s| s.hosts == 3)
    })
    .await;
    assert_eq!(engine.hosts, 3);

    // Heartbeats alone (renewTime changes, same descriptor) must not fan out into
    // reconciliations: 30 renewals, at most one periodic requeue per kind in the window.
    let reconciles = || {
        (
            h.metrics.reconcile_count("ActorCluster"),
            h.metrics.reconcile_count("ActorRole"),
        )
    };
    // Let the statuses settle first (each status write triggers its own watchers once).
    let mut before = reconciles();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = reconciles();
        if now == before {
            break;
        }
        before = now;
    }
    for _ in 0..10 {
        for id in ["engine-0-a", "engine-1-a", "engine-2-a"] {
            let mut l = leases.get(id).await.unwrap();
            l.spec.as_mut().unwrap().renew_time =
                Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
            leases.replace(id, &pp, &l).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let after = reconciles();
    assert!(
        after.0 - before.0 <= 1 && after.1 - before.1 <= 1,
        "heartbeats must not fan out into reconciles: {before:?} -> {after:?}"
    );

    // A host that leaves takes its Lease with it.
    leases
        .delete("engine-2-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually("2 host(s)", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| s.summary.as_deref() == Some("2 host(s) / 1 node(s)"))
    })
    .await;
}

#[tokio::test]
async fn a_fleet_that_reports_no_node_is_said_to_have_said_nothing() {
    let h = Harness::start().await;
    h.apply_examples().await;
    let leases = h.api::<Lease>();
    for id in ["web-0-a", "web-1-a", "web-2-a"] {
        leases
            .create(
                &PostParams::default(),
                &host_lease(id, "web", "active", None, 15),
            )
            .await
            .unwrap();
    }
    let status = eventually("the said-nothing form", || async {
        h.cluster_status("demo").await.filter(|s| s.hosts == 3)
    })
    .await;
    assert_eq!(status.nodes, NodeCount::Unknown);
    assert_eq!(
        status.summary.as_deref(),
        Some("3 host(s) / node(s) unknown")
    );
    let raw = h
        .double
        .get_json(
            &ResourceRef::new("actors.sigx.dev", "v1alpha1", "actorclusters"),
            Some(NS),
            "demo",
        )
        .unwrap();
    assert_eq!(raw["status"]["nodes"], "unknown", "never a guessed number");
}

#[tokio::test]
async fn a_lease_that_stops_renewing_counts_as_fenced() {
    let h = Harness::start().await;
    let mut cluster: ActorCluster = example("cluster.yaml");
    cluster.spec.membership.heartbeat_seconds = 1;
    cluster.spec.membership.ttl_seconds = 3;
    h.api::<ActorCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let leases = h.api::<Lease>();
    leases
        .create(
            &PostParams::default(),
            &host_lease("engine-0-a", "engine", "active", Some("n1"), 1),
        )
        .await
        .unwrap();
    eventually("one active host", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| s.counts.active == 1)
    })
    .await;
    // Nobody renews: after the Lease duration (plus the margin) on the operator's own clock,
    // the host has fenced itself by DESIGN.md §3.
    let status = eventually("the lapsed host counted as fenced", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| s.counts.fenced == 1)
    })
    .await;
    assert_eq!(status.counts.active, 0);
    let degraded = condition(&status, "Degraded").unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "HostsFenced")
    );
}

#[tokio::test]
async fn scaling_a_role_changes_the_deployment_and_status_follows() {
    let h = Harness::start().await;
    h.apply_examples().await;
    let _: Deployment = eventually("the engine Deployment", || h.get("engine")).await;

    // `kubectl scale actorrole engine --replicas=5` goes through the scale subresource.
    h.api::<ActorRole>()
        .patch_scale(
            "engine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    eventually("5 replicas in the Deployment", || async {
        h.get::<Deployment>("engine")
            .await
            .filter(|d| d.spec.replicas == Some(5))
    })
    .await;

    // The Deployment controller (played by the test) reports a finished rollout of the current
    // generation; the role follows.
    let generation = h
        .get::<Deployment>("engine")
        .await
        .unwrap()
        .metadata
        .generation;
    h.api::<Deployment>()
        .patch_status(
            "engine",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 5, "readyReplicas": 5,
                "updatedReplicas": 5, "availableReplicas": 5, "observedGeneration": generation}})),
        )
        .await
        .unwrap();
    let status = eventually("the role's status to follow the Deployment", || async {
        h.get::<ActorRole>("engine")
            .await
            .and_then(|r| r.status)
            .filter(|s| s.ready_replicas == 5)
    })
    .await;
    assert_eq!(status.replicas, 5);
    assert_eq!(
        status.conditions[0].reason, "HostsNotJoined",
        "pods are ready but no host holds a Lease yet"
    );
    let scale = h.api::<ActorRole>().get_scale("engine").await.unwrap();
    assert_eq!(scale.status.unwrap().replicas, 5);
}

#[tokio::test]
async fn deleting_a_cluster_keeps_what_its_roles_need_until_they_go() {
    let h = Harness::start().await;
    h.apply_examples().await;
    let _: Secret = eventually("the generated Secret", || h.get("demo-sigx-secret")).await;
    let _: RoleBinding = eventually("the RoleBinding", || h.get("demo-sigx-leases")).await;
    // Once the roles co-own the pods' objects (render::co_owned_by_roles); the Secret's owners
    // are set last in a reconciliation, after the ServiceAccount's.
    let co_owned = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        refs.iter().filter(|o| o.kind == "ActorRole").count() == 2
    };
    eventually("the roles to co-own the ServiceAccount", || async {
        h.get::<ServiceAccount>("demo-sigx")
            .await
            .filter(|sa| co_owned(sa.owner_references()))
    })
    .await;
    eventually("the roles to co-own the Secret", || async {
        h.get::<Secret>("demo-sigx-secret")
            .await
            .filter(|s| co_owned(s.owner_references()))
    })
    .await;

    h.api::<ActorCluster>()
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    // The roles' pods keep their ServiceAccount, RBAC and Secret; the roles say what happened.
    assert!(h.get::<Secret>("demo-sigx-secret").await.is_some());
    assert!(h.get::<ServiceAccount>("demo-sigx").await.is_some());
    assert!(h.get::<Role>("demo-sigx-leases").await.is_some());
    assert!(h.get::<RoleBinding>("demo-sigx-leases").await.is_some());
    let status = eventually("the role to report its missing cluster", || async {
        h.get::<ActorRole>("engine")
            .await
            .and_then(|r| r.status)
            .filter(|s| s.conditions.iter().any(|c| c.reason == "ClusterNotFound"))
    })
    .await;
    assert_eq!(status.conditions[0].status, "False");

    // With the last role gone, the garbage collector takes them.
    h.api::<ActorRole>()
        .delete("engine", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        h.get::<Secret>("demo-sigx-secret").await.is_some(),
        "web still needs it"
    );
    // Deleting a role removes its Deployment and PDB.
    h.api::<ActorRole>()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    assert!(h.get::<Deployment>("web").await.is_none());
    assert!(h.get::<PodDisruptionBudget>("web").await.is_none());
    assert!(h.get::<Secret>("demo-sigx-secret").await.is_none());
    assert!(h.get::<ServiceAccount>("demo-sigx").await.is_none());
    assert!(h.get::<Role>("demo-sigx-leases").await.is_none());
    assert!(h.get::<RoleBinding>("demo-sigx-leases").await.is_none());
}

#[tokio::test]
async fn the_operator_survives_an_api_outage_and_catches_up() {
    let h = Harness::start().await;
    let (_, _, _) = h.apply_examples().await;
    let _: Deployment = eventually("the engine Deployment", || h.get("engine")).await;
    let failures_before = h
        .metrics
        .failures
        .get_or_create(&sigx_operator::metrics::KindLabel {
            kind: "ActorCluster",
        })
        .get();

    // The operator loses the API; the rest of the world keeps writing.
    h.double.partition("operator", Mode::Failing);
    let pp = PostParams::default();
    let mut late: ActorRole = example("role-web.yaml");
    late.metadata.name = Some("late".into());
    h.api::<ActorRole>().create(&pp, &late).await.unwrap();
    h.api::<ActorRole>()
        .patch(
            "engine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    h.api::<Lease>()
        .create(
            &pp,
            &host_lease("engine-0-a", "engine", "active", Some("n1"), 15),
        )
        .await
        .unwrap();
    // Wait (bounded, not a fixed sleep: a loaded CI machine may be slow to run the periodic
    // reconcile) until a reconcile has failed against the partitioned API.
    let failures_now = || {
        h.metrics
            .failures
            .get_or_create(&sigx_operator::metrics::KindLabel {
                kind: "ActorCluster",
            })
            .get()
    };
    let waited = tokio::time::Instant::now();
    while failures_now() <= failures_before && waited.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        h.get::<Deployment>("late").await.is_none(),
        "the partitioned operator cannot have acted"
    );
    let failures_during = failures_now();
    assert!(
        failures_during > failures_before,
        "periodic reconciles failed and were retried with backoff"
    );
    assert!(
        !h.operator.is_finished(),
        "the operator keeps running through the outage"
    );

    h.double.partition("operator", Mode::Serving);
    eventually("the late role's Deployment", || h.get::<Deployment>("late")).await;
    eventually("the engine scaled to 4", || async {
        h.get::<Deployment>("engine")
            .await
            .filter(|d| d.spec.replicas == Some(4))
    })
    .await;
    eventually("the host that joined during the outage", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| s.hosts == 1 && s.counts.active == 1)
    })
    .await;
}

#[tokio::test]
async fn a_referenced_secret_is_checked_and_never_generated() {
    let h = Harness::start().await;
    let mut cluster: ActorCluster = example("cluster.yaml");
    cluster.spec.membership.heartbeat_seconds = 1;
    cluster.spec.membership.ttl_seconds = 3;
    cluster.spec.auth.secret_ref = Some(sigx_crds::SecretKeyRef {
        name: "mine".into(),
        key: "hmac".into(),
    });
    h.api::<ActorCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let status = eventually("SecretNotFound", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| condition(s, "SecretReady").is_some_and(|c| c.reason == "SecretNotFound"))
    })
    .await;
    assert_eq!(condition(&status, "Ready").unwrap().status, "False");
    assert!(
        h.get::<Secret>("demo-sigx-secret").await.is_none(),
        "nothing is generated"
    );

    // The user creates it with only whitespace: refused, as the sidecar would refuse it.
    let secret = |value: &str| Secret {
        metadata: ObjectMeta {
            name: Some("mine".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "hmac".to_string(),
            k8s_openapi::ByteString(value.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    h.api::<Secret>()
        .create(&PostParams::default(), &secret("  \n"))
        .await
        .unwrap();
    eventually("SecretEmpty", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| condition(s, "SecretReady").is_some_and(|c| c.reason == "SecretEmpty"))
    })
    .await;
    h.api::<Secret>()
        .replace("mine", &PostParams::default(), &{
            let mut s = secret("s3cret-s3cret");
            s.metadata.resource_version = h.get::<Secret>("mine").await.unwrap().resource_version();
            s
        })
        .await
        .unwrap();
    eventually("SecretReady", || async {
        h.cluster_status("demo").await.filter(|s| {
            condition(s, "SecretReady")
                .is_some_and(|c| c.status == "True" && c.reason == "Referenced")
        })
    })
    .await;

    // A rotation starts: the secret to accept must exist too, or no pod would start.
    h.api::<ActorCluster>()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"auth": {"acceptSecretRef": {"name": "next", "key": "hmac"}}}}),
            ),
        )
        .await
        .unwrap();
    let status = eventually("AcceptSecretNotFound", || async {
        h.cluster_status("demo").await.filter(|s| {
            condition(s, "SecretReady").is_some_and(|c| c.reason == "AcceptSecretNotFound")
        })
    })
    .await;
    assert_eq!(condition(&status, "SecretReady").unwrap().status, "False");
    let mut next = secret("n3xt-s3cret");
    next.metadata.name = Some("next".into());
    h.api::<Secret>()
        .create(&PostParams::default(), &next)
        .await
        .unwrap();
    let status = eventually("Rotating", || async {
        h.cluster_status("demo").await.filter(|s| {
            condition(s, "SecretReady")
                .is_some_and(|c| c.status == "True" && c.reason == "Rotating")
        })
    })
    .await;
    let message = &condition(&status, "SecretReady").unwrap().message;
    assert!(
        message.contains("Secret mine") && message.contains("also accepting Secret next"),
        "{message}"
    );

    // The accepted Secret holding the signing key (give or take a trailing newline) is the set-up
    // of a rotation in place, not a rotation.
    h.api::<Secret>()
        .replace("next", &PostParams::default(), &{
            let mut s = secret("s3cret-s3cret\n");
            s.metadata.name = Some("next".into());
            s.metadata.resource_version = h.get::<Secret>("next").await.unwrap().resource_version();
            s
        })
        .await
        .unwrap();
    // A referenced Secret is not watched (the operator resyncs every 5 minutes): any change to
    // the cluster has it looked at now.
    h.api::<ActorCluster>()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/touched": "1"}}})),
        )
        .await
        .unwrap();
    let status = eventually("Referenced, ready for a rotation in place", || async {
        h.cluster_status("demo").await.filter(|s| {
            condition(s, "SecretReady").is_some_and(|c| {
                c.status == "True"
                    && c.reason == "Referenced"
                    && c.message.contains("ready for a rotation in place")
            })
        })
    })
    .await;
    let message = &condition(&status, "SecretReady").unwrap().message;
    assert!(message.contains("Secret next"), "{message}");
}

#[tokio::test]
async fn conflicting_auth_that_slipped_past_admission_is_reported_not_rendered() {
    // Without admission the double plays an object that predates the rule.
    let h = Harness::start_with(false).await;
    let mut cluster: ActorCluster = example("cluster.yaml");
    cluster.spec.auth.secret_ref = Some(sigx_crds::SecretKeyRef {
        name: "mine".into(),
        key: "hmac".into(),
    });
    cluster.spec.auth.insecure = Some(true);
    h.api::<ActorCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let status = eventually("InvalidSpec", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| condition(s, "Ready").is_some_and(|c| c.reason == "InvalidSpec"))
    })
    .await;
    assert_eq!(condition(&status, "Degraded").unwrap().status, "True");
    assert!(
        h.get::<ServiceAccount>("demo-sigx").await.is_none(),
        "nothing rendered from a bad spec"
    );
    let events = h
        .double
        .list_json(&ResourceRef::new("events.k8s.io", "v1", "events"), Some(NS));
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "InvalidSpec" && e["type"] == "Warning"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_postgres_state_without_its_secret_is_reported_naming_the_field() {
    // Without admission the double plays an object that predates the CEL rule.
    let h = Harness::start_with(false).await;
    let mut cluster: ActorCluster = example("cluster.yaml");
    cluster.spec.state = Some(sigx_crds::StateSpec {
        kind: sigx_crds::StateKind::Postgres,
        secret_ref: None,
    });
    h.api::<ActorCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let status = eventually("InvalidSpec", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| condition(s, "Ready").is_some_and(|c| c.reason == "InvalidSpec"))
    })
    .await;
    let ready = condition(&status, "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("spec.state.secretRef is missing"),
        "{}",
        ready.message
    );
    assert_eq!(condition(&status, "Degraded").unwrap().status, "True");
    assert!(
        h.get::<ServiceAccount>("demo-sigx").await.is_none(),
        "nothing rendered from a bad spec"
    );
}

#[tokio::test]
async fn hand_edits_to_the_deployment_are_put_back() {
    let h = Harness::start().await;
    h.apply_examples().await;
    let _: Deployment = eventually("the engine Deployment", || h.get("engine")).await;
    // Someone scales the Deployment behind the operator's back (a `kubectl scale deploy`).
    h.api::<Deployment>()
        .patch(
            "engine",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 10}})),
        )
        .await
        .unwrap();
    // The ActorRole is the source of truth: server-side apply with force takes it back.
    eventually("the Deployment back at the role's 3 replicas", || async {
        h.get::<Deployment>("engine")
            .await
            .filter(|d| d.spec.replicas == Some(3))
    })
    .await;
}

#[tokio::test]
async fn watching_all_namespaces_keeps_clusters_apart() {
    let double = KubeDouble::start().await;
    let mut s = settings();
    s.namespace = None;
    let operator = Operator::new(double.client_named("operator"), s);
    let task = tokio::spawn(operator.run(std::future::pending()));
    let client = double.client();
    for ns in ["team-a", "team-b"] {
        let clusters: Api<ActorCluster> = Api::namespaced(client.clone(), ns);
        clusters
            .create(&PostParams::default(), &example("cluster.yaml"))
            .await
            .unwrap();
    }
    // Two hosts of team-a's "demo", one of team-b's.
    let a: Api<Lease> = Api::namespaced(client.clone(), "team-a");
    let b: Api<Lease> = Api::namespaced(client.clone(), "team-b");
    for id in ["h1", "h2"] {
        a.create(
            &PostParams::default(),
            &host_lease(id, "engine", "active", Some("n1"), 15),
        )
        .await
        .unwrap();
    }
    b.create(
        &PostParams::default(),
        &host_lease("h1", "engine", "active", Some("n9"), 15),
    )
    .await
    .unwrap();
    for (ns, hosts) in [("team-a", 2), ("team-b", 1)] {
        let clusters: Api<ActorCluster> = Api::namespaced(client.clone(), ns);
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        eventually(&format!("{ns}'s status"), || async {
            clusters
                .get("demo")
                .await
                .ok()?
                .status
                .filter(|s| s.hosts == hosts && s.nodes == NodeCount::Known(1))
        })
        .await;
        eventually(&format!("{ns}'s ServiceAccount"), || async {
            sas.get_opt("demo-sigx").await.ok()?
        })
        .await;
    }
    task.abort();
}

#[tokio::test]
async fn a_stalled_api_server_delays_the_operator_but_loses_nothing() {
    let h = Harness::start().await;
    h.apply_examples().await;
    let _: Deployment = eventually("the engine Deployment", || h.get("engine")).await;

    // Requests from the operator hang (a black-holed connection) while others still write.
    h.double.partition("operator", Mode::Stalling);
    let mut late: ActorRole = example("role-web.yaml");
    late.metadata.name = Some("late".into());
    h.api::<ActorRole>()
        .create(&PostParams::default(), &late)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        h.get::<Deployment>("late").await.is_none(),
        "a stalled operator cannot act"
    );
    assert!(!h.operator.is_finished());

    h.double.partition("operator", Mode::Serving);
    eventually("the late role's Deployment", || h.get::<Deployment>("late")).await;
}

#[tokio::test]
async fn a_deleted_generated_secret_is_regenerated_loudly() {
    let h = Harness::start().await;
    h.apply_examples().await;
    eventually("SecretReady", || async {
        h.cluster_status("demo")
            .await
            .filter(|s| condition(s, "SecretReady").is_some_and(|c| c.reason == "Generated"))
    })
    .await;
    h.api::<Secret>()
        .delete("demo-sigx-secret", &DeleteParams::default())
        .await
        .unwrap();
    let _: Secret = eventually("a new Secret", || h.get("demo-sigx-secret")).await;
    let events = eventually("a Warning about the regeneration", || async {
        let events = h
            .double
            .list_json(&ResourceRef::new("events.k8s.io", "v1", "events"), Some(NS));
        events
            .iter()
            .any(|e| e["reason"] == "SecretRegenerated" && e["type"] == "Warning")
            .then_some(events)
    })
    .await;
    assert!(!events.is_empty());
    assert_eq!(h.metrics.secrets_generated.get(), 2);
}

#[tokio::test]
async fn an_invalid_spec_is_refused_by_the_cel_rules() {
    let h = Harness::start().await;
    let refused = |e: kube::Error| match e {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
            s.message
        }
        other => panic!("expected 422 Invalid, got {other}"),
    };
    let pp = PostParams::default();

    let mut cluster: ActorCluster = example("cluster.yaml");
    cluster.spec.membership.heartbeat_seconds = 5;
    cluster.spec.membership.ttl_seconds = 10;
    let why = refused(
        h.api::<ActorCluster>()
            .create(&pp, &cluster)
            .await
            .unwrap_err(),
    );
    assert!(why.contains("ttlSeconds"), "{why}");

    let mut both: ActorCluster = example("cluster.yaml");
    both.spec.auth.secret_ref = Some(sigx_crds::SecretKeyRef {
        name: "s".into(),
        key: "k".into(),
    });
    both.spec.auth.insecure = Some(true);
    let why = refused(
        h.api::<ActorCluster>()
            .create(&pp, &both)
            .await
            .unwrap_err(),
    );
    assert!(why.contains("secretRef"), "{why}");

    let mut nothing: ActorRole = example("role-web.yaml");
    nothing.spec.workers.clear();
    let why = refused(
        h.api::<ActorRole>()
            .create(&pp, &nothing)
            .await
            .unwrap_err(),
    );
    assert!(why.contains("at least one type"), "{why}");

    // A valid role is admitted; moving it to another cluster afterwards is not.
    h.api::<ActorCluster>()
        .create(&pp, &example("cluster.yaml"))
        .await
        .unwrap();
    h.api::<ActorRole>()
        .create(&pp, &example("role-web.yaml"))
        .await
        .unwrap();
    let why = refused(
        h.api::<ActorRole>()
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"clusterRef": {"name": "elsewhere"}}})),
            )
            .await
            .unwrap_err(),
    );
    assert!(why.contains("immutable"), "{why}");
    // Nothing refused reached the operator.
    assert!(h.get::<ActorCluster>("demo").await.is_some());
    let _: Deployment = eventually("the valid role's Deployment", || h.get("web")).await;
}
