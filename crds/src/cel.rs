//! Client-side admission for the sigx kinds: the CRDs' CEL rules (`x-kubernetes-validations`),
//! evaluated without an API server, as the API server would on create and update.
//!
//! For test doubles of the API server (`e2e/`), so that "an invalid spec is refused by the CEL
//! rules" can be shown through the real `kube` client. Behind the `cel` feature: the operator
//! does not ship a CEL interpreter, because the real API server evaluates these rules itself.
//! OpenAPI checks (types, patterns, bounds) are not made here.

use std::sync::OnceLock;

use kube_cel::{CompiledSchema, Validator, compile_schema};
use serde_json::Value;

/// An object the CEL rules refuse, with the API server's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}.{group} {name:?} is invalid: {}", causes.join(", "))]
pub struct Refusal {
    /// `ActorCluster` or `ActorRole`.
    pub kind: String,
    /// `actors.sigx.dev`.
    pub group: &'static str,
    /// `metadata.name` of the object.
    pub name: String,
    /// One `<field path>: Invalid value: <message>` per failed rule.
    pub causes: Vec<String>,
}

/// Why [`admit`] could not judge an object at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// The kind is not one of this crate's.
    #[error("{0:?} is not a sigx kind (ActorCluster, ActorRole)")]
    UnknownKind(String),
}

struct Compiled {
    cluster: CompiledSchema,
    role: CompiledSchema,
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let mut schemas = crate::crds().into_iter().map(|crd| {
            let schema = crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(serde_json::to_value)
                .and_then(Result::ok)
                .unwrap_or(Value::Null);
            compile_schema(&schema)
        });
        // `crds()` returns ActorCluster, then ActorRole.
        let cluster = schemas
            .next()
            .unwrap_or_else(|| compile_schema(&Value::Null));
        let role = schemas
            .next()
            .unwrap_or_else(|| compile_schema(&Value::Null));
        Compiled { cluster, role }
    })
}

/// Admits `object` of `kind` (`old` is the stored object on an update, `None` on create):
/// `Ok(Ok(()))` when every rule holds, `Ok(Err(refusal))` when some do not.
///
/// Schema defaults are applied before the rules run, as the API server does.
pub fn admit(
    kind: &str,
    object: &Value,
    old: Option<&Value>,
) -> Result<Result<(), Refusal>, AdmitError> {
    let schema = match kind {
        "ActorCluster" => &compiled().cluster,
        "ActorRole" => &compiled().role,
        other => return Err(AdmitError::UnknownKind(other.to_owned())),
    };
    match Validator::new().validate_compiled(schema, object, old) {
        Ok(()) => Ok(Ok(())),
        Err(errors) => Ok(Err(Refusal {
            kind: kind.to_owned(),
            group: crate::GROUP,
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            causes: errors
                .iter()
                .map(|e| {
                    let path = if e.field_path.is_empty() {
                        "<root>"
                    } else {
                        e.field_path.as_str()
                    };
                    format!("{path}: Invalid value: {}", e.message)
                })
                .collect(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(membership: Value) -> Value {
        json!({"apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
               "metadata": {"name": "demo", "namespace": "apps"},
               "spec": {"sidecar": {"image": "s"}, "membership": membership}})
    }

    #[test]
    fn admits_good_and_refuses_bad_with_the_servers_wording() {
        assert_eq!(admit("ActorCluster", &cluster(json!({})), None), Ok(Ok(())));
        let refusal = admit(
            "ActorCluster",
            &cluster(json!({"heartbeatSeconds": 5, "ttlSeconds": 10})),
            None,
        )
        .unwrap()
        .unwrap_err();
        let text = refusal.to_string();
        assert!(
            text.starts_with("ActorCluster.actors.sigx.dev \"demo\" is invalid: "),
            "{text}"
        );
        assert!(
            text.contains("greater than 2 × membership.heartbeatSeconds"),
            "{text}"
        );
    }

    #[test]
    fn judges_updates_with_transition_rules() {
        let role = |cluster: &str| {
            json!({"apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
                   "metadata": {"name": "engine"},
                   "spec": {"clusterRef": {"name": cluster}, "actors": ["Counter"],
                            "template": {"spec": {"containers": [{"name": "a", "image": "a"}]}}}})
        };
        assert_eq!(
            admit("ActorRole", &role("demo"), Some(&role("demo"))),
            Ok(Ok(()))
        );
        let refusal = admit("ActorRole", &role("other"), Some(&role("demo")))
            .unwrap()
            .unwrap_err();
        assert!(
            refusal.to_string().contains("clusterRef is immutable"),
            "{refusal}"
        );
        // On create there is no old object: the transition rule does not apply.
        assert_eq!(admit("ActorRole", &role("other"), None), Ok(Ok(())));
    }

    #[test]
    fn unknown_kinds_are_not_judged() {
        assert!(matches!(
            admit("Pod", &json!({}), None),
            Err(AdmitError::UnknownKind(_))
        ));
    }
}
