//! Reminders in the SQLite state database: table `sigx_reminders`, keyed by (actor, name), with
//! an index on (shard, next attempt) so an owner reads only the rows due in its shards.
//!
//! An owner's poll reads outside any write transaction (most polls find nothing to claim and
//! take no lock); sets, claims and settles are group-committed writes (`state::group_commit`)
//! whose updates each compare the row's version, so two processes claiming one row cannot both
//! win.

use super::{
    ClaimRequest, MAX_PER_ACTOR, ReminderRow, ReminderSpec, ReminderStore, Settle, Settlement,
};
use crate::runtime::ActorId;
use crate::state::sqlite::{SqliteStateStore, current_epoch, sql};
use crate::state::{StateError, judge_epoch};
use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Row, params};

const COLUMNS: &str = "actor_type, actor_key, name, due_ms, period_ms, payload, next_ms, \
                       attempts, version, claimed_by, claim_until_ms";

/// A fresh row version: random, so a row deleted and set again never repeats a version that a
/// stale claim still holds.
pub(crate) fn new_version() -> i64 {
    (rand::random::<u64>() >> 1) as i64
}

fn row_of(r: &Row<'_>) -> rusqlite::Result<ReminderRow> {
    Ok(ReminderRow {
        actor: ActorId::new(r.get::<_, String>(0)?, r.get::<_, String>(1)?),
        name: r.get(2)?,
        due_unix_ms: r.get(3)?,
        period_ms: r.get::<_, i64>(4)? as u64,
        payload: Bytes::from(r.get::<_, Vec<u8>>(5)?),
        next_attempt_ms: r.get(6)?,
        attempts: r.get::<_, i64>(7)? as u32,
        version: r.get(8)?,
        claimed_by: r.get(9)?,
        claim_until_ms: r.get(10)?,
    })
}

