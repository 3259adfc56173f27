//! Unit tests of role.rs: the Deployment and PodDisruptionBudget of a role.

use super::*;
use crate::render::fixtures;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSecurityContext, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec.template.spec.as_ref().expect("pod spec")
}

fn the_sidecar(d: &Deployment) -> &Container {
    let inits = pod_spec(d)
        .init_containers
        .as_ref()
        .expect("init containers");
    let found: Vec<_> = inits
        .iter()
        .filter(|c| c.name == SIDECAR_CONTAINER)
        .collect();
    assert_eq!(found.len(), 1, "exactly one sidecar");
    found[0]
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

fn env_value<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
    env(c, name).and_then(|e| e.value.as_deref())
}

fn engine() -> Deployment {
    deployment(&fixtures::default_cluster(), &fixtures::engine_role()).unwrap()
}

#[test]
fn sidecar_is_a_native_sidecar_with_the_three_probes() {
    let d = engine();
    let s = the_sidecar(&d);
    assert_eq!(s.restart_policy.as_deref(), Some("Always"));
    assert_eq!(s.image.as_deref(), Some("ghcr.io/sigx/sidecar:0.1.0"));
    let path = |p: &Option<Probe>| {
        let get = p.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.port, IntOrString::String("health".into()));
        get.path.clone().unwrap()
    };
    assert_eq!(path(&s.startup_probe), "/startupz");
    assert_eq!(path(&s.liveness_probe), "/livez");
    assert_eq!(path(&s.readiness_probe), "/readyz");
    let ports = s.ports.as_ref().unwrap();
    let port = |n: &str| {
        ports
            .iter()
            .find(|p| p.name.as_deref() == Some(n))
            .unwrap()
            .container_port
    };
    assert_eq!(port("health"), HEALTH_PORT);
    assert_eq!(port("mesh"), 7311);
    assert_eq!(env_value(s, "SIGX_HEALTH_ADDR"), Some("0.0.0.0:9090"));
    assert_eq!(env_value(s, "SIGX_MESH_ADDR"), Some("0.0.0.0:7311"));
    // The app containers are untouched apart from the socket: no sidecar among them.
    assert!(
        pod_spec(&d)
            .containers
            .iter()
            .all(|c| c.name != SIDECAR_CONTAINER)
    );
}

#[test]
fn socket_volume_is_shared_and_announced_to_every_app_container() {
    let mut role = fixtures::engine_role();
    let pod = role.spec.template.spec.as_mut().unwrap();
    let mut second = pod.containers[0].clone();
    second.name = "helper".into();
    second.env = Some(vec![
        plain_env("SIGX_SOCKET", "/wrong"),
        plain_env("KEEP", "me"),
    ]);
    pod.containers.push(second);
    let d = deployment(&fixtures::default_cluster(), &role).unwrap();
    let spec = pod_spec(&d);
    let vol = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == SOCKET_VOLUME)
        .unwrap();
    assert!(vol.empty_dir.is_some());
    for c in spec.containers.iter().chain([the_sidecar(&d)]) {
        let m = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == SOCKET_VOLUME);
        assert_eq!(
            m.map(|m| m.mount_path.as_str()),
            Some(SOCKET_DIR),
            "{}",
            c.name
        );
        assert_eq!(env_value(c, "SIGX_SOCKET"), Some(SOCKET_PATH), "{}", c.name);
        let count = c
            .env
            .iter()
            .flatten()
            .filter(|e| e.name == "SIGX_SOCKET")
            .count();
        assert_eq!(count, 1, "{} has SIGX_SOCKET once", c.name);
    }
    assert!(SOCKET_PATH.starts_with(SOCKET_DIR));
    let helper = spec.containers.iter().find(|c| c.name == "helper").unwrap();
    assert_eq!(env_value(helper, "KEEP"), Some("me"), "user env is kept");
    for c in &spec.containers {
        assert_eq!(env_value(c, "SIGX_ACTORS"), Some("Counter"), "{}", c.name);
        assert_eq!(env_value(c, "SIGX_WORKERS"), Some(""), "{}", c.name);
    }
}

#[test]
fn sidecar_learns_its_identity_from_the_downward_api() {
    let d = engine();
    let s = the_sidecar(&d);
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),
        ("POD_IP", "status.podIP"),
        ("NODE_NAME", "spec.nodeName"),
        (
            "SIGX_ZONE",
            "metadata.labels['topology.kubernetes.io/zone']",
        ),
    ] {
        let field = env(s, name)
            .and_then(|e| e.value_from.as_ref())
            .and_then(|v| v.field_ref.as_ref())
            .unwrap_or_else(|| panic!("{name} from the downward API"));
        assert_eq!(field.field_path, path, "{name}");
    }
}

