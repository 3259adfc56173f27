//! Timers of an activation, from inside its turns: `ctx.set_timer(..)`, `ctx.cancel_timer(..)`,
//! and the [`TimerTick`] an [`ActorType::on_timer`](crate::ActorType::on_timer) handler gets.
//!
//! A timer lives in the sidecar's memory and belongs to the activation that set it: its ticks
//! are turns of that activation (one at a time with its other turns, unless the type is
//! reentrant), bounded like a call by the host's call timeout, and their state writes commit
//! like a method's. It ends when cancelled, after its one tick (one-shot), or with the
//! activation: a new activation starts with none (set them again in the activation function).
//! Ticks do not reset the idle timeout, and a failed tick is not retried. For a wake-up that
//! must survive the activation, use a reminder.

use crate::context::Context;
use crate::payload;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use sigx_proto::{ActorError, v1};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One tick of a timer, as its handler sees it.
#[derive(Debug, Clone)]
pub struct TimerTick {
    name: String,
    payload: Bytes,
    period: Option<Duration>,
    due: SystemTime,
    skipped: u64,
}

impl TimerTick {
    pub(crate) fn from_proto(t: v1::TimerTick) -> Self {
        TimerTick {
            period: (t.period_ms > 0).then(|| Duration::from_millis(t.period_ms)),
            due: UNIX_EPOCH + Duration::from_millis(t.due_unix_ms.max(0) as u64),
            skipped: t.skipped,
            name: t.name,
            payload: t.payload,
        }
    }

    /// The timer's name, as it was set.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The payload the timer was set with.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The payload decoded as JSON (empty reads as `null`); `invalid` when it does not decode.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ActorError> {
        payload::from_json(&self.payload).map_err(|e| {
            ActorError::invalid(format!(
                "the payload of timer {:?} is not the JSON its handler expects: {e}",
                self.name
            ))
        })
    }

    /// The timer's period; `None` for a one-shot timer (this is its only tick, and it is gone
    /// already: setting the name again sets a new timer).
    pub fn period(&self) -> Option<Duration> {
        self.period
    }

    /// When the tick was due, on the pod's wall clock (later than now when the activation was
    /// busy).
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// Ticks of this periodic timer skipped since the previous one, because it was still
    /// queued or running when they fell due.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

fn millis(what: &str, d: Duration) -> Result<u64, ActorError> {
    u64::try_from(d.as_millis())
        .map_err(|_| ActorError::invalid(format!("timer {what} of {d:?} is out of range")))
}

impl Context {
    fn timer_owner(&self, what: &str) -> Result<(), ActorError> {
        if self.activation_id.is_empty() {
            return Err(ActorError::invalid(format!(
                "{what}: {} is a worker type, and timers belong to an actor's activation; use \
                 an actor type",
                self.actor_type
            )));
        }
        Ok(())
    }

    /// Sets a timer of this activation: its first tick `after` from now, then every `period`
    /// (`None`: one tick). Setting a name again replaces that timer; returns whether one was
    /// replaced. Takes effect at once, whether or not this turn then succeeds.
    ///
    /// ```
    /// use sigx_sdk::{ActorType, Context};
    /// use std::time::Duration;
    ///
    /// let flusher = ActorType::new("Buffer", |ctx: Context| async move {
    ///     // Timers end with the activation: set them when it starts.
    ///     ctx.set_timer("flush", Duration::from_secs(1), Some(Duration::from_secs(1)), "")
    ///         .await?;
    ///     Ok(Vec::<String>::new())
    /// })
    /// .on_timer(|ctx, _tick| async move {
    ///     ctx.state().await.clear();
    ///     Ok(())
    /// });
    /// ```
    pub async fn set_timer(
        &self,
        name: impl Into<String>,
        after: Duration,
        period: Option<Duration>,
        payload: impl Into<Bytes>,
    ) -> Result<bool, ActorError> {
        self.timer_owner("set_timer")?;
        let request = v1::SetTimerRequest {
            actor: Some(self.storage.actor.clone()),
            activation_id: self.activation_id.to_string(),
            name: name.into(),
            due_ms: millis("delay", after)?,
            period_ms: match period {
                Some(p) if p.is_zero() => {
                    return Err(ActorError::invalid(
                        "a timer period of zero: pass None for a one-shot timer",
                    ));
                }
                Some(p) => millis("period", p)?,
                None => 0,
            },
            payload: payload.into(),
        };
        self.client
            .raw()
            .set_timer(request)
            .await
            .map(|r| r.into_inner().replaced)
            .map_err(|s| ActorError::from_status(&s))
    }

    /// Cancels this activation's timer `name`; returns whether it existed. No tick of it starts
    /// afterwards.
    pub async fn cancel_timer(&self, name: &str) -> Result<bool, ActorError> {
        self.timer_owner("cancel_timer")?;
        self.client
            .raw()
            .cancel_timer(v1::CancelTimerRequest {
                actor: Some(self.storage.actor.clone()),
                activation_id: self.activation_id.to_string(),
                name: name.to_string(),
            })
            .await
            .map(|r| r.into_inner().existed)
            .map_err(|s| ActorError::from_status(&s))
    }
}
