//! The production store: PostgreSQL, shared by every host of a fleet.
//!
//! The same two tables as SQLite (`sigx_actor_epochs`, one row per actor that ever activated and
//! never deleted; `sigx_actor_state`, the entries). Issuing an epoch is one
//! `INSERT ... ON CONFLICT DO UPDATE SET epoch = epoch + 1 RETURNING epoch`: the row lock makes
//! concurrent increments queue, so no two callers anywhere get one epoch. A commit is one
//! statement (one round trip, its own transaction) that locks the actor's epoch row
//! (`SELECT ... FOR UPDATE` in a `WITH`), applies the batch only if that row holds the batch's
//! epoch, and returns the epoch it found to be judged: an activation issuing a newer epoch waits
//! for that lock, so the check and the writes are one step against every other host. A read takes
//! its epoch and entries from one snapshot (`REPEATABLE READ`).
//!
//! Connection-level failures at run time answer [`StateError::Unavailable`], never a fencing
//! error: a store that cannot be reached says nothing about epochs.

mod pool;
mod reminders;
mod schema;

pub use schema::{PostgresStateError, SCHEMA_VERSION};

use super::{Selection, StateError, StateStore, StateWrite, judge_epoch};
use crate::runtime::ActorId;
use async_trait::async_trait;
use bytes::Bytes;
use pool::{Pool, Pooled};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

const KIND: &str = "postgres";
/// Connections per host.
pub const POOL_SIZE: usize = 4;
/// How long opening a connection may take when the DSN does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one operation may take, checkout included, before it answers `Unavailable`.
const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// `host:port/database` of a connection string's config, for messages (never the password).
pub fn describe_target(config: &tokio_postgres::Config) -> String {
    schema::target(config)
}

/// A host's handle on the PostgreSQL state store.
pub struct PostgresStateStore {
    pool: Arc<Pool>,
    target: String,
}

