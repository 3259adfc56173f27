//! The embedded default provider: the processes of one machine share one SQLite file (WAL).
//!
//! Two tables. `sigx_leases` holds one lease row per host; `sigx_changes` is the ordered change
//! log, whose `seq` (AUTOINCREMENT, assigned inside the single writer's transaction, so in commit
//! order) is also the version of the row it wrote. Every write is one `BEGIN IMMEDIATE`
//! transaction that checks the row (holder, version) and appends to the log: compare-and-swap,
//! the same semantics as a Kubernetes Lease PUT with a resourceVersion. Observers poll
//! `MAX(seq)` at a short interval and read the log after their cursor, so a view is always a
//! consistent prefix of the log; a cursor older than the compacted log reads a snapshot (the
//! 410 Gone of this store). Expiry is judged by observers exactly as for Kubernetes: on their
//! own monotonic clock, then a fresh `SELECT`, then a `DELETE ... WHERE version = ?`.
//!
//! One identity, one process: the `holder` column is `<host-id>/<incarnation>`, the incarnation
//! drawn when the provider is opened. A join over a row held by another incarnation is refused
//! (a second process started with the same `--host-id`); a renewal finds its row gone or held by
//! another incarnation and reports loss; **a renewal never inserts a row**, so a row deleted under
//! a live host (by a peer's expiry or by hand) fences that host at its next beat.

use super::descriptor::HostDescriptor;
use super::heartbeat::LostCause;
use super::provider::{ChangeBatch, DeleteOutcome, LeaseRecord, MembershipProvider, ProviderError};
use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const KIND: &str = "sqlite";
/// Change-log rows kept after compaction; an observer further behind reads a snapshot.
const LOG_KEEP: i64 = 4096;
/// Compact every this many writes.
const COMPACT_EVERY: i64 = 256;

/// How to reach the membership database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// The database file, shared by every host of the cluster on this machine.
    pub path: PathBuf,
    /// How often observers look for new changes (default 100 ms).
    pub poll_interval: Duration,
    /// How long a write waits for another process's write lock (default 2 s).
    pub busy_timeout: Duration,
}

impl SqliteOptions {
    /// Options for `path` with the default intervals.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteOptions {
            path: path.into(),
            poll_interval: Duration::from_millis(100),
            busy_timeout: Duration::from_secs(2),
        }
    }
}

/// The membership database cannot be used; reported before anything binds.
#[derive(Debug, thiserror::Error)]
pub enum SqliteOpenError {
    /// The file cannot be opened or created.
    #[error(
        "cannot open the membership database {path:?}: {source}; check that the directory exists \
         and is writable (SIGX_SQLITE_PATH)"
    )]
    Open {
        /// The path given.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file opened but is not a usable membership database.
    #[error("the membership database {path:?} cannot be prepared: {source}")]
    Schema {
        /// The path given.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// WAL mode could not be enabled (e.g. a network filesystem), so concurrent readers would
    /// block the writer.
    #[error(
        "the membership database {path:?} cannot use WAL journaling (got {mode:?}); put it on a \
         local filesystem"
    )]
    NotWal {
        /// The path given.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },
}

struct Shared {
    conn: Mutex<Connection>,
    notify: watch::Sender<u64>,
}

/// One host's connection to the shared membership database.
pub struct SqliteProvider {
    shared: Arc<Shared>,
    host_id: String,
    /// Our holder identity, `<host-id>/<incarnation>`.
    holder: String,
    path: PathBuf,
    poll_interval: Duration,
    poller: OnceLock<JoinHandle<()>>,
    feed_reads: AtomicU64,
}

impl Drop for SqliteProvider {
    fn drop(&mut self) {
        if let Some(p) = self.poller.get() {
            p.abort();
        }
    }
}

fn unavailable(op: &'static str, e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable {
        provider: KIND,
        op,
        detail: e.to_string(),
    }
}

/// Opens (creating if needed) the database and its schema, in WAL mode. Synchronous, so
/// configuration can be validated before anything binds. Hosts starting together race to
/// prepare a fresh file; a lock conflict retries the whole open (see `sqlite_open`).
pub fn open_connection(opts: &SqliteOptions) -> Result<Connection, SqliteOpenError> {
    crate::sqlite_open::retry_on_lock_conflict(
        || open_connection_once(opts),
        |e| match e {
            SqliteOpenError::Open { source, .. } | SqliteOpenError::Schema { source, .. } => {
                crate::sqlite_open::is_lock_conflict(source)
            }
            SqliteOpenError::NotWal { .. } => false,
        },
    )
}

