//! A few connections behind a semaphore, with reconnect.
//!
//! Our own rather than deadpool-postgres: the store needs four things — a bound on connections,
//! statements prepared once per connection, a broken connection dropped instead of reused, and an
//! open transaction never handed to the next caller — and that is sixty lines here against a
//! pool crate with its own runtime and config layers to keep aligned with tokio-postgres.

use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::{Client, Config, NoTls, Statement};

/// The statements every operation uses, prepared once per connection.
pub(super) struct Statements {
    pub next_epoch: Statement,
    pub epoch: Statement,
    pub epoch_for_update: Statement,
    pub read_keys: Statement,
    pub read_all: Statement,
    pub commit: Statement,
}

/// One connection and its statements.
pub(super) struct Conn {
    pub client: Client,
    pub stmts: Statements,
}

/// A connection checked out of the pool. Back to the idle list on drop, unless it broke or was
/// left inside a transaction (then it is dropped, which closes it: the server rolls back).
pub(super) struct Pooled {
    conn: Option<Conn>,
    pool: Arc<Pool>,
    /// Set before `BEGIN` is sent, cleared once `COMMIT`/`ROLLBACK` succeeded.
    pub in_tx: bool,
    /// Whether this connection came from the idle list (may have broken while idle).
    pub reused: bool,
    _permit: OwnedSemaphorePermit,
}

impl std::ops::Deref for Pooled {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !self.in_tx
            && !conn.client.is_closed()
            && let Ok(mut idle) = self.pool.idle.lock()
        {
            idle.push(conn);
        }
    }
}

/// Whether `e`, met on the first statement sent on a reused connection, says the server ended
/// that session while it sat idle, so the statement did not run: the socket is closed, or the
/// server's goodbye arrived in its place. An administrator's `pg_terminate_backend`, a crash
/// restart or `idle_session_timeout` send that goodbye asynchronously: a statement sent before
/// it arrives is answered with it (SQLSTATE class 57P) rather than seeing a closed socket.
pub(super) fn ended_while_idle(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.is_closed()
        || e.code().is_some_and(|c| {
            [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::IDLE_SESSION_TIMEOUT,
            ]
            .contains(c)
        })
}

/// The pool.
pub(super) struct Pool {
    config: Config,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    pub fn new(config: Config, size: usize) -> Arc<Self> {
        Arc::new(Pool {
            config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
        })
    }

    /// A live connection: an idle one, or a new one when none is idle.
    pub async fn get(self: &Arc<Self>) -> Result<Pooled, tokio_postgres::Error> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the pool's semaphore is never closed");
        let idle = {
            let mut idle = self.idle.lock().expect("pool lock");
            idle.retain(|c| !c.client.is_closed());
            idle.pop()
        };
        let (conn, reused) = match idle {
            Some(conn) => (conn, true),
            None => (self.connect().await?, false),
        };
        Ok(Pooled {
            conn: Some(conn),
            pool: self.clone(),
            in_tx: false,
            reused,
            _permit: permit,
        })
    }

    /// Replaces a checked-out connection that turned out broken with a new one.
    pub async fn replace(self: &Arc<Self>, p: &mut Pooled) -> Result<(), tokio_postgres::Error> {
        p.conn = Some(self.connect().await?);
        p.reused = false;
        p.in_tx = false;
        Ok(())
    }

    /// Empties the idle list (after the server went away every idle connection is dead).
    pub fn clear_idle(&self) {
        self.idle.lock().expect("pool lock").clear();
    }

    /// A new connection, its driver task spawned, its statements prepared.
    pub async fn connect(&self) -> Result<Conn, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "state store connection ended");
            }
        });
        let stmts = prepare(&client).await?;
        Ok(Conn { client, stmts })
    }
}

async fn prepare(c: &Client) -> Result<Statements, tokio_postgres::Error> {
    let (next_epoch, epoch, epoch_for_update, read_keys, read_all, commit) = futures::try_join!(
        c.prepare(
            "INSERT INTO sigx_actor_epochs (actor_type, actor_key, epoch) VALUES ($1, $2, 1)
                 ON CONFLICT (actor_type, actor_key)
                 DO UPDATE SET epoch = sigx_actor_epochs.epoch + 1
                 RETURNING epoch"
        ),
        c.prepare("SELECT epoch FROM sigx_actor_epochs WHERE actor_type = $1 AND actor_key = $2"),
        c.prepare(
            "SELECT epoch FROM sigx_actor_epochs WHERE actor_type = $1 AND actor_key = $2
                 FOR UPDATE"
        ),
        c.prepare(
            "SELECT key, value FROM sigx_actor_state
                 WHERE actor_type = $1 AND actor_key = $2 AND key = ANY($3::text[])"
        ),
        c.prepare(
            "SELECT key, value FROM sigx_actor_state
                 WHERE actor_type = $1 AND actor_key = $2 ORDER BY key"
        ),
        // A batch in one statement, so one round trip (see `commit` in mod.rs): `cur` locks the
        // actor's epoch row (a newer epoch being issued waits for the lock, or — issued first —
        // is the version `FOR UPDATE` returns), the writes apply only when it holds the
        // batch's epoch, and the epoch found comes back to be judged. Puts and deletes name
        // disjoint keys (each key's last write), so no row is changed twice.
        c.prepare(
            "WITH cur AS (
                 SELECT epoch FROM sigx_actor_epochs
                 WHERE actor_type = $1 AND actor_key = $2
                 FOR UPDATE
             ), put AS (
                 INSERT INTO sigx_actor_state (actor_type, actor_key, key, value, epoch)
                 SELECT $1, $2, k, v, $3 FROM unnest($4::text[], $5::bytea[]) AS t(k, v)
                 WHERE EXISTS (SELECT 1 FROM cur WHERE cur.epoch = $3)
                 ON CONFLICT (actor_type, actor_key, key)
                 DO UPDATE SET value = excluded.value, epoch = excluded.epoch
             ), del AS (
                 DELETE FROM sigx_actor_state
                 WHERE actor_type = $1 AND actor_key = $2 AND key = ANY($6::text[])
                     AND EXISTS (SELECT 1 FROM cur WHERE cur.epoch = $3)
             )
             SELECT (SELECT epoch FROM cur)"
        ),
    )?;
    Ok(Statements {
        next_epoch,
        epoch,
        epoch_for_update,
        read_keys,
        read_all,
        commit,
    })
}
