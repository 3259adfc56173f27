//! Pieces shared by both resources: actor type names, label keys, condition types.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// Label keys the operator puts on pods and the sidecar puts on its Lease.
///
/// The cluster and role keys are the ones DESIGN.md §3 names for Leases, so one selector finds
/// both a cluster's pods and its membership records.
pub mod labels {
    /// The `ActorCluster` a pod or Lease belongs to (value: the cluster's name).
    pub const CLUSTER: &str = "actors.sigx.dev/cluster";
    /// The `ActorRole` a pod or Lease belongs to (value: the role's name).
    pub const ROLE: &str = "actors.sigx.dev/role";
    /// Prefix of the per-type label: `actors.sigx.dev/type.Counter: "true"` on every pod whose
    /// sidecar registers `Counter`, so `kubectl get pods -l actors.sigx.dev/type.Counter` lists
    /// the hosts that may run it.
    pub const TYPE_PREFIX: &str = "actors.sigx.dev/type.";
    /// Value of a per-type label.
    pub const TYPE_VALUE: &str = "true";
    /// `app.kubernetes.io/managed-by` value on everything the operator creates.
    pub const MANAGED_BY_VALUE: &str = "sigx-operator";

    /// The label key that marks a pod as registering `type_name`.
    pub fn type_key(type_name: &super::TypeName) -> String {
        format!("{TYPE_PREFIX}{}", type_name.as_str())
    }
}

/// `type` values of the conditions in both statuses (meta/v1 Conditions keyed by `type`).
pub mod condition_types {
    /// The cluster has hosts and none is fenced; a role's Deployment has all replicas ready.
    pub const READY: &str = "Ready";
    /// Something needs a human: fenced hosts, a missing secret, a role that cannot render.
    pub const DEGRADED: &str = "Degraded";
    /// A role's rollout or hosts' joining is in progress: the operator expects it to finish on
    /// its own (kstatus' `Reconciling`).
    pub const RECONCILING: &str = "Reconciling";
    /// A role cannot progress without a change by someone: the API refused its Deployment, the
    /// ReplicaSet cannot create pods (quota, Pod Security, a webhook), its cluster is missing,
    /// or the rollout exceeded its progress deadline (kstatus' `Stalled`).
    pub const STALLED: &str = "Stalled";
    /// The cluster secret exists (generated or referenced) or the cluster is explicitly insecure.
    pub const SECRET_READY: &str = "SecretReady";
}

/// Longest accepted type name. A type name becomes part of a label key
/// (`actors.sigx.dev/type.<name>`), whose name part may hold at most 63 characters; `type.` takes
/// five of them.
pub const TYPE_NAME_MAX_LEN: usize = 58;

/// The schema pattern of a type name: the wire pattern of `proto` (`[A-Za-z][A-Za-z0-9_.-]*`)
/// narrowed so that the name is also a valid label-key name (ends alphanumeric, at most 58 chars).
pub const TYPE_NAME_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_.-]{0,56}[A-Za-z0-9])?$";

/// An actor or worker type name such as `Counter`.
///
/// Deserialization does not validate: a watcher must never fail a whole list because one object
/// slipped past an older schema. The apiserver enforces [`TYPE_NAME_PATTERN`]; code that builds
/// label keys from a name calls [`TypeName::validate`] first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(transparent)]
pub struct TypeName(String);

/// A type name that cannot be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "type name {name:?} is invalid: {reason} (a type name starts with a letter, continues with letters, digits, '_', '.' or '-', ends with a letter or digit, and has at most 58 characters)"
)]
pub struct TypeNameError {
    /// The offending name.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl TypeName {
    /// Builds a type name, checking it against [`TYPE_NAME_PATTERN`].
    pub fn new(name: impl Into<String>) -> Result<Self, TypeNameError> {
        let name = Self(name.into());
        name.validate()?;
        Ok(name)
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks the name against [`TYPE_NAME_PATTERN`] (same rule, without a regex engine).
    pub fn validate(&self) -> Result<(), TypeNameError> {
        let err = |reason| {
            Err(TypeNameError {
                name: self.0.clone(),
                reason,
            })
        };
        let bytes = self.0.as_bytes();
        let Some((&first, rest)) = bytes.split_first() else {
            return err("it is empty");
        };
        if bytes.len() > TYPE_NAME_MAX_LEN {
            return err("it is longer than 58 characters");
        }
        if !first.is_ascii_alphabetic() {
            return err("it does not start with a letter");
        }
        if !rest
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return err("it contains a character other than letters, digits, '_', '.' and '-'");
        }
        if !bytes[bytes.len() - 1].is_ascii_alphanumeric() {
            return err("it does not end with a letter or digit");
        }
        Ok(())
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for TypeName {
    fn schema_name() -> Cow<'static, str> {
        "TypeName".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "An actor type name, e.g. `Counter`: starts with a letter, continues with letters, digits, '_', '.' or '-', ends with a letter or digit; at most 58 characters (it becomes part of a pod label key).",
            "pattern": TYPE_NAME_PATTERN,
            "minLength": 1,
            "maxLength": TYPE_NAME_MAX_LEN,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_names_that_fit_a_label_key() {
        for ok in [
            "Counter",
            "E",
            "a1",
            "billing.Invoice",
            "my-type_2",
            &"A".repeat(58),
        ] {
            assert!(TypeName::new(ok).is_ok(), "{ok} should be accepted");
        }
    }

    #[test]
    fn refuses_names_that_do_not() {
        for bad in [
            "",
            "1Counter",
            "Counter-",
            "Coun ter",
            "Zähler",
            "_x",
            &"A".repeat(59),
        ] {
            assert!(TypeName::new(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn label_key_is_prefixed() {
        let t = TypeName::new("Counter").unwrap();
        assert_eq!(labels::type_key(&t), "actors.sigx.dev/type.Counter");
    }
}
