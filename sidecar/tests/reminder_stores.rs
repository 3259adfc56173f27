//! Every state store keeps reminders with the same promises (DESIGN.md §11), checked by one
//! suite run against each through two handles (two hosts of a fleet): a reminder is stored and
//! replaced by name; an owner's claim returns only the due rows of the shards it asks for,
//! earliest first; a row claimed by a live holder is nobody else's, a row claimed by a vanished
//! holder or a lapsed claim is anyone's; a settle applies only to the claim it names, so a
//! reminder set again meanwhile survives its old delivery; a change fenced by a stale epoch is
//! refused and changes nothing. PostgreSQL runs for real.

#[path = "support/postgres.rs"]
mod pg;

use bytes::Bytes;
use sigx_sidecar::reminders::{
    ClaimRequest, MAX_PER_ACTOR, ReminderRow, ReminderSpec, Settle, Settlement, shard_of,
};
use sigx_sidecar::runtime::ActorId;
use sigx_sidecar::state::StateStore;
use sigx_sidecar::state::memory::MemoryStateStore;
use sigx_sidecar::state::postgres::PostgresStateStore;
use sigx_sidecar::state::sqlite::SqliteStateStore;
use std::sync::Arc;

fn spec(name: &str, due: i64, period: u64, payload: &str) -> ReminderSpec {
    ReminderSpec {
        name: name.into(),
        due_unix_ms: due,
        period_ms: period,
        payload: Bytes::copy_from_slice(payload.as_bytes()),
    }
}

fn claim<'a>(
    shards: &'a [u32],
    due_by: i64,
    now: i64,
    claimer: &'a str,
    live: &'a [String],
) -> ClaimRequest<'a> {
    ClaimRequest {
        shards,
        due_by_ms: due_by,
        now_ms: now,
        claimer,
        live,
        claim_until_ms: now + 10_000,
        limit: 100,
    }
}

fn names(rows: &[ReminderRow]) -> Vec<String> {
    rows.iter()
        .map(|r| format!("{}/{}", r.actor.key, r.name))
        .collect()
}

fn settle(row: &ReminderRow, settle: Settle) -> Settlement {
    Settlement {
        actor: row.actor.clone(),
        name: row.name.clone(),
        version: row.version,
        settle,
    }
}

