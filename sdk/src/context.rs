//! What a handler knows about the turn it runs: which actor, which activation, which method,
//! the payload, the deadline, and a client for calling other actors.

use crate::client::Client;
use crate::payload;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use sigx_proto::ActorError;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One turn as its handler sees it. Activation hooks get one too (with no method and an empty
/// payload); worker handlers get one with an empty activation id.
#[derive(Clone)]
pub struct Context {
    pub(crate) actor_type: Arc<str>,
    pub(crate) key: Arc<str>,
    pub(crate) activation_id: Arc<str>,
    pub(crate) method: Arc<str>,
    pub(crate) payload: Bytes,
    pub(crate) deadline: Option<Instant>,
    pub(crate) host_id: Arc<str>,
    pub(crate) client: Client,
    pub(crate) storage: crate::storage::Storage,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("actor", &format_args!("{}/{}", self.actor_type, self.key))
            .field("activation_id", &self.activation_id)
            .field("method", &self.method)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

impl Context {
    /// The actor's (or worker's) type name.
    pub fn actor_type(&self) -> &str {
        &self.actor_type
    }

    /// The actor's key within its type. For workers, whatever key the caller passed.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This activation's id: unique per activation, new after every deactivation, empty for
    /// workers. Store it with external state and check it on write to fence out a stale
    /// activation (a fencing token).
    pub fn activation_id(&self) -> &str {
        &self.activation_id
    }

    /// The id of the host (sidecar) running this turn.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// The method being invoked; empty in activation, deactivation and timer hooks.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The caller's payload, as sent (in a timer hook: the timer's payload).
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The payload decoded as JSON; an empty payload reads as `null` (so `Option<T>` accepts a
    /// call without payload). A payload that does not decode is the caller's mistake: `invalid`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ActorError> {
        payload::from_json(&self.payload).map_err(|e| {
            ActorError::invalid(format!(
                "the payload of {}/{}.{} is not the JSON it expects: {e}",
                self.actor_type, self.key, self.method
            ))
        })
    }

    /// The payload decoded as a protobuf message; `invalid` when it does not decode.
    pub fn proto<M: prost::Message + Default>(&self) -> Result<M, ActorError> {
        payload::from_proto(&self.payload).map_err(|e| {
            ActorError::invalid(format!(
                "the payload of {}/{}.{} is not the protobuf message it expects: {e}",
                self.actor_type, self.key, self.method
            ))
        })
    }

    /// When the turn must be over: its not-after (the caller's deadline, capped by the host's
    /// lease), or, from an older sidecar, the caller's deadline. The SDK cancels the handler
    /// there (its answer is then `timeout`, never a result), so long handlers should check it
    /// and chunk their work. `None` = no deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time left before the deadline (zero once it passed); `None` = no deadline.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The W3C `traceparent` of this turn, when the call that caused it was traced: make your own
    /// spans children of it. Calls made through [`Context::client`] carry it already.
    pub fn traceparent(&self) -> Option<&str> {
        self.client.trace().map(|t| t.traceparent.as_str())
    }

    /// This turn's whole W3C trace context (`traceparent` and `tracestate`), when the call that
    /// caused it was traced. With the sidecar exporting spans it names the sidecar's `sigx.turn`
    /// span; with export off, the caller's own context, passed through unchanged.
    pub fn trace(&self) -> Option<&crate::proto::TraceContext> {
        self.client.trace()
    }

    /// A client for calling other actors through the same sidecar.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The actor's durable state: reads now, writes committed with the turn's result.
    pub fn storage(&self) -> &crate::storage::Storage {
        &self.storage
    }

    /// The activation's epoch (0 for workers): strictly greater than every earlier
    /// activation's of this actor, fleet-wide. Use it as the fencing token for external
    /// systems: store it with what you write, refuse writes with a lower one.
    pub fn epoch(&self) -> u64 {
        self.storage.epoch
    }

    /// This actor, as a handle: set its own reminders (`ctx.this_actor().set_reminder(..)`)
    /// or hand it to others. Its reminder changes carry the turn's epoch, so once a newer
    /// activation of the actor exists the store refuses them (`stale-epoch`, nothing changed):
    /// an activation that outlived its lease cannot rearrange its successor's reminders.
    pub fn this_actor(&self) -> crate::ActorHandle {
        self.client
            .actor(&*self.actor_type, &*self.key)
            .fenced(self.epoch())
    }
}

/// A turn of a stateful actor: the [`Context`] plus the activation's state.
///
/// The state lives in memory for as long as the activation does: it is created by the type's
/// activation function on the `Activate` turn and dropped after the `Deactivate` turn (or when
/// the connection to the sidecar is lost, because the sidecar drops every activation then).
/// Turns of one activation arrive one at a time unless the type is reentrant, so the lock is
/// uncontended for ordinary types; for reentrant ones it is what keeps state consistent.
pub struct ActorContext<S> {
    pub(crate) ctx: Context,
    pub(crate) state: Arc<tokio::sync::Mutex<S>>,
}

impl<S> Clone for ActorContext<S> {
    fn clone(&self) -> Self {
        ActorContext {
            ctx: self.ctx.clone(),
            state: self.state.clone(),
        }
    }
}

impl<S> std::fmt::Debug for ActorContext<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ctx.fmt(f)
    }
}

impl<S> std::ops::Deref for ActorContext<S> {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.ctx
    }
}

impl<S> ActorContext<S> {
    /// Locks the activation's state for this turn.
    pub async fn state(&self) -> tokio::sync::MutexGuard<'_, S> {
        self.state.lock().await
    }

    /// The shared state itself, e.g. to move into a spawned task.
    pub fn state_handle(&self) -> Arc<tokio::sync::Mutex<S>> {
        self.state.clone()
    }
}
