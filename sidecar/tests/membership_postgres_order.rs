//! The PostgreSQL provider's change log under concurrent writers, on a real server: a reader
//! never skips a change, however writers interleave, because change numbers come from the
//! counter row in commit order; numbers from a sequence (deliberately broken) make it skip one.

#[path = "support/postgres.rs"]
mod pg;

use sigx_sidecar::membership::postgres::ChangeOrdering;
use sigx_sidecar::membership::{
    Change, ChangeBatch, HostDescriptor, MembershipProvider, PostgresOptions, PostgresProvider,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(2000);

fn opts(dsn: &str) -> PostgresOptions {
    PostgresOptions {
        poll_interval: Duration::from_secs(30),
        ..PostgresOptions::new(dsn)
    }
}

async fn provider(dsn: &str, id: &str) -> Arc<PostgresProvider> {
    PostgresProvider::open(&opts(dsn), id).await.expect("open")
}

fn descriptor(id: &str) -> HostDescriptor {
    HostDescriptor::new(
        id,
        "127.0.0.1:7000",
        Some(vec!["Counter".into()]),
        Some(vec!["Counter".into()]),
    )
}

/// A client of our own on the test database (an operator with psql).
async fn psql(dsn: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// What a reader saw of the feed, applied: every change number, and the last version per host.
#[derive(Default)]
struct Reader {
    cursor: u64,
    seen: BTreeSet<u64>,
    state: BTreeMap<String, u64>,
}

impl Reader {
    async fn read(&mut self, p: &PostgresProvider) {
        match p.changes_since(Some(self.cursor)).await.unwrap() {
            ChangeBatch::Changes { changes, cursor } => {
                for c in changes {
                    match c {
                        Change::Upsert(r) => {
                            self.seen.insert(r.version);
                            self.state.insert(r.id().to_string(), r.version);
                        }
                        Change::Delete { id, version, .. } => {
                            self.seen.insert(version);
                            self.state.remove(&id);
                        }
                    }
                }
                self.cursor = cursor;
            }
            ChangeBatch::Snapshot { .. } => panic!("the log was not compacted: no snapshot"),
        }
    }

    /// Panics naming the changes the reader skipped, or a state that differs from the table.
    async fn check(&self, dsn: &str, since: u64) {
        let c = psql(dsn).await;
        let logged: BTreeSet<u64> = c
            .query(
                "SELECT seq FROM sigx_changes WHERE seq > $1",
                &[&(since as i64)],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i64>(0) as u64)
            .collect();
        let skipped: Vec<&u64> = logged.difference(&self.seen).collect();
        assert!(
            skipped.is_empty(),
            "the reader skipped changes {skipped:?} of {}",
            logged.len()
        );
        let table: BTreeMap<String, u64> = c
            .query("SELECT id, version FROM sigx_leases", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
            .collect();
        assert_eq!(self.state, table, "the reader's state is not the table's");
    }
}

/// Many hosts renewing at once and a reader reading the feed as fast as it can: the reader
/// sees every change number the log holds, and its state is the table's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_never_make_a_reader_skip_a_change() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("concurrent").await;
    let reader_p = provider(&dsn, "r").await;
    let mut reader = Reader::default();
    let start_at = reader_p.changes_since(None).await.unwrap().cursor();
    reader.cursor = start_at;
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let dsn = dsn.clone();
            tokio::spawn(async move {
                let id = format!("h{i}");
                let p = provider(&dsn, &id).await;
                p.join(&descriptor(&id), TTL).await.unwrap();
                for _ in 0..60 {
                    p.renew(&descriptor(&id)).await.unwrap();
                }
                if i % 2 == 0 {
                    p.withdraw().await.unwrap();
                }
            })
        })
        .collect();
    let mut reads = 0;
    while !writers.iter().all(|w| w.is_finished()) {
        reader.read(&reader_p).await;
        reads += 1;
    }
    for w in writers {
        w.await.unwrap();
    }
    reader.read(&reader_p).await;
    assert!(reads > 10, "the reader read {reads} times only");
    assert_eq!(reader.seen.len(), 8 * 61 + 4, "every write is one change");
    reader.check(&dsn, start_at).await;
}

/// A writer stalled between taking its change number and committing (here: waiting for a row
/// lock an operator holds), a second writer that commits meanwhile, and a reader that reads in
/// between. Returns the reader after everything committed (it started after both joins).
async fn stalled_writer(dsn: &str, ordering: ChangeOrdering) -> Reader {
    let o = PostgresOptions {
        ordering,
        hold_timeout: Duration::from_secs(20),
        ..opts(dsn)
    };
    let a = PostgresProvider::open(&o, "a").await.unwrap();
    let b = PostgresProvider::open(&o, "b").await.unwrap();
    let r = PostgresProvider::open(&o, "r").await.unwrap();
    a.join(&descriptor("a"), TTL).await.unwrap();
    b.join(&descriptor("b"), TTL).await.unwrap();
    let mut reader = Reader {
        cursor: r.changes_since(None).await.unwrap().cursor(),
        ..Default::default()
    };
    let mut operator = psql(dsn).await;
    let tx = operator.transaction().await.unwrap();
    tx.execute("SELECT 1 FROM sigx_leases WHERE id = 'a' FOR UPDATE", &[])
        .await
        .unwrap();
    let watcher = psql(dsn).await;
    let lock_waiters = async || -> i64 {
        watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'sigx-membership' AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    };
    let ra = tokio::spawn({
        let a = a.clone();
        async move { a.renew(&descriptor("a")).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock_waiters().await < 1 {
        assert!(
            Instant::now() < deadline,
            "a's renewal never waited for the operator's lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rb = tokio::spawn({
        let b = b.clone();
        async move { b.renew(&descriptor("b")).await }
    });
    // b either commits (nothing serializes it behind a) or queues behind a.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rb.is_finished() && lock_waiters().await < 2 {
        assert!(Instant::now() < deadline, "b neither committed nor waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    reader.read(&r).await;
    tx.commit().await.unwrap();
    ra.await.unwrap().unwrap();
    rb.await.unwrap().unwrap();
    reader.read(&r).await;
    reader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_writer_holds_back_the_feed_instead_of_being_skipped() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("stalled").await;
    let reader = stalled_writer(&dsn, ChangeOrdering::Serialized).await;
    assert_eq!(reader.seen.len(), 2, "both renewals: {:?}", reader.seen);
    reader.check(&dsn, 2).await;
}

/// DELIBERATELY BROKEN: change numbers from a sequence, writers not serialized. The reader
/// reads b's later number while a's smaller one is still uncommitted, moves its cursor past it,
/// and never sees a's renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_variant_numbers_from_a_sequence_make_a_reader_skip_a_change() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("broken").await;
    let reader = stalled_writer(&dsn, ChangeOrdering::UnorderedSequence).await;
    assert_eq!(
        reader.seen.len(),
        1,
        "only b's renewal was seen: {:?}",
        reader.seen
    );
    let c = psql(&dsn).await;
    let a_version: i64 = c
        .query_one("SELECT version FROM sigx_leases WHERE id = 'a'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        !reader.seen.contains(&(a_version as u64)),
        "a's renewal was skipped"
    );
    assert_ne!(
        reader.state.get("a"),
        Some(&(a_version as u64)),
        "the reader's a is stale"
    );
}