fn open_connection_once(opts: &SqliteOptions) -> Result<Connection, SqliteOpenError> {
    let path = &opts.path;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| SqliteOpenError::Open {
        path: path.clone(),
        source,
    })?;
    let schema = |source| SqliteOpenError::Schema {
        path: path.clone(),
        source,
    };
    conn.busy_timeout(opts.busy_timeout).map_err(schema)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|source| SqliteOpenError::Open {
            path: path.clone(),
            source,
        })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteOpenError::NotWal {
            path: path.clone(),
            mode,
        });
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(schema)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS sigx_leases (
             id TEXT PRIMARY KEY,
             holder TEXT NOT NULL,
             descriptor TEXT NOT NULL,
             ttl_ms INTEGER NOT NULL,
             version INTEGER NOT NULL
         );
         CREATE TABLE IF NOT EXISTS sigx_changes (
             seq INTEGER PRIMARY KEY AUTOINCREMENT,
             id TEXT NOT NULL,
             op TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
             holder TEXT,
             descriptor TEXT,
             ttl_ms INTEGER
         );",
    )
    .map_err(schema)?;
    Ok(conn)
}

fn record_from(
    id: String,
    holder: String,
    descriptor: String,
    ttl_ms: i64,
    version: i64,
) -> Result<LeaseRecord, ProviderError> {
    super::rows::lease_record(KIND, id, holder, &descriptor, ttl_ms, version)
}

/// One change-log row. A delete row names the holder only when that holder withdrew its own
/// record (see [`super::provider::Change::Delete::withdrawn`]); a peer's expiry leaves it
/// empty.
enum LogRow<'a> {
    Upsert {
        holder: &'a str,
        descriptor: &'a str,
        ttl_ms: i64,
    },
    Withdrawn {
        holder: &'a str,
    },
    Deleted,
}

/// Appends to the log inside the caller's write transaction; returns the new sequence number.
fn append(tx: &rusqlite::Transaction<'_>, id: &str, row: LogRow<'_>) -> rusqlite::Result<i64> {
    match row {
        LogRow::Upsert {
            holder,
            descriptor,
            ttl_ms,
        } => tx.execute(
            "INSERT INTO sigx_changes (id, op, holder, descriptor, ttl_ms) VALUES (?1, 'upsert', ?2, ?3, ?4)",
            params![id, holder, descriptor, ttl_ms],
        )?,
        LogRow::Withdrawn { holder } => tx.execute(
            "INSERT INTO sigx_changes (id, op, holder) VALUES (?1, 'delete', ?2)",
            params![id, holder],
        )?,
        LogRow::Deleted => tx.execute(
            "INSERT INTO sigx_changes (id, op) VALUES (?1, 'delete')",
            params![id],
        )?,
    };
    let seq = tx.last_insert_rowid();
    if seq % COMPACT_EVERY == 0 {
        tx.execute(
            "DELETE FROM sigx_changes WHERE seq <= ?1",
            params![seq - LOG_KEEP],
        )?;
    }
    Ok(seq)
}

enum WriteOutcome {
    Written(u64),
    Lost(LostCause),
    Conflict(String),
}

impl SqliteProvider {
    /// Opens the database for host `host_id`, as a new incarnation (a random nonce). Fails with a
    /// named error if the file cannot be opened, prepared, or put in WAL mode.
    pub fn open(
        opts: &SqliteOptions,
        host_id: impl Into<String>,
    ) -> Result<Arc<Self>, SqliteOpenError> {
        Self::open_as(opts, host_id, &super::provider::random_incarnation())
    }

