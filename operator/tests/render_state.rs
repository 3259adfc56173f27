//! `ActorCluster.spec.state` rendered into the sidecar: which store, and where its connection
//! string comes from (a Secret key, never a plain value). A postgres store without its Secret is
//! refused by name.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, EnvVar};
use serde_json::{Value, json};
use sigx_crds::{ActorCluster, ActorRole};
use sigx_operator::render::{self, RenderError, SIDECAR_CONTAINER, STATE_DIR, STATE_VOLUME};

fn cluster(state: Option<Value>) -> ActorCluster {
    let mut spec = json!({"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}});
    if let Some(state) = state {
        spec["state"] = state;
    }
    serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
        "metadata": {"name": "demo", "namespace": "apps", "uid": "c-uid", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

fn role() -> ActorRole {
    serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
        "metadata": {"name": "engine", "namespace": "apps", "uid": "r-uid", "generation": 1},
        "spec": {"clusterRef": {"name": "demo"}, "actors": ["Counter"],
                 "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
    }))
    .unwrap()
}

fn sidecar(d: &Deployment) -> &Container {
    let pod = d.spec.template.spec.as_ref().unwrap();
    pod.init_containers
        .iter()
        .flatten()
        .find(|c| c.name == SIDECAR_CONTAINER)
        .unwrap()
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

#[test]
fn a_postgres_state_reaches_the_sidecar_as_its_dsn_secret_key() {
    let d = render::deployment(
        &cluster(Some(
            json!({"kind": "postgres", "secretRef": {"name": "pg-app", "key": "dsn"}}),
        )),
        &role(),
    )
    .unwrap();
    let s = sidecar(&d);
    assert_eq!(
        env(s, "SIGX_STATE").and_then(|e| e.value.as_deref()),
        Some("postgres")
    );
    let dsn = env(s, "SIGX_STATE_DSN").expect("SIGX_STATE_DSN");
    assert_eq!(dsn.value, None, "the DSN is never a plain value");
    let from = dsn
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .expect("from a secretKeyRef");
    assert_eq!((from.name.as_str(), from.key.as_str()), ("pg-app", "dsn"));
    assert_eq!(from.optional, Some(false));
    // Only the sidecar sees it.
    let pod = d.spec.template.spec.as_ref().unwrap();
    for c in &pod.containers {
        assert!(env(c, "SIGX_STATE_DSN").is_none(), "{}", c.name);
    }
    assert!(env(s, "SIGX_STATE_PATH").is_none());
}

#[test]
fn an_sqlite_state_gets_a_disk_volume_and_no_state_section_leaves_the_default() {
    let d = render::deployment(&cluster(Some(json!({"kind": "sqlite"}))), &role()).unwrap();
    let s = sidecar(&d);
    assert_eq!(
        env(s, "SIGX_STATE").and_then(|e| e.value.as_deref()),
        Some("sqlite")
    );
    assert_eq!(
        env(s, "SIGX_STATE_PATH").and_then(|e| e.value.as_deref()),
        Some(format!("{STATE_DIR}/state.db").as_str())
    );
    let mount = s
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == STATE_VOLUME)
        .expect("the state volume is mounted in the sidecar");
    assert_eq!(mount.mount_path, STATE_DIR);
    assert_ne!(mount.read_only, Some(true));
    let pod = d.spec.template.spec.as_ref().unwrap();
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == STATE_VOLUME)
        .unwrap();
    let dir = vol.empty_dir.as_ref().expect("an emptyDir");
    assert_eq!(dir.medium, None, "on disk, not the socket's tmpfs");

    let d = render::deployment(&cluster(None), &role()).unwrap();
    let s = sidecar(&d);
    assert!(env(s, "SIGX_STATE").is_none() && env(s, "SIGX_STATE_DSN").is_none());
    let pod = d.spec.template.spec.as_ref().unwrap();
    assert!(pod.volumes.iter().flatten().all(|v| v.name != STATE_VOLUME));
}

#[test]
fn a_postgres_state_without_a_secret_ref_is_refused_naming_the_field() {
    let bad = cluster(Some(json!({"kind": "postgres"})));
    let err = render::deployment(&bad, &role()).unwrap_err();
    assert!(matches!(err, RenderError::State { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("ActorCluster \"demo\""), "{msg}");
    assert!(msg.contains("spec.state.secretRef is missing"), "{msg}");
    assert_eq!(render::state_mode(&bad).unwrap_err(), err);
}
