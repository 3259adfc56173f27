//! The fleet provider outside Kubernetes (VMs, bare metal): the hosts share one PostgreSQL
//! database. The same semantics as the SQLite provider, across machines.
//!
//! Three tables. `sigx_leases` holds one lease row per host; `sigx_changes` is the ordered change
//! log, whose `seq` is also the version of the row it wrote; `sigx_change_counter` is one row
//! holding the last `seq` issued. Every write is one transaction that first takes the next number
//! from the counter row (`UPDATE ... SET seq = seq + 1 RETURNING seq`), then checks the lease row
//! (holder, version) under `FOR UPDATE`, writes it, appends to the log and calls `pg_notify`:
//! compare-and-swap, the semantics of a Kubernetes Lease PUT with a resourceVersion.
//!
//! **Why a counter row and not a sequence.** A sequence hands out numbers when they are asked
//! for, not when their transactions commit: writer A takes 7, writer B takes 8 and commits
//! first, an observer reads the log up to 8 and moves its cursor there, then A commits 7 and no
//! observer ever reads it (a missed renewal makes a live host look silent; a missed deletion
//! keeps a dead one). The counter row's lock is held to commit, so writers take turns and
//! numbers are issued in commit order; and PostgreSQL makes a transaction visible before it
//! releases its locks, so any snapshot that sees change `n` sees every change below `n`. An
//! observer reads the log's head and the changes after its cursor in one `REPEATABLE READ`
//! snapshot, so a view is always a consistent prefix of the log. Writes are few (one per host
//! per beat) and short (a handful of statements), so taking turns costs nothing measurable; a
//! writer suspended mid-transaction is ended by the server after the hold timeout (see
//! [`conn`]). `membership_postgres` shows a reader skipping a change with
//! [`ChangeOrdering::UnorderedSequence`] and never with the counter.
//!
//! A cursor older than the compacted log reads a snapshot (the 410 Gone of this store). Pushes:
//! LISTEN/NOTIFY ([`listener`]) with a slow poll as a backstop. Expiry is judged by observers as
//! for every provider: on their own monotonic clock, then a fresh `SELECT`, then a
//! `DELETE ... WHERE version = $2`.
//!
//! One identity, one process: the `holder` column is `<host-id>/<incarnation>`. A join over a
//! row held by another incarnation is [`ProviderError::Conflict`]; a renewal that finds its row
//! gone or held by another incarnation reports loss; **a renewal never inserts a row**, so a row
//! deleted under a live host (a peer's expiry, an operator's `DELETE`) fences that host.
//!
//! One database (or one `search_path` schema) per cluster: the tables are not keyed by cluster.

mod conn;
mod dsn;
mod listener;
mod schema;

pub use dsn::{MembershipDsnError, resolve as resolve_dsn};
pub use schema::PostgresOpenError;

use super::descriptor::HostDescriptor;
use super::heartbeat::LostCause;
use super::provider::{
    Change, ChangeBatch, DeleteOutcome, LeaseRecord, MembershipProvider, ProviderError,
};
use async_trait::async_trait;
use conn::{Conn, Slot, unavailable};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::{IsolationLevel, Row};

pub(super) const KIND: &str = "postgres";

/// How change numbers are issued. Only tests change this.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeOrdering {
    /// From the counter row, whose lock serializes writers: numbers in commit order.
    #[default]
    Serialized,
    /// DELIBERATELY BROKEN, for tests only: from a sequence, without serializing writers. A
    /// change that commits after a higher-numbered one is skipped by an observer that read in
    /// between.
    UnorderedSequence,
}

/// How to reach the membership database.
#[derive(Clone)]
pub struct PostgresOptions {
    /// The connection string, URL or key=value form (holds the password: never printed).
    pub dsn: String,
    /// The backstop poll of the log's head, behind LISTEN/NOTIFY (default 5 s).
    pub poll_interval: Duration,
    /// How long a session may sit idle inside a transaction or wait for a lock (default 1 s):
    /// bounds how long a suspended writer holding the change counter stalls the others.
    pub hold_timeout: Duration,
    /// How long one operation may take before it answers `Unavailable` (default 5 s).
    pub op_timeout: Duration,
    /// Change-log rows kept after compaction; an observer further behind reads a snapshot.
    pub log_keep: i64,
    /// Compact every this many changes.
    pub compact_every: i64,
    /// Only tests change this.
    #[doc(hidden)]
    pub ordering: ChangeOrdering,
}

