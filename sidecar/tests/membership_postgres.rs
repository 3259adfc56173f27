//! The PostgreSQL provider on a real server (`support/postgres.rs`), in real time with short
//! TTLs: hosts see each other; a silent host is expired by a fresh read and a CAS delete; a
//! second incarnation is refused; a row deleted or rewritten under a live host fences it and is
//! never re-created; a write wakes the other hosts through NOTIFY well before the backstop
//! poll, also after the listener's connection was killed. Change ordering under concurrent
//! writers: `membership_postgres_order`. The provider's own semantics (CAS renewals and deletes,
//! withdrawal vs expiry, snapshots after compaction, fresh reads), checked exactly as for the
//! memory hub and SQLite: `membership_contract` (`postgres::*`).

#[path = "support/postgres.rs"]
mod pg;

use sigx_sidecar::clock;
use sigx_sidecar::membership::{
    FenceReason, HostDescriptor, HostStatus, LostCause, MembershipConfig, MembershipError,
    MembershipHandle, MembershipProvider, PostgresOpenError, PostgresOptions, PostgresProvider,
    ProviderError, start,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

// Twice the SQLite tests' timing: every test runs its own server, and they run in parallel on
// a small machine.
const BEAT: Duration = Duration::from_millis(400);
const TTL: Duration = Duration::from_millis(2000);
const DRIFT: Duration = Duration::from_millis(300);

fn cfg() -> MembershipConfig {
    MembershipConfig {
        drift_margin: DRIFT,
        ..MembershipConfig::with_timing(BEAT, TTL)
    }
}

/// Options whose backstop poll is far slower than anything the tests wait for: every prompt
/// wake-up below comes from NOTIFY.
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

async fn host(dsn: &str, id: &str) -> MembershipHandle {
    host_on(provider(dsn, id).await, id).await
}

async fn host_on(p: Arc<PostgresProvider>, id: &str) -> MembershipHandle {
    let h = start(p, descriptor(id), cfg(), clock::system())
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

fn ids(h: &MembershipHandle) -> Vec<String> {
    h.view().hosts().iter().map(|d| d.id.clone()).collect()
}

async fn wait_ids(h: &MembershipHandle, want: &[&str], within: Duration) -> Instant {
    let w: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    h.wait_for_view(within, move |v| {
        v.hosts().iter().map(|d| &d.id).eq(w.iter())
    })
    .await
    .unwrap_or_else(|_| panic!("{} sees {:?}, wanted {want:?}", h.self_id(), ids(h)));
    Instant::now()
}

/// Waits until `h` sees exactly `want` as its active hosts. A host's record can reach a peer
/// before its `Active` update does, so "listed" is not yet "active".
async fn wait_active(h: &MembershipHandle, want: &[&str], within: Duration) {
    let w: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    h.wait_for_view(within, move |v| v.active_stateful_ids().iter().eq(w.iter()))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} sees {:?} active, wanted {want:?}",
                h.self_id(),
                h.view().active_stateful_ids()
            )
        });
}

async fn fenced_within(h: &MembershipHandle, within: Duration) -> FenceReason {
    let mut fenced = h.fenced_signal();
    tokio::time::timeout(within, fenced.wait_for(|r| r.is_some()))
        .await
        .unwrap_or_else(|_| panic!("not fenced within {within:?}: {:?}", h.counters()))
        .unwrap();
    h.fence_state().unwrap()
}