impl PostgresStateStore {
    /// Parses `dsn`, connects, creates or migrates the schema and checks the privileges, so
    /// every way the store cannot be used is reported (by name) before the host binds.
    pub async fn open(dsn: &str) -> Result<Self, PostgresStateError> {
        let mut config =
            tokio_postgres::Config::from_str(dsn).map_err(|e| PostgresStateError::BadDsn {
                reason: schema::describe(&e),
            })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("sigx-sidecar");
        }
        let (mut client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| schema::connect_error(&config, &e))?;
        let driver = tokio::spawn(connection);
        let migrated = schema::migrate(&mut client, &config).await;
        drop(client);
        let _ = driver.await;
        migrated?;
        let target = schema::target(&config);
        let pool = Pool::new(config.clone(), POOL_SIZE);
        // One connection now: its statements prepare, proving the tables usable.
        drop(
            pool.get()
                .await
                .map_err(|e| schema::connect_error(&config, &e))?,
        );
        tracing::info!(%target, "PostgreSQL state store ready");
        Ok(PostgresStateStore { pool, target })
    }

    /// `host:port/database`, without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    fn unavailable(&self, what: &str, e: &tokio_postgres::Error) -> StateError {
        if pool::ended_while_idle(e) || e.as_db_error().is_none() {
            // Every idle connection went with the server, most likely.
            self.pool.clear_idle();
        }
        StateError::Unavailable {
            store: KIND,
            message: format!(
                "{what} at {}: {}; the call can be retried once the server is back",
                self.target,
                schema::describe(e)
            ),
        }
    }

    /// Replaces `c`, whose server ended it while it sat in the pool, and drops the other idle
    /// connections, which most likely went with it.
    async fn reconnect(&self, c: &mut Pooled) -> Result<(), StateError> {
        self.pool.clear_idle();
        self.pool
            .replace(c)
            .await
            .map_err(|e| self.unavailable("cannot reconnect to PostgreSQL", &e))
    }

    /// A connection inside a transaction started with `begin`. A connection that broke while
    /// idle is replaced once: nothing was sent on it yet, so nothing can have happened.
    async fn begin(&self, begin: &str) -> Result<Pooled, StateError> {
        let mut c = self
            .pool
            .get()
            .await
            .map_err(|e| self.unavailable("cannot connect to PostgreSQL", &e))?;
        // Inside the transaction from the moment BEGIN may reach the server: an operation
        // cancelled (its timeout) while BEGIN was in flight leaves the server to run it later,
        // and that connection must be closed, not handed to the next caller inside it.
        c.in_tx = true;
        if let Err(e) = c.client.batch_execute(begin).await {
            if !(c.reused && pool::ended_while_idle(&e)) {
                return Err(self.unavailable("cannot start a transaction", &e));
            }
            self.reconnect(&mut c).await?;
            c.in_tx = true;
            c.client
                .batch_execute(begin)
                .await
                .map_err(|e| self.unavailable("cannot start a transaction", &e))?;
        }
        Ok(c)
    }

    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`).
    async fn end(&self, c: &mut Pooled, sql: &str) -> Result<(), tokio_postgres::Error> {
        c.client.batch_execute(sql).await?;
        c.in_tx = false;
        Ok(())
    }

    async fn timed<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, StateError>>,
    ) -> Result<T, StateError> {
        tokio::time::timeout(OP_TIMEOUT, op)
            .await
            .unwrap_or_else(|_| {
                Err(StateError::Unavailable {
                    store: KIND,
                    message: format!(
                        "{what} at {} did not finish within {OP_TIMEOUT:?}; is the server \
                         overloaded or unreachable?",
                        self.target
                    ),
                })
            })
    }

    async fn current_epoch(
        &self,
        c: &Pooled,
        actor: &ActorId,
        for_update: bool,
    ) -> Result<u64, StateError> {
        let stmt = if for_update {
            &c.stmts.epoch_for_update
        } else {
            &c.stmts.epoch
        };
        let row = c
            .client
            .query_opt(stmt, &[&&*actor.actor_type, &&*actor.key])
            .await
            .map_err(|e| self.unavailable("cannot read the actor's epoch", &e))?;
        Ok(row.map(|r| r.get::<_, i64>(0)).unwrap_or(0) as u64)
    }
}

#[async_trait]
impl StateStore for PostgresStateStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn next_epoch(&self, actor: &ActorId) -> Result<u64, StateError> {
        self.timed("issuing an epoch", async {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                [&&*actor.actor_type, &&*actor.key];
            let mut c = self
                .pool
                .get()
                .await
                .map_err(|e| self.unavailable("cannot connect to PostgreSQL", &e))?;
            let row = match c.client.query_one(&c.stmts.next_epoch, &params).await {
                Ok(row) => row,
                // A connection that died while idle: retrying at worst skips an epoch number,
                // and epochs need only increase.
                Err(e) if c.reused && pool::ended_while_idle(&e) => {
                    self.reconnect(&mut c).await?;
                    c.client
                        .query_one(&c.stmts.next_epoch, &params)
                        .await
                        .map_err(|e| self.unavailable("cannot issue an epoch", &e))?
                }
                Err(e) => return Err(self.unavailable("cannot issue an epoch", &e)),
            };
            Ok(row.get::<_, i64>(0) as u64)
        })
        .await
    }

    async fn read(
        &self,
        actor: &ActorId,
        epoch: u64,
        selection: &Selection,
    ) -> Result<Vec<(String, Option<Bytes>)>, StateError> {
        self.timed("reading state", async {
            let mut c = self
                .begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await?;
            let current = self.current_epoch(&c, actor, false).await?;
            if let Err(refused) = judge_epoch(actor, epoch, current) {
                let _ = self.end(&mut c, "ROLLBACK").await;
                return Err(refused);
            }
            let (t, k) = (&*actor.actor_type, &*actor.key);
            let failed = |e| self.unavailable("cannot read state", &e);
            let out = match selection {
                Selection::Keys(keys) => {
                    let rows = c
                        .client
                        .query(&c.stmts.read_keys, &[&t, &k, keys])
                        .await
                        .map_err(failed)?;
                    let found: HashMap<String, Bytes> = rows
                        .into_iter()
                        .map(|r| (r.get(0), Bytes::from(r.get::<_, Vec<u8>>(1))))
                        .collect();
                    // In the order asked, a key named twice answered twice.
                    keys.iter()
                        .map(|key| (key.clone(), found.get(key).cloned()))
                        .collect()
                }
                Selection::All => c
                    .client
                    .query(&c.stmts.read_all, &[&t, &k])
                    .await
                    .map_err(failed)?
                    .into_iter()
                    .map(|r| (r.get(0), Some(Bytes::from(r.get::<_, Vec<u8>>(1)))))
                    .collect(),
            };
            self.end(&mut c, "COMMIT").await.map_err(failed)?;
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
        self.timed("committing state", async {
            // A batch applies in order; its effect is each key's last write, so the batch
            // becomes one upsert and one delete, sent with the epoch check as one statement
            // (one round trip, whatever its size).
            let mut last: HashMap<&str, Option<&[u8]>> = HashMap::new();
            for w in writes {
                match w {
                    StateWrite::Put { key, value } => last.insert(key, Some(&value[..])),
                    StateWrite::Delete { key } => last.insert(key, None),
                };
            }
            let (mut put_keys, mut put_values, mut del_keys) = (Vec::new(), Vec::new(), Vec::new());
            for (k, v) in last {
                match v {
                    Some(v) => {
                        put_keys.push(k);
                        put_values.push(v);
                    }
                    None => del_keys.push(k),
                }
            }
            let (t, k, e) = (&*actor.actor_type, &*actor.key, epoch as i64);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                [&t, &k, &e, &put_keys, &put_values, &del_keys];
            let mut c = self
                .pool
                .get()
                .await
                .map_err(|e| self.unavailable("cannot connect to PostgreSQL", &e))?;
            let lost = |e| {
                self.unavailable(
                    "the commit's answer was lost (the batch may or may not be durable; a read \
                     tells)",
                    &e,
                )
            };
            let (row, retried) = match c.client.query_one(&c.stmts.commit, &params).await {
                Ok(row) => (row, false),
                // A connection the server ended while it sat idle: the statement met its
                // goodbye or its closed socket, and did not run there. Once more on a new
                // connection. (Were it instead to have died mid-statement after committing, the
                // retry re-applies the same batch under the same epoch, which changes nothing,
                // or finds a newer epoch, which is answered below as outcome-unknown.)
                Err(e) if c.reused && pool::ended_while_idle(&e) => {
                    self.reconnect(&mut c).await?;
                    let row = c.client.query_one(&c.stmts.commit, &params).await;
                    (row.map_err(lost)?, true)
                }
                Err(e) if e.as_db_error().is_some() && !pool::ended_while_idle(&e) => {
                    // The server refused the statement: it rolled back, nothing was written.
                    return Err(self.unavailable("cannot write state (nothing was written)", &e));
                }
                Err(e) => return Err(lost(e)),
            };
            let current = row.get::<_, Option<i64>>(0).unwrap_or(0) as u64;
            match judge_epoch(actor, epoch, current) {
                Ok(()) => {}
                // A retried batch that finds a newer epoch may have landed the first time (a
                // goodbye can in principle follow a commit): say so, not "refused".
                Err(_) if retried => {
                    return Err(StateError::Unavailable {
                        store: KIND,
                        message: format!(
                            "the commit's answer was lost at {} and its retry found {actor} at \
                             epoch {current}, past this activation's {epoch} (the batch may or \
                             may not be durable; a read tells)",
                            self.target
                        ),
                    });
                }
                Err(refused) => return Err(refused),
            }
            Ok(())
        })
        .await
    }
}
