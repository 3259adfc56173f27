//! The fleet's state store in the simulation: the production in-memory store, recorded. Every
//! epoch it issues and every commit it judges goes into the history at the instant it happens,
//! so the checker can judge the store's fence (no commit with a stale epoch accepted) and the
//! output gate (no call acknowledged whose write was not stored).
//!
//! [`StateCheck::AcceptStale`] is the deliberately broken variant (checker tests only): it
//! commits every batch under the actor's newest epoch, whatever epoch the batch carries — a
//! store without the fence.

use super::world::{Ev, Shared};
use async_trait::async_trait;
use bytes::Bytes;
use sigx_sidecar::reminders::{ClaimRequest, ReminderRow, ReminderSpec, ReminderStore, Settlement};
use sigx_sidecar::runtime::ActorId;
use sigx_sidecar::state::memory::MemoryStateStore;
use sigx_sidecar::state::{Selection, StateError, StateStore, StateWrite};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Whether the store keeps its fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateCheck {
    /// The production store: a batch with a stale epoch writes nothing.
    #[default]
    Fenced,
    /// Broken: every batch is accepted under the newest epoch.
    AcceptStale,
}

/// The recorded store shared by every host of a run.
pub struct RecordedState {
    inner: MemoryStateStore,
    shared: Mutex<Weak<Shared>>,
    check: Mutex<StateCheck>,
    newest: Mutex<HashMap<ActorId, u64>>,
    /// Whether the store answers with its clock (true time).
    clock: std::sync::atomic::AtomicBool,
}

impl Default for RecordedState {
    fn default() -> Self {
        RecordedState {
            inner: MemoryStateStore::new(),
            shared: Mutex::new(Weak::new()),
            check: Mutex::new(StateCheck::Fenced),
            newest: Mutex::default(),
            clock: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl RecordedState {
    /// Records into `shared`'s history from now on, keeping (or breaking) the fence, with its
    /// own clock or (broken) without one.
    pub fn bind(&self, shared: &Arc<Shared>, check: StateCheck, clock: bool) {
        *self.shared.lock().unwrap() = Arc::downgrade(shared);
        *self.check.lock().unwrap() = check;
        self.clock.store(clock, std::sync::atomic::Ordering::SeqCst);
    }

    fn record(&self, ev: Ev) {
        if let Some(shared) = self.shared.lock().unwrap().upgrade() {
            shared.record_at(shared.now_ms(), ev);
        }
    }
}

/// The value a turn wrote: the sim app writes its call's payload (the call id) under `last`.
fn written(writes: &[StateWrite]) -> Option<String> {
    writes.iter().rev().find_map(|w| match w {
        StateWrite::Put { key, value } if key == "last" => {
            Some(String::from_utf8_lossy(value).into_owned())
        }
        _ => None,
    })
}

#[async_trait]
impl StateStore for RecordedState {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn next_epoch(&self, actor: &ActorId) -> Result<u64, StateError> {
        let epoch = self.inner.next_epoch(actor).await?;
        self.newest.lock().unwrap().insert(actor.clone(), epoch);
        self.record(Ev::EpochIssued {
            actor: actor.to_string(),
            epoch,
        });
        Ok(epoch)
    }

    async fn read(
        &self,
        actor: &ActorId,
        epoch: u64,
        selection: &Selection,
    ) -> Result<Vec<(String, Option<Bytes>)>, StateError> {
        self.inner.read(actor, epoch, selection).await
    }

    async fn commit(
        &self,
        actor: &ActorId,
        epoch: u64,
        writes: &[StateWrite],
    ) -> Result<(), StateError> {
        let under = match *self.check.lock().unwrap() {
            StateCheck::Fenced => epoch,
            StateCheck::AcceptStale => self
                .newest
                .lock()
                .unwrap()
                .get(actor)
                .copied()
                .unwrap_or(epoch),
        };
        let r = self.inner.commit(actor, under, writes).await;
        self.record(Ev::StateCommit {
            actor: actor.to_string(),
            epoch,
            value: written(writes),
            accepted: r.is_ok(),
        });
        r
    }
}

#[async_trait]
impl ReminderStore for RecordedState {
    async fn set_reminder(
        &self,
        actor: &ActorId,
        shard: u32,
        spec: &ReminderSpec,
        fence: Option<u64>,
    ) -> Result<(), StateError> {
        self.inner.set_reminder(actor, shard, spec, fence).await
    }

    async fn delete_reminder(
        &self,
        actor: &ActorId,
        name: &str,
        fence: Option<u64>,
    ) -> Result<bool, StateError> {
        self.inner.delete_reminder(actor, name, fence).await
    }

    async fn list_reminders(&self, actor: &ActorId) -> Result<Vec<ReminderRow>, StateError> {
        self.inner.list_reminders(actor).await
    }

    async fn claim_due(&self, req: &ClaimRequest<'_>) -> Result<Vec<ReminderRow>, StateError> {
        self.inner.claim_due(req).await
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<(), StateError> {
        self.inner.settle(settlements).await
    }

    async fn holds(&self, actor: &ActorId, name: &str, version: i64) -> Result<bool, StateError> {
        self.inner.holds(actor, name, version).await
    }

    /// The store is a server of its own (PostgreSQL's part): its clock is true time, whatever
    /// the hosts' wall clocks say.
    async fn clock_unix_ms(&self) -> Result<Option<i64>, StateError> {
        if !self.clock.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(None);
        }
        let shared = self.shared.lock().unwrap().upgrade();
        Ok(shared.map(|s| {
            let epoch = super::host::epoch()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as i64;
            epoch + s.now_ms() as i64
        }))
    }
}
