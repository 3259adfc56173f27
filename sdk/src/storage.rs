//! Durable actor state from inside a turn (DESIGN.md §11): `ctx.storage()`.
//!
//! Reads go to the sidecar (and its state store) under the turn's activation and epoch; writes are
//! collected during the turn and travel with its result, committed by the sidecar as one atomic
//! batch before the caller sees the answer. Reads see the turn's own writes (and, through the store,
//! every earlier turn's). A turn that fails writes nothing. If the store refuses the batch (a newer
//! activation of the actor exists: `stale-epoch`), the caller gets that error and the activation is
//! dropped, so an instance holding refused writes never runs another turn.

use crate::client::Client;
use crate::payload;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sigx_proto::{ActorError, v1};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A pending write of this turn.
#[derive(Debug, Clone)]
enum Pending {
    Put(Bytes),
    Delete,
}

/// The turn's pending writes, in order, and the latest per key (for read-your-writes).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    order: Vec<(String, Pending)>,
    latest: BTreeMap<String, Pending>,
}

impl Batch {
    fn push(&mut self, key: String, w: Pending) {
        self.latest.insert(key.clone(), w.clone());
        self.order.push((key, w));
    }

    /// The batch in wire form.
    pub(crate) fn into_writes(self) -> Vec<v1::StateWrite> {
        self.order
            .into_iter()
            .map(|(key, w)| v1::StateWrite {
                key,
                op: Some(match w {
                    Pending::Put(v) => v1::state_write::Op::Put(v),
                    Pending::Delete => v1::state_write::Op::Delete(true),
                }),
            })
            .collect()
    }
}

/// The actor's durable key/value state, as one turn sees it.
#[derive(Clone)]
pub struct Storage {
    pub(crate) client: Client,
    pub(crate) actor: v1::ActorRef,
    pub(crate) activation_id: Arc<str>,
    pub(crate) epoch: u64,
    pub(crate) batch: Arc<Mutex<Batch>>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field(
                "actor",
                &format_args!("{}/{}", self.actor.actor_type, self.actor.key),
            )
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl Storage {
    fn no_state(&self) -> Result<(), ActorError> {
        if self.epoch == 0 {
            return Err(ActorError::invalid(format!(
                "{} has no durable state: workers (and sidecars older than state) give turns no \
                 epoch; keep state in an actor type",
                self.actor.actor_type
            )));
        }
        Ok(())
    }

    /// The activation's epoch: its fencing token for systems outside sigx (store it with what
    /// you write there; refuse a write whose epoch is lower than the one stored).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    async fn read(&self, keys: Vec<String>, all: bool) -> Result<Vec<v1::StateEntry>, ActorError> {
        self.no_state()?;
        let mut raw = self.client.raw();
        raw.read_state(v1::ReadStateRequest {
            actor: Some(self.actor.clone()),
            activation_id: self.activation_id.to_string(),
            epoch: self.epoch,
            keys,
            all,
        })
        .await
        .map(|r| r.into_inner().entries)
        .map_err(|s| ActorError::from_status(&s))
    }

    /// The raw value of `key`: this turn's own pending write if there is one, else the store's.
    pub async fn get_bytes(&self, key: &str) -> Result<Option<Bytes>, ActorError> {
        if let Some(w) = self.batch.lock().unwrap().latest.get(key) {
            return Ok(match w {
                Pending::Put(v) => Some(v.clone()),
                Pending::Delete => None,
            });
        }
        let entries = self.read(vec![key.to_string()], false).await?;
        Ok(entries
            .into_iter()
            .next()
            .filter(|e| e.found)
            .map(|e| e.value))
    }

    /// The value of `key` decoded from JSON; `None` when absent.
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ActorError> {
        match self.get_bytes(key).await? {
            None => Ok(None),
            Some(bytes) => payload::from_json(&bytes).map(Some).map_err(|e| {
                ActorError::app(format!(
                    "state key {key:?} of {}/{} does not hold the JSON this code expects: {e}",
                    self.actor.actor_type, self.actor.key
                ))
            }),
        }
    }

    /// Every entry of the actor, in key order, with this turn's pending writes applied.
    pub async fn list(&self) -> Result<Vec<(String, Bytes)>, ActorError> {
        let mut all: BTreeMap<String, Bytes> = self
            .read(Vec::new(), true)
            .await?
            .into_iter()
            .filter(|e| e.found)
            .map(|e| (e.key, e.value))
            .collect();
        for (k, w) in &self.batch.lock().unwrap().latest {
            match w {
                Pending::Put(v) => {
                    all.insert(k.clone(), v.clone());
                }
                Pending::Delete => {
                    all.remove(k);
                }
            }
        }
        Ok(all.into_iter().collect())
    }

    /// Sets `key` to `value` (raw bytes) when the turn succeeds.
    pub fn put_bytes(&self, key: impl Into<String>, value: impl Into<Bytes>) {
        self.batch
            .lock()
            .unwrap()
            .push(key.into(), Pending::Put(value.into()));
    }

    /// Sets `key` to `value` encoded as JSON when the turn succeeds.
    pub fn put<T: Serialize + ?Sized>(
        &self,
        key: impl Into<String>,
        value: &T,
    ) -> Result<(), ActorError> {
        let bytes = payload::json(value)?;
        self.put_bytes(key, bytes);
        Ok(())
    }

    /// Removes `key` when the turn succeeds.
    pub fn delete(&self, key: impl Into<String>) {
        self.batch.lock().unwrap().push(key.into(), Pending::Delete);
    }
}
