//! Host load on a real SQLite membership file: a host's load reaches its peers on the renewals
//! it writes anyway, lands on their load board, and never rebuilds a view (a load change is not
//! a membership change); a status change still does.

use sigx_sidecar::clock;
use sigx_sidecar::membership::{
    HostDescriptor, HostStatus, LoadSample, MembershipConfig, MembershipHandle, SqliteOptions,
    SqliteProvider, start,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const BEAT: Duration = Duration::from_millis(100);
const TTL: Duration = Duration::from_millis(600);

fn temp_db() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("sigx-membership-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    (dir.join("membership.db"), dir)
}

async fn host(db: &PathBuf, id: &str) -> MembershipHandle {
    let opts = SqliteOptions {
        poll_interval: Duration::from_millis(20),
        ..SqliteOptions::new(db)
    };
    let provider = SqliteProvider::open(&opts, id).unwrap();
    let d = HostDescriptor::new(
        id,
        format!("{id}:7000"),
        Some(vec!["Counter".into()]),
        Some(vec!["Counter".into()]),
    );
    let cfg = MembershipConfig {
        drift_margin: Duration::from_millis(100),
        ..MembershipConfig::with_timing(BEAT, TTL)
    };
    let h = start(provider, d, cfg, clock::system())
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

async fn eventually(what: &str, within: Duration, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not seen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_reaches_peers_on_renewals_and_rebuilds_no_view() {
    let (db, dir) = temp_db();
    let a = host(&db, "a").await;
    let b = host(&db, "b").await;
    b.wait_for_view(Duration::from_secs(2), |v| {
        v.hosts()
            .iter()
            .filter(|h| h.status == HostStatus::Active)
            .count()
            == 2
    })
    .await
    .expect("b sees both hosts active");
    assert_eq!(b.loads().published("a"), None, "no load source yet");

    let activations = Arc::new(AtomicU64::new(0));
    {
        let activations = activations.clone();
        a.set_load_source(Arc::new(move || LoadSample {
            activations: activations.load(Ordering::SeqCst),
            turns_total: 0,
        }));
    }
    let loads = b.loads();
    eventually(
        "a's first load on b's board",
        Duration::from_secs(2),
        || loads.published("a").is_some_and(|l| l.activations == 0),
    )
    .await;
    let version = b.view().version;

    // A material change reaches b within a few beats (min_beats = 3)...
    activations.store(250, Ordering::SeqCst);
    eventually(
        "a's load of 250 on b's board",
        Duration::from_secs(3),
        || loads.estimate("a") == 250,
    )
    .await;
    activations.store(600, Ordering::SeqCst);
    eventually(
        "a's load of 600 on b's board",
        Duration::from_secs(3),
        || loads.estimate("a") == 600,
    )
    .await;
    // ...and rebuilt no view on b, nor on a: the loads are beside the views.
    assert_eq!(
        b.view().version,
        version,
        "a load change is a renewal, not a membership change"
    );
    assert!(
        b.view().hosts().iter().all(|h| h.load.is_none()),
        "views carry no stale loads"
    );

    // A status change still rebuilds the view.
    a.set_status(HostStatus::Leaving).await.unwrap();
    b.wait_for_view(Duration::from_secs(2), |v| {
        v.get("a").is_some_and(|h| h.status == HostStatus::Leaving)
    })
    .await
    .expect("b sees a leaving");
    assert!(b.view().version > version);
    // b's own record carries no load: it never set a source.
    assert_eq!(a.loads().published("b"), None);
    drop((a, b));
    let _ = std::fs::remove_dir_all(dir);
}
