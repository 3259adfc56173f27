//! Durable reminders (DESIGN.md §11): per actor, named, a due time and an optional period; a due
//! reminder is a `Reminder` turn on its actor, wherever it lives, activating it if needed, at
//! least once.
//!
//! Reminders live in the state store, beside the state they usually act on. Each belongs to one
//! of [`SHARDS`] shards by its actor's hash, and each shard is owned by rendezvous hashing over the
//! active stateful hosts of the view (the seed's `shardedReminders`): when a host joins or leaves,
//! only the shards it wins or held move. An owner never scans: it asks the store for the rows of
//! its shards due within a short look-ahead, through an index on (shard, next attempt) (the
//! seed's indexed provider), so a million sleeping reminders cost nothing until they are due.
//!
//! Two hosts may both believe they own a shard while their views disagree, and a host that owned
//! one may still hold rows it claimed a moment ago. A row is therefore **claimed** before it is
//! delivered: one compare-and-set on its version names the claiming host. A claim is honoured
//! while its holder is in the view and the claim has not lapsed; the holder delivers what it
//! claimed even after the shard moved (so a handoff refires nothing), and a host that vanished
//! from the view loses its claims at once, so the new owner delivers them within the membership
//! TTL of the crash. After the turn, the holder **settles** the row — deletes a one-shot, moves a
//! periodic one to its next due time, or schedules a retry — again only if the row's version is
//! still its claim's (a reminder set again meanwhile is a new reminder, untouched).

pub mod api;
pub mod memory;
pub mod ownership;
pub mod scheduler;
pub mod sqlite;
pub mod store_time;
// The PostgreSQL impl lives in `state::postgres::reminders`, beside the pool it uses.

use crate::directory::hash::Fnv1a;
use crate::runtime::ActorId;
use crate::state::StateError;
use async_trait::async_trait;
use bytes::Bytes;
use prost::Message;
use sigx_proto::{ActorError, v1};

pub use scheduler::{Ownership, OwnershipSource, ReminderCounters, SchedulerConfig};

/// Number of reminder shards (wire contract: every host must agree, and rows store their shard).
pub const SHARDS: u32 = 256;
/// The longest reminder name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// The largest reminder payload, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// The shortest period of a periodic reminder, in milliseconds.
pub const MIN_PERIOD_MS: u64 = 100;
/// The latest due time a reminder may be set for: the last millisecond of the year 9999.
pub const MAX_DUE_UNIX_MS: i64 = 253_402_300_799_999;
/// The longest period of a periodic reminder: 100 years (36,525 days).
pub const MAX_PERIOD_MS: u64 = 36_525 * 24 * 3_600 * 1_000;
/// The most reminders one actor may hold.
pub const MAX_PER_ACTOR: usize = 1000;
/// The method name a reminder delivery travels under between sidecars (see mesh.proto).
pub const REMINDER_METHOD: &str = "$reminder";

/// The shard of an actor's reminders: its directory hash, mod [`SHARDS`].
pub fn shard_of(actor: &ActorId) -> u32 {
    (crate::directory::hash::actor_hash(&actor.actor_type, &actor.key) % SHARDS as u64) as u32
}

/// The rendezvous weight of `host` for reminder shard `shard` (salted, so reminder shards and
/// directory partitions of one number do not land on one host by construction).
fn weight(shard: u32, host: &str) -> u64 {
    let mut h = Fnv1a::default();
    h.write(b"sigx-reminders\0");
    h.write(&shard.to_be_bytes());
    h.write(host.as_bytes());
    h.finish()
}

/// The shards `me` owns among the `eligible` host ids: those for which it has the highest
/// weight (ties to the smaller id). Empty when `me` is not eligible.
pub fn owned_shards(eligible: &[&str], me: &str) -> Vec<u32> {
    if !eligible.contains(&me) {
        return Vec::new();
    }
    (0..SHARDS)
        .filter(|&s| {
            let mine = weight(s, me);
            eligible.iter().all(|&other| {
                other == me || {
                    let w = weight(s, other);
                    mine > w || (mine == w && me < other)
                }
            })
        })
        .collect()
}

