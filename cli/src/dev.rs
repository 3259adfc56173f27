//! `sigx dev up`: a local cluster on this machine. N sidecars on 127.0.0.1, each with a counter
//! app (or the user's own app, `--app`) beside it, sharing a SQLite membership file and a
//! generated secret; optionally a workload that checks single activation end to end (every
//! increment counted exactly once).

#[path = "dev_app.rs"]
mod app;
#[path = "dev_workload.rs"]
mod workload;
pub use app::{AppSpec, pair as pair_apps};
use workload::workload;

use crate::duration::human;
use crate::{EXIT_FAILED, EXIT_USAGE};
use sigx_sdk::{Client, MemberFilter};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The longest Unix socket path Linux accepts is 107 bytes; leave room.
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Membership {
    /// `none` for one host, `sqlite` for more.
    Auto,
    /// Independent single hosts (only sensible with --hosts 1).
    None,
    /// One SQLite file in --dir shared by every host.
    Sqlite,
    /// One PostgreSQL database (--membership-dsn) shared by every host, as a fleet of VMs or
    /// bare-metal machines would; actor state goes there too. Rows an earlier run left behind
    /// lapse after their TTL.
    Postgres,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Your own app:
  sigx dev up --app 'python3 examples/counter-python/counter.py'
      one host running your app beside its sidecar
  sigx dev up --hosts 3 --app 'node dist/app.js'
      three hosts, each running the same app
  sigx dev up --app 'python3 counter.py' --actors Counter --app 'node greeter.js' --actors Greeter \\
              --app 'go run ./cmd/echo' --workers Echo
      a heterogeneous cluster: host 1 runs the first --app, host 2 the second, and so on
      (with more hosts than apps they take the apps in turn); --actors / --workers after an
      --app declare its types, as an ActorRole does: they reach its environment as SIGX_ACTORS /
      SIGX_WORKERS and its sidecar accepts a registration of exactly those types
Machines that share a PostgreSQL database instead of a file (membership and actor state):
  sigx dev up --hosts 3 --membership postgres --membership-dsn postgres://sigx:PW@db:5432/sigx
Every app runs through `sh -c` with SIGX_SOCKET (its sidecar's socket) and SIGX_HOST_INDEX in
its environment; its output is printed prefixed `host-N |` and kept in <dir>/host-N/app.log.
An app that exits is reported and started again (backoff 0.5 s doubling to 30 s), or with
--no-restart stops the cluster. Ctrl-C (or SIGTERM) stops the sidecars first, which drain their
apps (deactivating every actor through them), then stops the apps.")]
pub struct UpArgs {
    /// How many hosts (sidecar + app pairs) to start (default: 1, or one per --app).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub hosts: Option<u32>,
    /// Run COMMAND (through `sh -c`) as the app beside each sidecar instead of the counter app.
    /// Repeat it for a heterogeneous cluster (see below).
    #[arg(long = "app", value_name = "COMMAND")]
    pub apps: Vec<String>,
    /// The actor types (comma-separated) the --app before it serves.
    #[arg(long, value_name = "TYPES")]
    pub actors: Vec<String>,
    /// The worker types (comma-separated) the --app before it serves.
    #[arg(long, value_name = "TYPES")]
    pub workers: Vec<String>,
    /// Stop the cluster (exit 1) when an --app exits, instead of starting it again.
    #[arg(long)]
    pub no_restart: bool,
    /// The --app commands paired with their types (filled from the command line's order).
    #[arg(skip)]
    pub app_specs: Vec<AppSpec>,
    /// Where sockets, logs, the membership database and the secret go.
    #[arg(long, default_value = ".sigx")]
    pub dir: PathBuf,
    /// After start, increment this many counters once from every host, then check each final
    /// value (no lost or doubled increments). 0 = no workload.
    #[arg(long, default_value_t = 0)]
    pub workload: u32,
    /// Stop the cluster after the workload (and exit non-zero when its check failed) instead of
    /// waiting for Ctrl-C.
    #[arg(long)]
    pub exit_after_workload: bool,
    /// The membership provider the hosts share.
    #[arg(long, value_enum, default_value = "auto")]
    pub membership: Membership,
    /// The PostgreSQL connection string for --membership postgres (passed to every sidecar as
    /// SIGX_MEMBERSHIP_DSN, never on its command line).
    #[arg(long, env = "SIGX_MEMBERSHIP_DSN", hide_env_values = true)]
    pub membership_dsn: Option<String>,
    /// Where `sigx-sidecar` and `counter-app` are (default: next to this `sigx` binary; with
    /// --app only the sidecar is needed).
    #[arg(long, env = "SIGX_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Calls in flight per host during the workload.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// How long to wait for every host to be ready (and, clustered, to see every other host).
    #[arg(long, default_value = "60s", value_parser = crate::duration::parse)]
    pub ready_timeout: Duration,
    /// Membership heartbeat, milliseconds (passed to every sidecar; default: the sidecar's).
    #[arg(long)]
    pub beat_ms: Option<u64>,
    /// Membership TTL, milliseconds (passed to every sidecar; default: the sidecar's).
    #[arg(long)]
    pub ttl_ms: Option<u64>,
    /// Have every counter app append activation and turn events to <dir>/trace.jsonl.
    #[arg(long)]
    pub trace: bool,
}

/// Why `dev up` could not bring the cluster up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

pub(crate) fn io_err(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> UpError {
    move |e| UpError::Failed(format!("{what}: {e}"))
}

/// One started process and where its output goes.
pub(crate) struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
    exited: Option<std::process::ExitStatus>,
    /// Signal the process group, not only the process (`sh -c` and what it started).
    group: bool,
    /// The pid, kept after the child is reaped: it names the process group.
    pid: Option<rustix::process::Pid>,
    /// SIGTERM was sent: a second one would tell the sidecar to skip its graceful stop.
    termed: std::sync::atomic::AtomicBool,
}

impl Proc {
    fn spawn(name: String, mut cmd: Command, log: PathBuf) -> Result<Proc, UpError> {
        let out =
            std::fs::File::create(&log).map_err(io_err(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(io_err("clone a log file handle"))?;
        // Log files, not a terminal: no colour escapes.
        cmd.env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // A group of its own: Ctrl-C in the terminal reaches `sigx` only, which then stops
            // the children in the right order (sidecars first, so they can deactivate actors
            // through their apps).
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(io_err(format!("start {name}")))?;
        Ok(Proc {
            pid: Proc::pid_of(&child),
            name,
            child,
            log,
            exited: None,
            group: false,
            termed: Default::default(),
        })
    }

    /// `Some(status)` once the process has exited.
    fn poll_exit(&mut self) -> Option<std::process::ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Sends SIGTERM once: a sidecar reads a second SIGTERM as "skip the drain, exit fast".
    fn signal_term(&self) {
        if self.exited.is_some() || self.termed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.signal(rustix::process::Signal::TERM);
    }

    fn pid_of(child: &Child) -> Option<rustix::process::Pid> {
        child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32))
    }

    fn signal(&self, signal: rustix::process::Signal) {
        if let Some(pid) = self.pid {
            // The group's id is the process's: it was spawned as the leader of its own group.
            let _ = if self.group {
                rustix::process::kill_process_group(pid, signal)
            } else {
                rustix::process::kill_process(pid, signal)
            };
        }
    }

    /// For a group: waits until every process of the group has exited (`sh -c 'cd x && go run .'`
    /// outlives its shell), else kills them. `None` when they all exited within `grace`.
    async fn reap_group(&self, grace: Duration) -> Option<String> {
        let pid = self.pid.filter(|_| self.group)?;
        let deadline = Instant::now() + grace;
        while rustix::process::test_kill_process_group(pid).is_ok() {
            if Instant::now() >= deadline {
                self.signal(rustix::process::Signal::KILL);
                return Some(format!(
                    "{}: what it started did not stop within {}; killed",
                    self.name,
                    human(grace)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Waits up to `grace` for the process to exit after SIGTERM, then kills it.
    async fn stop(&mut self, grace: Duration) -> String {
        if let Some(status) = self.poll_exit() {
            if self.group {
                // What it started may still run.
                self.signal(rustix::process::Signal::TERM);
                if let Some(killed) = self.reap_group(grace).await {
                    return killed;
                }
            }
            return format!("{} had already exited ({status})", self.name);
        }
        self.signal_term();
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.exited = Some(status);
                if let Some(killed) = self.reap_group(grace).await {
                    return killed;
                }
                use std::os::unix::process::ExitStatusExt;
                if status.success() {
                    format!("{} stopped", self.name)
                } else if self.group && status.signal() == Some(libc_sigterm()) {
                    // The shell ended by the SIGTERM it was sent, its group with it: a stop.
                    format!("{} stopped (SIGTERM)", self.name)
                } else {
                    format!("{} stopped with {status}", self.name)
                }
            }
            _ => {
                if self.group {
                    self.signal(rustix::process::Signal::KILL);
                }
                let _ = self.child.kill().await;
                format!("{} did not stop within {}; killed", self.name, human(grace))
            }
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// SIGTERM's number, for reading an exit status.
fn libc_sigterm() -> i32 {
    rustix::process::Signal::TERM.as_raw()
}

/// One host of the local cluster.
struct DevHost {
    index: u32,
    socket: PathBuf,
    health: SocketAddr,
    sidecar: Proc,
    app: HostApp,
    host_id: Option<String>,
}

/// The app beside a sidecar: the bundled counter app, or the user's `--app`.
enum HostApp {
    Counter(Proc),
    User(app::UserApp),
}

impl HostApp {
    fn proc(&mut self) -> &mut Proc {
        match self {
            HostApp::Counter(p) => p,
            HostApp::User(u) => &mut u.proc,
        }
    }
}

impl UpArgs {
    /// The hosts to start: --hosts, else one per --app (at least one).
    pub fn host_count(&self) -> u32 {
        self.hosts
            .unwrap_or_else(|| u32::try_from(self.app_specs.len()).unwrap_or(32).max(1))
    }
}

fn free_ports(n: usize) -> Result<Vec<u16>, UpError> {
    // Hold every listener until all ports are picked, so no port is handed out twice.
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(io_err("pick a free port on 127.0.0.1"))?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(io_err("read a port"))
        })
        .collect()
}

fn find_bins(args: &UpArgs) -> Result<(PathBuf, PathBuf), UpError> {
    let user_apps = !args.app_specs.is_empty();
    let dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .map_err(io_err("find the sigx binary"))?
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| UpError::Failed("the sigx binary has no directory".into()))?,
    };
    let sidecar = dir.join("sigx-sidecar");
    let app = dir.join("counter-app");
    for bin in [&sidecar, &app] {
        if user_apps && bin == &app {
            continue; // the user's own app replaces counter-app
        }
        if !bin.is_file() {
            return Err(UpError::Usage(format!(
                "{} not found: `sigx dev up` runs the binaries next to `sigx` (or in \
                 --bin-dir). Build them with `cargo build -p sigx-sidecar -p \
                 sigx-example-counter -p sigx-cli`.",
                bin.display()
            )));
        }
    }
    Ok((sidecar, app))
}

/// A fresh random cluster secret in `<dir>/secret`, readable by this user only.
fn write_secret(dir: &Path) -> Result<PathBuf, UpError> {
    use rand::RngExt;
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = dir.join("secret");
    let bytes: [u8; 32] = rand::rng().random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_err(format!("create {}", path.display())))?;
    // `mode` applies only on creation; a file left by an earlier run is tightened too.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io_err(format!("chmod 600 {}", path.display())))?;
    f.write_all(hex.as_bytes())
        .map_err(io_err(format!("write {}", path.display())))?;
    Ok(path)
}

/// Refuses to share a directory with a running `dev up`; records this one's pid.
fn claim_dir(dir: &Path) -> Result<PathBuf, UpError> {
    let pid_file = dir.join("dev.pid");
    if let Ok(text) = std::fs::read_to_string(&pid_file)
        && let Ok(pid) = text.trim().parse::<i32>()
        && pid != std::process::id() as i32
        && let Some(pid) = rustix::process::Pid::from_raw(pid)
        && rustix::process::test_kill_process(pid).is_ok()
        // A pid left by a run that died may since belong to an unrelated process.
        && std::fs::read_to_string(format!("/proc/{}/comm", pid.as_raw_nonzero()))
            .is_ok_and(|comm| comm.trim() == "sigx")
    {
        return Err(UpError::Usage(format!(
            "another `sigx dev up` (pid {}) is using {}: stop it first, or pass another --dir",
            pid.as_raw_nonzero(),
            dir.display()
        )));
    }
    std::fs::write(&pid_file, std::process::id().to_string())
        .map_err(io_err(format!("write {}", pid_file.display())))?;
    Ok(pid_file)
}

/// The machine's name, from the kernel: every dev host runs here, so this is a fact, not a guess.
fn node_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `GET path` over plain HTTP/1.1; the status code.
async fn http_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 256];
        while !buf.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let line = String::from_utf8_lossy(&buf);
        line.split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {line:?}")))
    };
    tokio::time::timeout(Duration::from_secs(2), work)
        .await
        .map_err(|_| std::io::Error::other("no answer within 2s"))?
}