async fn suite(s1: Arc<dyn StateStore>, s2: Arc<dyn StateStore>) {
    let x = ActorId::new("Invoice", "x");
    let y = ActorId::new("Invoice", "y");
    let (sx, sy) = (shard_of(&x), shard_of(&y));
    assert_ne!(
        sx, sy,
        "the two actors of the suite sit in different shards"
    );
    let both = [sx, sy];
    let live = vec!["a@1".to_string(), "b@1".to_string()];

    // Stored and listed by name; replaced by name.
    s1.set_reminder(&x, sx, &spec("late", 2000, 0, "v1"), None)
        .await
        .unwrap();
    s1.set_reminder(&x, sx, &spec("early", 1000, 0, "e"), None)
        .await
        .unwrap();
    s2.set_reminder(&y, sy, &spec("tick", 1500, 500, "t"), None)
        .await
        .unwrap();
    s2.set_reminder(&x, sx, &spec("late", 3000, 0, "v2"), None)
        .await
        .unwrap();
    let listed = s1.list_reminders(&x).await.unwrap();
    assert_eq!(names(&listed), ["x/early", "x/late"]);
    assert_eq!(
        listed[1].due_unix_ms, 3000,
        "the later set replaced the reminder"
    );
    assert_eq!(&listed[1].payload[..], b"v2");

    // A claim sees only what is due by its horizon, only in its shards, earliest first.
    let none = s1
        .claim_due(&claim(&both, 999, 0, "a@1", &live))
        .await
        .unwrap();
    assert!(none.is_empty(), "nothing is due by 999: {:?}", names(&none));
    let only_y = s1
        .claim_due(&claim(&[sy], 5000, 0, "a@1", &live))
        .await
        .unwrap();
    assert_eq!(
        names(&only_y),
        ["y/tick"],
        "shard {sy} holds only y's reminder"
    );
    let got = s1
        .claim_due(&claim(&both, 2500, 0, "a@1", &live))
        .await
        .unwrap();
    assert_eq!(names(&got), ["x/early"], "y/tick is held by a@1 already");
    assert!(got.iter().all(|r| r.claimed_by.as_deref() == Some("a@1")));

    // A live holder's claim is nobody else's.
    let stolen = s2
        .claim_due(&claim(&both, 5000, 0, "b@1", &live))
        .await
        .unwrap();
    assert_eq!(names(&stolen), ["x/late"], "only the unclaimed row");

    // A holder gone from the view loses its claims at once.
    let without_a = vec!["b@1".to_string()];
    let taken = s2
        .claim_due(&claim(&both, 5000, 0, "b@1", &without_a))
        .await
        .unwrap();
    assert_eq!(names(&taken), ["x/early", "y/tick"], "earliest first");

    // a@1's settle of its old claim is void: b@1 holds a newer claim of that row.
    s1.settle(&[settle(&got[0], Settle::Delete)]).await.unwrap();
    assert_eq!(
        names(&s1.list_reminders(&x).await.unwrap()),
        ["x/early", "x/late"]
    );

    // Settles of the current claims apply: a one-shot goes, a periodic one moves on.
    let tick = taken.iter().find(|r| r.name == "tick").unwrap();
    let early = taken.iter().find(|r| r.name == "early").unwrap();
    s2.settle(&[
        settle(early, Settle::Delete),
        settle(
            tick,
            Settle::Reschedule {
                due_unix_ms: 2000,
                next_attempt_ms: 2000,
                attempts: 0,
            },
        ),
    ])
    .await
    .unwrap();
    assert_eq!(names(&s1.list_reminders(&x).await.unwrap()), ["x/late"]);
    let ty = s1.list_reminders(&y).await.unwrap();
    assert_eq!((ty[0].due_unix_ms, ty[0].claimed_by.clone()), (2000, None));

    // A reminder set again while claimed is a new reminder: its old claim's settle is void.
    let late = stolen[0].clone();
    s1.set_reminder(&x, sx, &spec("late", 4000, 0, "v3"), None)
        .await
        .unwrap();
    s2.settle(&[settle(&late, Settle::Delete)]).await.unwrap();
    let kept = s1.list_reminders(&x).await.unwrap();
    assert_eq!(
        (names(&kept), kept[0].due_unix_ms),
        (vec!["x/late".to_string()], 4000)
    );

    // A lapsed claim is anyone's; a retry keeps its due time and counts the attempt; a
    // release frees the row for the next claim.
    let c = s1
        .claim_due(&ClaimRequest {
            claim_until_ms: 4100,
            ..claim(&both, 4000, 0, "a@1", &live)
        })
        .await
        .unwrap();
    assert_eq!(names(&c), ["y/tick", "x/late"]);
    let relapsed = s2
        .claim_due(&claim(&both, 4000, 4100, "b@1", &live))
        .await
        .unwrap();
    assert_eq!(names(&relapsed), ["y/tick", "x/late"], "lapsed at 4100");
    s2.settle(&[
        settle(
            &relapsed[1],
            Settle::Reschedule {
                due_unix_ms: 4000,
                next_attempt_ms: 5000,
                attempts: 1,
            },
        ),
        settle(&relapsed[0], Settle::Release),
    ])
    .await
    .unwrap();
    let late = &s1.list_reminders(&x).await.unwrap()[0];
    assert_eq!(
        (late.due_unix_ms, late.next_attempt_ms, late.attempts),
        (4000, 5000, 1)
    );
    let free = s1
        .claim_due(&claim(&both, 4999, 4200, "a@1", &live))
        .await
        .unwrap();
    assert_eq!(
        names(&free),
        ["y/tick"],
        "released; x/late waits for its retry at 5000"
    );

    // A row claimed ahead of its due time is checked before delivery: set again, it is void.
    let ahead = free[0].clone();
    assert!(s2.holds(&y, "tick", ahead.version).await.unwrap());
    s2.set_reminder(&y, sy, &spec("tick", 9000, 500, "t2"), None)
        .await
        .unwrap();
    assert!(!s1.holds(&y, "tick", ahead.version).await.unwrap());

    // Deleted by name; the limit per actor is named.
    assert!(s2.delete_reminder(&x, "late", None).await.unwrap());
    assert!(!s2.delete_reminder(&x, "late", None).await.unwrap());
    assert!(s1.list_reminders(&x).await.unwrap().is_empty());
}

async fn limit(s: Arc<dyn StateStore>) {
    let z = ActorId::new("Invoice", "z");
    for i in 0..MAX_PER_ACTOR {
        s.set_reminder(&z, shard_of(&z), &spec(&format!("r{i}"), 1, 0, ""), None)
            .await
            .unwrap();
    }
    let refused = s
        .set_reminder(&z, shard_of(&z), &spec("one-more", 1, 0, ""), None)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&format!("{MAX_PER_ACTOR} reminders")),
        "{refused}"
    );
    // Replacing an existing name is not growth.
    s.set_reminder(&z, shard_of(&z), &spec("r0", 2, 0, ""), None)
        .await
        .unwrap();
}

