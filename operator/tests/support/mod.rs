//! Objects as the API server returns them, and accessors into rendered Deployments, shared by
//! the render tests.
#![allow(dead_code)]

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde_json::{Value, json};
use sigx_crds::{ActorCluster, ActorRole};
use sigx_operator::render::SIDECAR_CONTAINER;

/// Cluster `demo` in `apps`, with `extra` merged into its spec.
pub fn cluster(extra: Value) -> ActorCluster {
    let mut spec = json!({"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
        "metadata": {"name": "demo", "namespace": "apps", "uid": "c-uid", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

/// Role `engine` of `demo` with the given pod spec and optional `spec.sidecar`.
pub fn role(pod: Value, sidecar: Option<Value>) -> ActorRole {
    let mut spec = json!({"clusterRef": {"name": "demo"}, "actors": ["Counter"],
        "template": {"spec": pod}});
    if let Some(s) = sidecar {
        spec["sidecar"] = s;
    }
    serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
        "metadata": {"name": "engine", "namespace": "apps", "uid": "r-uid-engine", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

/// A pod spec with one app container `app`.
pub fn one_app() -> Value {
    json!({"containers": [{"name": "app", "image": "app:1"}]})
}

pub fn pod(d: &Deployment) -> &PodSpec {
    d.spec.template.spec.as_ref().unwrap()
}

pub fn sidecar(d: &Deployment) -> &Container {
    pod(d)
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == SIDECAR_CONTAINER)
        .unwrap()
}

pub fn app<'a>(d: &'a Deployment, name: &str) -> &'a Container {
    pod(d).containers.iter().find(|c| c.name == name).unwrap()
}

pub fn env(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

pub fn port(c: &Container, name: &str) -> i32 {
    c.ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap()
        .container_port
}