#[test]
fn sidecar_env_carries_the_cluster_spec() {
    let cluster = fixtures::cluster(json!({
        "sidecar": {"image": "s:1", "imagePullPolicy": "IfNotPresent"},
        "membership": {"heartbeatSeconds": 2, "ttlSeconds": 7},
        "meshPort": 7400,
        "calls": {"timeoutSeconds": 12, "retries": 5},
        "placement": "prefer-local",
        "rebalance": false,
        "placementByType": [
            {"type": "Counter", "policy": "least-loaded"},
            {"type": "Relay", "policy": "random"}
        ]
    }));
    let d = deployment(&cluster, &fixtures::engine_role()).unwrap();
    let s = the_sidecar(&d);
    assert_eq!(
        env_value(s, "SIGX_PLACEMENT_TYPES"),
        Some("Counter=least-loaded,Relay=random"),
        "per-type placement in the sidecar's --placement-type syntax"
    );
    let expect = [
        ("SIGX_MEMBERSHIP", "kubernetes"),
        ("SIGX_CLUSTER", "demo"),
        ("SIGX_ROLE", "engine"),
        ("SIGX_BEAT_MS", "2000"),
        ("SIGX_TTL_MS", "7000"),
        ("SIGX_MESH_ADDR", "0.0.0.0:7400"),
        ("SIGX_CALL_TIMEOUT_MS", "12000"),
        ("SIGX_RETRIES", "5"),
        ("SIGX_PLACEMENT", "prefer-local"),
        ("SIGX_REBALANCE", "false"),
        ("SIGX_DRAIN_TIMEOUT_MS", "12000"),
    ];
    for (k, v) in expect {
        assert_eq!(env_value(s, k), Some(v), "{k}");
    }
    assert_eq!(s.image_pull_policy.as_deref(), Some("IfNotPresent"));
    // The drain (the call timeout), the preStop answer's margin, the app's exit, one beat for
    // the hand-over and the withdrawal.
    assert_eq!(
        pod_spec(&d).termination_grace_period_seconds,
        Some(12 + 2 + 5 + 2 + 5)
    );
}

#[test]
fn generated_secret_is_mounted_as_a_file() {
    let d = engine();
    let s = the_sidecar(&d);
    assert_eq!(
        env_value(s, "SIGX_SECRET_FILE"),
        Some("/etc/sigx/secret/secret")
    );
    assert!(env(s, "SIGX_INSECURE").is_none());
    assert!(
        env(s, "SIGX_SECRET").is_none(),
        "the secret is never a plain env value"
    );
    let vol = pod_spec(&d)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == SECRET_VOLUME)
        .unwrap();
    let secret = vol.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("demo-sigx-secret"));
    assert_eq!(secret.items.as_ref().unwrap()[0].key, "secret");
    // Only the sidecar mounts it.
    for c in &pod_spec(&d).containers {
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != SECRET_VOLUME)
        );
    }
}

#[test]
fn referenced_secret_and_insecure_are_rendered_as_asked() {
    let referenced = fixtures::cluster(json!({
        "sidecar": {"image": "s"}, "auth": {"secretRef": {"name": "mine", "key": "hmac"}}
    }));
    let d = deployment(&referenced, &fixtures::engine_role()).unwrap();
    let vol = pod_spec(&d)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == SECRET_VOLUME)
        .unwrap();
    let secret = vol.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("mine"));
    assert_eq!(secret.items.as_ref().unwrap()[0].key, "hmac");

    let insecure =
        fixtures::cluster(json!({"sidecar": {"image": "s"}, "auth": {"insecure": true}}));
    let d = deployment(&insecure, &fixtures::engine_role()).unwrap();
    let s = the_sidecar(&d);
    assert_eq!(env_value(s, "SIGX_INSECURE"), Some("true"));
    assert!(env(s, "SIGX_SECRET_FILE").is_none());
    assert!(
        pod_spec(&d)
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != SECRET_VOLUME)
    );
}