    /// Like [`SqliteProvider::open`], as the given incarnation (deterministic tests).
    pub fn open_as(
        opts: &SqliteOptions,
        host_id: impl Into<String>,
        incarnation: &str,
    ) -> Result<Arc<Self>, SqliteOpenError> {
        let conn = open_connection(opts)?;
        let host_id = host_id.into();
        Ok(Arc::new(SqliteProvider {
            shared: Arc::new(Shared {
                conn: Mutex::new(conn),
                notify: watch::channel(0).0,
            }),
            holder: super::provider::holder_identity(&host_id, incarnation),
            host_id,
            path: opts.path.clone(),
            poll_interval: opts.poll_interval,
            poller: OnceLock::new(),
            feed_reads: AtomicU64::new(0),
        }))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads of the change log so far.
    pub fn feed_reads(&self) -> u64 {
        self.feed_reads.load(Ordering::Relaxed)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> Result<T, ProviderError> + Send + 'static,
    ) -> Result<T, ProviderError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = shared.conn.lock().expect("sqlite connection lock");
            f(&mut conn)
        })
        .await
        .map_err(|e| unavailable(op, e))?
    }

    fn announce(&self, seq: u64) {
        self.shared.notify.send_if_modified(|v| {
            if seq > *v {
                *v = seq;
                true
            } else {
                false
            }
        });
    }

    /// Creates or takes over (`takeover`) our row, or renews it (`!takeover`), in one write
    /// transaction.
    async fn write_own(
        &self,
        op: &'static str,
        descriptor: &HostDescriptor,
        ttl: Option<Duration>,
    ) -> Result<u64, ProviderError> {
        let me = self.holder.clone();
        let id = descriptor.id.clone();
        let json = descriptor.to_json();
        let joining = ttl.is_some();
        let ttl_ms = ttl.map(|t| t.as_millis() as i64);
        let outcome = self
            .blocking(op, move |conn| {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(|e| unavailable(op, e))?;
                let row: Option<(String, i64, i64)> = tx
                    .query_row(
                        "SELECT holder, version, ttl_ms FROM sigx_leases WHERE id = ?1",
                        params![id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()
                    .map_err(|e| unavailable(op, e))?;
                let (ttl_ms, cas_version) = match (row, joining) {
                    (Some((holder, _, _)), true) if holder != me => {
                        return Ok(WriteOutcome::Conflict(holder));
                    }
                    (Some((_, version, _)), true) => (ttl_ms.unwrap_or_default(), Some(version)),
                    (None, true) => (ttl_ms.unwrap_or_default(), None),
                    // A renewal never re-creates a deleted row: whoever deleted it (a peer's
                    // expiry, an operator) expects this host to be gone, so it fences.
                    (None, false) => return Ok(WriteOutcome::Lost(LostCause::Gone)),
                    (Some((holder, _, _)), false) if holder != me => {
                        return Ok(WriteOutcome::Lost(LostCause::HolderChanged { holder }));
                    }
                    // Still ours: compare-and-swap on the version read in this transaction (if
                    // it differs from the one we last wrote, this is the 409 → re-read → retry
                    // path of the Kubernetes provider, taken in one step).
                    (Some((_, version, ttl_ms)), false) => (ttl_ms, Some(version)),
                };
                let row = LogRow::Upsert {
                    holder: &me,
                    descriptor: &json,
                    ttl_ms,
                };
                let seq = append(&tx, &id, row).map_err(|e| unavailable(op, e))?;
                let changed = match cas_version {
                    Some(v) => tx.execute(
                        "UPDATE sigx_leases SET holder = ?2, descriptor = ?3, ttl_ms = ?4, version = ?5
                         WHERE id = ?1 AND version = ?6",
                        params![id, me, json, ttl_ms, seq, v],
                    ),
                    None => tx.execute(
                        "INSERT INTO sigx_leases (id, holder, descriptor, ttl_ms, version)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![id, me, json, ttl_ms, seq],
                    ),
                }
                .map_err(|e| unavailable(op, e))?;
                if changed != 1 {
                    return Err(unavailable(op, "compare-and-swap matched no row"));
                }
                tx.commit().map_err(|e| unavailable(op, e))?;
                Ok(WriteOutcome::Written(seq as u64))
            })
            .await?;
        match outcome {
            WriteOutcome::Written(seq) => {
                self.announce(seq);
                Ok(seq)
            }
            WriteOutcome::Lost(cause) => Err(ProviderError::Lost {
                provider: KIND,
                cause,
            }),
            WriteOutcome::Conflict(holder) => Err(ProviderError::Conflict {
                provider: KIND,
                id: descriptor.id.clone(),
                holder,
            }),
        }
    }

    fn start_poller(&self) {
        let weak = Arc::downgrade(&self.shared);
        let interval = self.poll_interval;
        self.poller.get_or_init(|| {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(shared) = weak.upgrade() else { return };
                    let s = shared.clone();
                    let max = tokio::task::spawn_blocking(move || {
                        let conn = s.conn.lock().expect("sqlite connection lock");
                        conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM sigx_changes", [], |r| {
                            r.get::<_, i64>(0)
                        })
                    })
                    .await;
                    if let Ok(Ok(max)) = max {
                        shared.notify.send_if_modified(|v| {
                            if max as u64 != *v {
                                *v = max as u64;
                                true
                            } else {
                                false
                            }
                        });
                    }
                }
            })
        });
    }
}

