//! The reminder RPCs of the app socket: `SetReminder`, `DeleteReminder`, `ListReminders`.

use super::{ReminderSpec, check_spec, shard_of, to_info};
use crate::runtime::{ActorId, Runtime};
use crate::state::StateError;
use sigx_proto::{ActorError, v1};
use std::sync::atomic::Ordering;

/// A store failure as the app sees it. Every reminder RPC is idempotent, so retrying is safe,
/// except after a refused fence: a newer activation of the actor exists, and the asking one is
/// superseded on this host (it would be refused again).
fn store_error(
    runtime: &Runtime,
    what: &str,
    actor: &ActorId,
    fence: Option<u64>,
    e: StateError,
) -> ActorError {
    match e {
        StateError::Invalid(m) => ActorError::invalid(m),
        e @ (StateError::StaleEpoch { .. } | StateError::UnknownEpoch { .. }) => {
            let err = ActorError::stale_epoch(format!(
                "{what} for {actor} was refused: {e}; nothing changed. A newer activation of the \
                 actor owns its reminders now; this activation is dropped"
            ));
            tracing::warn!(%actor, epoch = fence, error = %e, "reminder change refused: stale epoch");
            if let Some(epoch) = fence {
                runtime.supersede_epoch(actor, epoch, err.clone());
            }
            err
        }
        e => ActorError::unreachable(format!(
            "{what} for {actor} failed: {e}; retry (the request is idempotent)"
        )),
    }
}

/// The fence a request carries: its epoch, 0 meaning none.
fn fence_of(epoch: u64) -> Option<u64> {
    (epoch != 0).then_some(epoch)
}

/// Refuses reminders on a type this host's app registers as a worker.
fn check_actor_type(runtime: &Runtime, actor: &ActorId) -> Result<(), ActorError> {
    if runtime.registers(&actor.actor_type) == Some(false) {
        return Err(ActorError::invalid(format!(
            "{:?} is a worker type, and workers have no reminders (no identity to remind); set \
             reminders on an actor type",
            actor.actor_type
        )));
    }
    Ok(())
}

/// What a `SetReminder` received at `now_unix_ms` asks to store, checked ([`check_spec`]).
pub fn spec_of(req: v1::SetReminderRequest, now_unix_ms: i64) -> Result<ReminderSpec, ActorError> {
    let due_unix_ms = match req.due {
        Some(v1::set_reminder_request::Due::DueUnixMs(at)) => at,
        Some(v1::set_reminder_request::Due::DueInMs(after)) => {
            now_unix_ms.saturating_add(after.min(i64::MAX as u64) as i64)
        }
        None => {
            return Err(ActorError::invalid(format!(
                "reminder {:?} has no due time: set due_unix_ms (absolute) or due_in_ms (from now)",
                req.name
            )));
        }
    };
    let spec = ReminderSpec {
        name: req.name,
        due_unix_ms,
        period_ms: req.period_ms,
        payload: req.payload,
    };
    check_spec(&spec)?;
    Ok(spec)
}

/// `SetReminder`.
pub async fn set(
    runtime: &Runtime,
    actor: ActorId,
    req: v1::SetReminderRequest,
) -> Result<v1::SetReminderResponse, ActorError> {
    check_actor_type(runtime, &actor)?;
    let fence = fence_of(req.epoch);
    // `due_in_ms` counts from now on the store's clock, the one the reminder is due by.
    let (store, clock) = (&runtime.config().state, &runtime.config().clock);
    let time = runtime.store_time();
    time.refresh(store.as_ref(), clock).await;
    let spec = spec_of(req, time.now_unix_ms(clock))?;
    let due_unix_ms = spec.due_unix_ms;
    runtime
        .config()
        .state
        .set_reminder(&actor, shard_of(&actor), &spec, fence)
        .await
        .map_err(|e| store_error(runtime, "setting a reminder", &actor, fence, e))?;
    runtime
        .counters()
        .reminders
        .set
        .fetch_add(1, Ordering::Relaxed);
    tracing::debug!(%actor, reminder = %spec.name, due = due_unix_ms, period_ms = spec.period_ms,
        "reminder set");
    // The owner of its shard may be this host: a reminder due soon should not wait a poll.
    runtime.reminder_nudge().notify_one();
    Ok(v1::SetReminderResponse { due_unix_ms })
}

/// `DeleteReminder`.
pub async fn delete(
    runtime: &Runtime,
    actor: ActorId,
    req: &v1::DeleteReminderRequest,
) -> Result<v1::DeleteReminderResponse, ActorError> {
    let fence = fence_of(req.epoch);
    let existed = runtime
        .config()
        .state
        .delete_reminder(&actor, &req.name, fence)
        .await
        .map_err(|e| store_error(runtime, "deleting a reminder", &actor, fence, e))?;
    Ok(v1::DeleteReminderResponse { existed })
}

/// `ListReminders`.
pub async fn list(
    runtime: &Runtime,
    actor: ActorId,
) -> Result<v1::ListRemindersResponse, ActorError> {
    let rows = runtime
        .config()
        .state
        .list_reminders(&actor)
        .await
        .map_err(|e| store_error(runtime, "listing reminders", &actor, None, e))?;
    Ok(v1::ListRemindersResponse {
        reminders: rows.iter().map(to_info).collect(),
    })
}
