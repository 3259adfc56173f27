//! Durable actor state fenced by ordered epochs (DESIGN.md §11).
//!
//! Every activation takes its actor's next **epoch** from the store before its Activate turn: one
//! conditional increment of a per-actor row, so an epoch is strictly greater than every epoch of
//! that actor issued before, fleet-wide and forever (the row is never deleted). The epoch travels
//! in every turn and is the app's fencing token for systems outside sigx.
//!
//! State is per actor, key/value. A turn's writes (puts and deletes) commit as **one atomic
//! batch** and only if the batch's epoch is still the actor's current one: a store compares and
//! refuses, so an activation superseded by a newer one (a zombie: its sidecar frozen past the TTL
//! while its app kept running, or app code that ignored cancellation) can never write over the new
//! activation's state, whatever the leases and the directory believed. This is the last line behind
//! the lease-bounded turns. The runtime holds a turn's answer until its batch is durable (the output
//! gate) and drops an activation whose write was refused.
//!
//! Stores, behind [`StateStore`]: [`memory`] (one process: tests and the simulator), [`sqlite`]
//! (the embedded default: the hosts of one machine share one file), [`postgres`] (production: every
//! host of a fleet shares one database).

pub mod config;
pub mod memory;
pub mod postgres;
pub mod sqlite;

use crate::runtime::ActorId;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;

pub use config::{StateConfig, StateKind};

/// The configured store cannot be opened; reported before anything binds (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum StateOpenError {
    /// The SQLite state database.
    #[error(transparent)]
    Sqlite(#[from] sqlite::SqliteStateError),
    /// The PostgreSQL state store.
    #[error(transparent)]
    Postgres(#[from] postgres::PostgresStateError),
}

/// Opens the store the configuration names, creating or migrating its schema.
pub async fn open(config: &crate::config::Config) -> Result<SharedStateStore, StateOpenError> {
    match &config.state {
        StateConfig::Memory => {
            if config.membership != crate::config::MembershipKind::None {
                tracing::warn!(
                    "actor state is in memory (SIGX_STATE=memory): it is lost when this host \
                     stops and not shared with the other hosts, so an actor that moves starts \
                     empty; set SIGX_STATE=sqlite (one machine) or postgres (a fleet)"
                );
            }
            Ok(Arc::new(memory::MemoryStateStore::new()))
        }
        StateConfig::Sqlite { path } => {
            let path = path.clone();
            let store = tokio::task::spawn_blocking(move || sqlite::SqliteStateStore::open(&path))
                .await
                .expect("the state open task does not panic")?;
            Ok(Arc::new(store))
        }
        StateConfig::Postgres { dsn } => Ok(Arc::new(
            postgres::PostgresStateStore::open(dsn.expose()).await?,
        )),
    }
}

/// The longest state key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The largest single value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// The most writes (puts and deletes) in one turn's batch.
pub const MAX_BATCH_WRITES: usize = 1000;
/// The largest batch, keys and values together, in bytes.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// The most keys one read may name.
pub const MAX_READ_KEYS: usize = 1000;

/// A shared store.
pub type SharedStateStore = Arc<dyn StateStore>;

/// One write of a turn's batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateWrite {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: String,
        /// The value, opaque to sigx.
        value: Bytes,
    },
    /// Removes `key` (absent is fine).
    Delete {
        /// The key.
        key: String,
    },
}

impl StateWrite {
    /// The key written.
    pub fn key(&self) -> &str {
        match self {
            StateWrite::Put { key, .. } | StateWrite::Delete { key } => key,
        }
    }
}

/// Which entries a read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These keys, in this order (absent ones as `None`).
    Keys(Vec<String>),
    /// Every entry of the actor, in key order.
    All,
}

/// Why a state operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The write (or read) carries an epoch older than the actor's current one: a newer
    /// activation exists somewhere, and this one must stop.
    #[error(
        "stale epoch: actor {actor} is at epoch {current}, this activation holds epoch {given}; \
         a newer activation superseded it, so nothing it writes is stored (it is dropped)"
    )]
    StaleEpoch {
        /// The actor.
        actor: String,
        /// The epoch the caller holds.
        given: u64,
        /// The actor's current epoch in the store.
        current: u64,
    },
    /// The epoch was never issued for this actor (a bug or a store reset under a live host).
    #[error(
        "unknown epoch: actor {actor} has no epoch {given} in the state store (current {current}); \
         was the store reset under a live host?"
    )]
    UnknownEpoch {
        /// The actor.
        actor: String,
        /// The epoch the caller holds.
        given: u64,
        /// The actor's current epoch in the store (0: none issued).
        current: u64,
    },
    /// A key, value, batch or read over its limit, or a malformed key.
    #[error("{0}")]
    Invalid(String),
    /// The store cannot be reached or failed. For a read nothing changed; for a commit the
    /// outcome may be unknown (a connection lost during COMMIT), which is why the runtime answers
    /// such a turn `outcome-unknown` and supersedes its activation.
    #[error("state store {store} failed: {message}")]
    Unavailable {
        /// The store kind.
        store: &'static str,
        /// What it said.
        message: String,
    },
}

