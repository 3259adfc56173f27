//! Reminders in the in-process store: the same claim and settle semantics as the durable
//! stores, for tests and the simulator (every host of a simulated fleet shares one table).

use super::{
    ClaimRequest, MAX_PER_ACTOR, ReminderRow, ReminderSpec, ReminderStore, Settle, Settlement,
};
use crate::runtime::ActorId;
use crate::state::StateError;
use crate::state::memory::MemoryStateStore;
use async_trait::async_trait;
use std::collections::BTreeMap;

/// The reminders of a memory store.
#[derive(Debug, Default)]
pub struct Table {
    rows: BTreeMap<(ActorId, String), (u32, ReminderRow)>,
    versions: i64,
}

impl Table {
    fn bump(&mut self) -> i64 {
        self.versions += 1;
        self.versions
    }
}

impl MemoryStateStore {
    fn set_unfenced(
        &self,
        actor: &ActorId,
        shard: u32,
        spec: &ReminderSpec,
    ) -> Result<(), StateError> {
        let mut t = self.reminders.lock().expect("reminders lock");
        let key = (actor.clone(), spec.name.clone());
        if !t.rows.contains_key(&key) {
            let held = t
                .rows
                .range((actor.clone(), String::new())..)
                .take_while(|((a, _), _)| a == actor)
                .count();
            if held >= MAX_PER_ACTOR {
                return Err(StateError::Invalid(format!(
                    "{actor} already holds {MAX_PER_ACTOR} reminders, the most one actor may \
                     hold; delete some or reuse names"
                )));
            }
        }
        let version = t.bump();
        t.rows.insert(
            key,
            (
                shard,
                ReminderRow {
                    actor: actor.clone(),
                    name: spec.name.clone(),
                    due_unix_ms: spec.due_unix_ms,
                    period_ms: spec.period_ms,
                    payload: spec.payload.clone(),
                    next_attempt_ms: spec.due_unix_ms,
                    attempts: 0,
                    version,
                    claimed_by: None,
                    claim_until_ms: 0,
                },
            ),
        );
        Ok(())
    }
}

#[async_trait]
impl ReminderStore for MemoryStateStore {
    async fn set_reminder(
        &self,
        actor: &ActorId,
        shard: u32,
        spec: &ReminderSpec,
        fence: Option<u64>,
    ) -> Result<(), StateError> {
        self.fenced(actor, fence, || self.set_unfenced(actor, shard, spec))
    }

    async fn delete_reminder(
        &self,
        actor: &ActorId,
        name: &str,
        fence: Option<u64>,
    ) -> Result<bool, StateError> {
        self.fenced(actor, fence, || {
            let mut t = self.reminders.lock().expect("reminders lock");
            Ok(t.rows.remove(&(actor.clone(), name.to_string())).is_some())
        })
    }

    async fn list_reminders(&self, actor: &ActorId) -> Result<Vec<ReminderRow>, StateError> {
        let t = self.reminders.lock().expect("reminders lock");
        Ok(t.rows
            .range((actor.clone(), String::new())..)
            .take_while(|((a, _), _)| a == actor)
            .map(|(_, (_, row))| row.clone())
            .collect())
    }

    async fn claim_due(&self, req: &ClaimRequest<'_>) -> Result<Vec<ReminderRow>, StateError> {
        let mut t = self.reminders.lock().expect("reminders lock");
        let mut due: Vec<(i64, (ActorId, String))> = t
            .rows
            .iter()
            .filter(|(_, (shard, row))| {
                req.shards.contains(shard)
                    && row.next_attempt_ms <= req.due_by_ms
                    && req.may_claim(row)
            })
            .map(|(k, (_, row))| (row.next_attempt_ms, k.clone()))
            .collect();
        due.sort();
        due.truncate(req.limit);
        let mut out = Vec::with_capacity(due.len());
        for (_, key) in due {
            let version = t.bump();
            let (_, row) = t.rows.get_mut(&key).expect("listed above");
            row.version = version;
            row.claimed_by = Some(req.claimer.to_string());
            row.claim_until_ms = req.claim_until_ms;
            out.push(row.clone());
        }
        Ok(out)
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<(), StateError> {
        let mut t = self.reminders.lock().expect("reminders lock");
        for s in settlements {
            let key = (s.actor.clone(), s.name.clone());
            if t.rows
                .get(&key)
                .is_none_or(|(_, row)| row.version != s.version)
            {
                continue;
            }
            let version = t.bump();
            let (_, row) = t.rows.get_mut(&key).expect("checked above");
            match &s.settle {
                Settle::Delete => {
                    t.rows.remove(&key);
                }
                Settle::Reschedule {
                    due_unix_ms,
                    next_attempt_ms,
                    attempts,
                } => {
                    row.due_unix_ms = *due_unix_ms;
                    row.next_attempt_ms = *next_attempt_ms;
                    row.attempts = *attempts;
                    row.version = version;
                    row.claimed_by = None;
                    row.claim_until_ms = 0;
                }
                Settle::Release => {
                    row.version = version;
                    row.claimed_by = None;
                    row.claim_until_ms = 0;
                }
            }
        }
        Ok(())
    }

    async fn holds(&self, actor: &ActorId, name: &str, version: i64) -> Result<bool, StateError> {
        let t = self.reminders.lock().expect("reminders lock");
        Ok(t.rows
            .get(&(actor.clone(), name.to_string()))
            .is_some_and(|(_, row)| row.version == version))
    }
}