/// The middle step of a switch between insecure and a secret: the pods sign with the secret
/// and also accept unsigned requests; without the field, nothing of it.
#[test]
fn accept_unsigned_goes_to_the_sidecar_beside_the_secret() {
    let switching = fixtures::cluster(json!({"auth": {"acceptUnsigned": true}}));
    let d = deployment(&switching, &fixtures::engine_role()).unwrap();
    let s = the_sidecar(&d);
    assert_eq!(env_value(s, "SIGX_ACCEPT_UNSIGNED"), Some("true"));
    assert!(
        env(s, "SIGX_SECRET_FILE").is_some(),
        "it signs with the secret"
    );
    assert!(env(s, "SIGX_INSECURE").is_none());
    assert!(env(the_sidecar(&engine()), "SIGX_ACCEPT_UNSIGNED").is_none());
    let off = fixtures::cluster(json!({"auth": {"acceptUnsigned": false}}));
    let d = deployment(&off, &fixtures::engine_role()).unwrap();
    assert!(env(the_sidecar(&d), "SIGX_ACCEPT_UNSIGNED").is_none());
}

#[test]
fn a_rotation_mounts_the_accepted_secret_beside_the_signing_one() {
    let rotating = fixtures::cluster(json!({
        "auth": {"secretRef": {"name": "mesh-v2", "key": "hmac"},
                 "acceptSecretRef": {"name": "mesh-v1", "key": "secret"}}
    }));
    let d = deployment(&rotating, &fixtures::engine_role()).unwrap();
    let volume = |name: &str| {
        pod_spec(&d)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == name)
            .and_then(|v| v.secret.clone())
            .unwrap()
    };
    assert_eq!(
        volume(SECRET_VOLUME).secret_name.as_deref(),
        Some("mesh-v2")
    );
    let accept = volume(ACCEPT_SECRET_VOLUME);
    assert_eq!(accept.secret_name.as_deref(), Some("mesh-v1"));
    assert_eq!(accept.items.as_ref().unwrap()[0].key, "secret");
    assert_eq!(
        accept.optional,
        Some(false),
        "a typo must not start pods unrotated"
    );
    let s = the_sidecar(&d);
    assert_eq!(
        env_value(s, "SIGX_SECRET_ACCEPT_FILE"),
        Some("/etc/sigx/secret-accept/secret")
    );
    let mount = s
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == ACCEPT_SECRET_VOLUME)
        .unwrap();
    assert_eq!(mount.mount_path, ACCEPT_SECRET_DIR);
    assert_eq!(mount.read_only, Some(true));
    // Only the sidecar sees it.
    let app = &pod_spec(&d).containers[0];
    assert!(
        app.volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != ACCEPT_SECRET_VOLUME)
    );

    // Not rotating: nothing of it.
    let d = engine();
    assert!(env(the_sidecar(&d), "SIGX_SECRET_ACCEPT_FILE").is_none());
    assert!(
        pod_spec(&d)
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != ACCEPT_SECRET_VOLUME)
    );
}

#[test]
fn pods_are_labelled_with_cluster_role_and_types_and_the_selector_matches() {
    let role = fixtures::role(
        "mixed",
        json!({
            "clusterRef": {"name": "demo"},
            "actors": ["Counter", "billing.Invoice"],
            "workers": ["Echo"],
            "template": {"metadata": {"labels": {"app": "x", "actors.sigx.dev/role": "spoofed", "actors.sigx.dev/type.Undeclared": "true"}},
                         "spec": {"containers": [{"name": "app", "image": "a"}]}}
        }),
    );
    let d = deployment(&fixtures::default_cluster(), &role).unwrap();
    let labels = d
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(labels["actors.sigx.dev/cluster"], "demo");
    assert_eq!(
        labels["actors.sigx.dev/role"], "mixed",
        "operator labels win"
    );
    for t in ["Counter", "billing.Invoice", "Echo"] {
        assert_eq!(labels[&format!("actors.sigx.dev/type.{t}")], "true");
    }
    assert_eq!(labels["app"], "x", "user labels are kept");
    let annotations = d
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap();
    assert_eq!(
        annotations["kubectl.kubernetes.io/default-container"],
        "app"
    );
    assert!(
        !labels.contains_key("actors.sigx.dev/type.Undeclared"),
        "a template cannot claim a type its role does not declare"
    );
    assert_eq!(
        labels
            .keys()
            .filter(|k| k.starts_with("actors.sigx.dev/"))
            .count(),
        5,
        "cluster, role and three types"
    );
    let s = the_sidecar(&d);
    assert_eq!(env_value(s, "SIGX_ACTORS"), Some("Counter,billing.Invoice"));
    assert_eq!(env_value(s, "SIGX_WORKERS"), Some("Echo"));
    let selector = d.spec.selector.match_labels.as_ref().unwrap();
    assert_eq!(selector.len(), 2, "selector: cluster and role only");
    for (k, v) in selector {
        assert_eq!(labels.get(k), Some(v), "pod labels satisfy the selector");
    }
    assert_eq!(
        selector_string(&fixtures::default_cluster(), &role).unwrap(),
        "actors.sigx.dev/cluster=demo,actors.sigx.dev/role=mixed"
    );
}

