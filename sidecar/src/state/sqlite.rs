//! The embedded default store: one SQLite file (WAL, `synchronous = FULL`), shared by the hosts
//! of one machine (`sigx dev up`).
//!
//! Three tables. `sigx_actor_epochs` holds one row per actor that ever activated, its current
//! epoch; the row is never deleted, so epochs only grow. `sigx_actor_state` holds the entries;
//! `sigx_reminders` the reminders (see `reminders::sqlite`). Issuing an
//! epoch is one upsert-increment; a commit reads the actor's epoch row, refuses unless the
//! batch's epoch is that one, and applies the batch, inside a `BEGIN IMMEDIATE` transaction — the
//! single writer lock of SQLite makes the check and the writes one step, across processes. Writes
//! that queue up meanwhile share one transaction (`group_commit`), each in its own savepoint.

use super::{Selection, StateError, StateStore, StateWrite, judge_epoch};
use crate::runtime::ActorId;
use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KIND: &str = "sqlite";
/// The schema this code writes; older files are migrated forward when opened.
pub const SCHEMA_VERSION: i64 = 2;

/// The state database cannot be used; reported before anything binds (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum SqliteStateError {
    /// The file cannot be opened or created.
    #[error(
        "cannot open the state database {path:?}: {source}; check that the directory exists and \
         is writable (SIGX_STATE_PATH)"
    )]
    Open {
        /// The path given.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file opened but its schema cannot be created or migrated.
    #[error("the state database {path:?} cannot be prepared: {source}")]
    Schema {
        /// The path given.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file was written by a newer sigx.
    #[error(
        "the state database {path:?} has schema version {found}, newer than this sidecar's \
         {SCHEMA_VERSION}; run a sidecar at least as new as the one that wrote it"
    )]
    TooNew {
        /// The path given.
        path: PathBuf,
        /// The version found.
        found: i64,
    },
    /// WAL mode could not be enabled (e.g. a network filesystem).
    #[error(
        "the state database {path:?} cannot use WAL journaling (got {mode:?}); put it on a local \
         filesystem"
    )]
    NotWal {
        /// The path given.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },
}

/// A host's connection to the state database.
pub struct SqliteStateStore {
    conn: Arc<Mutex<Connection>>,
    writes: super::group_commit::WriteQueue,
    path: PathBuf,
}

impl SqliteStateStore {
    /// Opens (creating if needed) the database at `path` and creates or migrates its schema.
    /// Hosts starting together race to prepare a fresh file; a lock conflict retries the whole
    /// open (see `sqlite_open`).
    pub fn open(path: &Path) -> Result<Self, SqliteStateError> {
        crate::sqlite_open::retry_on_lock_conflict(
            || Self::open_once(path),
            |e| match e {
                SqliteStateError::Open { source, .. } | SqliteStateError::Schema { source, .. } => {
                    crate::sqlite_open::is_lock_conflict(source)
                }
                SqliteStateError::TooNew { .. } | SqliteStateError::NotWal { .. } => false,
            },
        )
    }

    fn open_once(path: &Path) -> Result<Self, SqliteStateError> {
        let open = |source| SqliteStateError::Open {
            path: path.to_path_buf(),
            source,
        };
        let schema = |source| SqliteStateError::Schema {
            path: path.to_path_buf(),
            source,
        };
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open)?;
        // The hosts of a machine write this file concurrently. SQLite's default busy handler
        // backs off in growing sleeps (up to 100 ms each), which turned a contended commit of
        // ~1 ms into tens or hundreds of milliseconds in the chaos fleet; short even sleeps keep
        // the wait near the holder's commit time, up to the same 5 s bound.
        conn.busy_handler(Some(busy_wait)).map_err(open)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(schema)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(SqliteStateError::NotWal {
                path: path.to_path_buf(),
                mode,
            });
        }
        conn.execute_batch("PRAGMA synchronous = FULL;")
            .map_err(schema)?;
        migrate(&conn).map_err(|e| match e {
            Migrate::Sql(source) => schema(source),
            Migrate::TooNew(found) => SqliteStateError::TooNew {
                path: path.to_path_buf(),
                found,
            },
        })?;
        Ok(SqliteStateStore {
            conn: Arc::new(Mutex::new(conn)),
            writes: Default::default(),
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, StateError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().expect("state db lock");
            f(&mut conn)
        })
        .await
        .map_err(|e| unavailable(format!("the state task failed: {e}")))?
    }

    /// Runs `f` inside a write transaction shared with the writes queued beside it (group
    /// commit, see `group_commit`); answers once that transaction committed. `f` runs inside
    /// its own savepoint: an error rolls back its writes alone.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, StateError> {
        let answer = self.writes.push(f);
        let (conn, writes) = (self.conn.clone(), self.writes.clone());
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().expect("state db lock");
            writes.run(&conn);
        })
        .await
        .map_err(|e| unavailable(format!("the state task failed: {e}")))?;
        answer
            .await
            .map_err(|_| unavailable("the state writer dropped the write"))?
    }
}