async fn start(args: &UpArgs) -> Result<Vec<DevHost>, UpError> {
    let (sidecar_bin, app_bin) = find_bins(args)?;
    let n_hosts = args.host_count();
    if (n_hosts as usize) < args.app_specs.len() {
        return Err(UpError::Usage(format!(
            "{} --app commands need at least as many hosts, but --hosts is {n_hosts}: each host \
             runs one app",
            args.app_specs.len()
        )));
    }
    let membership = match args.membership {
        Membership::Auto if n_hosts == 1 => Membership::None,
        Membership::Auto => Membership::Sqlite,
        m => m,
    };
    if membership == Membership::None && n_hosts > 1 {
        return Err(UpError::Usage(
            "--membership none with more than one host would start independent hosts that do \
             not know each other; use sqlite"
                .into(),
        ));
    }
    let dsn = match (membership, args.membership_dsn.as_deref()) {
        (Membership::Postgres, Some(d)) if !d.trim().is_empty() => Some(d.trim().to_string()),
        (Membership::Postgres, _) => {
            return Err(UpError::Usage(
                "--membership postgres needs --membership-dsn (or SIGX_MEMBERSHIP_DSN): the                  connection string of a database every host can reach, e.g.                  postgres://USER:PASSWORD@HOST:5432/DATABASE"
                    .into(),
            ));
        }
        (_, Some(_)) => {
            return Err(UpError::Usage(
                "--membership-dsn only applies to --membership postgres".into(),
            ));
        }
        (_, None) => None,
    };
    std::fs::create_dir_all(&args.dir).map_err(io_err(format!("create {}", args.dir.display())))?;
    claim_dir(&args.dir)?;
    let secret = write_secret(&args.dir)?;
    let db = args.dir.join("membership.db");
    if membership == Membership::Sqlite {
        // A fresh cluster: rows of an earlier run's hosts would only linger until their TTL.
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    let node = node_name();
    let ports = free_ports(2 * n_hosts as usize)?;
    let mut hosts = Vec::new();
    for i in 1..=n_hosts {
        // Hosts take the --app commands in turn.
        let spec = (!args.app_specs.is_empty())
            .then(|| &args.app_specs[(i as usize - 1) % args.app_specs.len()]);
        let dir = args.dir.join(format!("host-{i}"));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        let socket = dir.join("sidecar.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(UpError::Usage(format!(
                "the socket path {} is longer than {MAX_SOCKET_PATH} bytes (Unix sockets allow \
                 107): pass a shorter --dir",
                socket.display()
            )));
        }
        let health: SocketAddr = ([127, 0, 0, 1], ports[2 * (i as usize - 1)]).into();
        let mesh: SocketAddr = ([127, 0, 0, 1], ports[2 * (i as usize - 1) + 1]).into();

        let mut cmd = Command::new(&sidecar_bin);
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--health-addr")
            .arg(health.to_string())
            .arg("--mesh-addr")
            .arg(mesh.to_string())
            .arg("--advertise")
            .arg(mesh.to_string())
            .arg("--pod-name")
            .arg(format!("dev-{i}"))
            .arg("--membership")
            .arg(match membership {
                Membership::Sqlite => "sqlite",
                Membership::Postgres => "postgres",
                _ => "none",
            })
            .arg("--sqlite-path")
            .arg(&db)
            .arg("--secret-file")
            .arg(&secret);
        if let Some(node) = &node {
            cmd.arg("--node").arg(node);
        }
        // In the environment, not argv: the DSN holds the password.
        cmd.env_remove("SIGX_MEMBERSHIP_DSN");
        if let Some(dsn) = &dsn {
            cmd.env("SIGX_MEMBERSHIP_DSN", dsn);
        }
        if let Some(beat) = args.beat_ms {
            cmd.arg("--beat-ms").arg(beat.to_string());
        }
        if let Some(ttl) = args.ttl_ms {
            cmd.arg("--ttl-ms").arg(ttl.to_string());
        }
        // Declared types hold the app's registration to exactly them, as an ActorRole does; the
        // sidecar must not inherit a declaration from this shell either.
        cmd.env_remove("SIGX_ACTORS").env_remove("SIGX_WORKERS");
        if let Some(spec) = spec {
            if let Some(a) = &spec.actors {
                cmd.arg("--actors").arg(a);
            }
            if let Some(w) = &spec.workers {
                cmd.arg("--workers").arg(w);
            }
        }
        // Host descriptors carry no health address: `sigx dashboard --dir` reads it here.
        std::fs::write(dir.join("health.addr"), format!("{health}\n")).map_err(io_err(format!(
            "write {}",
            dir.join("health.addr").display()
        )))?;
        let sidecar = Proc::spawn(format!("sidecar {i}"), cmd, dir.join("sidecar.log"))?;

        let app = match spec {
            Some(spec) => {
                HostApp::User(app::UserApp::start(i, spec, &socket, dir.join("app.log")).await?)
            }
            None => {
                let mut cmd = Command::new(&app_bin);
                cmd.arg("--socket").arg(&socket);
                if args.trace {
                    cmd.env("COUNTER_TRACE_FILE", args.dir.join("trace.jsonl"));
                }
                HostApp::Counter(Proc::spawn(
                    format!("counter-app {i}"),
                    cmd,
                    dir.join("app.log"),
                )?)
            }
        };
        hosts.push(DevHost {
            index: i,
            socket,
            health,
            sidecar,
            app,
            host_id: None,
        });
    }
    Ok(hosts)
}

