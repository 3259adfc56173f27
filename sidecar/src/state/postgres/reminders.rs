//! Reminders in PostgreSQL: table `sigx_reminders`, keyed by (actor, name), with an index on
//! (shard, next attempt). A poll reads candidates without locks; a batch of claims (or of
//! settles of one kind) is one statement over `unnest`ed arrays whose every row compares the
//! stored version, so a batch costs one round trip whatever its size and two hosts claiming one
//! row cannot both win.

use super::PostgresStateStore;
use crate::reminders::sqlite::new_version;
use crate::reminders::{
    ClaimRequest, MAX_PER_ACTOR, ReminderRow, ReminderSpec, ReminderStore, Settle, Settlement,
};
use crate::runtime::ActorId;
use crate::state::{StateError, judge_epoch};
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::HashMap;

const COLUMNS: &str = "actor_type, actor_key, name, due_ms, period_ms, payload, next_ms, \
                       attempts, version, claimed_by, claim_until_ms";

fn row_of(r: &tokio_postgres::Row) -> ReminderRow {
    ReminderRow {
        actor: ActorId::new(r.get::<_, String>(0), r.get::<_, String>(1)),
        name: r.get(2),
        due_unix_ms: r.get(3),
        period_ms: r.get::<_, i64>(4) as u64,
        payload: Bytes::from(r.get::<_, Vec<u8>>(5)),
        next_attempt_ms: r.get(6),
        attempts: r.get::<_, i32>(7) as u32,
        version: r.get(8),
        claimed_by: r.get(9),
        claim_until_ms: r.get(10),
    }
}

impl PostgresStateStore {
    async fn conn(&self) -> Result<super::Pooled, StateError> {
        self.pool
            .get()
            .await
            .map_err(|e| self.unavailable("cannot connect to PostgreSQL", &e))
    }

    /// A connection for a reminder change. With a `fence`, inside a transaction holding the
    /// actor's epoch row (`FOR UPDATE`) judged current, so no newer activation can be issued
    /// an epoch before the change commits ([`Self::commit_fenced`]); a refused fence rolls back.
    async fn fenced_conn(
        &self,
        actor: &ActorId,
        fence: Option<u64>,
    ) -> Result<super::Pooled, StateError> {
        let Some(epoch) = fence else {
            return self.conn().await;
        };
        let mut c = self.begin("BEGIN").await?;
        let current = self.current_epoch(&c, actor, true).await?;
        if let Err(refused) = judge_epoch(actor, epoch, current) {
            let _ = self.end(&mut c, "ROLLBACK").await;
            return Err(refused);
        }
        Ok(c)
    }

    /// Commits what [`Self::fenced_conn`] opened (nothing to do without a fence).
    async fn commit_fenced(&self, c: &mut super::Pooled) -> Result<(), StateError> {
        if !c.in_tx {
            return Ok(());
        }
        self.end(c, "COMMIT").await.map_err(|e| {
            self.unavailable(
                "the reminder change's commit answer was lost (it may or may not be stored; \
                 ListReminders tells)",
                &e,
            )
        })
    }
}

