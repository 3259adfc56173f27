//! The CRDs' CEL rules, evaluated without an API server by `kube-cel` (the interpreter kube-rs
//! uses for client-side validation) against the very schemas `crdgen` writes.
//!
//! Every rule has a table of objects the API server must accept and must refuse; the same table
//! run against deliberately broken variants of the rules shows the table would notice.

use kube_cel::{
    CompiledSchema, ScopeContext, ValidationErrors, Validator, WarningKind, analyze_rule,
    compile_schema,
};
use serde_json::{Value, json};
use sigx_crds::common::{TYPE_NAME_PATTERN, TypeName};

/// The `openAPIV3Schema` of the CRD for `plural`, as `crdgen` renders it.
fn schema(plural: &str) -> Value {
    let crd = sigx_crds::crds()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap_or_else(|| panic!("no CRD {plural}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(schema).unwrap()
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
           "metadata": {"name": name, "namespace": "apps"}, "spec": spec})
}

fn role(spec: Value) -> Value {
    json!({"apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
           "metadata": {"name": "engine", "namespace": "apps"}, "spec": spec})
}

fn template() -> Value {
    json!({"spec": {"containers": [{"name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0"}]}})
}

/// One expectation: this object (optionally as an update of `old`) is accepted, or refused with a
/// message containing `refusal`.
struct Case {
    what: &'static str,
    plural: &'static str,
    object: Value,
    old: Option<Value>,
    refusal: Option<&'static str>,
}

fn accept(what: &'static str, plural: &'static str, object: Value) -> Case {
    Case {
        what,
        plural,
        object,
        old: None,
        refusal: None,
    }
}

fn refuse(what: &'static str, plural: &'static str, object: Value, refusal: &'static str) -> Case {
    Case {
        what,
        plural,
        object,
        old: None,
        refusal: Some(refusal),
    }
}

