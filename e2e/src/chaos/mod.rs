//! The chaos harness (test-only): a fleet of real `sigx-sidecar` + `counter-app` process pairs on
//! 127.0.0.x sharing one SQLite membership file (or one PostgreSQL database), a load generator with a ledger of every call,
//! and the faults of a real fleet — SIGTERM rolling restarts (each pod replaced by a new
//! incarnation, like a Deployment rollout with maxSurge 1), kill -9, SIGSTOP/SIGCONT past the
//! TTL (a VM suspend) — with a report: calls sent, succeeded, failed by kind, outcome-unknown,
//! duplicate activations, handoff time per restart.
//!
//! Pods stop in the order Kubernetes stops a pod with a native sidecar: the app gets SIGTERM
//! first (the SDK asks its sidecar to drain it, then exits), the sidecar after the app has gone.

pub mod ledger;
pub mod reminders;
pub mod trace;

pub use ledger::{Ledger, Load, Outcome, Report};

use rustix::process::{Pid, Signal, kill_process};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Timings and sizes of a fleet.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Pods at the start.
    pub hosts: usize,
    /// Membership beat, milliseconds.
    pub beat_ms: u64,
    /// Membership TTL, milliseconds.
    pub ttl_ms: u64,
    /// Extra time every Counter turn takes (widens overlap windows).
    pub turn_delay_ms: u64,
    /// Per-call deadline the load uses, milliseconds.
    pub call_timeout_ms: u64,
    /// A PostgreSQL connection string for the actor state (and reminders); `None` = the
    /// sidecars' default, one SQLite state file beside the membership file.
    pub state_dsn: Option<String>,
    /// A PostgreSQL connection string for the membership (`--membership postgres`, a fleet of
    /// machines); `None` = one SQLite membership file in the fleet's directory. Without
    /// `state_dsn` the actor state follows it into the same database.
    pub membership_dsn: Option<String>,
    /// How the pods started first authenticate the mesh ([`Fleet::set_auth`] changes it for
    /// the pods started later).
    pub auth: MeshAuthStep,
    /// How often sidecars re-read their secret files (`--secret-reload-ms`; 0: never).
    pub secret_reload_ms: u64,
}

/// How a pod authenticates the mesh: the three steps of switching a cluster between
/// `--insecure` and a secret (README, "Switching between insecure and a secret").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MeshAuthStep {
    /// Sign with the fleet's secret (and accept a rotation's second one); refuse the rest.
    #[default]
    Secret,
    /// Sign with the secret, and also accept requests without a MAC (`--accept-unsigned`).
    SecretAcceptingUnsigned,
    /// No secret (`--insecure`).
    Insecure,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            hosts: 3,
            beat_ms: 200,
            ttl_ms: 1_000,
            turn_delay_ms: 0,
            call_timeout_ms: 10_000,
            state_dsn: None,
            membership_dsn: None,
            auth: MeshAuthStep::Secret,
            secret_reload_ms: 10_000,
        }
    }
}

/// Where the binaries are: `SIGX_BIN_DIR`, else the cargo target directory of this test.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("SIGX_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> → target/<profile>
    let mut dir = exe.parent().expect("deps dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace binaries first (`cargo build --workspace --bins`, \
         which `make test` does), or set SIGX_BIN_DIR",
        path.display()
    );
    path
}

/// One pod: a sidecar and its app.
pub struct Pod {
    /// The host id (a new incarnation per pod).
    pub id: String,
    /// The pod's loopback address.
    pub ip: String,
    /// The health endpoint.
    pub health: SocketAddr,
    /// The app socket.
    pub socket: PathBuf,
    sidecar: Child,
    app: Child,
    /// False once stopped or killed.
    pub alive: bool,
}

impl Pod {
    fn pids(&self) -> Vec<i32> {
        [self.sidecar.id(), self.app.id()]
            .into_iter()
            .flatten()
            .map(|p| p as i32)
            .collect()
    }
}

fn signal(pid: i32, sig: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = kill_process(pid, sig);
    }
}

