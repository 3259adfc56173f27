//! The example CRs in `examples/k8s/` rendered by the operator's pure functions: the manifests a
//! user of the walkthrough gets. With `SIGX_RENDER_OUT=<dir>` set, the rendered objects are also
//! written there (`rendered.yaml`), so `scripts/check-manifests.sh` can validate them against the
//! Kubernetes schemas.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use serde_json::Value;
use sigx_crds::{ActorCluster, ActorRole};
use sigx_operator::render;

const NAMESPACE: &str = "sigx-demo";

fn examples() -> PathBuf {
    // Read at run time, not baked in at compile time: a target dir reused across checkouts (CI
    // reuses one) would otherwise point the test at another checkout's files.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("../examples/k8s")
}

/// Reads an example and gives it what the API server would: a namespace and a uid.
fn load<K: serde::de::DeserializeOwned + kube::Resource>(file: &str) -> K {
    let text = std::fs::read_to_string(examples().join(file)).expect(file);
    let mut obj: K = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let meta = obj.meta_mut();
    meta.namespace = Some(NAMESPACE.to_owned());
    meta.uid = Some(format!("uid-{file}"));
    obj
}

fn json<T: serde::Serialize>(obj: &T) -> Value {
    serde_json::to_value(obj).expect("serialize")
}

struct Rendered {
    docs: Vec<Value>,
    web: Deployment,
    engine: Deployment,
}

fn render_all() -> Rendered {
    let cluster: ActorCluster = load("cluster.yaml");
    let web: ActorRole = load("role-web.yaml");
    let engine: ActorRole = load("role-engine.yaml");
    let mut docs = vec![
        json(&render::service_account(&cluster).unwrap()),
        json(&render::lease_role(&cluster).unwrap()),
        json(&render::lease_role_binding(&cluster).unwrap()),
        // Fixed bytes: this is a fixture, not a secret.
        json(
            &render::generated_secret(&cluster, &[0x5a; 32])
                .unwrap()
                .expect("generated mode"),
        ),
    ];
    let web_d = render::deployment(&cluster, &web).unwrap();
    let engine_d = render::deployment(&cluster, &engine).unwrap();
    for (role, d) in [(&web, &web_d), (&engine, &engine_d)] {
        docs.push(json(d));
        docs.push(json(
            &render::pod_disruption_budget(&cluster, role).unwrap(),
        ));
    }
    Rendered {
        docs,
        web: web_d,
        engine: engine_d,
    }
}

fn sidecar(d: &Deployment) -> &Container {
    d.spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == render::SIDECAR_CONTAINER)
        .expect("sidecar")
}

fn pod_labels(d: &Deployment) -> &BTreeMap<String, String> {
    d.spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap()
}

#[test]
fn web_registers_only_echo_and_engine_only_counter() {
    let r = render_all();
    let web = pod_labels(&r.web);
    assert_eq!(
        web.get("actors.sigx.dev/type.Echo").map(String::as_str),
        Some("true")
    );
    assert!(!web.contains_key("actors.sigx.dev/type.Counter"));
    let engine = pod_labels(&r.engine);
    assert_eq!(
        engine
            .get("actors.sigx.dev/type.Counter")
            .map(String::as_str),
        Some("true")
    );
    assert!(!engine.contains_key("actors.sigx.dev/type.Echo"));
    for (d, replicas, role) in [(&r.web, 2, "web"), (&r.engine, 3, "engine")] {
        assert_eq!(d.spec.replicas, Some(replicas));
        assert_eq!(pod_labels(d)["actors.sigx.dev/role"], role);
        assert_eq!(pod_labels(d)["actors.sigx.dev/cluster"], "demo");
        assert_eq!(d.metadata.namespace.as_deref(), Some(NAMESPACE));
    }
}

#[test]
fn both_roles_share_the_generated_secret_and_the_account() {
    let r = render_all();
    for d in [&r.web, &r.engine] {
        let spec = d.spec.template.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("demo-sigx"));
        let secret_vol = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "sigx-secret")
            .unwrap();
        assert_eq!(
            secret_vol.secret.as_ref().unwrap().secret_name.as_deref(),
            Some("demo-sigx-secret")
        );
        // drain (the call timeout) + the preStop margin + the app's exit + one beat + withdrawal.
        assert_eq!(
            spec.termination_grace_period_seconds,
            Some(30 + 2 + 5 + 5 + 5)
        );
        let env: Vec<_> = sidecar(d)
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert!(env.contains(&"SIGX_SECRET_FILE") && !env.contains(&"SIGX_INSECURE"));
    }
    let kinds: Vec<_> = r
        .docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Secret",
            "Deployment",
            "PodDisruptionBudget",
            "Deployment",
            "PodDisruptionBudget"
        ]
    );
    for d in &r.docs {
        assert!(
            d["apiVersion"].is_string(),
            "every object names its apiVersion: {d}"
        );
    }
}

/// The manifests as the schema check reads them: one multi-document YAML stream that parses
/// back to the same objects. Written to `$SIGX_RENDER_OUT/rendered.yaml` when that is set.
#[test]
fn rendered_examples_round_trip_through_yaml() {
    let r = render_all();
    let mut text = String::new();
    for doc in &r.docs {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(doc).unwrap());
    }
    let parsed: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML stream parses");
    assert_eq!(parsed.len(), r.docs.len());
    for (back, doc) in parsed.iter().zip(&r.docs) {
        assert_eq!(back, doc, "YAML round trip changed {}", doc["kind"]);
    }
    if let Some(out) = std::env::var_os("SIGX_RENDER_OUT") {
        let out = PathBuf::from(out);
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("rendered.yaml"), text).unwrap();
    }
}