fn cases() -> Vec<Case> {
    let image = json!({"image": "ghcr.io/sigx/sidecar:0.1.0"});
    let secret_ref = json!({"name": "hmac", "key": "secret"});
    let role_spec = |actors: Value, workers: Value| {
        json!({"clusterRef": {"name": "demo"}, "replicas": 2, "actors": actors,
               "workers": workers, "template": template()})
    };
    vec![
        accept(
            "least-loaded with per-type policies and rebalancing off",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "placement": "least-loaded", "rebalance": false,
                       "placementByType": [{"type": "Counter", "policy": "prefer-local"}]}),
            ),
        ),
        // --- ActorCluster: membership timing ---
        accept(
            "defaults only (5 s beat, 15 s TTL after defaulting)",
            "actorclusters",
            cluster("demo", json!({"sidecar": image})),
        ),
        accept(
            "TTL just over two beats",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "membership": {"heartbeatSeconds": 5, "ttlSeconds": 11}}),
            ),
        ),
        refuse(
            "TTL exactly two beats",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "membership": {"heartbeatSeconds": 5, "ttlSeconds": 10}}),
            ),
            "greater than 2 × membership.heartbeatSeconds",
        ),
        refuse(
            "TTL below the beat",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "membership": {"heartbeatSeconds": 10, "ttlSeconds": 5}}),
            ),
            "greater than 2 × membership.heartbeatSeconds",
        ),
        refuse(
            "only the beat raised, TTL left at its default",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "membership": {"heartbeatSeconds": 8}}),
            ),
            "greater than 2 × membership.heartbeatSeconds",
        ),
        // --- ActorCluster: exactly one auth mode ---
        accept(
            "generated secret (no auth given)",
            "actorclusters",
            cluster("demo", json!({"sidecar": image, "auth": {}})),
        ),
        accept(
            "referenced secret",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "auth": {"secretRef": secret_ref}}),
            ),
        ),
        accept(
            "insecure, written out",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "auth": {"insecure": true}}),
            ),
        ),
        accept(
            "secretRef with insecure: false",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "auth": {"secretRef": secret_ref, "insecure": false}}),
            ),
        ),
        accept(
            "secretRef with insecure: null",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "auth": {"secretRef": secret_ref, "insecure": null}}),
            ),
        ),
        refuse(
            "secretRef and insecure: true",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "auth": {"secretRef": secret_ref, "insecure": true}}),
            ),
            "not both",
        ),
        accept(
            "a rotation: secretRef and acceptSecretRef",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "auth": {"secretRef": secret_ref, "acceptSecretRef": {"name": "next", "key": "secret"}}}),
            ),
        ),
        accept(
            "a rotation away from the generated secret",
            "actorclusters",
            cluster(
                "demo",
                json!({"auth": {"acceptSecretRef": {"name": "next", "key": "secret"}}}),
            ),
        ),
        refuse(
            "acceptSecretRef and insecure: true",
            "actorclusters",
            cluster(
                "demo",
                json!({"auth": {"acceptSecretRef": secret_ref, "insecure": true}}),
            ),
            "needs a secret to sign with",
        ),
        accept(
            "a switch to a secret: acceptUnsigned with the generated secret",
            "actorclusters",
            cluster("demo", json!({"auth": {"acceptUnsigned": true}})),
        ),
        accept(
            "a switch back: acceptUnsigned with secretRef",
            "actorclusters",
            cluster(
                "demo",
                json!({"auth": {"secretRef": secret_ref, "acceptUnsigned": true}}),
            ),
        ),
        accept(
            "acceptUnsigned: false with insecure: true",
            "actorclusters",
            cluster(
                "demo",
                json!({"auth": {"acceptUnsigned": false, "insecure": true}}),
            ),
        ),
        refuse(
            "acceptUnsigned and insecure: true",
            "actorclusters",
            cluster(
                "demo",
                json!({"auth": {"acceptUnsigned": true, "insecure": true}}),
            ),
            "it needs a secret to sign with",
        ),
        // --- ActorCluster: the state store ---
        accept(
            "postgres with the DSN's Secret",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "state": {"kind": "postgres", "secretRef": {"name": "pg", "key": "dsn"}}}),
            ),
        ),
        accept(
            "sqlite without a Secret",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "state": {"kind": "sqlite"}}),
            ),
        ),
        refuse(
            "postgres without a secretRef",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "state": {"kind": "postgres"}}),
            ),
            "state.secretRef is required",
        ),
        refuse(
            "sqlite with a secretRef",
            "actorclusters",
            cluster(
                "demo",
                json!({"sidecar": image, "state": {"kind": "sqlite", "secretRef": {"name": "pg", "key": "dsn"}}}),
            ),
            "applies only to state.kind postgres",
        ),
        // --- names become label values ---
        accept(
            "63-character cluster name",
            "actorclusters",
            cluster(&"c".repeat(63), json!({"sidecar": image})),
        ),
        refuse(
            "64-character cluster name",
            "actorclusters",
            cluster(&"c".repeat(64), json!({"sidecar": image})),
            "at most 63 characters",
        ),
        // --- ActorRole ---
        accept(
            "engine role with one stateful type",
            "actorroles",
            role(role_spec(json!(["Counter"]), json!([]))),
        ),
        accept(
            "web role with one worker only",
            "actorroles",
            role(role_spec(json!([]), json!(["Echo"]))),
        ),
        accept(
            "workers omitted (defaulted to [])",
            "actorroles",
            role(
                json!({"clusterRef": {"name": "demo"}, "actors": ["Counter"], "template": template()}),
            ),
        ),
        refuse(
            "a role that registers nothing",
            "actorroles",
            role(role_spec(json!([]), json!([]))),
            "at least one type",
        ),
        refuse(
            "a role with both lists omitted",
            "actorroles",
            role(json!({"clusterRef": {"name": "demo"}, "template": template()})),
            "at least one type",
        ),
        refuse(
            "the same type as actor and worker",
            "actorroles",
            role(role_spec(json!(["Counter", "Echo"]), json!(["Echo"]))),
            "not both",
        ),
        Case {
            what: "clusterRef changed on update",
            plural: "actorroles",
            object: role(
                json!({"clusterRef": {"name": "other"}, "actors": ["Counter"], "template": template()}),
            ),
            old: Some(role(role_spec(json!(["Counter"]), json!([])))),
            refusal: Some("clusterRef is immutable"),
        },
        Case {
            what: "replicas changed on update (clusterRef kept)",
            plural: "actorroles",
            object: role(
                json!({"clusterRef": {"name": "demo"}, "replicas": 7, "actors": ["Counter"], "template": template()}),
            ),
            old: Some(role(role_spec(json!(["Counter"]), json!([])))),
            refusal: None,
        },
    ]
}

