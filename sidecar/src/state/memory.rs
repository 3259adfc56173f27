//! The in-process store: the same epoch and batch semantics as the durable stores, nothing on
//! disk. For tests and the deterministic simulator, where many hosts share one process (one
//! `MemoryStateStore` shared by every host is one fleet's store).

use super::{Selection, StateError, StateStore, StateWrite, judge_epoch};
use crate::runtime::ActorId;
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

#[derive(Default)]
struct Actor {
    epoch: u64,
    entries: BTreeMap<String, Bytes>,
}

/// State held in memory.
#[derive(Default)]
pub struct MemoryStateStore {
    actors: Mutex<HashMap<ActorId, Actor>>,
    /// Reminders by actor and name, with the shard each is in (see `reminders::memory`).
    pub(crate) reminders: Mutex<crate::reminders::memory::Table>,
}

impl MemoryStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` only if `fence` (when given) is `actor`'s current epoch, holding the epoch lock
    /// throughout, so no newer epoch can be issued between the check and the write.
    pub(crate) fn fenced<R>(
        &self,
        actor: &ActorId,
        fence: Option<u64>,
        f: impl FnOnce() -> Result<R, StateError>,
    ) -> Result<R, StateError> {
        let actors = self.actors.lock().expect("state lock");
        if let Some(epoch) = fence {
            judge_epoch(actor, epoch, actors.get(actor).map_or(0, |a| a.epoch))?;
        }
        f()
    }
}

#[async_trait]
impl StateStore for MemoryStateStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn next_epoch(&self, actor: &ActorId) -> Result<u64, StateError> {
        let mut actors = self.actors.lock().expect("state lock");
        let a = actors.entry(actor.clone()).or_default();
        a.epoch += 1;
        Ok(a.epoch)
    }

    async fn read(
        &self,
        actor: &ActorId,
        epoch: u64,
        selection: &Selection,
    ) -> Result<Vec<(String, Option<Bytes>)>, StateError> {
        let actors = self.actors.lock().expect("state lock");
        let a = actors.get(actor);
        judge_epoch(actor, epoch, a.map_or(0, |a| a.epoch))?;
        let entries = &a.expect("judged current").entries;
        Ok(match selection {
            Selection::Keys(keys) => keys
                .iter()
                .map(|k| (k.clone(), entries.get(k).cloned()))
                .collect(),
            Selection::All => entries
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect(),
        })
    }

    async fn commit(
        &self,
        actor: &ActorId,
        epoch: u64,
        writes: &[StateWrite],
    ) -> Result<(), StateError> {
        let mut actors = self.actors.lock().expect("state lock");
        let current = actors.get(actor).map_or(0, |a| a.epoch);
        judge_epoch(actor, epoch, current)?;
        let a = actors.get_mut(actor).expect("judged current");
        for w in writes {
            match w {
                StateWrite::Put { key, value } => {
                    a.entries.insert(key.clone(), value.clone());
                }
                StateWrite::Delete { key } => {
                    a.entries.remove(key);
                }
            }
        }
        Ok(())
    }
}