fn read_changes(conn: &mut Connection, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
    let op = "read changes";
    let e = |e| unavailable(op, e);
    // One read transaction: the snapshot and MAX(seq) come from the same point of the log.
    let tx = conn.transaction().map_err(e)?;
    let (min, max): (Option<i64>, i64) = tx
        .query_row(
            "SELECT MIN(seq), COALESCE(MAX(seq), 0) FROM sigx_changes",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(e)?;
    let batch = match cursor.map(|c| c as i64) {
        Some(c) if c == max => ChangeBatch::Changes {
            changes: Vec::new(),
            cursor: max as u64,
        },
        Some(c) if c < max && min.is_some_and(|min| c + 1 >= min) => {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT seq, id, op, holder, descriptor, ttl_ms FROM sigx_changes
                     WHERE seq > ?1 ORDER BY seq",
                )
                .map_err(e)?;
            let rows = stmt
                .query_map(params![c], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                    ))
                })
                .map_err(e)?;
            let mut changes = Vec::new();
            for row in rows {
                let (seq, id, kind, holder, descriptor, ttl_ms) = row.map_err(e)?;
                changes.push(super::rows::change_row(
                    KIND, seq, id, &kind, holder, descriptor, ttl_ms,
                )?);
            }
            ChangeBatch::Changes {
                changes,
                cursor: max as u64,
            }
        }
        _ => {
            let mut stmt = tx
                .prepare_cached("SELECT id, holder, descriptor, ttl_ms, version FROM sigx_leases")
                .map_err(e)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .map_err(e)?;
            let mut records = Vec::new();
            for row in rows {
                let (id, holder, descriptor, ttl_ms, version) = row.map_err(e)?;
                records.push(record_from(id, holder, descriptor, ttl_ms, version)?);
            }
            ChangeBatch::Snapshot {
                records,
                cursor: max as u64,
            }
        }
    };
    tx.commit().map_err(e)?;
    Ok(batch)
}

#[async_trait]
impl MembershipProvider for SqliteProvider {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    async fn join(&self, descriptor: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        self.write_own("join", descriptor, Some(ttl)).await
    }

    async fn renew(&self, descriptor: &HostDescriptor) -> Result<u64, ProviderError> {
        self.write_own("renew", descriptor, None).await
    }

    async fn withdraw(&self) -> Result<(), ProviderError> {
        let me = self.host_id.clone();
        let holder = self.holder.clone();
        let seq = self
            .blocking("withdraw", move |conn| {
                let op = "withdraw";
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(|e| unavailable(op, e))?;
                let n = tx
                    .execute(
                        // Only our own incarnation's row: another process's is not ours to
                        // delete.
                        "DELETE FROM sigx_leases WHERE id = ?1 AND holder = ?2",
                        params![me, holder],
                    )
                    .map_err(|e| unavailable(op, e))?;
                if n == 0 {
                    return Ok(None);
                }
                let row = LogRow::Withdrawn { holder: &holder };
                let seq = append(&tx, &me, row).map_err(|e| unavailable(op, e))?;
                tx.commit().map_err(|e| unavailable(op, e))?;
                Ok(Some(seq as u64))
            })
            .await?;
        if let Some(seq) = seq {
            self.announce(seq);
        }
        Ok(())
    }

    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        self.feed_reads.fetch_add(1, Ordering::Relaxed);
        self.blocking("read changes", move |conn| read_changes(conn, cursor))
            .await
    }

    fn notifications(&self) -> watch::Receiver<u64> {
        self.start_poller();
        self.shared.notify.subscribe()
    }

    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        let id = id.to_string();
        self.blocking("read", move |conn| {
            let row: Option<(String, String, i64, i64)> = conn
                .query_row(
                    "SELECT holder, descriptor, ttl_ms, version FROM sigx_leases WHERE id = ?1",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(|e| unavailable("read", e))?;
            row.map(|(holder, descriptor, ttl_ms, version)| {
                record_from(id, holder, descriptor, ttl_ms, version)
            })
            .transpose()
        })
        .await
    }

    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError> {
        let id = id.to_string();
        let (outcome, seq) = self
            .blocking("delete", move |conn| {
                let op = "delete";
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(|e| unavailable(op, e))?;
                let current: Option<i64> = tx
                    .query_row(
                        "SELECT version FROM sigx_leases WHERE id = ?1",
                        params![id],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| unavailable(op, e))?;
                match current {
                    None => return Ok((DeleteOutcome::Gone, None)),
                    Some(v) if v as u64 != version => return Ok((DeleteOutcome::Changed, None)),
                    Some(_) => {}
                }
                tx.execute(
                    "DELETE FROM sigx_leases WHERE id = ?1 AND version = ?2",
                    params![id, version as i64],
                )
                .map_err(|e| unavailable(op, e))?;
                let seq = append(&tx, &id, LogRow::Deleted).map_err(|e| unavailable(op, e))?;
                tx.commit().map_err(|e| unavailable(op, e))?;
                Ok((DeleteOutcome::Deleted, Some(seq as u64)))
            })
            .await?;
        if let Some(seq) = seq {
            self.announce(seq);
        }
        Ok(outcome)
    }
}
