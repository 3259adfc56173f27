//! One membership connection, reconnected on demand: the provider holds two (writes, reads), so
//! a feed read never queues behind a write that waits for the change counter.
//!
//! Every session sets `idle_in_transaction_session_timeout` and `lock_timeout` to the hold
//! timeout: a write holds the change counter's row lock for its few statements, and a host
//! suspended (SIGSTOP, a VM pause) in the middle of one would otherwise stall every host's
//! renewals for as long as it is stopped. The server ends such a session and rolls it back.

use super::schema::{self, Statements};
use super::{ChangeOrdering, KIND};
use crate::membership::provider::ProviderError;
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::{Client, Config, NoTls};

/// A live connection and its statements.
pub(super) struct Conn {
    pub client: Client,
    pub st: Statements,
}

/// A connection slot.
pub(super) struct Slot {
    config: Config,
    ordering: ChangeOrdering,
    hold: Duration,
    conn: Mutex<Option<Conn>>,
}

/// A checked-out connection. Dropped before [`Guard::finished`] (the operation's future was
/// cancelled: a caller's timeout) it closes the connection: a statement may be half-sent or a
/// `BEGIN` answered with no transaction object to roll it back, and a connection left inside a
/// transaction would hold its locks until the server's idle timeout ended it.
pub(super) struct Guard<'a> {
    guard: MutexGuard<'a, Option<Conn>>,
    finished: bool,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            *self.guard = None;
        }
    }
}

impl Guard<'_> {
    pub fn conn(&mut self) -> &mut Conn {
        self.guard.as_mut().expect("connected at checkout")
    }

    /// Maps a failed statement to `Unavailable`, dropping the connection unless the server
    /// answered (a broken connection is never reused). The server's goodbye (SQLSTATE class
    /// 57P: terminated by an administrator, a crash restart, an idle timeout) is an answer
    /// that ends the session, so it drops the connection too.
    pub fn fail(&mut self, op: &'static str, e: tokio_postgres::Error) -> ProviderError {
        let goodbye = e.code().is_some_and(|c| c.code().starts_with("57P"));
        if e.as_db_error().is_none() || e.is_closed() || goodbye {
            *self.guard = None;
        }
        unavailable(op, schema::describe(&e))
    }

    /// The operation ran to its end (successfully or with an answer): the connection is in a
    /// known state.
    pub fn finished(&mut self) {
        self.finished = true;
    }

    /// Drops the connection (an operation on it timed out: its state is unknown).
    pub fn reset(&mut self) {
        *self.guard = None;
    }
}

pub(super) fn unavailable(op: &'static str, detail: impl Into<String>) -> ProviderError {
    ProviderError::Unavailable {
        provider: KIND,
        op,
        detail: detail.into(),
    }
}

impl Slot {
    pub fn new(config: Config, ordering: ChangeOrdering, hold: Duration) -> Self {
        Slot {
            config,
            ordering,
            hold,
            conn: Mutex::new(None),
        }
    }

    /// Seeds the slot with a connection made at open.
    pub async fn put(&self, conn: Conn) {
        *self.conn.lock().await = Some(conn);
    }

    /// A live connection (connecting when there is none).
    pub async fn get(&self, op: &'static str) -> Result<Guard<'_>, ProviderError> {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_some_and(|c| c.client.is_closed()) {
            *guard = None;
        }
        if guard.is_none() {
            match self.connect().await {
                Ok(c) => *guard = Some(c),
                Err(e) => {
                    return Err(unavailable(
                        op,
                        format!(
                            "cannot connect to {}: {}",
                            schema::target(&self.config),
                            schema::describe(&e)
                        ),
                    ));
                }
            }
        }
        Ok(Guard {
            guard,
            finished: false,
        })
    }

    pub async fn connect(&self) -> Result<Conn, tokio_postgres::Error> {
        connect(&self.config, self.ordering, self.hold).await
    }
}

/// A new connection, its driver task spawned, its session limits set, its statements prepared.
pub(super) async fn connect(
    config: &Config,
    ordering: ChangeOrdering,
    hold: Duration,
) -> Result<Conn, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "membership store connection ended");
        }
    });
    let ms = hold.as_millis().max(1);
    client
        .batch_execute(&format!(
            "SET idle_in_transaction_session_timeout = {ms}; SET lock_timeout = {ms}"
        ))
        .await?;
    let st = schema::prepare(&client, ordering).await?;
    Ok(Conn { client, st })
}
