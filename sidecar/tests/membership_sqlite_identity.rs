//! One identity, one process, on the SQLite provider (DESIGN.md §3, issue 12 holes D and G), on a
//! real database file with two providers, in real time with short TTLs: a second incarnation of
//! a host id is refused while the first keeps serving; a row deleted or rewritten under a live
//! host by a third party fences that host within a beat or two, and is never re-created.

use sigx_sidecar::clock;
use sigx_sidecar::membership::sqlite::open_connection;
use sigx_sidecar::membership::{
    FenceReason, HostDescriptor, HostStatus, LostCause, MembershipConfig, MembershipError,
    MembershipHandle, MembershipProvider, ProviderError, SqliteOptions, SqliteProvider, start,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const BEAT: Duration = Duration::from_millis(200);
const TTL: Duration = Duration::from_millis(1000);

fn cfg() -> MembershipConfig {
    MembershipConfig {
        drift_margin: Duration::from_millis(200),
        ..MembershipConfig::with_timing(BEAT, TTL)
    }
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);
impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("sigx-identity-{}-{name}", std::process::id()));
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
        poll_interval: Duration::from_millis(20),
        ..SqliteOptions::new(db)
    }
}

fn descriptor(id: &str) -> HostDescriptor {
    HostDescriptor::new(
        id,
        "127.0.0.1:7000",
        Some(vec!["Counter".into()]),
        Some(vec!["Counter".into()]),
    )
}