/// Runs every case against the given schemas; returns the expectations that did not hold.
fn unmet(clusters: &Value, roles: &Value) -> Vec<String> {
    let validator = Validator::new();
    let mut out = Vec::new();
    for case in cases() {
        let schema = if case.plural == "actorclusters" {
            clusters
        } else {
            roles
        };
        let result: Result<(), ValidationErrors> =
            validator.validate(schema, &case.object, case.old.as_ref());
        match (case.refusal, result) {
            (None, Ok(())) => {}
            (None, Err(errors)) => {
                out.push(format!("{}: should be accepted, got {errors:?}", case.what))
            }
            (Some(want), Ok(())) => out.push(format!("{}: should be refused ({want})", case.what)),
            (Some(want), Err(errors)) => {
                if !errors.iter().any(|e| e.message.contains(want)) {
                    out.push(format!(
                        "{}: refused, but not for {want:?}: {errors:?}",
                        case.what
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn every_rule_accepts_the_good_and_refuses_the_bad() {
    let unmet = unmet(&schema("actorclusters"), &schema("actorroles"));
    assert!(
        unmet.is_empty(),
        "unmet expectations:\n{}",
        unmet.join("\n")
    );
}

/// Replaces the rule text `from` (wherever it appears) with `to`.
fn mutate(mut schema: Value, from: &str, to: &str) -> Value {
    fn walk(v: &mut Value, from: &str, to: &str, hits: &mut usize) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(rule)) = map.get_mut("rule")
                    && rule == from
                {
                    *rule = to.to_owned();
                    *hits += 1;
                }
                map.values_mut().for_each(|c| walk(c, from, to, hits));
            }
            Value::Array(items) => items.iter_mut().for_each(|c| walk(c, from, to, hits)),
            _ => {}
        }
    }
    let mut hits = 0;
    walk(&mut schema, from, to, &mut hits);
    assert_eq!(hits, 1, "rule {from:?} should appear once");
    schema
}

#[test]
fn broken_variants_of_each_rule_are_caught() {
    let clusters = schema("actorclusters");
    let roles = schema("actorroles");
    let broken: [(&str, &str, &str); 11] = [
        (
            "actorclusters",
            "self.kind != 'postgres' || has(self.secretRef)",
            "true",
        ),
        (
            "actorclusters",
            "self.kind == 'postgres' || !has(self.secretRef)",
            "true",
        ),
        (
            "actorclusters",
            "self.ttlSeconds > 2 * self.heartbeatSeconds",
            "self.ttlSeconds >= 2 * self.heartbeatSeconds",
        ),
        (
            "actorclusters",
            "!(has(self.secretRef) && has(self.insecure) && self.insecure == true)",
            "!(has(self.secretRef) && has(self.insecure))",
        ),
        // `insecure: null` is a bool-typed null to CEL: `&& self.insecure` fails to evaluate on
        // it (and the object is refused), `== true` does not.
        (
            "actorclusters",
            "!(has(self.secretRef) && has(self.insecure) && self.insecure == true)",
            "!(has(self.secretRef) && has(self.insecure) && self.insecure)",
        ),
        (
            "actorclusters",
            "!(has(self.acceptSecretRef) && has(self.insecure) && self.insecure == true)",
            "true",
        ),
        (
            "actorclusters",
            "!(has(self.acceptUnsigned) && self.acceptUnsigned == true && has(self.insecure) && self.insecure == true)",
            "!(has(self.acceptUnsigned) && has(self.insecure) && self.insecure == true)",
        ),
        (
            "actorclusters",
            "size(self.metadata.name) <= 63",
            "size(self.metadata.name) <= 64",
        ),
        (
            "actorroles",
            "size(self.actors) + size(self.workers) > 0",
            "size(self.actors) > 0",
        ),
        (
            "actorroles",
            "self.actors.all(t, !(t in self.workers))",
            "true",
        ),
        ("actorroles", "self == oldSelf", "true"),
    ];
    for (plural, from, to) in broken {
        let (c, r) = if plural == "actorclusters" {
            (mutate(clusters.clone(), from, to), roles.clone())
        } else {
            (clusters.clone(), mutate(roles.clone(), from, to))
        };
        assert!(
            !unmet(&c, &r).is_empty(),
            "weakening {from:?} to {to:?} went unnoticed"
        );
    }
}

/// Every `x-kubernetes-validations` rule in a schema, with the schema node it sits on.
fn rules(schema: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::Array(rs)) = map.get("x-kubernetes-validations") {
                    for r in rs {
                        out.push((r["rule"].as_str().unwrap().to_owned(), v.clone()));
                    }
                }
                map.values().for_each(|c| walk(c, out));
            }
            Value::Array(items) => items.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    walk(schema, &mut out);
    out
}

#[test]
fn every_rule_compiles_stays_in_scope_and_within_the_cost_budget() {
    let mut seen = 0;
    for plural in ["actorclusters", "actorroles"] {
        let schema = schema(plural);
        let compiled: CompiledSchema = compile_schema(&schema);
        assert!(!compiled.has_errors(), "{plural}: a rule does not compile");
        for (rule, node) in rules(&schema) {
            let node = compile_schema(&node);
            let warnings: Vec<_> = analyze_rule(&rule, &node, ScopeContext::CrdValidation)
                .into_iter()
                // kube-cel 0.8 reports the variable a macro binds (`t` in `all(t, ...)`) as out
                // of scope; every other warning (cost, missing bounds, real scope errors) counts.
                .filter(|w| {
                    !(w.kind == WarningKind::WrongScope && w.message.starts_with("variable 't' "))
                })
                .collect();
            assert!(warnings.is_empty(), "{plural}: {rule}: {warnings:?}");
            seen += 1;
        }
    }
    assert_eq!(
        seen, 11,
        "the number of CEL rules changed: extend the tables above"
    );
}

#[test]
fn a_syntax_error_in_a_rule_is_caught() {
    let broken = mutate(
        schema("actorclusters"),
        "self.ttlSeconds > 2 * self.heartbeatSeconds",
        "self.ttlSeconds > 2 *",
    );
    assert!(rules(&broken).iter().any(|(r, _)| r.ends_with('*')));
    let mut any = false;
    for (_, node) in rules(&broken) {
        any |= compile_schema(&node).has_errors();
    }
    assert!(any, "the broken rule must fail to compile");
}

/// The schema pattern of type names (enforced by the API server's RE2) and the Rust check the
/// operator uses must agree. CEL's `matches` uses an RE2-compatible engine, so it stands in for
/// the API server here.
#[test]
fn type_name_pattern_and_rust_check_agree() {
    let pattern = TYPE_NAME_PATTERN.replace('\\', "\\\\");
    let schema = json!({
        "type": "string",
        "x-kubernetes-validations": [{"rule": format!("self.matches('{pattern}')"), "message": "no match"}]
    });
    let validator = Validator::new();
    let names = [
        "Counter",
        "E",
        "a1",
        "billing.Invoice",
        "my-type_2",
        "x.y-z",
        "",
        "1Counter",
        "Counter-",
        "Counter.",
        "Coun ter",
        "Zähler",
        "_x",
        "-x",
        "a/b",
        "A",
        "AB",
    ];
    let long_ok = "A".repeat(58);
    let long_bad = "A".repeat(59);
    for name in names
        .iter()
        .copied()
        .chain([long_ok.as_str(), long_bad.as_str()])
    {
        let by_pattern = validator.validate(&schema, &json!(name), None).is_ok();
        let by_rust = TypeName::new(name).is_ok();
        assert_eq!(
            by_pattern, by_rust,
            "{name:?}: pattern says {by_pattern}, Rust says {by_rust}"
        );
    }
}

/// The cost check above is not vacuous: without `maxItems` on the type lists, the
/// `all(... in ...)` rule is flagged (the API server would estimate it against unbounded lists).
#[test]
fn an_unbounded_list_under_a_rule_is_caught() {
    let mut schema = schema("actorroles");
    let spec = &mut schema["properties"]["spec"];
    for list in ["actors", "workers"] {
        let removed = spec["properties"][list]
            .as_object_mut()
            .unwrap()
            .remove("maxItems");
        assert!(removed.is_some(), "{list} has maxItems");
    }
    let node = compile_schema(spec);
    let warnings = analyze_rule(
        "self.actors.all(t, !(t in self.workers))",
        &node,
        ScopeContext::CrdValidation,
    );
    assert!(
        warnings.iter().any(|w| w.kind != WarningKind::WrongScope),
        "expected a bounds/cost warning, got {warnings:?}"
    );
}

/// The walkthrough's CRs (`examples/k8s/`) are accepted by the CEL rules and parse into the types.
#[test]
fn the_examples_pass_the_rules() {
    let dir = manifest_dir().join("../examples/k8s");
    let validator = Validator::new();
    let mut checked = 0;
    for (file, plural) in [
        ("cluster.yaml", "actorclusters"),
        ("role-web.yaml", "actorroles"),
        ("role-engine.yaml", "actorroles"),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect(file);
        let object: Value = serde_saphyr::from_str(&text).expect(file);
        if plural == "actorclusters" {
            serde_json::from_value::<sigx_crds::ActorCluster>(object.clone()).expect(file);
        } else {
            serde_json::from_value::<sigx_crds::ActorRole>(object.clone()).expect(file);
        }
        if let Err(errors) = validator.validate(&schema(plural), &object, None) {
            panic!("{file} is refused: {errors:?}");
        }
        checked += 1;
    }
    assert_eq!(checked, 3);
}

/// The crate's directory as cargo gives it to the running test. Read at run time, not baked in
/// at compile time: a target dir reused across checkouts (CI reuses one) would otherwise point
/// the test at another checkout's files.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