/// A fleet of pods on one machine.
pub struct Fleet {
    /// The fleet's scratch directory (logs, sockets, the membership and state DBs, trace).
    pub dir: tempfile::TempDir,
    cfg: FleetConfig,
    /// Every pod ever started, in order.
    pub pods: Vec<Pod>,
    /// The sockets the load may call through (live, not terminating).
    pub targets: Arc<RwLock<Vec<PathBuf>>>,
    secret_file: PathBuf,
    /// The second secret new pods accept (a rotation in progress), if any.
    accept_file: Option<PathBuf>,
    /// Secret files written so far (each rotation step gets new files).
    secret_files: u32,
    /// How pods started from now on authenticate the mesh.
    auth: MeshAuthStep,
    generation: u32,
    app_restarts: u32,
    /// Whole-pod freezes (SIGSTOP … SIGCONT), for the duplicate-activation checker.
    freezes: Vec<trace::Freeze>,
    /// Pods stopped and not yet resumed: (pod index, monotonic ns of the stop).
    frozen: Vec<(usize, u64)>,
}

async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(
        Duration::from_millis(500),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .ok()?
    .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_millis(500), s.read_to_string(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

/// CLOCK_MONOTONIC in nanoseconds: the clock the counter app's trace lines are stamped with.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

impl Fleet {
    /// Starts `cfg.hosts` pods and waits until every one is ready.
    pub async fn start(cfg: FleetConfig) -> Fleet {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret_file = dir.path().join("secret");
        std::fs::write(&secret_file, format!("chaos-{}", std::process::id())).unwrap();
        let mut fleet = Fleet {
            dir,
            auth: cfg.auth,
            cfg,
            pods: Vec::new(),
            targets: Arc::default(),
            secret_file,
            accept_file: None,
            secret_files: 0,
            generation: 0,
            app_restarts: 0,
            freezes: Vec::new(),
            frozen: Vec::new(),
        };
        for _ in 0..fleet.cfg.hosts {
            fleet.spawn_pod().await;
        }
        fleet
    }

    /// The trace file every app appends to.
    pub fn trace_file(&self) -> PathBuf {
        self.dir.path().join("trace.jsonl")
    }

    /// The TTL.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.cfg.ttl_ms)
    }

    /// Starts a new pod (a new incarnation), waits until it is ready, adds it to the targets.
    pub async fn spawn_pod(&mut self) -> usize {
        self.generation += 1;
        let n = self.generation;
        let ip = format!("127.0.0.{}", 1 + (n % 250));
        let id = format!("pod-{n}");
        let health: SocketAddr = format!("{ip}:{}", free_port(&ip)).parse().unwrap();
        let socket = self.dir.path().join(format!("{id}.sock"));
        let log = |what: &str| {
            std::fs::File::create(self.dir.path().join(format!("{id}.{what}.log"))).unwrap()
        };
        let mut sidecar = Command::new(bin("sigx-sidecar"));
        if let Some(dsn) = &self.cfg.state_dsn {
            sidecar.args(["--state", "postgres", "--state-dsn", dsn]);
        }
        sidecar.env_clear();
        match &self.cfg.membership_dsn {
            // In the environment, as an operator would pass a secret.
            Some(dsn) => sidecar
                .args(["--membership", "postgres"])
                .env("SIGX_MEMBERSHIP_DSN", dsn),
            None => sidecar
                .args(["--membership", "sqlite", "--sqlite-path"])
                .arg(self.dir.path().join("membership.db")),
        };
        let sidecar = sidecar
            .env("SIGX_LOG", "info")
            .args(["--host-id", &id])
            .args(self.auth_args())
            .arg("--socket")
            .arg(&socket)
            .args(["--health-addr", &health.to_string()])
            .args([
                "--mesh-addr",
                &format!("{ip}:0"),
                "--advertise",
                &format!("{ip}:0"),
            ])
            .args(["--beat-ms", &self.cfg.beat_ms.to_string()])
            .args(["--ttl-ms", &self.cfg.ttl_ms.to_string()])
            .args(["--drain-timeout-ms", "10000"])
            .env("NODE_NAME", "chaos-node")
            .stdout(Stdio::null())
            .stderr(log("sidecar"))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sigx-sidecar");
        // The native sidecar starts first; the app once the socket exists.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "{id}: the sidecar never created its socket"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let app = Command::new(bin("counter-app"))
            .env_clear()
            .env("SIGX_LOG", "warn")
            .env("SIGX_SOCKET", &socket)
            .env("COUNTER_TRACE_FILE", self.trace_file())
            .env("COUNTER_TURN_DELAY_MS", self.cfg.turn_delay_ms.to_string())
            .stdout(Stdio::null())
            .stderr(log("app"))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn counter-app");
        let mut pod = Pod {
            id,
            ip,
            health,
            socket,
            sidecar,
            app,
            alive: true,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_status(pod.health, "/readyz").await == Some(200) {
                break;
            }
            if let Ok(Some(status)) = pod.sidecar.try_wait() {
                panic!(
                    "{}: the sidecar exited early ({status}); see {}",
                    pod.id,
                    self.log_path(&pod.id, "sidecar").display()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: not ready within 30 s; see its logs in {}",
                pod.id,
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.targets.write().unwrap().push(pod.socket.clone());
        self.pods.push(pod);
        self.pods.len() - 1
    }

    /// The log file of a pod's process.
    pub fn log_path(&self, id: &str, what: &str) -> PathBuf {
        self.dir.path().join(format!("{id}.{what}.log"))
    }

    fn untarget(&self, i: usize) {
        let socket = self.pods[i].socket.clone();
        self.targets.write().unwrap().retain(|s| *s != socket);
    }

    /// Stops pod `i` as Kubernetes does: no new calls through it, SIGTERM to the app (which
    /// drains through its sidecar and exits), then SIGTERM to the sidecar. Returns how long it
    /// took and the sidecar's exit code.
    pub async fn terminate(&mut self, i: usize) -> (Duration, Option<i32>) {
        self.untarget(i);
        // Calls already made through this pod finish (its app's callers are going away too).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = Instant::now();
        let pod = &mut self.pods[i];
        if let Some(pid) = pod.app.id() {
            signal(pid as i32, Signal::TERM);
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), pod.app.wait()).await;
        if let Some(pid) = pod.sidecar.id() {
            signal(pid as i32, Signal::TERM);
        }
        let code = match tokio::time::timeout(Duration::from_secs(30), pod.sidecar.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = pod.sidecar.start_kill();
                None
            }
        };
        pod.alive = false;
        (t.elapsed(), code)
    }

    /// kill -9 of both processes of pod `i`.
    pub async fn kill9(&mut self, i: usize) {
        self.untarget(i);
        let pod = &mut self.pods[i];
        for pid in pod.pids() {
            signal(pid, Signal::KILL);
        }
        let _ = pod.sidecar.wait().await;
        let _ = pod.app.wait().await;
        pod.alive = false;
    }

    /// SIGSTOP both processes of pod `i` (a VM suspend).
    pub fn sigstop(&mut self, i: usize) {
        self.untarget(i);
        self.frozen.push((i, monotonic_ns()));
        for pid in self.pods[i].pids() {
            signal(pid, Signal::STOP);
        }
    }

    /// SIGCONT both processes of pod `i`.
    pub fn sigcont(&mut self, i: usize) {
        if let Some(k) = self.frozen.iter().position(|(p, _)| *p == i) {
            let (_, stopped_ns) = self.frozen.remove(k);
            self.freezes.push(trace::Freeze {
                host: self.pods[i].id.clone(),
                stopped_ns,
                resumed_ns: monotonic_ns(),
            });
        }
        for pid in self.pods[i].pids() {
            signal(pid, Signal::CONT);
        }
    }

    /// SIGSTOP pod `i`'s sidecar alone: its app keeps running (issue 12: a stalled sidecar).
    pub fn sigstop_sidecar(&mut self, i: usize) {
        self.untarget(i);
        if let Some(pid) = self.pods[i].sidecar.id() {
            signal(pid as i32, Signal::STOP);
        }
    }

    /// SIGCONT pod `i`'s sidecar.
    pub fn sigcont_sidecar(&mut self, i: usize) {
        if let Some(pid) = self.pods[i].sidecar.id() {
            signal(pid as i32, Signal::CONT);
        }
    }

    /// kill -9 of pod `i`'s app alone, then a new app process on the same socket: an app
    /// container restart while the sidecar lives (issue 12, hole B). Returns once the new app
    /// is started (not once the sidecar has taken it back; callers see that through probes).
    pub async fn restart_app(&mut self, i: usize) {
        let trace = self.trace_file();
        self.app_restarts += 1;
        let log = self.dir.path().join(format!(
            "{}.app.restart-{}.log",
            self.pods[i].id, self.app_restarts
        ));
        let pod = &mut self.pods[i];
        if let Some(pid) = pod.app.id() {
            signal(pid as i32, Signal::KILL);
        }
        let _ = pod.app.wait().await;
        pod.app = Command::new(bin("counter-app"))
            .env_clear()
            .env("SIGX_LOG", "warn")
            .env("SIGX_SOCKET", &pod.socket)
            .env("COUNTER_TRACE_FILE", trace)
            .env("COUNTER_TURN_DELAY_MS", self.cfg.turn_delay_ms.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn counter-app");
    }

    /// An HTTP probe of pod `i`.
    pub async fn probe(&self, i: usize, path: &str) -> Option<u16> {
        http_status(self.pods[i].health, path).await
    }

    /// The mesh secret pods started from now on sign with.
    pub fn secret(&self) -> String {
        std::fs::read_to_string(&self.secret_file).expect("the fleet's secret file")
    }

    /// A rotation step: pods started from now on sign with `sign` and also accept `accept`
    /// (`--secret-accept-file`), as the operator renders them for `spec.auth.secretRef` and
    /// `spec.auth.acceptSecretRef`. Running pods keep what they started with until replaced.
    pub fn set_secrets(&mut self, sign: &str, accept: Option<&str>) {
        self.secret_files += 1;
        let n = self.secret_files;
        let write = |name: String, value: &str| {
            let path = self.dir.path().join(name);
            std::fs::write(&path, value).unwrap();
            path
        };
        self.secret_file = write(format!("secret-{n}"), sign);
        self.accept_file = accept.map(|a| write(format!("accept-{n}"), a));
    }

    /// Edits the secret files of the pods started last in place, as the kubelet updates the
    /// volume of an edited Secret (a new file swapped in by a rename): running pods see it only
    /// by reloading. `accept` must name a file they were started with (`set_secrets`).
    pub fn edit_secrets_in_place(&self, sign: &str, accept: Option<&str>) {
        let swap = |path: &Path, value: &str| {
            let tmp = path.with_extension("edit");
            std::fs::write(&tmp, value).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        };
        swap(&self.secret_file, sign);
        if let Some(value) = accept {
            let path = self
                .accept_file
                .as_ref()
                .expect("pods started with an accepted secret");
            swap(path, value);
        }
    }

    /// How often each pod's sidecar log (in [`Fleet::pods`] order) contains `needle`.
    pub fn sidecar_logs_matching(&self, needle: &str) -> Vec<usize> {
        self.pods
            .iter()
            .map(|p| {
                std::fs::read_to_string(self.log_path(&p.id, "sidecar"))
                    .unwrap_or_default()
                    .matches(needle)
                    .count()
            })
            .collect()
    }

    /// Calls `get` on `Counter/c<k>` for each k in `keys` through pod `i`'s socket, each with a
    /// 2 s deadline; returns how many failed.
    pub async fn failed_gets_through(&self, i: usize, keys: impl Iterator<Item = usize>) -> usize {
        let c = client(&self.pods[i].socket).with_timeout(Duration::from_secs(2));
        let mut failed = 0;
        for k in keys {
            if c.call_json::<(), i64>("Counter", &format!("c{k}"), "get", &())
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        failed
    }

    /// Stops `load` (on `Counter/c0..c<counters>`), reads the final values through a live pod
    /// and judges the run, duplicate activations from the trace included; prints the report.
    pub async fn judge_load(
        &self,
        load: Load,
        counters: usize,
        scenario: &str,
        handoffs: Vec<Duration>,
    ) -> Report {
        let ledger = load.stop().await;
        let live = self.pods.iter().find(|p| p.alive).expect("a live pod");
        let actors: Vec<String> = (0..counters).map(|k| format!("Counter/c{k}")).collect();
        let finals = ledger::read_finals(&client(&live.socket), &actors).await;
        let mut report = Report::judge(
            scenario,
            &ledger,
            &finals,
            trace::duplicate_activations(&self.trace_file()),
        );
        report.handoffs = handoffs;
        println!("{}", report.render());
        report
    }

    /// A step of switching between `--insecure` and a secret: pods started from now on
    /// authenticate the mesh as `step` says, as the operator renders them for `spec.auth`
    /// (`insecure: true`, `acceptUnsigned: true`, neither). Running pods keep what they started
    /// with until replaced.
    pub fn set_auth(&mut self, step: MeshAuthStep) {
        self.auth = step;
    }

    /// The sidecar arguments of [`Fleet::set_auth`] and [`Fleet::set_secrets`].
    fn auth_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if self.auth == MeshAuthStep::Insecure {
            args.push("--insecure".into());
            return args;
        }
        args.push("--secret-reload-ms".into());
        args.push(self.cfg.secret_reload_ms.to_string().into());
        args.push("--secret-file".into());
        args.push(self.secret_file.clone().into());
        if let Some(accept) = &self.accept_file {
            args.push("--secret-accept-file".into());
            args.push(accept.clone().into());
        }
        if self.auth == MeshAuthStep::SecretAcceptingUnsigned {
            args.push("--accept-unsigned".into());
        }
        args
    }

    /// Replaces every live pod in turn, like a Deployment rollout with maxSurge 1 and
    /// maxUnavailable 0: start the new pod, wait until it is ready, then stop an old one.
    /// Returns the stop time of each old pod.
    pub async fn rolling_restart(&mut self) -> Vec<Duration> {
        let old: Vec<usize> = (0..self.pods.len())
            .filter(|&i| self.pods[i].alive)
            .collect();
        let mut handoffs = Vec::new();
        for i in old {
            self.spawn_pod().await;
            let (took, code) = self.terminate(i).await;
            assert_eq!(code, Some(0), "{} did not exit cleanly", self.pods[i].id);
            handoffs.push(took);
        }
        handoffs
    }

    /// The pods frozen whole and resumed so far (for [`trace::duplicate_activations_around`]).
    pub fn freezes(&self) -> &[trace::Freeze] {
        &self.freezes
    }

    /// Stops every live pod.
    pub async fn shutdown(&mut self) {
        for i in 0..self.pods.len() {
            if self.pods[i].alive {
                self.sigcont(i);
                self.terminate(i).await;
            }
        }
    }
}

/// A failing test keeps the evidence: the fleet's logs, trace and membership file are copied
/// out of the scratch directory (which is deleted on drop) and the copy is named on stderr, so
/// a CI failure can be read after the run.
impl Drop for Fleet {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let keep = std::env::temp_dir().join(format!(
            "sigx-chaos-failed-{}-{}",
            std::process::id(),
            self.generation
        ));
        if std::fs::create_dir_all(&keep).is_err() {
            return;
        }
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                let path = entry.path();
                let keepable = path
                    .extension()
                    .is_some_and(|e| e == "log" || e == "jsonl" || e == "db");
                if keepable && let Some(name) = path.file_name() {
                    let _ = std::fs::copy(&path, keep.join(name));
                }
            }
        }
        eprintln!("the fleet's logs are kept in {}", keep.display());
    }
}

/// Where an app socket path leads (for tests that need a client).
pub fn client(socket: &Path) -> sigx_sdk::Client {
    sigx_sdk::Client::lazy(socket)
}
