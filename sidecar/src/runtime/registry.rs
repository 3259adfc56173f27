//! What the app registered: its stateful actor types and worker types, validated.

use sigx_proto::v1;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The default idle timeout of an activation (seed and issue: 5 minutes).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The default number of concurrent turns of one worker type on one host.
pub const DEFAULT_WORKER_CONCURRENCY: u32 = 16;
/// The longest type name accepted.
pub const MAX_TYPE_NAME: usize = 128;

/// A stateful actor type as registered.
#[derive(Debug, Clone)]
pub struct ActorType {
    pub name: String,
    pub reentrant: bool,
    pub idle_timeout: Duration,
    /// Empty = any method.
    pub methods: HashSet<String>,
}

/// A worker type as registered.
#[derive(Debug, Clone)]
pub struct WorkerType {
    pub name: String,
    pub max_concurrency: u32,
    /// Empty = any method.
    pub methods: HashSet<String>,
}

/// The validated registration of one app.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub app_name: String,
    pub actors: BTreeMap<String, ActorType>,
    pub workers: BTreeMap<String, WorkerType>,
}

/// What is wrong with a registration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistrationError {
    #[error("the registration names no actor or worker type: register at least one")]
    Empty,
    #[error("a type name is empty: every actor and worker type needs a name")]
    EmptyName,
    #[error(
        "type name {0:?} is not valid: use a letter, then letters, digits, '_', '.' or '-' \
         (at most 128 characters)"
    )]
    BadName(String),
    #[error("type {0:?} is registered twice: type names must be unique across actors and workers")]
    Duplicate(String),
    #[error("type {ty:?} lists method {method:?} twice or with an empty name")]
    BadMethod { ty: String, method: String },
}

/// Whether `name` is a valid type name: `[A-Za-z][A-Za-z0-9_.-]{0,127}`.
pub fn valid_type_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => {}
        _ => return false,
    }
    name.len() <= MAX_TYPE_NAME
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

fn methods(ty: &str, list: &[String]) -> Result<HashSet<String>, RegistrationError> {
    let mut set = HashSet::new();
    for m in list {
        if m.is_empty() || !set.insert(m.clone()) {
            return Err(RegistrationError::BadMethod {
                ty: ty.to_string(),
                method: m.clone(),
            });
        }
    }
    Ok(set)
}

impl Registry {
    /// Validates a `Register` message.
    pub fn from_proto(reg: &v1::Register) -> Result<Self, RegistrationError> {
        if reg.actors.is_empty() && reg.workers.is_empty() {
            return Err(RegistrationError::Empty);
        }
        let mut seen = HashSet::new();
        let mut check = |name: &str| -> Result<(), RegistrationError> {
            if name.is_empty() {
                return Err(RegistrationError::EmptyName);
            }
            if !valid_type_name(name) {
                return Err(RegistrationError::BadName(name.to_string()));
            }
            if !seen.insert(name.to_string()) {
                return Err(RegistrationError::Duplicate(name.to_string()));
            }
            Ok(())
        };
        let mut registry = Registry {
            app_name: reg.app_name.clone(),
            ..Default::default()
        };
        for a in &reg.actors {
            check(&a.name)?;
            registry.actors.insert(
                a.name.clone(),
                ActorType {
                    name: a.name.clone(),
                    reentrant: a.reentrant,
                    idle_timeout: if a.idle_timeout_ms == 0 {
                        DEFAULT_IDLE_TIMEOUT
                    } else {
                        Duration::from_millis(a.idle_timeout_ms)
                    },
                    methods: methods(&a.name, &a.methods)?,
                },
            );
        }
        for w in &reg.workers {
            check(&w.name)?;
            registry.workers.insert(
                w.name.clone(),
                WorkerType {
                    name: w.name.clone(),
                    max_concurrency: if w.max_concurrency == 0 {
                        DEFAULT_WORKER_CONCURRENCY
                    } else {
                        w.max_concurrency
                    },
                    methods: methods(&w.name, &w.methods)?,
                },
            );
        }
        Ok(registry)
    }

    /// Every registered type name, sorted.
    pub fn all_types(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .actors
            .keys()
            .chain(self.workers.keys())
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// The stateful type names, sorted.
    pub fn stateful_types(&self) -> Vec<String> {
        self.actors.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(actors: &[&str], workers: &[&str]) -> v1::Register {
        v1::Register {
            actors: actors
                .iter()
                .map(|n| v1::ActorTypeSpec {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            workers: workers
                .iter()
                .map(|n| v1::WorkerTypeSpec {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            app_name: "t".into(),
        }
    }

    #[test]
    fn malformed_registrations_are_named() {
        assert_eq!(
            Registry::from_proto(&reg(&[], &[])).unwrap_err(),
            RegistrationError::Empty
        );
        assert_eq!(
            Registry::from_proto(&reg(&[""], &[])).unwrap_err(),
            RegistrationError::EmptyName
        );
        assert_eq!(
            Registry::from_proto(&reg(&["Counter"], &["Counter"])).unwrap_err(),
            RegistrationError::Duplicate("Counter".into())
        );
        assert_eq!(
            Registry::from_proto(&reg(&["9lives"], &[])).unwrap_err(),
            RegistrationError::BadName("9lives".into())
        );
    }

    #[test]
    fn defaults_apply() {
        let r = Registry::from_proto(&reg(&["Counter"], &["Echo"])).unwrap();
        assert_eq!(r.actors["Counter"].idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert_eq!(
            r.workers["Echo"].max_concurrency,
            DEFAULT_WORKER_CONCURRENCY
        );
        assert_eq!(
            r.all_types(),
            vec!["Counter".to_string(), "Echo".to_string()]
        );
    }
}