/// A durable, epoch-fenced key/value store of actor state. Every state store also keeps the
/// actors' reminders (`crate::reminders`), beside the state they act on.
#[async_trait]
pub trait StateStore: crate::reminders::ReminderStore + Send + Sync + 'static {
    /// `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// The actor's next epoch: strictly greater than every epoch issued for it before, by any
    /// process using this store. From now on it is the actor's current epoch.
    async fn next_epoch(&self, actor: &ActorId) -> Result<u64, StateError>;

    /// The actor's entries named by `selection`, if `epoch` is still current.
    async fn read(
        &self,
        actor: &ActorId,
        epoch: u64,
        selection: &Selection,
    ) -> Result<Vec<(String, Option<Bytes>)>, StateError>;

    /// Applies `writes` in order as one atomic batch, if `epoch` is still the actor's current
    /// epoch; otherwise writes nothing and answers [`StateError::StaleEpoch`]. Durable when it
    /// returns `Ok`.
    async fn commit(
        &self,
        actor: &ActorId,
        epoch: u64,
        writes: &[StateWrite],
    ) -> Result<(), StateError>;
}

/// Checks one key.
pub fn check_key(key: &str) -> Result<(), StateError> {
    if key.is_empty() {
        return Err(StateError::Invalid(
            "a state key must not be empty".to_string(),
        ));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(StateError::Invalid(format!(
            "state key of {} bytes is over the limit of {MAX_KEY_BYTES} bytes (starts {:?}); \
             use a shorter key",
            key.len(),
            key.chars().take(40).collect::<String>()
        )));
    }
    Ok(())
}

/// Checks a turn's batch against the limits before it reaches a store.
pub fn check_batch(writes: &[StateWrite]) -> Result<(), StateError> {
    if writes.len() > MAX_BATCH_WRITES {
        return Err(StateError::Invalid(format!(
            "a turn wrote {} state entries, over the limit of {MAX_BATCH_WRITES} per turn; split \
             the work over several turns",
            writes.len()
        )));
    }
    let mut total = 0usize;
    for w in writes {
        check_key(w.key())?;
        total += w.key().len();
        if let StateWrite::Put { key, value } = w {
            if value.len() > MAX_VALUE_BYTES {
                return Err(StateError::Invalid(format!(
                    "state value for key {key:?} is {} bytes, over the limit of \
                     {MAX_VALUE_BYTES} bytes; store large blobs elsewhere and keep a reference",
                    value.len()
                )));
            }
            total += value.len();
        }
    }
    if total > MAX_BATCH_BYTES {
        return Err(StateError::Invalid(format!(
            "a turn wrote {total} bytes of state, over the limit of {MAX_BATCH_BYTES} bytes per \
             turn; split the work over several turns"
        )));
    }
    Ok(())
}

/// Checks a read's selection.
pub fn check_selection(selection: &Selection) -> Result<(), StateError> {
    if let Selection::Keys(keys) = selection {
        if keys.len() > MAX_READ_KEYS {
            return Err(StateError::Invalid(format!(
                "a state read named {} keys, over the limit of {MAX_READ_KEYS}; read in pages",
                keys.len()
            )));
        }
        for k in keys {
            check_key(k)?;
        }
    }
    Ok(())
}

/// The store's refusal judged against an actor's current epoch: `Ok` when `given` is current.
pub(crate) fn judge_epoch(actor: &ActorId, given: u64, current: u64) -> Result<(), StateError> {
    if given == current && given != 0 {
        Ok(())
    } else if given < current {
        Err(StateError::StaleEpoch {
            actor: actor.to_string(),
            given,
            current,
        })
    } else {
        Err(StateError::UnknownEpoch {
            actor: actor.to_string(),
            given,
            current,
        })
    }
}