impl PostgresOptions {
    /// Options for `dsn` with the defaults.
    pub fn new(dsn: impl Into<String>) -> Self {
        PostgresOptions {
            dsn: dsn.into(),
            poll_interval: Duration::from_secs(5),
            hold_timeout: Duration::from_secs(1),
            op_timeout: Duration::from_secs(5),
            log_keep: 4096,
            compact_every: 256,
            ordering: ChangeOrdering::Serialized,
        }
    }
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = tokio_postgres::Config::from_str(&self.dsn)
            .map(|c| schema::target(&c))
            .unwrap_or_else(|_| "<unparsable>".into());
        f.debug_struct("PostgresOptions")
            .field("dsn", &target)
            .field("poll_interval", &self.poll_interval)
            .field("hold_timeout", &self.hold_timeout)
            .finish_non_exhaustive()
    }
}

/// State shared with the listener task.
struct Shared {
    notify: watch::Sender<u64>,
    listener_sessions: AtomicU64,
}

impl Shared {
    fn announce(&self, seq: u64) {
        self.notify.send_if_modified(|v| {
            if seq > *v {
                *v = seq;
                true
            } else {
                false
            }
        });
    }
}

/// One host's connections to the shared membership database.
pub struct PostgresProvider {
    shared: Arc<Shared>,
    host_id: String,
    holder: String,
    writer: Slot,
    reader: Slot,
    listen_config: tokio_postgres::Config,
    target: String,
    opts: PostgresOptions,
    listener: OnceLock<JoinHandle<()>>,
    feed_reads: AtomicU64,
}

impl Drop for PostgresProvider {
    fn drop(&mut self) {
        if let Some(l) = self.listener.get() {
            l.abort();
        }
    }
}

enum WriteOutcome {
    Written(u64),
    Lost(LostCause),
    Conflict(String),
}

impl PostgresProvider {
    /// Connects for host `host_id`, as a new incarnation, creating the tables if missing. Every
    /// way the database cannot be used is a named error before anything binds.
    pub async fn open(
        opts: &PostgresOptions,
        host_id: impl Into<String>,
    ) -> Result<Arc<Self>, PostgresOpenError> {
        Self::open_as(opts, host_id, &super::provider::random_incarnation()).await
    }

