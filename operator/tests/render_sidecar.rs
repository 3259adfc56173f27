//! Cluster and role settings rendered into the sidecar container: the membership coalescing
//! window (only when set), the resources (measured default requests, overridden per cluster
//! and per role, never a default CPU limit), and a role's extra sidecar env.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use serde_json::{Value, json};
use sigx_crds::{ActorCluster, ActorRole};
use sigx_operator::render::{self, SIDECAR_CONTAINER};

fn cluster(extra: Value) -> ActorCluster {
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

fn role(sidecar: Option<Value>) -> ActorRole {
    let mut spec = json!({"clusterRef": {"name": "demo"}, "actors": ["Counter"],
        "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}});
    if let Some(s) = sidecar {
        spec["sidecar"] = s;
    }
    serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
        "metadata": {"name": "engine", "namespace": "apps", "uid": "r-uid", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

fn sidecar(d: &Deployment) -> Container {
    let pod = d.spec.template.spec.as_ref().unwrap();
    pod.init_containers
        .iter()
        .flatten()
        .find(|c| c.name == SIDECAR_CONTAINER)
        .unwrap()
        .clone()
}

fn env(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

#[test]
fn coalesce_ms_reaches_the_sidecar_only_when_set() {
    let set = cluster(
        json!({"membership": {"heartbeatSeconds": 5, "ttlSeconds": 15, "coalesceMs": 250}}),
    );
    let s = sidecar(&render::deployment(&set, &role(None)).unwrap());
    assert_eq!(
        env(&s, "SIGX_MEMBERSHIP_COALESCE_MS").as_deref(),
        Some("250")
    );
    let unset = sidecar(&render::deployment(&cluster(json!({})), &role(None)).unwrap());
    assert!(
        unset
            .env
            .iter()
            .flatten()
            .all(|e| e.name != "SIGX_MEMBERSHIP_COALESCE_MS"),
        "absent: the sidecar's own default applies"
    );
}

#[test]
fn the_sidecar_has_requests_and_the_role_overrides_them() {
    let plain = sidecar(&render::deployment(&cluster(json!({})), &role(None)).unwrap());
    let r = plain.resources.unwrap();
    let requests = r.requests.unwrap();
    assert_eq!(requests["cpu"].0, "25m");
    assert_eq!(requests["memory"].0, "32Mi");
    assert!(r.limits.is_none(), "no default limit (no CPU limit)");

    let with_cluster = cluster(json!({"sidecar": {"image": "s:1",
        "resources": {"requests": {"cpu": "40m"}, "limits": {"memory": "256Mi"}}}}));
    let overridden = role(Some(
        json!({"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}),
    ));
    let s = sidecar(&render::deployment(&with_cluster, &overridden).unwrap());
    let r = s.resources.unwrap();
    let requests = r.requests.unwrap();
    assert_eq!(requests["cpu"].0, "100m", "the role wins over the cluster");
    assert_eq!(requests["memory"].0, "64Mi");
    assert_eq!(
        r.limits.unwrap()["memory"].0,
        "256Mi",
        "the cluster's limit stays"
    );
}

#[test]
fn a_roles_sidecar_env_follows_the_operators_and_reserved_names_are_refused() {
    let r = role(Some(json!({"env": [
        {"name": "RUST_LOG", "value": "sigx=debug"},
        {"name": "OTEL_EXPORTER_OTLP_HEADERS",
            "valueFrom": {"secretKeyRef": {"name": "otel", "key": "headers"}}},
    ]})));
    let d = render::deployment(&cluster(json!({})), &r).unwrap();
    let c = sidecar(&d);
    assert_eq!(env(&c, "RUST_LOG").as_deref(), Some("sigx=debug"));
    let from = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "OTEL_EXPORTER_OTLP_HEADERS")
        .and_then(|e| e.value_from.clone())
        .and_then(|f| f.secret_key_ref)
        .unwrap();
    assert_eq!((from.name.as_str(), from.key.as_str()), ("otel", "headers"));
    let names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names[names.len() - 2..],
        ["RUST_LOG", "OTEL_EXPORTER_OTLP_HEADERS"],
        "after the operator's"
    );
    let app = &d.spec.template.spec.as_ref().unwrap().containers[0];
    assert!(app.env.iter().flatten().all(|e| e.name != "RUST_LOG"));

    for reserved in ["SIGX_CLUSTER", "SIGX_ANYTHING", "POD_NAME", "NODE_NAME"] {
        let r = role(Some(json!({"env": [{"name": reserved, "value": "x"}]})));
        let e = render::deployment(&cluster(json!({})), &r).unwrap_err();
        assert!(
            matches!(&e, render::RenderError::ReservedEnv { name, .. } if name == reserved),
            "{e}"
        );
        assert_eq!(e.reason(), "InvalidSpec");
        assert!(e.to_string().contains(reserved), "{e}");
    }
}