#[async_trait]
impl ReminderStore for PostgresStateStore {
    async fn set_reminder(
        &self,
        actor: &ActorId,
        shard: u32,
        spec: &ReminderSpec,
        fence: Option<u64>,
    ) -> Result<(), StateError> {
        self.timed("setting a reminder", async {
            let (t, k) = (&*actor.actor_type, &*actor.key);
            let failed = |e| self.unavailable("cannot set the reminder", &e);
            let mut c = self.fenced_conn(actor, fence).await?;
            // Counted outside the write: the bound is approximate under concurrent sets of new
            // names for one actor, which is all a guard against runaway growth needs.
            let row = c
                .client
                .query_one(
                    "SELECT COUNT(*), COUNT(*) FILTER (WHERE name = $3) FROM sigx_reminders
                     WHERE actor_type = $1 AND actor_key = $2",
                    &[&t, &k, &spec.name],
                )
                .await
                .map_err(failed)?;
            let (held, exists): (i64, i64) = (row.get(0), row.get(1));
            if exists == 0 && held as usize >= MAX_PER_ACTOR {
                return Err(StateError::Invalid(format!(
                    "{actor} already holds {MAX_PER_ACTOR} reminders, the most one actor may \
                     hold; delete some or reuse names"
                )));
            }
            c.client
                .execute(
                    "INSERT INTO sigx_reminders (actor_type, actor_key, name, shard, due_ms,
                         period_ms, payload, next_ms, attempts, version, claimed_by, claim_until_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $5, 0, $8, NULL, 0)
                     ON CONFLICT (actor_type, actor_key, name) DO UPDATE SET
                         shard = excluded.shard, due_ms = excluded.due_ms,
                         period_ms = excluded.period_ms, payload = excluded.payload,
                         next_ms = excluded.next_ms, attempts = 0, version = excluded.version,
                         claimed_by = NULL, claim_until_ms = 0",
                    &[
                        &t,
                        &k,
                        &spec.name,
                        &(shard as i32),
                        &spec.due_unix_ms,
                        &(spec.period_ms as i64),
                        &&spec.payload[..],
                        &new_version(),
                    ],
                )
                .await
                .map_err(failed)?;
            self.commit_fenced(&mut c).await
        })
        .await
    }

    async fn delete_reminder(
        &self,
        actor: &ActorId,
        name: &str,
        fence: Option<u64>,
    ) -> Result<bool, StateError> {
        self.timed("deleting a reminder", async {
            let mut c = self.fenced_conn(actor, fence).await?;
            let n = c
                .client
                .execute(
                    "DELETE FROM sigx_reminders
                     WHERE actor_type = $1 AND actor_key = $2 AND name = $3",
                    &[&&*actor.actor_type, &&*actor.key, &name],
                )
                .await
                .map_err(|e| self.unavailable("cannot delete the reminder", &e))?;
            self.commit_fenced(&mut c).await?;
            Ok(n > 0)
        })
        .await
    }

    async fn list_reminders(&self, actor: &ActorId) -> Result<Vec<ReminderRow>, StateError> {
        self.timed("listing reminders", async {
            let c = self.conn().await?;
            let rows = c
                .client
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM sigx_reminders
                         WHERE actor_type = $1 AND actor_key = $2 ORDER BY name"
                    ),
                    &[&&*actor.actor_type, &&*actor.key],
                )
                .await
                .map_err(|e| self.unavailable("cannot list reminders", &e))?;
            Ok(rows.iter().map(row_of).collect())
        })
        .await
    }

    async fn claim_due(&self, req: &ClaimRequest<'_>) -> Result<Vec<ReminderRow>, StateError> {
        if req.shards.is_empty() || req.limit == 0 {
            return Ok(Vec::new());
        }
        self.timed("claiming due reminders", async {
            let failed = |e| self.unavailable("cannot claim due reminders", &e);
            let c = self.conn().await?;
            let shards: Vec<i32> = req.shards.iter().map(|&s| s as i32).collect();
            let rows = c
                .client
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM sigx_reminders
                         WHERE shard = ANY($1) AND next_ms <= $2
                         ORDER BY next_ms LIMIT $3"
                    ),
                    &[&shards, &req.due_by_ms, &(req.limit as i64 * 2)],
                )
                .await
                .map_err(failed)?;
            let wanted: Vec<ReminderRow> = rows
                .iter()
                .map(row_of)
                .filter(|r| req.may_claim(r))
                .take(req.limit)
                .collect();
            if wanted.is_empty() {
                return Ok(wanted);
            }
            let mut by_key: HashMap<(String, String, String), (i64, ReminderRow)> = HashMap::new();
            let (mut ts, mut ks, mut ns, mut vs, mut nvs) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for row in wanted {
                let nv = new_version();
                ts.push(row.actor.actor_type.to_string());
                ks.push(row.actor.key.to_string());
                ns.push(row.name.clone());
                vs.push(row.version);
                nvs.push(nv);
                by_key.insert(
                    (
                        row.actor.actor_type.to_string(),
                        row.actor.key.to_string(),
                        row.name.clone(),
                    ),
                    (nv, row),
                );
            }
            let won = c
                .client
                .query(
                    "UPDATE sigx_reminders r SET claimed_by = $1, claim_until_ms = $2,
                         version = c.nv
                     FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[])
                         AS c(t, k, n, v, nv)
                     WHERE r.actor_type = c.t AND r.actor_key = c.k AND r.name = c.n
                         AND r.version = c.v
                     RETURNING r.actor_type, r.actor_key, r.name",
                    &[&req.claimer, &req.claim_until_ms, &ts, &ks, &ns, &vs, &nvs],
                )
                .await
                .map_err(failed)?;
            let mut out = Vec::with_capacity(won.len());
            for r in won {
                let key = (r.get::<_, String>(0), r.get::<_, String>(1), r.get(2));
                if let Some((nv, mut row)) = by_key.remove(&key) {
                    row.version = nv;
                    row.claimed_by = Some(req.claimer.to_string());
                    row.claim_until_ms = req.claim_until_ms;
                    out.push(row);
                }
            }
            out.sort_by_key(|r| r.next_attempt_ms);
            Ok(out)
        })
        .await
    }

    /// The server's clock (`clock_timestamp()`, the time of the statement, not of a
    /// transaction): the one clock every host of a PostgreSQL fleet shares.
    async fn clock_unix_ms(&self) -> Result<Option<i64>, StateError> {
        self.timed("reading the server's clock", async {
            let c = self.conn().await?;
            let row = c
                .client
                .query_one(
                    "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
                    &[],
                )
                .await
                .map_err(|e| self.unavailable("cannot read the server's clock", &e))?;
            Ok(Some(row.get::<_, i64>(0)))
        })
        .await
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<(), StateError> {
        if settlements.is_empty() {
            return Ok(());
        }
        self.timed("settling reminders", async {
            let failed = |e| self.unavailable("cannot settle delivered reminders", &e);
            let c = self.conn().await?;
            #[derive(Default)]
            struct Cols {
                t: Vec<String>,
                k: Vec<String>,
                n: Vec<String>,
                v: Vec<i64>,
                due: Vec<i64>,
                next: Vec<i64>,
                attempts: Vec<i32>,
                nv: Vec<i64>,
            }
            let (mut del, mut resched, mut rel) =
                (Cols::default(), Cols::default(), Cols::default());
            for s in settlements {
                let cols = match s.settle {
                    Settle::Delete => &mut del,
                    Settle::Reschedule { .. } => &mut resched,
                    Settle::Release => &mut rel,
                };
                cols.t.push(s.actor.actor_type.to_string());
                cols.k.push(s.actor.key.to_string());
                cols.n.push(s.name.clone());
                cols.v.push(s.version);
                cols.nv.push(new_version());
                if let Settle::Reschedule {
                    due_unix_ms,
                    next_attempt_ms,
                    attempts,
                } = s.settle
                {
                    cols.due.push(due_unix_ms);
                    cols.next.push(next_attempt_ms);
                    cols.attempts.push(attempts as i32);
                }
            }
            if !del.t.is_empty() {
                c.client
                    .execute(
                        "DELETE FROM sigx_reminders r
                         USING unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
                             AS c(t, k, n, v)
                         WHERE r.actor_type = c.t AND r.actor_key = c.k AND r.name = c.n
                             AND r.version = c.v",
                        &[&del.t, &del.k, &del.n, &del.v],
                    )
                    .await
                    .map_err(failed)?;
            }
            if !resched.t.is_empty() {
                c.client
                    .execute(
                        "UPDATE sigx_reminders r SET due_ms = c.d, next_ms = c.nx,
                             attempts = c.a, version = c.nv, claimed_by = NULL, claim_until_ms = 0
                         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[],
                             $5::bigint[], $6::bigint[], $7::int[], $8::bigint[])
                             AS c(t, k, n, v, d, nx, a, nv)
                         WHERE r.actor_type = c.t AND r.actor_key = c.k AND r.name = c.n
                             AND r.version = c.v",
                        &[
                            &resched.t,
                            &resched.k,
                            &resched.n,
                            &resched.v,
                            &resched.due,
                            &resched.next,
                            &resched.attempts,
                            &resched.nv,
                        ],
                    )
                    .await
                    .map_err(failed)?;
            }
            if !rel.t.is_empty() {
                c.client
                    .execute(
                        "UPDATE sigx_reminders r SET version = c.nv, claimed_by = NULL,
                             claim_until_ms = 0
                         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[],
                             $5::bigint[]) AS c(t, k, n, v, nv)
                         WHERE r.actor_type = c.t AND r.actor_key = c.k AND r.name = c.n
                             AND r.version = c.v",
                        &[&rel.t, &rel.k, &rel.n, &rel.v, &rel.nv],
                    )
                    .await
                    .map_err(failed)?;
            }
            Ok(())
        })
        .await
    }

    async fn holds(&self, actor: &ActorId, name: &str, version: i64) -> Result<bool, StateError> {
        self.timed("checking a claim", async {
            let c = self.conn().await?;
            let row = c
                .client
                .query_opt(
                    "SELECT 1 FROM sigx_reminders
                     WHERE actor_type = $1 AND actor_key = $2 AND name = $3 AND version = $4",
                    &[&&*actor.actor_type, &&*actor.key, &name, &version],
                )
                .await
                .map_err(|e| self.unavailable("cannot check a reminder claim", &e))?;
            Ok(row.is_some())
        })
        .await
    }
}
