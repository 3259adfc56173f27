//! Durable reminders (DESIGN.md §11): set on an actor by name, delivered to it as a turn at the
//! due time wherever it lives, activating it if needed, at least once.
//!
//! ```no_run
//! # async fn demo(client: sigx_sdk::Client) -> Result<(), sigx_sdk::ActorError> {
//! use sigx_sdk::Due;
//! use std::time::Duration;
//! let invoice = client.actor("Invoice", "inv-7");
//! invoice
//!     .set_reminder("overdue", Due::In(Duration::from_secs(3600)), None, "")
//!     .await?;
//! # Ok(()) }
//! ```

use crate::client::{ActorHandle, Client, read_status};
use bytes::Bytes;
use sigx_proto::{ActorError, v1};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// When a reminder is first due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// At this wall-clock time.
    At(SystemTime),
    /// This long from now (the sidecar's clock).
    In(Duration),
}

/// A due reminder, as its handler ([`crate::ActorType::on_reminder`]) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reminder {
    /// Its name.
    pub name: String,
    /// The payload it was set with.
    pub payload: Bytes,
    /// This occurrence's due time: the same on every retry of it, so (`name`, `due`) identifies
    /// the occurrence for an idempotent handler.
    pub due: SystemTime,
    /// `None` for a one-shot reminder.
    pub period: Option<Duration>,
    /// 1 for the first delivery of this occurrence, more for retries.
    pub attempt: u32,
}

/// A stored reminder, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderInfo {
    /// Its name.
    pub name: String,
    /// Its next due time.
    pub due: SystemTime,
    /// `None` for a one-shot reminder.
    pub period: Option<Duration>,
    /// The payload.
    pub payload: Bytes,
    /// Failed deliveries of the current occurrence so far.
    pub failed_attempts: u32,
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn from_unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn period_of(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl Reminder {
    pub(crate) fn from_proto(r: v1::Reminder) -> Self {
        Reminder {
            name: r.name,
            payload: r.payload,
            due: from_unix_ms(r.due_unix_ms),
            period: period_of(r.period_ms),
            attempt: r.attempt,
        }
    }
}

impl Client {
    /// Sets (or replaces, by name) a reminder of `actor_type`/`key`; returns its first due time.
    /// `period` `None` is a one-shot reminder (deleted once delivered); otherwise at least 100 ms.
    pub async fn set_reminder(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
        name: impl Into<String>,
        due: Due,
        period: Option<Duration>,
        payload: impl Into<Bytes>,
    ) -> Result<SystemTime, ActorError> {
        self.set_reminder_fenced(actor_type, key, name, due, period, payload, 0)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn set_reminder_fenced(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
        name: impl Into<String>,
        due: Due,
        period: Option<Duration>,
        payload: impl Into<Bytes>,
        epoch: u64,
    ) -> Result<SystemTime, ActorError> {
        let due = match due {
            Due::At(t) => v1::set_reminder_request::Due::DueUnixMs(unix_ms(t)),
            Due::In(d) => {
                v1::set_reminder_request::Due::DueInMs(d.as_millis().min(u64::MAX as u128) as u64)
            }
        };
        let request = v1::SetReminderRequest {
            actor: Some(v1::ActorRef {
                actor_type: actor_type.into(),
                key: key.into(),
            }),
            name: name.into(),
            due: Some(due),
            period_ms: period.map_or(0, |p| p.as_millis().clamp(1, u64::MAX as u128) as u64),
            payload: payload.into(),
            epoch,
        };
        let mut inner = self.raw();
        inner
            .set_reminder(request)
            .await
            .map(|r| from_unix_ms(r.into_inner().due_unix_ms))
            .map_err(|s| read_status(&s, self.socket()))
    }

    /// Deletes a reminder; whether it existed.
    pub async fn delete_reminder(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
        name: impl Into<String>,
    ) -> Result<bool, ActorError> {
        self.delete_reminder_fenced(actor_type, key, name, 0).await
    }

    async fn delete_reminder_fenced(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
        name: impl Into<String>,
        epoch: u64,
    ) -> Result<bool, ActorError> {
        let mut inner = self.raw();
        inner
            .delete_reminder(v1::DeleteReminderRequest {
                actor: Some(v1::ActorRef {
                    actor_type: actor_type.into(),
                    key: key.into(),
                }),
                name: name.into(),
                epoch,
            })
            .await
            .map(|r| r.into_inner().existed)
            .map_err(|s| read_status(&s, self.socket()))
    }

    /// The reminders of `actor_type`/`key`, by name.
    pub async fn list_reminders(
        &self,
        actor_type: impl Into<String>,
        key: impl Into<String>,
    ) -> Result<Vec<ReminderInfo>, ActorError> {
        let mut inner = self.raw();
        inner
            .list_reminders(v1::ListRemindersRequest {
                actor: Some(v1::ActorRef {
                    actor_type: actor_type.into(),
                    key: key.into(),
                }),
            })
            .await
            .map(|r| {
                r.into_inner()
                    .reminders
                    .into_iter()
                    .map(|r| ReminderInfo {
                        name: r.name,
                        due: from_unix_ms(r.due_unix_ms),
                        period: period_of(r.period_ms),
                        payload: r.payload,
                        failed_attempts: r.failed_attempts,
                    })
                    .collect()
            })
            .map_err(|s| read_status(&s, self.socket()))
    }
}

impl ActorHandle {
    /// Sets (or replaces) a reminder of this actor. See [`Client::set_reminder`]. A handle from
    /// `Context::this_actor` carries its turn's epoch ([`ActorHandle::fence`]): the change is
    /// refused (`stale-epoch`, nothing stored) once a newer activation of the actor exists.
    pub async fn set_reminder(
        &self,
        name: impl Into<String>,
        due: Due,
        period: Option<Duration>,
        payload: impl Into<Bytes>,
    ) -> Result<SystemTime, ActorError> {
        let (client, actor_type, key) = self.parts();
        client
            .set_reminder_fenced(actor_type, key, name, due, period, payload, self.fence())
            .await
    }

    /// Deletes a reminder of this actor; whether it existed. Fenced like
    /// [`ActorHandle::set_reminder`].
    pub async fn delete_reminder(&self, name: impl Into<String>) -> Result<bool, ActorError> {
        let (client, actor_type, key) = self.parts();
        client
            .delete_reminder_fenced(actor_type, key, name, self.fence())
            .await
    }

    /// This actor's reminders.
    pub async fn list_reminders(&self) -> Result<Vec<ReminderInfo>, ActorError> {
        let (client, actor_type, key) = self.parts();
        client.list_reminders(actor_type, key).await
    }
}