/// What an app asks to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderSpec {
    /// Unique per actor.
    pub name: String,
    /// The first due time, Unix ms.
    pub due_unix_ms: i64,
    /// 0 = one-shot.
    pub period_ms: u64,
    /// Delivered with every occurrence.
    pub payload: Bytes,
}

/// One stored reminder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderRow {
    /// Whose.
    pub actor: ActorId,
    /// Its name.
    pub name: String,
    /// The due time of its current occurrence, Unix ms.
    pub due_unix_ms: i64,
    /// 0 = one-shot.
    pub period_ms: u64,
    /// The payload.
    pub payload: Bytes,
    /// When the next delivery may start, Unix ms: the due time, or a retry's time.
    pub next_attempt_ms: i64,
    /// Failed deliveries of the current occurrence.
    pub attempts: u32,
    /// Bumped by every change of the row; claims and settles compare it.
    pub version: i64,
    /// The holder of the row's claim (`host@started_at`), if any.
    pub claimed_by: Option<String>,
    /// Until when the claim holds even if its holder still looks alive, Unix ms.
    pub claim_until_ms: i64,
}

/// A request for due rows.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The shards to look in.
    pub shards: &'a [u32],
    /// Rows whose next attempt is at or before this time, Unix ms.
    pub due_by_ms: i64,
    /// Now, Unix ms: a claim that lapsed before it is void.
    pub now_ms: i64,
    /// The claiming host (`host@started_at`).
    pub claimer: &'a str,
    /// Every holder that is still alive (`host@started_at` of every host in the view): a claim
    /// by anyone else is void.
    pub live: &'a [String],
    /// Until when the new claims hold, Unix ms.
    pub claim_until_ms: i64,
    /// The most rows to claim.
    pub limit: usize,
}

impl ClaimRequest<'_> {
    /// Whether `row` may be claimed now.
    pub fn may_claim(&self, row: &ReminderRow) -> bool {
        match &row.claimed_by {
            None => true,
            Some(holder) => {
                row.claim_until_ms <= self.now_ms || !self.live.iter().any(|l| l == holder)
            }
        }
    }
}

/// What becomes of a claimed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Delivered (a one-shot) or abandoned: delete it.
    Delete,
    /// Due again: a periodic reminder's next occurrence, or a retry of this one.
    Reschedule {
        /// The occurrence's due time.
        due_unix_ms: i64,
        /// When to deliver it next.
        next_attempt_ms: i64,
        /// Failed deliveries of that occurrence so far.
        attempts: u32,
    },
    /// Not delivered (the host is stopping): free the claim for the shard's owner.
    Release,
}

/// A settle of one claimed row, applied only if the row is still at `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Whose.
    pub actor: ActorId,
    /// Which reminder.
    pub name: String,
    /// The version of the claim.
    pub version: i64,
    /// What to do.
    pub settle: Settle,
}

/// Where reminders are stored: every state store is also a reminder store.
#[async_trait]
pub trait ReminderStore: Send + Sync + 'static {
    /// Stores `spec` for `actor` in `shard`, replacing a reminder of that name (and voiding its
    /// claim). Refuses past [`MAX_PER_ACTOR`].
    ///
    /// With a `fence` (the asking activation's epoch), stores it only if that epoch is still the
    /// actor's current one, judged in the same transaction as the write
    /// ([`StateError::StaleEpoch`] otherwise, nothing stored): a zombie activation cannot
    /// rearrange its successor's reminders.
    async fn set_reminder(
        &self,
        actor: &ActorId,
        shard: u32,
        spec: &ReminderSpec,
        fence: Option<u64>,
    ) -> Result<(), StateError>;

    /// Deletes the named reminder; whether it existed. Fenced like [`Self::set_reminder`].
    async fn delete_reminder(
        &self,
        actor: &ActorId,
        name: &str,
        fence: Option<u64>,
    ) -> Result<bool, StateError>;

    /// The actor's reminders, by name.
    async fn list_reminders(&self, actor: &ActorId) -> Result<Vec<ReminderRow>, StateError>;

    /// Claims up to `req.limit` rows of `req.shards` due by `req.due_by_ms` that
    /// [`ClaimRequest::may_claim`], earliest first, and returns them as claimed (new version).
    async fn claim_due(&self, req: &ClaimRequest<'_>) -> Result<Vec<ReminderRow>, StateError>;

    /// Applies each settlement whose row is still at its version (others are left alone).
    async fn settle(&self, settlements: &[Settlement]) -> Result<(), StateError>;

    /// Whether the named reminder is still at `version` (the claim is still the owner's): a
    /// reminder deleted or set again after it was claimed ahead of its due time is not
    /// delivered.
    async fn holds(&self, actor: &ActorId, name: &str, version: i64) -> Result<bool, StateError>;

    /// The store's own clock, Unix ms, where it has one apart from the host's (a database
    /// server): due times are set and judged on it, so every host agrees when a reminder is due
    /// whatever its own wall clock says ([`store_time`]). `None` (the default): the store shares
    /// the host's machine and so its clock (SQLite, memory).
    async fn clock_unix_ms(&self) -> Result<Option<i64>, StateError> {
        Ok(None)
    }
}

