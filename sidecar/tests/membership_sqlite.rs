//! The SQLite provider on a real database file, in real time with short TTLs: hosts in one
//! process and in separate processes see each other; a silent host is expired (and a lagging
//! observer does not expire a live one, unless deliberately broken); SIGKILL and SIGSTOP of a
//! separate process; a named error for an unusable path.

use async_trait::async_trait;
use sigx_sidecar::clock;
use sigx_sidecar::membership::{
    ChangeBatch, DeleteOutcome, ExpiryCheck, HostDescriptor, HostStatus, LeaseRecord,
    MembershipConfig, MembershipHandle, MembershipProvider, ProviderError, SqliteOpenError,
    SqliteOptions, SqliteProvider, start,
};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio::time::Instant;

const BEAT: Duration = Duration::from_millis(200);
const TTL: Duration = Duration::from_millis(1000);
const DRIFT: Duration = Duration::from_millis(200);
const POLL: Duration = Duration::from_millis(20);

fn cfg() -> MembershipConfig {
    MembershipConfig {
        drift_margin: DRIFT,
        ..MembershipConfig::with_timing(BEAT, TTL)
    }
}

static DIRS: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);
impl TempDir {
    fn new(name: &str) -> Self {
        let n = DIRS.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("sigx-membership-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn db(&self) -> PathBuf {
        self.0.join("membership.db")
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn opts(db: &Path) -> SqliteOptions {
    SqliteOptions {
        poll_interval: POLL,
        ..SqliteOptions::new(db)
    }
}

fn descriptor(id: &str, stateful: bool) -> HostDescriptor {
    let (types, st) = if stateful {
        (
            vec!["Counter".into(), "Relay".into()],
            vec!["Counter".into()],
        )
    } else {
        (vec!["Relay".into()], vec![])
    };
    let mut d = HostDescriptor::new(id, format!("127.0.0.1:{}", 7000), Some(types), Some(st));
    d.meta.insert("node".into(), "local".into());
    d
}

async fn host_on(
    provider: Arc<dyn MembershipProvider>,
    id: &str,
    cfg: MembershipConfig,
) -> MembershipHandle {
    let h = start(provider, descriptor(id, true), cfg, clock::system())
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

async fn host(db: &Path, id: &str) -> MembershipHandle {
    host_on(SqliteProvider::open(&opts(db), id).unwrap(), id, cfg()).await
}

fn ids(h: &MembershipHandle) -> Vec<String> {
    h.view().hosts().iter().map(|d| d.id.clone()).collect()
}

async fn wait_ids(h: &MembershipHandle, want: &[&str], within: Duration) -> Instant {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    let w = want.clone();
    h.wait_for_view(within, move |v| {
        v.hosts().iter().map(|d| &d.id).eq(w.iter())
    })
    .await
    .unwrap_or_else(|_| panic!("{} sees {:?}, wanted {want:?}", h.self_id(), ids(h)));
    Instant::now()
}

#[tokio::test]
async fn hosts_sharing_one_file_see_each_other() {
    let dir = TempDir::new("three");
    let a = host(&dir.db(), "a").await;
    let b = host(&dir.db(), "b").await;
    let c = host(&dir.db(), "c").await;
    for h in [&a, &b, &c] {
        wait_ids(h, &["a", "b", "c"], Duration::from_secs(2)).await;
        h.wait_for_view(Duration::from_secs(2), |v| {
            v.active_stateful_ids().len() == 3
        })
        .await
        .unwrap();
        assert!(h.is_self_active());
    }
    assert_eq!(a.view().fingerprint(), c.view().fingerprint());
    assert_eq!(a.view().node_count(), 1);
    c.leave().await.unwrap();
    wait_ids(&a, &["a", "b"], Duration::from_secs(1)).await;
    assert_eq!(
        a.counters().expiries_observed,
        0,
        "a leave is not an expiry"
    );
}

#[tokio::test]
async fn a_silent_host_is_expired_and_its_row_deleted() {
    let dir = TempDir::new("silent");
    let a = host(&dir.db(), "a").await;
    let b = host(&dir.db(), "b").await;
    wait_ids(&a, &["a", "b"], Duration::from_secs(2)).await;
    // A crash: the tasks stop, nothing is withdrawn.
    b.abort();
    let t0 = Instant::now();
    let gone = wait_ids(&a, &["a"], TTL * 3).await;
    assert!(
        gone - t0 <= TTL + DRIFT + BEAT,
        "dropped after {:?}",
        gone - t0
    );
    assert!(
        gone - t0 >= TTL - BEAT,
        "dropped too early: {:?}",
        gone - t0
    );
    assert_eq!(a.counters().expiries_observed, 1);
    let probe = SqliteProvider::open(&opts(&dir.db()), "probe").unwrap();
    assert_eq!(
        probe.read("b").await.unwrap(),
        None,
        "the observer deleted the row"
    );
}

/// A provider wrapper whose change feed can be frozen (a lagging observer) while its direct
/// reads still reach the database.
struct Lagging {
    inner: Arc<SqliteProvider>,
    frozen: AtomicBool,
}

#[async_trait]
impl MembershipProvider for Lagging {
    fn kind(&self) -> &'static str {
        "sqlite-lagging"
    }
    fn holder(&self) -> &str {
        self.inner.holder()
    }
    async fn join(&self, d: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        self.inner.join(d, ttl).await
    }
    async fn renew(&self, d: &HostDescriptor) -> Result<u64, ProviderError> {
        self.inner.renew(d).await
    }
    async fn withdraw(&self) -> Result<(), ProviderError> {
        self.inner.withdraw().await
    }
    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        match cursor {
            Some(c) if self.frozen.load(Ordering::SeqCst) => Ok(ChangeBatch::Changes {
                changes: vec![],
                cursor: c,
            }),
            _ => self.inner.changes_since(cursor).await,
        }
    }
    fn notifications(&self) -> watch::Receiver<u64> {
        self.inner.notifications()
    }
    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        self.inner.read(id).await
    }
    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError> {
        self.inner.delete_if(id, version).await
    }
}

async fn lagging_observer_scenario(check: ExpiryCheck) -> (MembershipHandle, MembershipHandle) {
    let dir = TempDir::new("lagging");
    let lagging = Arc::new(Lagging {
        inner: SqliteProvider::open(&opts(&dir.db()), "a").unwrap(),
        frozen: AtomicBool::new(false),
    });
    let a = host_on(
        lagging.clone(),
        "a",
        MembershipConfig {
            expiry_check: check,
            ..cfg()
        },
    )
    .await;
    let b = host(&dir.db(), "b").await;
    wait_ids(&a, &["a", "b"], Duration::from_secs(2)).await;
    // From here a's feed stands still while b keeps renewing: every renewal lands "just before
    // its deadline" as far as a can tell.
    lagging.frozen.store(true, Ordering::SeqCst);
    tokio::time::sleep(TTL * 3).await;
    (a, b)
}

#[tokio::test]
async fn a_lagging_observer_does_not_expire_a_host_that_renewed() {
    let (a, b) = lagging_observer_scenario(ExpiryCheck::FreshRead).await;
    assert_eq!(ids(&a), ["a", "b"]);
    assert_eq!(a.counters().expiries_observed, 0);
    assert_eq!(b.fence_state(), None);
}

/// Deliberately broken: skip the fresh read, and the lagging observer expires a live host.
#[tokio::test]
async fn broken_variant_without_the_fresh_read_expires_a_live_host() {
    let (a, b) = lagging_observer_scenario(ExpiryCheck::TrustLocalJudgement).await;
    assert_eq!(ids(&a), ["a"], "the broken observer dropped b");
    assert!(a.counters().expiries_observed >= 1);
    assert_eq!(b.fence_state(), None, "while b is alive and renewing");
    assert!(b.view().get("b").is_some());
}

/// An observer whose cursor fell behind the compacted change log reads a consistent snapshot
/// (this store's 410 Gone), and a current cursor reads exactly the changes after it.
#[tokio::test]
async fn a_cursor_older_than_the_compacted_log_reads_a_snapshot() {
    let dir = TempDir::new("compact");
    let writer = SqliteProvider::open(&opts(&dir.db()), "w").unwrap();
    let observer = SqliteProvider::open(&opts(&dir.db()), "o").unwrap();
    let d = descriptor("w", false);
    writer.join(&d, TTL).await.unwrap();
    let early = observer.changes_since(None).await.unwrap().cursor();
    // More renewals than the log keeps.
    for _ in 0..5000 {
        writer.renew(&d).await.unwrap();
    }
    match observer.changes_since(Some(early)).await.unwrap() {
        ChangeBatch::Snapshot { records, cursor } => {
            assert_eq!(records.len(), 1);
            assert_eq!(
                records[0].version, cursor,
                "the snapshot is the state at its cursor"
            );
        }
        other => panic!(
            "expected a snapshot, got {} changes",
            match other {
                ChangeBatch::Changes { changes, .. } => changes.len(),
                _ => 0,
            }
        ),
    }
    let now = observer.changes_since(None).await.unwrap().cursor();
    writer.renew(&d).await.unwrap();
    writer.withdraw().await.unwrap();
    match observer.changes_since(Some(now)).await.unwrap() {
        ChangeBatch::Changes { changes, cursor } => {
            assert_eq!(changes.len(), 2);
            assert!(
                matches!(changes[1], sigx_sidecar::membership::Change::Delete { ref id, version, withdrawn: true } if id == "w" && version == cursor)
            );
        }
        ChangeBatch::Snapshot { .. } => panic!("a current cursor must read the changes"),
    }
    // A deletion by anyone but the holder (a peer's expiry) is not a withdrawal.
    let v = writer.join(&d, TTL).await.unwrap();
    assert_eq!(
        observer.delete_if("w", v).await.unwrap(),
        sigx_sidecar::membership::DeleteOutcome::Deleted
    );
    match observer.changes_since(Some(v)).await.unwrap() {
        ChangeBatch::Changes { changes, .. } => assert!(
            matches!(
                changes[..],
                [sigx_sidecar::membership::Change::Delete {
                    withdrawn: false,
                    ..
                }]
            ),
            "{changes:?}"
        ),
        ChangeBatch::Snapshot { .. } => panic!("a current cursor must read the changes"),
    }
}

#[test]
fn an_unusable_path_is_a_named_error() {
    let dir = TempDir::new("badpath");
    let missing = dir.0.join("no-such-dir").join("membership.db");
    let err = SqliteProvider::open(&SqliteOptions::new(&missing), "a")
        .err()
        .expect("error");
    assert!(matches!(err, SqliteOpenError::Open { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("no-such-dir") && msg.contains("SIGX_SQLITE_PATH"),
        "{msg}"
    );
    // A directory where the file should be.
    let err = SqliteProvider::open(&SqliteOptions::new(&dir.0), "a")
        .err()
        .expect("error");
    assert!(err.to_string().contains("membership database"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Separate processes: this test binary re-runs itself as a child host.

const CHILD_ENV: &str = "SIGX_MEMBERSHIP_CHILD";

/// The child host: joins the database named in the environment and reports on stdout
/// (`SIGX VIEW a,b,c`, `SIGX FENCED <reason>`, `SIGX REJOINED <n>`) until killed.
#[tokio::test]
#[ignore = "run by the multi-process tests as a child process"]
async fn child_host() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '|');
    let (db, id, stateful) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
        parts.next().unwrap() == "stateful",
    );
    let provider = SqliteProvider::open(&opts(Path::new(&db)), id.as_str()).unwrap();
    let h = start(provider, descriptor(&id, stateful), cfg(), clock::system())
        .await
        .unwrap();
    h.set_status(HostStatus::Active).await.unwrap();
    let mut views = h.subscribe();
    let mut fenced = h.fenced_signal();
    let mut rejoins = 0;
    let say = |s: String| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "SIGX {s}");
        let _ = out.flush();
    };
    say(format!("VIEW {}", ids(&h).join(",")));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::select! {
            _ = views.changed() => say(format!("VIEW {}", ids(&h).join(","))),
            _ = fenced.changed() => if let Some(r) = h.fence_state() { say(format!("FENCED {}", r.as_str())) },
            _ = tokio::time::sleep(BEAT / 2) => {}
            _ = tokio::time::sleep_until(deadline) => return,
        }
        if h.counters().rejoins != rejoins {
            rejoins = h.counters().rejoins;
            say(format!("REJOINED {rejoins}"));
        }
    }
}

