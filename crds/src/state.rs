//! `ActorCluster.spec.state`: where actors' durable state and epochs live (DESIGN.md §11).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::SecretKeyRef;

/// The state store of a cluster's sidecars. Without this section each sidecar keeps state in
/// memory: lost when the pod stops and not shared, so an actor that moves starts empty.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.kind != 'postgres' || has(self.secretRef)").message("state.secretRef is required when state.kind is postgres: name the Secret and key holding the connection string").reason(Reason::FieldValueRequired))]
#[x_kube(validation = Rule::new("self.kind == 'postgres' || !has(self.secretRef)").message("state.secretRef applies only to state.kind postgres; remove it or set kind: postgres").reason(Reason::FieldValueForbidden))]
pub struct StateSpec {
    /// `postgres`: one database shared by every host (production). `sqlite`: a file per pod in
    /// the pod's socket volume, gone with the pod and not shared between hosts — for a single
    /// replica or development only.
    pub kind: StateKind,
    /// For `postgres`: the Secret key holding the connection string
    /// (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`), given to the sidecar as `SIGX_STATE_DSN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
}

/// The state store kind.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StateKind {
    /// An SQLite file per pod.
    Sqlite,
    /// A PostgreSQL database shared by the fleet.
    Postgres,
}

impl StateKind {
    /// The spelling of the spec and of `SIGX_STATE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// A state section the CEL rules refuse (only reachable when the schema was bypassed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateSpecError {
    /// `kind: postgres` without the connection string's Secret.
    #[error(
        "spec.state.secretRef is missing: state.kind postgres needs the Secret and key holding \
         the connection string (spec.state.secretRef: {{name, key}})"
    )]
    MissingSecretRef,
    /// A `secretRef` for a kind that takes none.
    #[error("spec.state.secretRef is set for state.kind sqlite, which takes none; remove it")]
    UnexpectedSecretRef,
}

/// The store a spec selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateMode<'a> {
    /// An SQLite file per pod.
    Sqlite,
    /// PostgreSQL, connection string in this Secret key.
    Postgres(&'a SecretKeyRef),
}

impl StateSpec {
    /// The selected store; refuses what the CEL rules refuse.
    pub fn mode(&self) -> Result<StateMode<'_>, StateSpecError> {
        match (self.kind, &self.secret_ref) {
            (StateKind::Postgres, Some(r)) => Ok(StateMode::Postgres(r)),
            (StateKind::Postgres, None) => Err(StateSpecError::MissingSecretRef),
            (StateKind::Sqlite, None) => Ok(StateMode::Sqlite),
            (StateKind::Sqlite, Some(_)) => Err(StateSpecError::UnexpectedSecretRef),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_needs_a_secret_ref_and_sqlite_takes_none() {
        let spec = |v| serde_json::from_value::<StateSpec>(v).unwrap();
        let r = serde_json::json!({"name": "pg", "key": "dsn"});
        assert!(matches!(
            spec(serde_json::json!({"kind": "postgres", "secretRef": r})).mode(),
            Ok(StateMode::Postgres(SecretKeyRef { name, key })) if name == "pg" && key == "dsn"
        ));
        let err = spec(serde_json::json!({"kind": "postgres"}))
            .mode()
            .unwrap_err();
        assert!(err.to_string().contains("spec.state.secretRef"), "{err}");
        assert_eq!(
            spec(serde_json::json!({"kind": "sqlite"})).mode(),
            Ok(StateMode::Sqlite)
        );
        assert_eq!(
            spec(serde_json::json!({"kind": "sqlite", "secretRef": r})).mode(),
            Err(StateSpecError::UnexpectedSecretRef)
        );
        assert!(serde_json::from_value::<StateSpec>(serde_json::json!({"kind": "mysql"})).is_err());
    }
}