/// Checks what an app asks to store; the error names the limit.
pub fn check_spec(spec: &ReminderSpec) -> Result<(), ActorError> {
    if spec.name.is_empty() || spec.name.len() > MAX_NAME_BYTES {
        return Err(ActorError::invalid(format!(
            "a reminder name must be 1..={MAX_NAME_BYTES} bytes (got {} bytes)",
            spec.name.len()
        )));
    }
    if spec.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(ActorError::invalid(format!(
            "reminder {:?} has a payload of {} bytes, over the limit of {MAX_PAYLOAD_BYTES}; \
             keep large data in the actor's state and a reference in the reminder",
            spec.name,
            spec.payload.len()
        )));
    }
    if !(0..=MAX_DUE_UNIX_MS).contains(&spec.due_unix_ms) {
        return Err(ActorError::invalid(format!(
            "reminder {:?} is due at {} ms since the Unix epoch, which is not a time between 1970 \
             and the end of the year 9999 (0..={MAX_DUE_UNIX_MS}); set due_unix_ms to a Unix \
             time in milliseconds, or due_in_ms to a delay",
            spec.name, spec.due_unix_ms
        )));
    }
    if spec.period_ms > MAX_PERIOD_MS {
        return Err(ActorError::invalid(format!(
            "reminder {:?} has a period of {} ms, over the maximum of {MAX_PERIOD_MS} ms (100 \
             years); set period_ms to 0 for a one-shot reminder",
            spec.name, spec.period_ms
        )));
    }
    if spec.period_ms != 0 && spec.period_ms < MIN_PERIOD_MS {
        return Err(ActorError::invalid(format!(
            "reminder {:?} has a period of {} ms, under the minimum of {MIN_PERIOD_MS} ms; use a \
             timer for faster ticks (timers live in the activation, not the store)",
            spec.name, spec.period_ms
        )));
    }
    Ok(())
}

/// The next due time of a periodic reminder after `due` once it was delivered at `now`: the
/// first `due + k·period` later than `now` (missed occurrences are skipped, not replayed).
///
/// Computed in 128 bits, so no stored row (whatever its due time and period) can overflow it;
/// a next occurrence past `i64::MAX` ms reads as `i64::MAX`, never due. [`check_spec`] keeps
/// what apps set far from that edge.
pub fn next_due(due_unix_ms: i64, period_ms: u64, now_unix_ms: i64) -> i64 {
    let (due, now) = (i128::from(due_unix_ms), i128::from(now_unix_ms));
    let period = i128::from(period_ms.max(1));
    let next = if now < due {
        due + period
    } else {
        due + ((now - due) / period + 1) * period
    };
    i64::try_from(next).unwrap_or(i64::MAX)
}

/// The payload of a reminder delivery (`REMINDER_METHOD`).
pub fn delivery(row: &ReminderRow) -> Bytes {
    v1::Reminder {
        name: row.name.clone(),
        payload: row.payload.clone(),
        due_unix_ms: row.due_unix_ms,
        period_ms: row.period_ms,
        attempt: row.attempts + 1,
    }
    .encode_to_vec()
    .into()
}

/// Reads a reminder delivery back.
pub fn decode_delivery(payload: &[u8]) -> Result<v1::Reminder, ActorError> {
    v1::Reminder::decode(payload).map_err(|e| {
        ActorError::invalid(format!(
            "a {REMINDER_METHOD} delivery does not hold a Reminder ({e}): it is sigx's own turn \
             kind, sent only by sidecars"
        ))
    })
}