struct Child {
    proc: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Child {
    fn spawn(db: &Path, id: &str, stateful: bool) -> Child {
        let exe = std::env::current_exe().unwrap();
        let mut proc = tokio::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "child_host",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!(
                    "{}|{id}|{}",
                    db.display(),
                    if stateful { "stateful" } else { "worker" }
                ),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = proc.stdout.take().unwrap();
        let l = lines.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(out).lines();
            while let Ok(Some(line)) = r.next_line().await {
                // libtest may print "test child_host ... " in front of the first line.
                if let Some(at) = line.find("SIGX ") {
                    l.lock().unwrap().push(line[at + 5..].to_string());
                }
            }
        });
        Child { proc, lines }
    }

    async fn wait_line(&self, want: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.lines.lock().unwrap().iter().any(|l| l == want) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "child never said {want:?}; it said {:?}",
                    self.lines.lock().unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pid(&self) -> String {
        self.proc.id().unwrap().to_string()
    }

    async fn signal(&self, sig: &str) {
        let status = tokio::process::Command::new("kill")
            .args([sig, &self.pid()])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_processes_see_each_other_survive_sigkill_and_fence_after_sigstop() {
    let dir = TempDir::new("procs");
    let db = dir.db();
    let a = host(&db, "a").await;
    let mut b = Child::spawn(&db, "b", true);
    let c = Child::spawn(&db, "c", true);
    let w = Child::spawn(&db, "w", false);
    wait_ids(&a, &["a", "b", "c", "w"], Duration::from_secs(20)).await;
    for child in [&b, &c, &w] {
        child
            .wait_line("VIEW a,b,c,w", Duration::from_secs(5))
            .await;
    }

    // SIGKILL b: the survivors drop it within the TTL (plus the drift margin and a beat).
    b.proc.kill().await.unwrap();
    let t0 = Instant::now();
    let gone = wait_ids(&a, &["a", "c", "w"], TTL * 4).await;
    assert!(
        gone - t0 <= TTL + DRIFT + BEAT * 2,
        "dropped after {:?}",
        gone - t0
    );
    c.wait_line("VIEW a,c,w", Duration::from_secs(2)).await;

    // SIGSTOP c (stateful) past the TTL: the others expire it; on SIGCONT it fences itself.
    c.signal("-STOP").await;
    wait_ids(&a, &["a", "w"], TTL * 4).await;
    c.signal("-CONT").await;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let said = c.lines.lock().unwrap().clone();
        if said.iter().any(|l| l.starts_with("FENCED ")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "c never fenced; it said {said:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(TTL).await;
    assert_eq!(ids(&a), ["a", "w"], "a fenced host stays out");

    // SIGSTOP w (worker-only) the same way: on SIGCONT it rejoins under the same id.
    w.signal("-STOP").await;
    wait_ids(&a, &["a"], TTL * 4).await;
    w.signal("-CONT").await;
    w.wait_line("REJOINED 1", Duration::from_secs(3)).await;
    wait_ids(&a, &["a", "w"], Duration::from_secs(3)).await;
    assert!(
        !w.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("FENCED"))
    );
}