#[async_trait]
impl ReminderStore for SqliteStateStore {
    async fn set_reminder(
        &self,
        actor: &ActorId,
        shard: u32,
        spec: &ReminderSpec,
        fence: Option<u64>,
    ) -> Result<(), StateError> {
        let (actor, spec) = (actor.clone(), spec.clone());
        self.write(move |tx| {
            if let Some(epoch) = fence {
                judge_epoch(&actor, epoch, current_epoch(tx, &actor)?)?;
            }
            let (t, k) = (&*actor.actor_type, &*actor.key);
            let (held, exists): (i64, i64) = tx
                .query_row(
                    "SELECT COUNT(*), COALESCE(SUM(name = ?3), 0) FROM sigx_reminders
                     WHERE actor_type = ?1 AND actor_key = ?2",
                    params![t, k, &spec.name],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map_err(sql)?;
            if exists == 0 && held as usize >= MAX_PER_ACTOR {
                return Err(StateError::Invalid(format!(
                    "{actor} already holds {MAX_PER_ACTOR} reminders, the most one actor may \
                     hold; delete some or reuse names"
                )));
            }
            tx.execute(
                "INSERT INTO sigx_reminders (actor_type, actor_key, name, shard, due_ms, period_ms,
                     payload, next_ms, attempts, version, claimed_by, claim_until_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?5, 0, ?8, NULL, 0)
                 ON CONFLICT (actor_type, actor_key, name) DO UPDATE SET
                     shard = excluded.shard, due_ms = excluded.due_ms,
                     period_ms = excluded.period_ms, payload = excluded.payload,
                     next_ms = excluded.next_ms, attempts = 0, version = excluded.version,
                     claimed_by = NULL, claim_until_ms = 0",
                params![
                    t,
                    k,
                    &spec.name,
                    shard,
                    spec.due_unix_ms,
                    spec.period_ms as i64,
                    &spec.payload[..],
                    new_version()
                ],
            )
            .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn delete_reminder(
        &self,
        actor: &ActorId,
        name: &str,
        fence: Option<u64>,
    ) -> Result<bool, StateError> {
        let (actor, name) = (actor.clone(), name.to_string());
        self.write(move |conn| {
            if let Some(epoch) = fence {
                judge_epoch(&actor, epoch, current_epoch(conn, &actor)?)?;
            }
            let n = conn
                .execute(
                    "DELETE FROM sigx_reminders
                     WHERE actor_type = ?1 AND actor_key = ?2 AND name = ?3",
                    params![&*actor.actor_type, &*actor.key, &name],
                )
                .map_err(sql)?;
            Ok(n > 0)
        })
        .await
    }

    async fn list_reminders(&self, actor: &ActorId) -> Result<Vec<ReminderRow>, StateError> {
        let actor = actor.clone();
        self.blocking(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM sigx_reminders
                     WHERE actor_type = ?1 AND actor_key = ?2 ORDER BY name"
                ))
                .map_err(sql)?;
            let rows = stmt
                .query_map(params![&*actor.actor_type, &*actor.key], row_of)
                .map_err(sql)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql)
        })
        .await
    }

    async fn claim_due(&self, req: &ClaimRequest<'_>) -> Result<Vec<ReminderRow>, StateError> {
        if req.shards.is_empty() || req.limit == 0 {
            return Ok(Vec::new());
        }
        let shards = req
            .shards
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let (due_by, limit) = (req.due_by_ms, req.limit);
        // Candidates first, without a write lock; the filter on claims is the request's own.
        let candidates = self
            .blocking(move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM sigx_reminders
                         WHERE shard IN ({shards}) AND next_ms <= ?1
                         ORDER BY next_ms LIMIT ?2"
                    ))
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![due_by, limit as i64 * 2], row_of)
                    .map_err(sql)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql)
            })
            .await?;
        let mut wanted: Vec<ReminderRow> = candidates
            .into_iter()
            .filter(|r| req.may_claim(r))
            .take(limit)
            .collect();
        if wanted.is_empty() {
            return Ok(wanted);
        }
        let (claimer, until) = (req.claimer.to_string(), req.claim_until_ms);
        self.write(move |tx| {
            let mut won = Vec::with_capacity(wanted.len());
            {
                let mut claim = tx
                    .prepare_cached(
                        "UPDATE sigx_reminders SET claimed_by = ?1, claim_until_ms = ?2,
                             version = ?3
                         WHERE actor_type = ?4 AND actor_key = ?5 AND name = ?6
                             AND version = ?7",
                    )
                    .map_err(sql)?;
                for mut row in wanted.drain(..) {
                    let version = new_version();
                    let n = claim
                        .execute(params![
                            &claimer,
                            until,
                            version,
                            &*row.actor.actor_type,
                            &*row.actor.key,
                            &row.name,
                            row.version
                        ])
                        .map_err(sql)?;
                    if n == 1 {
                        row.version = version;
                        row.claimed_by = Some(claimer.clone());
                        row.claim_until_ms = until;
                        won.push(row);
                    }
                }
            }
            Ok(won)
        })
        .await
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<(), StateError> {
        if settlements.is_empty() {
            return Ok(());
        }
        let settlements = settlements.to_vec();
        self.write(move |tx| {
            {
                let mut delete = tx
                    .prepare_cached(
                        "DELETE FROM sigx_reminders
                         WHERE actor_type = ?1 AND actor_key = ?2 AND name = ?3 AND version = ?4",
                    )
                    .map_err(sql)?;
                let mut reschedule = tx
                    .prepare_cached(
                        "UPDATE sigx_reminders SET due_ms = ?5, next_ms = ?6, attempts = ?7,
                             version = ?8, claimed_by = NULL, claim_until_ms = 0
                         WHERE actor_type = ?1 AND actor_key = ?2 AND name = ?3 AND version = ?4",
                    )
                    .map_err(sql)?;
                let mut release = tx
                    .prepare_cached(
                        "UPDATE sigx_reminders SET version = ?5, claimed_by = NULL,
                             claim_until_ms = 0
                         WHERE actor_type = ?1 AND actor_key = ?2 AND name = ?3 AND version = ?4",
                    )
                    .map_err(sql)?;
                for s in &settlements {
                    let (t, k) = (&*s.actor.actor_type, &*s.actor.key);
                    match &s.settle {
                        Settle::Delete => delete.execute(params![t, k, &s.name, s.version]),
                        Settle::Reschedule {
                            due_unix_ms,
                            next_attempt_ms,
                            attempts,
                        } => reschedule.execute(params![
                            t,
                            k,
                            &s.name,
                            s.version,
                            due_unix_ms,
                            next_attempt_ms,
                            *attempts as i64,
                            new_version()
                        ]),
                        Settle::Release => {
                            release.execute(params![t, k, &s.name, s.version, new_version()])
                        }
                    }
                    .map_err(sql)?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn holds(&self, actor: &ActorId, name: &str, version: i64) -> Result<bool, StateError> {
        let (actor, name) = (actor.clone(), name.to_string());
        self.blocking(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT 1 FROM sigx_reminders
                     WHERE actor_type = ?1 AND actor_key = ?2 AND name = ?3 AND version = ?4",
                )
                .map_err(sql)?;
            stmt.exists(params![&*actor.actor_type, &*actor.key, &name, version])
                .map_err(sql)
        })
        .await
    }
}