async fn host(provider: Arc<SqliteProvider>, id: &str) -> MembershipHandle {
    let h = start(provider, descriptor(id), cfg(), clock::system())
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

/// A third party's SQL on the shared file (an operator with the sqlite3 shell, say).
fn third_party(db: &Path, sql: &str) -> usize {
    open_connection(&opts(db))
        .unwrap()
        .execute(sql, [])
        .unwrap()
}

async fn fenced_within(h: &MembershipHandle, within: Duration) -> Duration {
    let t0 = Instant::now();
    let mut fenced = h.fenced_signal();
    tokio::time::timeout(within, fenced.wait_for(|r| r.is_some()))
        .await
        .unwrap_or_else(|_| panic!("not fenced within {within:?}: {:?}", h.counters()))
        .unwrap();
    t0.elapsed()
}

#[tokio::test]
async fn a_second_incarnation_of_a_host_id_is_refused_and_the_first_keeps_serving() {
    let dir = TempDir::new("second");
    let first = SqliteProvider::open(&opts(&dir.db()), "a").unwrap();
    let holder = first.holder().to_string();
    let a = host(first, "a").await;

    let second = SqliteProvider::open(&opts(&dir.db()), "a").unwrap();
    assert_ne!(
        second.holder(),
        holder,
        "each provider is its own incarnation"
    );
    let err = start(second, descriptor("a"), cfg(), clock::system())
        .await
        .expect_err("a second process with the same host id must be refused");
    match &err {
        MembershipError::Provider(ProviderError::Conflict { id, holder: h, .. }) => {
            assert_eq!((id.as_str(), h.as_str()), ("a", holder.as_str()));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("\"a\"") && msg.contains(&holder), "{msg}");

    let beats = a.counters().beats;
    tokio::time::sleep(BEAT * 4).await;
    assert_eq!(a.fence_state(), None);
    assert_eq!(a.check_lease(), Ok(()));
    assert!(a.counters().beats >= beats + 2, "{:?}", a.counters());
    let probe = SqliteProvider::open(&opts(&dir.db()), "probe").unwrap();
    assert_eq!(probe.read("a").await.unwrap().unwrap().holder, holder);
}

#[tokio::test]
async fn a_row_deleted_under_a_live_host_fences_it_and_is_not_re_created() {
    let dir = TempDir::new("deleted");
    let a = host(SqliteProvider::open(&opts(&dir.db()), "a").unwrap(), "a").await;
    // Deleted behind the change log's back: only the host's own renewal can notice.
    assert_eq!(
        third_party(&dir.db(), "DELETE FROM sigx_leases WHERE id = 'a'"),
        1
    );
    let took = fenced_within(&a, BEAT * 3).await;
    assert_eq!(
        a.fence_state(),
        Some(FenceReason::Lost(LostCause::Gone)),
        "after {took:?}"
    );
    tokio::time::sleep(BEAT * 3).await;
    let probe = SqliteProvider::open(&opts(&dir.db()), "probe").unwrap();
    assert_eq!(probe.read("a").await.unwrap(), None, "re-created");
}

#[tokio::test]
async fn a_row_rewritten_by_another_incarnation_fences_its_host() {
    let dir = TempDir::new("rewritten");
    let a = host(SqliteProvider::open(&opts(&dir.db()), "a").unwrap(), "a").await;
    // Another process of the same host id (say one from before this fix) writes the row.
    assert_eq!(
        third_party(
            &dir.db(),
            "UPDATE sigx_leases SET holder = 'a/0000000000000000' WHERE id = 'a'"
        ),
        1
    );
    fenced_within(&a, BEAT * 3).await;
    assert_eq!(
        a.fence_state(),
        Some(FenceReason::Lost(LostCause::HolderChanged {
            holder: "a/0000000000000000".into()
        }))
    );
}

mod support;

/// A free local TCP port (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Sidecar {
    child: tokio::process::Child,
    socket: PathBuf,
    health: std::net::SocketAddr,
    log: PathBuf,
}

/// A real `sigx-sidecar` process on the shared SQLite file, under `host_id`.
fn sidecar(dir: &Path, name: &str, host_id: &str) -> Sidecar {
    let socket = dir.join(format!("{name}.sock"));
    let health: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mesh = format!("127.0.0.1:{}", free_port());
    let log = dir.join(format!("{name}.log"));
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sigx-sidecar"))
        .env_clear()
        .env("SIGX_LOG", "info")
        .args(["--membership", "sqlite", "--host-id", host_id])
        .arg("--sqlite-path")
        .arg(dir.join("membership.db"))
        .arg("--socket")
        .arg(&socket)
        .args(["--health-addr", &health.to_string()])
        .args(["--mesh-addr", &mesh, "--advertise", &mesh])
        .args(["--secret", "identity-test-secret"])
        .args(["--beat-ms", "100", "--ttl-ms", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sigx-sidecar");
    Sidecar {
        child,
        socket,
        health,
        log,
    }
}

async fn attach_app(s: &Sidecar) -> support::TestApp {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the sidecar never made its socket"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let register = sigx_proto::v1::Register {
        actors: vec![support::actor_spec("Counter", false, 0)],
        workers: vec![],
        app_name: "identity".into(),
    };
    support::TestApp::start(&s.socket, register, Default::default())
        .await
        .expect("the app registers")
}

/// Two real `sigx-sidecar` processes started with the same `--host-id` on one SQLite file: the
/// second is refused (it never becomes ready, and says why, naming the id and the holder), while
/// the first keeps its lease and keeps serving calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_one_host_id_the_second_is_refused_the_first_keeps_serving() {
    let dir = TempDir::new("processes");
    let mut first = sidecar(&dir.0, "first", "dup");
    let _first_app = attach_app(&first).await;
    support::wait_ready(first.health, Duration::from_secs(20)).await;
    let mut calls = support::client(&first.socket).await;
    support::call(&mut calls, "Counter", "k", "echo", b"1", 5_000)
        .await
        .expect("the first process serves");
    let probe = SqliteProvider::open(&opts(&dir.db()), "probe").unwrap();
    let holder = probe.read("dup").await.unwrap().expect("a row").holder;
    assert!(holder.starts_with("dup/"), "{holder}");

    let mut second = sidecar(&dir.0, "second", "dup");
    let _second_app = attach_app(&second).await;
    // The refusal is logged, naming the id and the first process's holder.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(&second.log).unwrap_or_default();
        if log.contains("\"dup\" is held by") && log.contains(&holder) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second process never reported the conflict:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Several TTLs later: the second never became ready, the first never fenced.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_ne!(support::http_get(second.health, "/readyz").await, 200);
        assert_eq!(support::http_get(first.health, "/readyz").await, 200);
        assert_eq!(support::http_get(first.health, "/livez").await, 200);
    }
    support::call(&mut calls, "Counter", "k", "echo", b"2", 5_000)
        .await
        .expect("the first process still serves");
    assert_eq!(probe.read("dup").await.unwrap().unwrap().holder, holder);
    assert!(
        first.child.try_wait().unwrap().is_none(),
        "the first exited"
    );
    let _ = second.child.start_kill();
    let _ = first.child.start_kill();
}