#[test]
fn rollout_adds_before_it_removes_and_replicas_follow_the_role() {
    let d = engine();
    assert_eq!(d.spec.replicas, Some(3));
    let ru = d
        .spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(ru.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));

    let mut scaled = fixtures::engine_role();
    scaled.spec.replicas = 5;
    let d5 = deployment(&fixtures::default_cluster(), &scaled).unwrap();
    assert_eq!(d5.spec.replicas, Some(5));
    let owner = &d5.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ActorRole", "engine")
    );
    assert_eq!(d5.metadata.name.as_deref(), Some("engine"));
    assert_eq!(d5.metadata.namespace.as_deref(), Some("apps"));
}

#[test]
fn grace_period_covers_the_drain_and_keeps_a_longer_one() {
    let c = fixtures::default_cluster();
    assert_eq!(termination_grace_seconds(&c), 30 + 2 + 5 + 5 + 5);
    assert_eq!(
        pod_spec(&engine()).termination_grace_period_seconds,
        Some(47)
    );
    let mut role = fixtures::engine_role();
    role.spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(300);
    let d = deployment(&c, &role).unwrap();
    assert_eq!(pod_spec(&d).termination_grace_period_seconds, Some(300));
}

#[test]
fn only_the_sidecar_gets_an_api_token() {
    let d = engine();
    let spec = pod_spec(&d);
    assert_eq!(spec.service_account_name.as_deref(), Some("demo-sigx"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let has_token = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == TOKEN_DIR)
    };
    assert!(has_token(the_sidecar(&d)));
    assert!(spec.containers.iter().all(|c| !has_token(c)));

    let mut wants_token = fixtures::engine_role();
    wants_token
        .spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .automount_service_account_token = Some(true);
    let d = deployment(&fixtures::default_cluster(), &wants_token).unwrap();
    assert!(
        !has_token(the_sidecar(&d)),
        "kubelet mounts it; no second mount at the same path"
    );
    assert!(
        pod_spec(&d)
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != TOKEN_VOLUME)
    );
}

#[test]
fn no_fs_group_is_added_and_the_templates_is_kept() {
    assert_eq!(pod_spec(&engine()).security_context, None);
    let mut role = fixtures::engine_role();
    role.spec.template.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        fs_group: Some(2000),
        ..PodSecurityContext::default()
    });
    let d = deployment(&fixtures::default_cluster(), &role).unwrap();
    assert_eq!(
        pod_spec(&d).security_context.as_ref().unwrap().fs_group,
        Some(2000)
    );
}

#[test]
fn user_init_containers_run_before_the_sidecar() {
    let mut role = fixtures::engine_role();
    role.spec.template.spec.as_mut().unwrap().init_containers = Some(vec![Container {
        name: "migrate".into(),
        image: Some("m".into()),
        ..Container::default()
    }]);
    let d = deployment(&fixtures::default_cluster(), &role).unwrap();
    let names: Vec<_> = pod_spec(&d)
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["migrate", SIDECAR_CONTAINER]);
}

#[test]
fn pdb_allows_one_disruption_over_the_same_pods() {
    let c = fixtures::default_cluster();
    let r = fixtures::engine_role();
    let pdb = pod_disruption_budget(&c, &r).unwrap();
    let spec = pdb.spec.unwrap();
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert!(
        spec.min_available.is_none(),
        "maxUnavailable and minAvailable are exclusive"
    );
    assert_eq!(
        spec.selector.unwrap(),
        deployment(&c, &r).unwrap().spec.selector
    );
    assert_eq!(pdb.metadata.owner_references.unwrap()[0].kind, "ActorRole");
}