    /// Like [`PostgresProvider::open`], as the given incarnation.
    pub async fn open_as(
        opts: &PostgresOptions,
        host_id: impl Into<String>,
        incarnation: &str,
    ) -> Result<Arc<Self>, PostgresOpenError> {
        let mut config = tokio_postgres::Config::from_str(opts.dsn.trim()).map_err(|e| {
            PostgresOpenError::BadDsn {
                reason: schema::describe(&e),
            }
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(opts.op_timeout);
        }
        let mut listen_config = config.clone();
        if config.get_application_name().is_none() {
            config.application_name("sigx-membership");
            listen_config.application_name("sigx-membership-listener");
        }
        let named = |e: tokio_postgres::Error| schema::open_error(&config, &e);
        let (mut client, connection) =
            config.connect(tokio_postgres::NoTls).await.map_err(named)?;
        let driver = tokio::spawn(connection);
        let created = schema::create(&mut client, opts.ordering).await;
        drop(client);
        let _ = driver.await;
        created.map_err(named)?;
        // Both connections now: their statements prepare, proving the tables usable, and the
        // first join and read need not connect.
        let writer = Slot::new(config.clone(), opts.ordering, opts.hold_timeout);
        let reader = Slot::new(config.clone(), opts.ordering, opts.hold_timeout);
        let (w, r) = futures::try_join!(writer.connect(), reader.connect()).map_err(named)?;
        writer.put(w).await;
        reader.put(r).await;
        let host_id = host_id.into();
        let target = schema::target(&config);
        tracing::info!(%target, "PostgreSQL membership store ready");
        Ok(Arc::new(PostgresProvider {
            shared: Arc::new(Shared {
                notify: watch::channel(0).0,
                listener_sessions: AtomicU64::new(0),
            }),
            holder: super::provider::holder_identity(&host_id, incarnation),
            host_id,
            reader,
            writer,
            listen_config,
            target,
            opts: opts.clone(),
            listener: OnceLock::new(),
            feed_reads: AtomicU64::new(0),
        }))
    }

    /// `host:port/database`, without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Reads of the change log so far.
    pub fn feed_reads(&self) -> u64 {
        self.feed_reads.load(Ordering::Relaxed)
    }

    /// Sessions the notification listener has opened (1 + reconnects).
    pub fn listener_sessions(&self) -> u64 {
        self.shared.listener_sessions.load(Ordering::Relaxed)
    }

    /// Runs `body` on a connection of `slot` within the operation timeout.
    async fn on<T>(
        &self,
        slot: &Slot,
        op: &'static str,
        body: impl AsyncFnOnce(&mut Conn) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, ProviderError> {
        let mut g = slot.get(op).await?;
        let outcome = tokio::time::timeout(self.opts.op_timeout, body(g.conn())).await;
        g.finished();
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(g.fail(op, e)),
            Err(_) => {
                g.reset();
                Err(unavailable(
                    op,
                    format!(
                        "no answer from {} within {:?}",
                        self.target, self.opts.op_timeout
                    ),
                ))
            }
        }
    }

    /// Creates or takes over our row (`ttl` given: a join), or renews it, in one transaction.
    async fn write_own(
        &self,
        op: &'static str,
        descriptor: &HostDescriptor,
        ttl: Option<Duration>,
    ) -> Result<u64, ProviderError> {
        let me = self.holder.as_str();
        let id = descriptor.id.as_str();
        let json = descriptor.to_json();
        let (keep, every) = (self.opts.log_keep, self.opts.compact_every);
        let outcome = self
            .on(&self.writer, op, async |c: &mut Conn| {
                let Conn { client, st } = c;
                let tx = client.transaction().await?;
                let seq: i64 = tx.query_one(&st.bump, &[]).await?.get(0);
                let row = tx.query_opt(&st.own_for_update, &[&id]).await?.map(|r| {
                    (
                        r.get::<_, String>(0),
                        r.get::<_, i64>(1),
                        r.get::<_, i64>(2),
                    )
                });
                let joining = ttl.is_some();
                let join_ttl = ttl.map(|t| t.as_millis() as i64).unwrap_or_default();
                let (ttl_ms, cas) = match (row, joining) {
                    (Some((holder, _, _)), true) if holder != me => {
                        return Ok(WriteOutcome::Conflict(holder));
                    }
                    (Some((_, version, _)), true) => (join_ttl, Some(version)),
                    (None, true) => (join_ttl, None),
                    // A renewal never re-creates a deleted row: whoever deleted it (a peer's
                    // expiry, an operator) expects this host gone, so it fences.
                    (None, false) => return Ok(WriteOutcome::Lost(LostCause::Gone)),
                    (Some((holder, _, _)), false) if holder != me => {
                        return Ok(WriteOutcome::Lost(LostCause::HolderChanged { holder }));
                    }
                    // Still ours: compare-and-swap on the version read under the row lock.
                    (Some((_, version, ttl_ms)), false) => (ttl_ms, Some(version)),
                };
                let payload = seq.to_string();
                let lease = async {
                    match cas {
                        Some(v) => {
                            tx.execute(&st.update_lease, &[&id, &me, &json, &ttl_ms, &seq, &v])
                                .await
                        }
                        None => {
                            tx.execute(&st.insert_lease, &[&id, &me, &json, &ttl_ms, &seq])
                                .await
                        }
                    }
                };
                // Pipelined: one round trip while the counter is held.
                let log: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                    [&seq, &id, &me, &json, &ttl_ms];
                let notify: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                    [&schema::CHANNEL, &payload];
                let (_, changed, _) = futures::try_join!(
                    tx.execute(&st.log_upsert, &log),
                    lease,
                    tx.query_one(&st.notify, &notify),
                )?;
                if changed != 1 {
                    // Cannot happen under the row lock; never commit a log row without its write.
                    return Ok(WriteOutcome::Lost(LostCause::Gone));
                }
                if every > 0 && seq % every == 0 {
                    tx.execute(&st.compact, &[&(seq - keep)]).await?;
                }
                tx.commit().await?;
                Ok(WriteOutcome::Written(seq as u64))
            })
            .await?;
        match outcome {
            WriteOutcome::Written(seq) => {
                self.shared.announce(seq);
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

    /// Deletes `id`'s row in one transaction: ours (`holder` given: a withdrawal, logged with
    /// the holder) or a peer's at `version` (an expiry).
    async fn delete(
        &self,
        op: &'static str,
        id: &str,
        holder: Option<&str>,
        version: u64,
    ) -> Result<(DeleteOutcome, Option<u64>), ProviderError> {
        let (keep, every) = (self.opts.log_keep, self.opts.compact_every);
        let version = version as i64;
        self.on(&self.writer, op, async |c: &mut Conn| {
            let Conn { client, st } = c;
            let tx = client.transaction().await?;
            let seq: i64 = tx.query_one(&st.bump, &[]).await?.get(0);
            let n = match holder {
                Some(h) => tx.execute(&st.delete_own, &[&id, &h]).await?,
                None => {
                    let current: Option<i64> = tx
                        .query_opt(&st.version_for_update, &[&id])
                        .await?
                        .map(|r| r.get(0));
                    match current {
                        None => return Ok((DeleteOutcome::Gone, None)),
                        Some(v) if v != version => return Ok((DeleteOutcome::Changed, None)),
                        Some(_) => tx.execute(&st.delete_at, &[&id, &version]).await?,
                    }
                }
            };
            if n == 0 {
                return Ok((DeleteOutcome::Gone, None));
            }
            let payload = seq.to_string();
            let log: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&seq, &id, &holder];
            let notify: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                [&schema::CHANNEL, &payload];
            futures::try_join!(
                tx.execute(&st.log_delete, &log),
                tx.query_one(&st.notify, &notify),
            )?;
            if every > 0 && seq % every == 0 {
                tx.execute(&st.compact, &[&(seq - keep)]).await?;
            }
            tx.commit().await?;
            Ok((DeleteOutcome::Deleted, Some(seq as u64)))
        })
        .await
    }

    fn start_listener(&self) {
        self.listener.get_or_init(|| {
            tokio::spawn(listener::run(
                Arc::downgrade(&self.shared),
                self.listen_config.clone(),
                self.opts.poll_interval,
                self.opts.op_timeout,
            ))
        });
    }
}

/// A lease row (`id, holder, descriptor, ttl_ms, version`) as a record.
fn record(
    id: String,
    holder: String,
    descriptor: &str,
    ttl_ms: i64,
    version: i64,
) -> Result<LeaseRecord, ProviderError> {
    super::rows::lease_record(KIND, id, holder, descriptor, ttl_ms, version)
}

/// One change-log row as a change. A delete names the holder only when the holder withdrew.
fn change(r: &Row) -> Result<Change, ProviderError> {
    let op: String = r.get(2);
    super::rows::change_row(KIND, r.get(0), r.get(1), &op, r.get(3), r.get(4), r.get(5))
}

enum RawBatch {
    Changes(Vec<Row>, i64),
    Snapshot(Vec<Row>, i64),
}

#[async_trait]
impl MembershipProvider for PostgresProvider {
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
        // Only our own incarnation's row: another process's is not ours to delete.
        let (_, seq) = self
            .delete("withdraw", &self.host_id, Some(&self.holder), 0)
            .await?;
        if let Some(seq) = seq {
            self.shared.announce(seq);
        }
        Ok(())
    }

    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        self.feed_reads.fetch_add(1, Ordering::Relaxed);
        let raw = self
            .on(&self.reader, "read changes", async |c: &mut Conn| {
                let Conn { client, st } = c;
                // One snapshot: the head and the changes (or the records) from one point of the
                // log.
                let tx = client
                    .build_transaction()
                    .isolation_level(IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let b = tx.query_one(&st.bounds, &[]).await?;
                let (min, max): (Option<i64>, i64) = (b.get(0), b.get(1));
                let raw = match cursor.map(|c| c as i64) {
                    Some(c) if c == max => RawBatch::Changes(Vec::new(), max),
                    Some(c) if c < max && min.is_some_and(|min| c + 1 >= min) => {
                        RawBatch::Changes(tx.query(&st.log_after, &[&c]).await?, max)
                    }
                    _ => RawBatch::Snapshot(tx.query(&st.snapshot, &[]).await?, max),
                };
                tx.commit().await?;
                Ok(raw)
            })
            .await?;
        Ok(match raw {
            RawBatch::Changes(rows, max) => ChangeBatch::Changes {
                changes: rows.iter().map(change).collect::<Result<_, _>>()?,
                cursor: max as u64,
            },
            RawBatch::Snapshot(rows, max) => ChangeBatch::Snapshot {
                records: rows
                    .iter()
                    .map(|r| record(r.get(0), r.get(1), r.get::<_, &str>(2), r.get(3), r.get(4)))
                    .collect::<Result<_, _>>()?,
                cursor: max as u64,
            },
        })
    }

    fn notifications(&self) -> watch::Receiver<u64> {
        self.start_listener();
        self.shared.notify.subscribe()
    }

    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        let row = self
            .on(&self.reader, "read", async |c: &mut Conn| {
                c.client.query_opt(&c.st.read_one, &[&id]).await
            })
            .await?;
        row.map(|r| {
            record(
                id.to_string(),
                r.get(0),
                r.get::<_, &str>(1),
                r.get(2),
                r.get(3),
            )
        })
        .transpose()
    }

    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError> {
        let (outcome, seq) = self.delete("delete", id, None, version).await?;
        if let Some(seq) = seq {
            self.shared.announce(seq);
        }
        Ok(outcome)
    }
}