/// A client of our own on the test database (an operator with psql).
async fn psql(dsn: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_see_each_other_a_silent_one_is_expired_by_a_fresh_read_and_a_leave_withdraws() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("three").await;
    // Hosts opening together on an empty database take turns creating the tables.
    let (pa, pb, pc) = tokio::join!(
        provider(&dsn, "a"),
        provider(&dsn, "b"),
        provider(&dsn, "c")
    );
    let a = host_on(pa, "a").await;
    let b = host_on(pb, "b").await;
    let c = host_on(pc, "c").await;
    for h in [&a, &b, &c] {
        wait_active(h, &["a", "b", "c"], Duration::from_secs(5)).await;
    }
    assert_eq!(a.view().fingerprint(), c.view().fingerprint());
    c.leave().await.unwrap();
    wait_ids(&a, &["a", "b"], Duration::from_secs(3)).await;
    assert_eq!(
        a.counters().expiries_observed,
        0,
        "a leave is not an expiry"
    );

    // A crash: b's tasks stop, nothing is withdrawn.
    b.abort();
    let t0 = Instant::now();
    let gone = wait_ids(&a, &["a"], TTL * 3).await;
    assert!(
        gone - t0 <= TTL + DRIFT + BEAT * 2,
        "dropped after {:?}",
        gone - t0
    );
    assert!(
        gone - t0 >= TTL - BEAT,
        "dropped too early: {:?}",
        gone - t0
    );
    assert_eq!(a.counters().expiries_observed, 1);
    let probe = provider(&dsn, "probe").await;
    assert_eq!(
        probe.read("b").await.unwrap(),
        None,
        "the observer deleted the row"
    );
    assert!(probe.read("a").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_one_process_cas_deletes_and_deleted_rows_stay_deleted() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("identity").await;

    // A second incarnation of a live host id is refused; the first keeps serving.
    let first = provider(&dsn, "a").await;
    let holder = first.holder().to_string();
    let a = start(first, descriptor("a"), cfg(), clock::system())
        .await
        .unwrap();
    a.set_status(HostStatus::Active).await.unwrap();
    let second = provider(&dsn, "a").await;
    assert_ne!(second.holder(), holder);
    match start(second, descriptor("a"), cfg(), clock::system()).await {
        Err(MembershipError::Provider(ProviderError::Conflict { id, holder: h, .. })) => {
            assert_eq!((id.as_str(), h.as_str()), ("a", holder.as_str()));
        }
        other => panic!("expected a conflict, got {:?}", other.map(|_| ())),
    }
    let beats = a.counters().beats;
    tokio::time::sleep(BEAT * 3).await;
    assert_eq!(a.fence_state(), None);
    assert!(a.counters().beats >= beats + 2, "{:?}", a.counters());

    // A row deleted behind the log's back: only a's own renewal can notice; it fences and the
    // row is never re-created.
    let operator = psql(&dsn).await;
    let n = operator
        .execute("DELETE FROM sigx_leases WHERE id = 'a'", &[])
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        fenced_within(&a, BEAT * 3).await,
        FenceReason::Lost(LostCause::Gone)
    );
    tokio::time::sleep(BEAT * 3).await;
    let probe = provider(&dsn, "probe").await;
    assert_eq!(probe.read("a").await.unwrap(), None, "re-created");

    // A row rewritten by another incarnation fences its host.
    let b = host(&dsn, "b").await;
    operator
        .execute(
            "UPDATE sigx_leases SET holder = 'b/0000000000000000' WHERE id = 'b'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        fenced_within(&b, BEAT * 3).await,
        FenceReason::Lost(LostCause::HolderChanged {
            holder: "b/0000000000000000".into()
        })
    );

    // CAS renewals and deletes, fresh reads and no resurrection on the provider alone:
    // `membership_contract` (postgres::*).

    // Named errors before anything binds.
    let err = PostgresProvider::open(&opts(&server.dsn("nosuchdb")), "x")
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, PostgresOpenError::NoDatabase { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("SIGX_MEMBERSHIP_DSN"), "{err}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = PostgresProvider::open(
        &opts(&format!("postgres://u:secretpw@127.0.0.1:{port}/d")),
        "x",
    )
    .await
    .err()
    .unwrap();
    let msg = err.to_string();
    assert!(
        matches!(err, PostgresOpenError::Unreachable { .. }),
        "{err:?}"
    );
    assert!(
        msg.contains("SIGX_MEMBERSHIP_DSN") && !msg.contains("secretpw"),
        "{msg}"
    );
    let err = PostgresProvider::open(&opts(&server.dsn_as("sigx", "wrong", "identity")), "x")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, PostgresOpenError::Auth { .. }), "{err:?}");
}

/// A write wakes another host's `notifications()` through NOTIFY, far sooner than the 30 s
/// backstop poll; after the listener's connection is killed it reconnects and the next write
/// (and whatever was written while it was away) still arrives promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_wakes_the_other_host_through_notify_also_after_the_listener_is_killed() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("notify").await;
    let a = host(&dsn, "a").await;
    // The bound: well under the backstop poll (30 s) and under one beat.
    let prompt = Duration::from_millis(150);
    let pb = provider(&dsn, "b").await;
    let t0 = Instant::now();
    let b = host_on(pb, "b").await;
    let seen = wait_ids(&a, &["a", "b"], Duration::from_secs(5)).await;
    // b's join and its status write, then a's read.
    assert!(seen - t0 <= prompt * 2, "a saw b after {:?}", seen - t0);

    let observer = provider(&dsn, "o").await;
    let writer = provider(&dsn, "w").await;
    let mut rx = observer.notifications();
    // Wait for the listener's first session (it announces the head once it listens).
    tokio::time::timeout(Duration::from_secs(5), rx.changed())
        .await
        .unwrap()
        .unwrap();
    for round in 0..3 {
        rx.borrow_and_update();
        let t0 = Instant::now();
        let v = if round == 0 {
            writer.join(&descriptor("w"), TTL).await.unwrap()
        } else {
            writer.renew(&descriptor("w")).await.unwrap()
        };
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| *s >= v))
            .await
            .expect("no notification")
            .unwrap();
        assert!(
            t0.elapsed() <= prompt,
            "round {round}: woken after {:?}",
            t0.elapsed()
        );
    }

    // Kill every listener session; a write made while they are away still arrives.
    let sessions = observer.listener_sessions();
    let operator = psql(&dsn).await;
    let killed: i64 = operator
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'sigx-membership-listener'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed >= 3, "killed {killed} listeners");
    let v = writer.renew(&descriptor("w")).await.unwrap();
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| *s >= v))
        .await
        .expect("the write made while the listener was away never arrived")
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "after {:?}",
        t0.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while observer.listener_sessions() <= sessions {
        assert!(Instant::now() < deadline, "the listener never reconnected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rx.borrow_and_update();
    let t0 = Instant::now();
    let v = writer.renew(&descriptor("w")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| *s >= v))
        .await
        .unwrap()
        .unwrap();
    assert!(
        t0.elapsed() <= prompt,
        "after the reconnect: woken after {:?}",
        t0.elapsed()
    );
    // The handles' views followed too: b leaves, a sees it at once.
    b.leave().await.unwrap();
    wait_ids(&a, &["a", "w"], Duration::from_secs(3)).await;
}
