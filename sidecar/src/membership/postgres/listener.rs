//! Push notifications: one `LISTEN sigx_membership` connection per provider feeding the
//! `notifications()` watch, with a slow poll of the log's head on the same connection as a
//! backstop.
//!
//! Every write calls `pg_notify` inside its transaction, so the notification is delivered when
//! (and only if) the write commits, in commit order, carrying its change number. A notification
//! lost with the listener's connection is not lost for the feed: after every (re)connect the
//! listener reads the log's head *after* its `LISTEN` took effect and announces it, so every
//! change committed while it was away is at or below the announced number (a feed read follows
//! whenever that is past the observer's cursor) and every later one arrives as a notification.
//! The backstop poll also finds a connection that died silently (a query that does not answer
//! within the operation timeout ends the session and reconnects).

use super::schema::CHANNEL;
use futures::StreamExt;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

use super::Shared;

/// Longest pause between reconnect attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Runs until the provider is dropped.
pub(super) async fn run(weak: Weak<Shared>, config: Config, poll: Duration, op_timeout: Duration) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match session(&weak, &config, poll, op_timeout).await {
            Session::Dropped => return,
            Session::Lost(why, listened) => {
                if listened {
                    // It worked for a while: a new outage starts from the shortest pause.
                    backoff = Duration::from_millis(50);
                }
                tracing::warn!(
                    reason = %why,
                    "membership notification connection lost; reconnecting (views keep \
                     up through a full read once it is back)"
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
        if weak.strong_count() == 0 {
            return;
        }
    }
}

enum Session {
    /// The provider is gone.
    Dropped,
    /// The connection failed (after its LISTEN took effect: `true`); reconnect.
    Lost(String, bool),
}

/// Aborts the wrapped task when dropped (the connection driver must not outlive its session).
struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn head(client: &Client, op_timeout: Duration) -> Result<u64, String> {
    let q = client.query_one(
        "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM sigx_changes",
        &[],
    );
    match tokio::time::timeout(op_timeout, q).await {
        Ok(Ok(row)) => Ok(row.get::<_, i64>(0).max(0) as u64),
        Ok(Err(e)) => Err(super::schema::describe(&e)),
        Err(_) => Err(format!("no answer within {op_timeout:?}")),
    }
}

async fn session(
    weak: &Weak<Shared>,
    config: &Config,
    poll: Duration,
    op_timeout: Duration,
) -> Session {
    let (client, mut connection) =
        match tokio::time::timeout(op_timeout, config.connect(NoTls)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Session::Lost(super::schema::describe(&e), false),
            Err(_) => return Session::Lost(format!("connect took over {op_timeout:?}"), false),
        };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    if let Ok(seq) = n.payload().parse::<u64>()
                        && tx.send(seq).is_err()
                    {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "membership listener connection ended");
                    return;
                }
            }
        }
    }));
    let sql = format!("LISTEN {CHANNEL}");
    let listen = client.batch_execute(&sql);
    match tokio::time::timeout(op_timeout, listen).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Session::Lost(super::schema::describe(&e), false),
        Err(_) => return Session::Lost(format!("LISTEN took over {op_timeout:?}"), false),
    }
    // Read after LISTEN: whatever committed before it is at or below this head.
    let at = match head(&client, op_timeout).await {
        Ok(at) => at,
        Err(why) => return Session::Lost(why, false),
    };
    {
        let Some(shared) = weak.upgrade() else {
            return Session::Dropped;
        };
        shared.listener_sessions.fetch_add(1, Ordering::Relaxed);
        // Always wake the feed: notifications may have been missed while we were away.
        shared.notify.send_modify(|v| *v = (*v).max(at));
    }
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let seq = tokio::select! {
            m = rx.recv() => match m {
                Some(seq) => seq,
                None => return Session::Lost("the connection closed".into(), true),
            },
            _ = tick.tick() => match head(&client, op_timeout).await {
                Ok(seq) => seq,
                Err(why) => return Session::Lost(why, true),
            },
        };
        let Some(shared) = weak.upgrade() else {
            return Session::Dropped;
        };
        shared.announce(seq);
    }
}