/// Waits a moment for another process's write lock: 100 µs for the first 100 tries, then 1 ms,
/// giving up after about 5 s (the caller answers `Unavailable`).
fn busy_wait(attempt: i32) -> bool {
    let pause = if attempt < 100 {
        Duration::from_micros(100)
    } else {
        Duration::from_millis(1)
    };
    if attempt > 100 + 5_000 {
        return false;
    }
    std::thread::sleep(pause);
    true
}

enum Migrate {
    Sql(rusqlite::Error),
    TooNew(i64),
}

impl From<rusqlite::Error> for Migrate {
    fn from(e: rusqlite::Error) -> Self {
        Migrate::Sql(e)
    }
}

/// Creates the schema, or migrates an older one forward; idempotent, safe to race (every host
/// of a machine opens the file at start).
fn migrate(conn: &Connection) -> Result<(), Migrate> {
    conn.execute_batch(
        "BEGIN IMMEDIATE;
         CREATE TABLE IF NOT EXISTS sigx_state_schema (version INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS sigx_actor_epochs (
             actor_type TEXT NOT NULL,
             actor_key TEXT NOT NULL,
             epoch INTEGER NOT NULL,
             PRIMARY KEY (actor_type, actor_key)
         ) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS sigx_actor_state (
             actor_type TEXT NOT NULL,
             actor_key TEXT NOT NULL,
             key TEXT NOT NULL,
             value BLOB NOT NULL,
             epoch INTEGER NOT NULL,
             PRIMARY KEY (actor_type, actor_key, key)
         ) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS sigx_reminders (
             actor_type TEXT NOT NULL,
             actor_key TEXT NOT NULL,
             name TEXT NOT NULL,
             shard INTEGER NOT NULL,
             due_ms INTEGER NOT NULL,
             period_ms INTEGER NOT NULL,
             payload BLOB NOT NULL,
             next_ms INTEGER NOT NULL,
             attempts INTEGER NOT NULL,
             version INTEGER NOT NULL,
             claimed_by TEXT,
             claim_until_ms INTEGER NOT NULL,
             PRIMARY KEY (actor_type, actor_key, name)
         ) WITHOUT ROWID;
         CREATE INDEX IF NOT EXISTS sigx_reminders_due ON sigx_reminders (shard, next_ms);
         INSERT INTO sigx_state_schema (version)
             SELECT 2 WHERE NOT EXISTS (SELECT 1 FROM sigx_state_schema);
         UPDATE sigx_state_schema SET version = 2 WHERE version < 2;
         COMMIT;",
    )?;
    let found: i64 = conn.query_row("SELECT MAX(version) FROM sigx_state_schema", [], |r| {
        r.get(0)
    })?;
    if found > SCHEMA_VERSION {
        return Err(Migrate::TooNew(found));
    }
    Ok(())
}

fn unavailable(message: impl Into<String>) -> StateError {
    StateError::Unavailable {
        store: KIND,
        message: message.into(),
    }
}

pub(crate) fn sql(e: rusqlite::Error) -> StateError {
    unavailable(e.to_string())
}

pub(crate) fn current_epoch(conn: &Connection, actor: &ActorId) -> Result<u64, StateError> {
    let epoch: Option<i64> = conn
        .query_row(
            "SELECT epoch FROM sigx_actor_epochs WHERE actor_type = ?1 AND actor_key = ?2",
            params![&*actor.actor_type, &*actor.key],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql)?;
    Ok(epoch.unwrap_or(0) as u64)
}

#[async_trait]
impl StateStore for SqliteStateStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn next_epoch(&self, actor: &ActorId) -> Result<u64, StateError> {
        let actor = actor.clone();
        self.write(move |conn| {
            let epoch: i64 = conn
                .query_row(
                    "INSERT INTO sigx_actor_epochs (actor_type, actor_key, epoch) VALUES (?1, ?2, 1)
                     ON CONFLICT (actor_type, actor_key) DO UPDATE SET epoch = epoch + 1
                     RETURNING epoch",
                    params![&*actor.actor_type, &*actor.key],
                    |r| r.get(0),
                )
                .map_err(sql)?;
            Ok(epoch as u64)
        })
        .await
    }

    async fn read(
        &self,
        actor: &ActorId,
        epoch: u64,
        selection: &Selection,
    ) -> Result<Vec<(String, Option<Bytes>)>, StateError> {
        let (actor, selection) = (actor.clone(), selection.clone());
        self.blocking(move |conn| {
            // One read transaction: the epoch and the entries from the same snapshot.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .map_err(sql)?;
            judge_epoch(&actor, epoch, current_epoch(&tx, &actor)?)?;
            let out = match &selection {
                Selection::Keys(keys) => {
                    let mut stmt = tx
                        .prepare_cached(
                            "SELECT value FROM sigx_actor_state
                             WHERE actor_type = ?1 AND actor_key = ?2 AND key = ?3",
                        )
                        .map_err(sql)?;
                    let mut out = Vec::with_capacity(keys.len());
                    for k in keys {
                        let v: Option<Vec<u8>> = stmt
                            .query_row(params![&*actor.actor_type, &*actor.key, k], |r| r.get(0))
                            .optional()
                            .map_err(sql)?;
                        out.push((k.clone(), v.map(Bytes::from)));
                    }
                    out
                }
                Selection::All => {
                    let mut stmt = tx
                        .prepare_cached(
                            "SELECT key, value FROM sigx_actor_state
                             WHERE actor_type = ?1 AND actor_key = ?2 ORDER BY key",
                        )
                        .map_err(sql)?;
                    let rows = stmt
                        .query_map(params![&*actor.actor_type, &*actor.key], |r| {
                            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
                        })
                        .map_err(sql)?;
                    let mut out = Vec::new();
                    for row in rows {
                        let (k, v) = row.map_err(sql)?;
                        out.push((k, Some(Bytes::from(v))));
                    }
                    out
                }
            };
            drop(tx);
            Ok(out)
        })
        .await
    }

    async fn commit(
        &self,
        actor: &ActorId,
        epoch: u64,
        writes: &[StateWrite],
    ) -> Result<(), StateError> {
        let (actor, writes) = (actor.clone(), writes.to_vec());
        self.write(move |tx| {
            judge_epoch(&actor, epoch, current_epoch(tx, &actor)?)?;
            {
                let mut put = tx
                    .prepare_cached(
                        "INSERT INTO sigx_actor_state (actor_type, actor_key, key, value, epoch)
                         VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT (actor_type, actor_key, key)
                         DO UPDATE SET value = excluded.value, epoch = excluded.epoch",
                    )
                    .map_err(sql)?;
                let mut delete = tx
                    .prepare_cached(
                        "DELETE FROM sigx_actor_state
                         WHERE actor_type = ?1 AND actor_key = ?2 AND key = ?3",
                    )
                    .map_err(sql)?;
                for w in &writes {
                    match w {
                        StateWrite::Put { key, value } => put
                            .execute(params![
                                &*actor.actor_type,
                                &*actor.key,
                                key,
                                &value[..],
                                epoch as i64
                            ])
                            .map_err(sql)?,
                        StateWrite::Delete { key } => delete
                            .execute(params![&*actor.actor_type, &*actor.key, key])
                            .map_err(sql)?,
                    };
                }
            }
            Ok(())
        })
        .await
    }
}