#[test]
fn mismatches_and_collisions_are_refused_with_a_reason() {
    let c = fixtures::default_cluster();
    let template = json!({"spec": {"containers": [{"name": "app", "image": "a"}]}});
    let refuse = |role: ActorRole| deployment(&c, &role).unwrap_err();

    let other = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "other"}, "actors": ["A"], "template": template}),
    );
    assert!(matches!(refuse(other), RenderError::WrongCluster { .. }));

    let mut elsewhere = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "template": template}),
    );
    elsewhere.metadata.namespace = Some("other-ns".into());
    assert!(matches!(
        refuse(elsewhere),
        RenderError::CrossNamespace { .. }
    ));

    let dup = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "workers": ["A"], "template": template}),
    );
    assert!(matches!(refuse(dup), RenderError::DuplicateType { .. }));

    let none = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "template": template}),
    );
    assert!(matches!(refuse(none), RenderError::NoTypes { .. }));

    let bad = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["9lives"], "template": template}),
    );
    let err = refuse(bad);
    assert!(matches!(err, RenderError::TypeName { .. }));
    assert!(err.to_string().contains("9lives"), "{err}");

    let empty = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "template": {"spec": {"containers": []}}}),
    );
    assert!(matches!(refuse(empty), RenderError::NoAppContainer { .. }));

    let reserved = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
        "template": {"spec": {"containers": [{"name": "sigx-sidecar", "image": "a"}]}}}),
    );
    assert!(matches!(
        refuse(reserved),
        RenderError::ReservedName {
            what: "container",
            ..
        }
    ));

    let reserved_vol = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
        "template": {"spec": {"containers": [{"name": "app", "image": "a"}], "volumes": [{"name": "sigx-socket", "emptyDir": {}}]}}}),
    );
    assert!(matches!(
        refuse(reserved_vol),
        RenderError::ReservedName { what: "volume", .. }
    ));

    let reserved_mount = fixtures::role(
        "r",
        json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
        "template": {"spec": {"containers": [{"name": "app", "image": "a",
            "volumeMounts": [{"name": "data", "mountPath": "/var/run/sigx/"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}}}),
    );
    assert!(matches!(
        refuse(reserved_mount),
        RenderError::ReservedName {
            what: "mount path",
            ..
        }
    ));
}

#[test]
fn no_per_type_placement_renders_no_variable() {
    let cluster = fixtures::cluster(json!({"sidecar": {"image": "s:1"}}));
    let d = deployment(&cluster, &fixtures::engine_role()).unwrap();
    assert_eq!(env_value(the_sidecar(&d), "SIGX_PLACEMENT_TYPES"), None);
    assert_eq!(
        env_value(the_sidecar(&d), "SIGX_REBALANCE"),
        None,
        "the sidecar's default (on) applies"
    );
}

#[test]
fn the_sidecar_image_is_the_roles_else_the_clusters_else_the_operators_release() {
    let image = |cluster: serde_json::Value, role_sidecar: Option<serde_json::Value>| {
        let mut role = fixtures::engine_role();
        role.spec.sidecar = role_sidecar.map(|s| serde_json::from_value(s).unwrap());
        let d = deployment(&fixtures::cluster(cluster), &role).unwrap();
        the_sidecar(&d).image.clone().unwrap()
    };
    // Neither sets one: the operator's own release, never an empty or `latest` image.
    let default = image(json!({}), None);
    assert_eq!(default, sigx_crds::DEFAULT_SIDECAR_IMAGE);
    assert_eq!(
        default,
        format!("ghcr.io/sigx/sidecar:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(default, image(json!({"sidecar": {}}), Some(json!({}))));
    // The cluster pins one.
    let pinned = json!({"sidecar": {"image": "mirror.example/sigx/sidecar:0.0.9"}});
    assert_eq!(
        image(pinned.clone(), None),
        "mirror.example/sigx/sidecar:0.0.9"
    );
    // A role moves ahead of the others.
    assert_eq!(
        image(
            pinned,
            Some(json!({"image": "mirror.example/sigx/sidecar:0.2.0"}))
        ),
        "mirror.example/sigx/sidecar:0.2.0"
    );
}

#[test]
fn the_template_hash_moves_with_the_pod_template_and_only_with_it() {
    let hash =
        |d: &Deployment| d.metadata.annotations.as_ref().unwrap()[names::TEMPLATE_HASH].clone();
    let base = engine();
    assert_eq!(hash(&base).len(), 16);
    assert_eq!(
        hash(&base),
        hash(&engine()),
        "the same spec, the same digest"
    );
    assert_eq!(hash(&base), names::template_hash(&base.spec.template));
    // Replicas and rollout settings change the Deployment, not its pods.
    let mut role = fixtures::engine_role();
    role.spec.replicas = 7;
    let scaled = deployment(&fixtures::default_cluster(), &role).unwrap();
    assert_eq!(hash(&scaled), hash(&base));
    // A cluster-wide change (the sidecar image) rolls the pods: a new digest.
    let cluster = fixtures::cluster(json!({"sidecar": {"image": "ghcr.io/sigx/sidecar:0.2.0"}}));
    let upgraded = deployment(&cluster, &fixtures::engine_role()).unwrap();
    assert_ne!(hash(&upgraded), hash(&base));
}
