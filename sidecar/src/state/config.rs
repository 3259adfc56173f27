//! Which state store a host uses (`--state`, `--state-path`, `--state-dsn[-file]`), validated
//! with the rest of the configuration before anything binds, and opened by [`super::open`].

use clap::ValueEnum;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The state store kind (`SIGX_STATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateKind {
    /// In this process only: lost at exit, and not shared with other hosts.
    Memory,
    /// One SQLite file, shared by the hosts of one machine.
    Sqlite,
    /// One PostgreSQL database, shared by every host of the fleet.
    Postgres,
}

/// The file name of the SQLite state database when `--state-path` is not given.
pub const DEFAULT_STATE_FILE: &str = "sigx-state.db";

/// The validated choice.
#[derive(Clone, PartialEq, Eq)]
pub enum StateConfig {
    /// [`super::memory::MemoryStateStore`].
    Memory,
    /// [`super::sqlite::SqliteStateStore`] at this file.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// [`super::postgres::PostgresStateStore`].
    Postgres {
        /// The connection string (it holds the password: never printed).
        dsn: StateDsn,
    },
}

impl StateConfig {
    /// The kind chosen.
    pub fn kind(&self) -> StateKind {
        match self {
            StateConfig::Memory => StateKind::Memory,
            StateConfig::Sqlite { .. } => StateKind::Sqlite,
            StateConfig::Postgres { .. } => StateKind::Postgres,
        }
    }
}

impl std::fmt::Debug for StateConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateConfig::Memory => f.write_str("Memory"),
            StateConfig::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            StateConfig::Postgres { dsn } => f.debug_struct("Postgres").field("dsn", dsn).finish(),
        }
    }
}

/// A PostgreSQL connection string. `Debug` shows where it points, never the password.
#[derive(Clone, PartialEq, Eq)]
pub struct StateDsn(String);

impl StateDsn {
    /// The string, for the client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for StateDsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match tokio_postgres::Config::from_str(&self.0) {
            Ok(c) => write!(f, "StateDsn({})", super::postgres::describe_target(&c)),
            Err(_) => f.write_str("StateDsn(<unparsable>)"),
        }
    }
}

/// A state setting that is wrong, named.
#[derive(Debug, thiserror::Error)]
pub enum StateConfigError {
    /// `--state postgres` without a connection string.
    #[error(
        "SIGX_STATE=postgres needs a connection string: set SIGX_STATE_DSN_FILE (or \
         SIGX_STATE_DSN); in Kubernetes, give the ActorCluster's state section a secretRef"
    )]
    MissingDsn,
    /// The connection string is empty, unreadable or does not parse.
    #[error("{0}")]
    BadDsn(String),
    /// A setting for one kind given with another kind.
    #[error(
        "{name} is set but SIGX_STATE={kind}: it only applies to SIGX_STATE={applies}; set \
         SIGX_STATE={applies} or remove {name}"
    )]
    Mismatch {
        /// The setting.
        name: &'static str,
        /// The kind chosen.
        kind: &'static str,
        /// The kind it belongs to.
        applies: &'static str,
    },
    /// The SQLite state file cannot be where it is said to be.
    #[error("SIGX_STATE_PATH={path:?}: {reason}")]
    Path {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn kind_name(k: StateKind) -> &'static str {
    match k {
        StateKind::Memory => "memory",
        StateKind::Sqlite => "sqlite",
        StateKind::Postgres => "postgres",
    }
}

/// Resolves the flags. Without `--state` the kind follows what was given: a DSN means
/// `postgres`, a state path or SQLite membership means `sqlite` (the file next to the membership
/// file), otherwise `memory` (a single host).
pub fn validate(
    kind: Option<StateKind>,
    state_path: Option<&Path>,
    dsn: Option<&str>,
    dsn_file: Option<&Path>,
    membership_sqlite: Option<&Path>,
) -> Result<StateConfig, StateConfigError> {
    let has_dsn = dsn.is_some() || dsn_file.is_some();
    let kind = kind.unwrap_or(if has_dsn {
        StateKind::Postgres
    } else if state_path.is_some() || membership_sqlite.is_some() {
        StateKind::Sqlite
    } else {
        StateKind::Memory
    });
    let mismatch = |name, applies| StateConfigError::Mismatch {
        name,
        kind: kind_name(kind),
        applies,
    };
    if kind != StateKind::Postgres {
        if dsn.is_some() {
            return Err(mismatch("SIGX_STATE_DSN", "postgres"));
        }
        if dsn_file.is_some() {
            return Err(mismatch("SIGX_STATE_DSN_FILE", "postgres"));
        }
    }
    if kind != StateKind::Sqlite && state_path.is_some() {
        return Err(mismatch("SIGX_STATE_PATH", "sqlite"));
    }
    match kind {
        StateKind::Memory => Ok(StateConfig::Memory),
        StateKind::Sqlite => {
            let path = match state_path {
                Some(p) => p.to_path_buf(),
                None => membership_sqlite
                    .and_then(Path::parent)
                    .unwrap_or(Path::new(".sigx"))
                    .join(DEFAULT_STATE_FILE),
            };
            if let Some(parent) = path.parent()
                && !parent.as_os_str().is_empty()
                && !parent.is_dir()
            {
                return Err(StateConfigError::Path {
                    reason: format!("directory {parent:?} does not exist; create it"),
                    path,
                });
            }
            if path.is_dir() {
                return Err(StateConfigError::Path {
                    path,
                    reason: "is a directory, not a database file".into(),
                });
            }
            Ok(StateConfig::Sqlite { path })
        }
        StateKind::Postgres => {
            let dsn = match (dsn, dsn_file) {
                (Some(d), _) => d.trim().to_string(),
                (None, Some(file)) => std::fs::read_to_string(file)
                    .map_err(|e| {
                        StateConfigError::BadDsn(format!(
                            "SIGX_STATE_DSN_FILE={file:?} cannot be read: {e}"
                        ))
                    })?
                    .trim()
                    .to_string(),
                (None, None) => return Err(StateConfigError::MissingDsn),
            };
            if dsn.is_empty() {
                return Err(StateConfigError::BadDsn(
                    "the PostgreSQL connection string (SIGX_STATE_DSN) is empty".into(),
                ));
            }
            if let Err(e) = tokio_postgres::Config::from_str(&dsn) {
                return Err(StateConfigError::BadDsn(
                    super::postgres::PostgresStateError::BadDsn {
                        reason: e.to_string(),
                    }
                    .to_string(),
                ));
            }
            Ok(StateConfig::Postgres { dsn: StateDsn(dsn) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_follows_what_was_given_and_mismatches_are_named() {
        let m = Path::new("/tmp/m.db");
        assert_eq!(
            validate(None, None, None, None, None).unwrap(),
            StateConfig::Memory
        );
        assert_eq!(
            validate(None, None, None, None, Some(m)).unwrap(),
            StateConfig::Sqlite {
                path: PathBuf::from("/tmp/sigx-state.db")
            }
        );
        let pg = validate(
            None,
            None,
            Some("postgres://u:hunter2@db:5432/s"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(pg.kind(), StateKind::Postgres);
        let shown = format!("{pg:?}");
        assert!(
            shown.contains("db:5432/s") && !shown.contains("hunter2"),
            "{shown}"
        );
        let err = validate(Some(StateKind::Memory), None, Some("host=db"), None, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("SIGX_STATE_DSN is set but SIGX_STATE=memory"),
            "{err}"
        );
        let err = validate(Some(StateKind::Postgres), None, None, None, Some(m)).unwrap_err();
        assert!(matches!(err, StateConfigError::MissingDsn), "{err}");
        let err = validate(None, None, Some("postgres://u:pw@h:nope/d"), None, None).unwrap_err();
        assert!(
            err.to_string().contains("SIGX_STATE_DSN is not a valid"),
            "{err}"
        );
        assert!(!err.to_string().contains("pw@"), "{err}");
        let err = validate(
            None,
            Some(Path::new("/nonexistent-dir/s.db")),
            None,
            None,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("SIGX_STATE_PATH"), "{err}");
    }

    #[test]
    fn a_dsn_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("dsn");
        std::fs::write(&file, "postgres://u:p@db/s\n").unwrap();
        let got = validate(None, None, None, Some(&file), None).unwrap();
        assert_eq!(
            got,
            StateConfig::Postgres {
                dsn: StateDsn("postgres://u:p@db/s".into())
            }
        );
        let err = validate(None, None, None, Some(&dir.path().join("missing")), None).unwrap_err();
        assert!(err.to_string().contains("SIGX_STATE_DSN_FILE"), "{err}");
    }
}
