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

async fn attach_app(socket: &Path) -> support::TestApp {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
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
    support::TestApp::start(socket, register, Default::default())
        .await
        .expect("the app registers")
}

/// Two real `sigx-sidecar` processes started with the same `--host-id` on one SQLite file: the
/// second sees the record renewed by a live holder and exits 64 (a configuration error), naming
/// the id and the holder, instead of retrying its join forever; the first keeps its lease and
/// keeps serving calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_one_host_id_the_second_exits_64_the_first_keeps_serving() {
    let dir = TempDir::new("processes");
    let mut first = sidecar(&dir.0, "first", "dup");
    let _first_app = attach_app(&first.socket).await;
    support::wait_ready(first.health, Duration::from_secs(20)).await;
    let mut calls = support::client(&first.socket).await;
    support::call(&mut calls, "Counter", "k", "echo", b"1", 5_000)
        .await
        .expect("the first process serves");
    let probe = SqliteProvider::open(&opts(&dir.db()), "probe").unwrap();
    let holder = probe.read("dup").await.unwrap().expect("a row").holder;
    assert!(holder.starts_with("dup/"), "{holder}");

    let mut second = sidecar(&dir.0, "second", "dup");
    // It may exit before its app has registered (its socket gone under the connect): what is
    // judged is the exit, so the attach runs on its own and a failed one ends only its task.
    let second_socket = second.socket.clone();
    let _second_app = tokio::spawn(async move { attach_app(&second_socket).await });
    let status = tokio::time::timeout(Duration::from_secs(10), second.child.wait())
        .await
        .expect("the second process never exited")
        .unwrap();
    let log = std::fs::read_to_string(&second.log).unwrap_or_default();
    assert_eq!(status.code(), Some(64), "{log}");
    assert!(
        log.contains("host id \"dup\" is in use") && log.contains(&holder),
        "the exit does not name the id and the live holder:\n{log}"
    );
    // Meanwhile and after: the first never fenced and still serves.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
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
    let _ = first.child.start_kill();
}

/// A process with an explicit `--host-id` killed with SIGKILL and started again under the same
/// id, with no other host to expire its record: the new incarnation watches the dead one's
/// record, sees it unrenewed for its TTL plus the margin, expires it, and joins (before, it
/// retried its join forever and never became ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_the_same_host_id_joins_once_the_dead_record_lapses() {
    let dir = TempDir::new("restart");
    let mut first = sidecar(&dir.0, "first", "again");
    let first_app = attach_app(&first.socket).await;
    support::wait_ready(first.health, Duration::from_secs(20)).await;
    let probe = SqliteProvider::open(&opts(&dir.db()), "probe").unwrap();
    let dead = probe.read("again").await.unwrap().expect("a row").holder;
    first.child.kill().await.unwrap();
    drop(first_app);

    let second = sidecar(&dir.0, "second", "again");
    let _second_app = attach_app(&second.socket).await;
    // TTL 600 ms + margin 60 ms, polled every 75 ms: ready well within a few seconds.
    support::wait_ready(second.health, Duration::from_secs(10)).await;
    let now = probe
        .read("again")
        .await
        .unwrap()
        .expect("the new row")
        .holder;
    assert!(now.starts_with("again/") && now != dead, "{now} vs {dead}");
    let log = std::fs::read_to_string(&second.log).unwrap_or_default();
    assert!(log.contains("lapsed; expired it"), "{log}");
}