/// A reminder change carrying an epoch (the asking activation's) is applied only while that
/// epoch is the actor's current one, judged by the store: once a newer activation took an epoch
/// (through the other handle: another host), the old one can neither set nor delete, and what
/// the new one set stays exactly as it set it.
async fn fenced(s1: Arc<dyn StateStore>, s2: Arc<dyn StateStore>) {
    let w = ActorId::new("Invoice", "w");
    let sw = shard_of(&w);
    let old = s1.next_epoch(&w).await.unwrap();
    s1.set_reminder(&w, sw, &spec("due", 1000, 0, "old"), Some(old))
        .await
        .expect("the current epoch may set");
    let new = s2.next_epoch(&w).await.unwrap();
    assert!(new > old);

    let stale = s1
        .set_reminder(&w, sw, &spec("due", 1, 0, "zombie"), Some(old))
        .await
        .expect_err("a stale epoch may not set");
    assert!(
        matches!(stale, sigx_sidecar::state::StateError::StaleEpoch { .. }),
        "{stale}"
    );
    let stale = s1
        .set_reminder(&w, sw, &spec("extra", 1, 0, "zombie"), Some(old))
        .await
        .expect_err("nor add a name");
    assert!(
        matches!(stale, sigx_sidecar::state::StateError::StaleEpoch { .. }),
        "{stale}"
    );
    let stale = s1
        .delete_reminder(&w, "due", Some(old))
        .await
        .expect_err("nor delete");
    assert!(
        matches!(stale, sigx_sidecar::state::StateError::StaleEpoch { .. }),
        "{stale}"
    );
    let ahead = s1
        .set_reminder(&w, sw, &spec("due", 1, 0, "never"), Some(new + 5))
        .await
        .expect_err("an epoch never issued is refused too");
    assert!(
        matches!(ahead, sigx_sidecar::state::StateError::UnknownEpoch { .. }),
        "{ahead}"
    );
    let rows = s2.list_reminders(&w).await.unwrap();
    assert_eq!(
        names(&rows),
        ["w/due"],
        "nothing the stale epoch asked for happened"
    );
    assert_eq!(&rows[0].payload[..], b"old");

    s2.set_reminder(&w, sw, &spec("due", 2000, 0, "new"), Some(new))
        .await
        .expect("the new epoch may set");
    assert!(s2.delete_reminder(&w, "due", Some(new)).await.unwrap());
    // Unfenced changes (a process outside the actor) are not judged.
    s1.set_reminder(&w, sw, &spec("admin", 3000, 0, ""), None)
        .await
        .unwrap();
    assert!(s1.delete_reminder(&w, "admin", None).await.unwrap());
    assert!(s1.list_reminders(&w).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_memory_store_keeps_the_reminder_promises() {
    let s: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    suite(s.clone(), s.clone()).await;
    fenced(s.clone(), s.clone()).await;
    limit(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_store_keeps_the_reminder_promises_across_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s1: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&path).unwrap());
    let s2: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&path).unwrap());
    suite(s1.clone(), s2.clone()).await;
    fenced(s1.clone(), s2).await;
    // One machine, one clock: the store has none of its own.
    assert_eq!(s1.clock_unix_ms().await.unwrap(), None);
    limit(s1).await;
}

#[test]
fn a_version_1_sqlite_state_file_gains_the_reminders_table_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE sigx_state_schema (version INTEGER NOT NULL);
             INSERT INTO sigx_state_schema (version) VALUES (1);
             CREATE TABLE sigx_actor_epochs (actor_type TEXT NOT NULL, actor_key TEXT NOT NULL,
                 epoch INTEGER NOT NULL, PRIMARY KEY (actor_type, actor_key)) WITHOUT ROWID;
             CREATE TABLE sigx_actor_state (actor_type TEXT NOT NULL, actor_key TEXT NOT NULL,
                 key TEXT NOT NULL, value BLOB NOT NULL, epoch INTEGER NOT NULL,
                 PRIMARY KEY (actor_type, actor_key, key)) WITHOUT ROWID;
             INSERT INTO sigx_actor_epochs VALUES ('Counter', 'a', 7);",
        )
        .unwrap();
    }
    SqliteStateStore::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("SELECT MAX(version) FROM sigx_state_schema", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, 2);
    let epoch: i64 = conn
        .query_row("SELECT epoch FROM sigx_actor_epochs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(epoch, 7, "the migration keeps what was there");
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM sigx_reminders", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_keeps_the_reminder_promises_across_handles() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("reminders").await;
    let s1: Arc<dyn StateStore> = Arc::new(PostgresStateStore::open(&dsn).await.unwrap());
    let s2: Arc<dyn StateStore> = Arc::new(PostgresStateStore::open(&dsn).await.unwrap());
    suite(s1.clone(), s2.clone()).await;
    fenced(s1.clone(), s2).await;
    // The server's clock, which reminders are due by (issue 13): read from the server, so on
    // this machine it agrees with the wall clock, and it moves forward.
    let first = s1
        .clock_unix_ms()
        .await
        .unwrap()
        .expect("PostgreSQL has a clock");
    let here = sigx_sidecar::clock::system().wall_unix_ms();
    assert!(
        (first - here).abs() < 5_000,
        "server {first} ms, here {here} ms"
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = s1.clock_unix_ms().await.unwrap().unwrap();
    assert!(
        second >= first + 15,
        "the server clock moved {} ms in 20 ms",
        second - first
    );
    limit(s1).await;
}