/// The wire form of a stored row.
pub fn to_info(row: &ReminderRow) -> v1::ReminderInfo {
    v1::ReminderInfo {
        name: row.name.clone(),
        due_unix_ms: row.due_unix_ms,
        period_ms: row.period_ms,
        payload: row.payload.clone(),
        failed_attempts: row.attempts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_split_between_hosts_without_overlap_and_move_little() {
        let three = ["a", "b", "c"];
        let mut all: Vec<u32> = three.iter().flat_map(|h| owned_shards(&three, h)).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..SHARDS).collect::<Vec<_>>(),
            "each shard has one owner"
        );
        for h in three {
            let n = owned_shards(&three, h).len();
            assert!((50..120).contains(&n), "{h} owns {n} of {SHARDS}");
        }
        // c leaves: a and b keep every shard they had.
        let two = ["a", "b"];
        for h in two {
            let before = owned_shards(&three, h);
            let after = owned_shards(&two, h);
            assert!(before.iter().all(|s| after.contains(s)), "{h} lost a shard");
        }
        assert!(owned_shards(&two, "c").is_empty());
    }

    #[test]
    fn a_periodic_reminder_skips_missed_occurrences() {
        assert_eq!(next_due(1000, 100, 950), 1100);
        assert_eq!(next_due(1000, 100, 1000), 1100);
        assert_eq!(next_due(1000, 100, 1050), 1100);
        assert_eq!(next_due(1000, 100, 1100), 1200);
        assert_eq!(next_due(1000, 100, 1999), 2000);
    }

    /// Found by fuzzing (fuzz/regressions/reminders): `due + period` overflowed i64 and panicked
    /// (wrapped, in a release build, to a due time in the past) for rows due near the ends of
    /// time; now such rows saturate and apps cannot set them.
    #[test]
    fn due_times_at_the_edges_neither_overflow_nor_are_accepted() {
        assert_eq!(next_due(i64::MAX - 5, 100, 0), i64::MAX);
        assert_eq!(next_due(i64::MIN, u64::MAX, i64::MAX), i64::MAX);
        assert_eq!(next_due(i64::MIN, 100, i64::MAX), i64::MAX);
        let spec = |due_unix_ms, period_ms| ReminderSpec {
            name: "r".into(),
            due_unix_ms,
            period_ms,
            payload: Bytes::new(),
        };
        assert!(check_spec(&spec(MAX_DUE_UNIX_MS, MAX_PERIOD_MS)).is_ok());
        let late = check_spec(&spec(i64::MAX, 100)).unwrap_err();
        assert!(late.message.contains("year 9999"), "{}", late.message);
        assert!(check_spec(&spec(-1, 0)).is_err());
        let long = check_spec(&spec(0, MAX_PERIOD_MS + 1)).unwrap_err();
        assert!(long.message.contains("100 years"), "{}", long.message);
    }

    #[test]
    fn a_claim_by_a_vanished_host_or_a_lapsed_one_is_void() {
        let live = vec!["a@1".to_string()];
        let req = ClaimRequest {
            shards: &[0],
            due_by_ms: 100,
            now_ms: 50,
            claimer: "a@1",
            live: &live,
            claim_until_ms: 1000,
            limit: 10,
        };
        let mut row = ReminderRow {
            actor: ActorId::new("T", "k"),
            name: "n".into(),
            due_unix_ms: 10,
            period_ms: 0,
            payload: Bytes::new(),
            next_attempt_ms: 10,
            attempts: 0,
            version: 1,
            claimed_by: None,
            claim_until_ms: 0,
        };
        assert!(req.may_claim(&row));
        row.claimed_by = Some("a@1".into());
        row.claim_until_ms = 60;
        assert!(!req.may_claim(&row), "a live holder's claim holds");
        row.claim_until_ms = 50;
        assert!(req.may_claim(&row), "a lapsed claim is void");
        row.claim_until_ms = 60;
        row.claimed_by = Some("b@1".into());
        assert!(req.may_claim(&row), "a vanished holder's claim is void");
        row.claimed_by = Some("a@0".into());
        assert!(
            req.may_claim(&row),
            "an earlier incarnation's claim is void"
        );
    }
}