/// A process that exited during start-up, with the end of its log.
fn early_exit(hosts: &mut [DevHost]) -> Option<UpError> {
    for h in hosts.iter_mut() {
        for p in [&mut h.sidecar, h.app.proc()] {
            if let Some(status) = p.poll_exit() {
                return Some(UpError::Failed(format!(
                    "{} exited during start-up ({status}); the end of {}:\n{}",
                    p.name,
                    p.log.display(),
                    p.log_tail(15)
                )));
            }
        }
    }
    None
}

/// Waits until every host answers `/readyz` with 200 and, when there are several, every host's
/// view shows all of them active.
async fn wait_ready(hosts: &mut [DevHost], timeout: Duration) -> Result<(), UpError> {
    let deadline = Instant::now() + timeout;
    let n = hosts.len();
    loop {
        if let Some(e) = early_exit(hosts) {
            return Err(e);
        }
        let mut pending = Vec::new();
        for h in hosts.iter_mut() {
            if !matches!(http_status(h.health, "/readyz").await, Ok(200)) {
                pending.push(format!("host {} is not ready (/readyz)", h.index));
                continue;
            }
            let Ok(client) = Client::connect(&h.socket).await else {
                pending.push(format!("host {}'s socket does not answer", h.index));
                continue;
            };
            let client = client.with_timeout(Duration::from_secs(2));
            if h.host_id.is_none() {
                h.host_id = client
                    .status()
                    .await
                    .ok()
                    .and_then(|s| s.host)
                    .map(|d| d.id);
            }
            match client.members(&MemberFilter::active()).await {
                Ok(m) if m.hosts.len() >= n => {}
                Ok(m) => pending.push(format!(
                    "host {} sees {} of {n} hosts active",
                    h.index,
                    m.hosts.len()
                )),
                Err(e) => pending.push(format!("host {}: members: {e}", h.index)),
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // The first host that is not ready usually says why in its log.
            let first = pending
                .first()
                .and_then(|p| p.split_whitespace().nth(1))
                .and_then(|i| i.trim_end_matches('\'').parse::<u32>().ok())
                .and_then(|i| hosts.iter().find(|h| h.index == i));
            let tail = first
                .map(|h| {
                    format!(
                        "\nthe end of {}:\n{}",
                        h.sidecar.log.display(),
                        h.sidecar.log_tail(8)
                    )
                })
                .unwrap_or_default();
            return Err(UpError::Failed(format!(
                "the cluster was not ready within {}: {}{tail}",
                human(timeout),
                pending.join("; ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGINT and SIGTERM, listened to from the start: the children run in process groups of their
/// own, so a signal that killed `sigx` by default would orphan them.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// Runs until a signal (`None`) or until a child exits on its own (`Some(what happened)`); a
/// user's `--app` that exits is reported and started again unless `restart` is off.
async fn wait_for_stop(
    hosts: &mut [DevHost],
    signals: &mut Signals,
    restart: bool,
) -> Option<String> {
    loop {
        tokio::select! {
            () = signals.recv() => return None,
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                for h in hosts.iter_mut() {
                    if let HostApp::User(u) = &mut h.app {
                        match u.tend(restart).await {
                            Ok(Some(report)) => println!("{report}"),
                            Ok(None) => {}
                            Err(problem) => return Some(problem),
                        }
                    }
                    let counter = match &mut h.app {
                        HostApp::Counter(p) => Some(p),
                        HostApp::User(_) => None,
                    };
                    for p in std::iter::once(&mut h.sidecar).chain(counter) {
                        if let Some(status) = p.poll_exit() {
                            return Some(format!(
                                "{} exited unexpectedly ({status}); the end of {}:\n{}",
                                p.name, p.log.display(), p.log_tail(15)
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// Stops sidecars first (each drains, deactivates its actors through its app and leaves the
/// membership), then the apps.
async fn stop_all(hosts: &mut [DevHost]) {
    for h in hosts.iter() {
        h.sidecar.signal_term();
    }
    let lines = futures::future::join_all(
        hosts
            .iter_mut()
            .map(|h| h.sidecar.stop(Duration::from_secs(30))),
    )
    .await;
    for l in lines {
        println!("  {l}");
    }
    let lines = futures::future::join_all(
        hosts
            .iter_mut()
            .map(|h| h.app.proc().stop(Duration::from_secs(15))),
    )
    .await;
    for l in lines {
        println!("  {l}");
    }
}

async fn print_status(hosts: &[DevHost]) {
    for (n, h) in hosts.iter().enumerate() {
        let client = Client::lazy(&h.socket).with_timeout(Duration::from_secs(5));
        match client.status().await {
            Ok(status) if n == 0 => {
                println!("--- sigx status --socket {}", h.socket.display());
                print!(
                    "{}",
                    crate::status::render_status(&status, crate::status::now_unix_ms())
                );
            }
            Ok(status) => {
                let total: u64 = status.activations.iter().map(|a| a.activations).sum();
                println!(
                    "--- host {} ({}): {}, {total} activation(s)",
                    h.index,
                    h.host_id.as_deref().unwrap_or("?"),
                    status.state
                );
            }
            Err(e) => println!("--- host {}: status failed: {e}", h.index),
        }
    }
}

pub async fn up(args: UpArgs) -> ExitCode {
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sigx dev up: cannot install signal handlers: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let mut hosts = match start(&args).await {
        Ok(h) => h,
        Err(UpError::Usage(e)) => {
            eprintln!("sigx dev up: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(UpError::Failed(e)) => {
            eprintln!("sigx dev up: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    println!(
        "starting {} host(s) in {} (logs: {}/host-N/{{sidecar,app}}.log)",
        hosts.len(),
        args.dir.display(),
        args.dir.display()
    );
    let code = run_cluster(&args, &mut hosts, &mut signals).await;
    println!("stopping");
    stop_all(&mut hosts).await;
    let _ = std::fs::remove_file(args.dir.join("dev.pid"));
    code
}

/// Everything between start and stop; whatever happens here, the caller stops the children.
async fn run_cluster(args: &UpArgs, hosts: &mut [DevHost], signals: &mut Signals) -> ExitCode {
    let ready = tokio::select! {
        r = wait_ready(hosts, args.ready_timeout) => r,
        () = signals.recv() => {
            println!("interrupted while starting");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    if let Err(e) = ready {
        eprintln!("sigx dev up: {e}");
        return ExitCode::from(EXIT_FAILED);
    }
    for h in hosts.iter() {
        println!(
            "host {}: {} socket {} health http://{}/readyz",
            h.index,
            h.host_id.as_deref().unwrap_or("?"),
            h.socket.display(),
            h.health
        );
    }
    println!("dashboard: sigx dashboard --dir {}", args.dir.display());
    if args.app_specs.is_empty() {
        println!(
            "ready. try: sigx call Counter/a increment --socket {}",
            hosts[0].socket.display()
        );
    } else {
        println!(
            "ready. call your actors: sigx call <Type>/<key> <method> [json] --socket {}",
            hosts[0].socket.display()
        );
    }

    let mut code = ExitCode::SUCCESS;
    if args.workload > 0 {
        let sockets: Vec<PathBuf> = hosts.iter().map(|h| h.socket.clone()).collect();
        let report = tokio::select! {
            r = workload(&sockets, args.workload, args.concurrency) => r,
            () = signals.recv() => {
                println!("interrupted during the workload");
                return ExitCode::from(EXIT_FAILED);
            }
        };
        print!("{}", report.render());
        if !report.passed() {
            code = ExitCode::from(EXIT_FAILED);
        }
    }
    print_status(hosts).await;

    if !args.exit_after_workload {
        println!("running; Ctrl-C stops the cluster");
        if let Some(problem) = wait_for_stop(hosts, signals, !args.no_restart).await {
            eprintln!("sigx dev up: {problem}");
            code = ExitCode::from(EXIT_FAILED);
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_file_is_private_and_random() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sigx-dev-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = write_secret(&dir).unwrap();
        let first = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(first.len(), 64);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_secret(&dir).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_ne!(std::fs::read_to_string(&p).unwrap(), first);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
