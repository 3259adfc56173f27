//! Shared by the `sdk_*` and `cli_*` tests: the real binaries (`sigx-sidecar`, `counter-app`,
//! `sigx`) run as child processes on a Unix socket in a scratch directory.
//!
//! The binaries must be built first (`make test` does):
//! `cargo build -p sigx-sidecar -p sigx-example-counter -p sigx-cli`.
#![allow(dead_code)]

pub mod dev_up;
pub mod kube_host;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A built binary of the workspace, from the target directory this test runs from.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build -p sigx-sidecar -p sigx-example-counter -p sigx-cli` \
         before these tests (make test does)",
        path.display()
    );
    path
}

/// A scratch directory removed on drop. Short path: Unix socket paths are limited to 107 bytes.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sx-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (SIGKILL) on drop, with its output in a log file.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        cmd.env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().expect("spawn");
        Proc { child, log }
    }

    /// Sends a signal by name (`TERM`, `STOP`, ...) with the system's `kill`.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{name} {} failed", self.child.id());
    }

    /// SIGTERM, then waits (bounded) for the exit.
    pub fn terminate(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        self.signal("TERM");
        let deadline = std::time::Duration::from_millis(50);
        let mut waited = Duration::ZERO;
        while waited < grace {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(deadline);
            waited += deadline;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real `sigx-sidecar` with no cluster (`--membership none`).
pub struct Sidecar {
    pub proc: Proc,
    pub socket: PathBuf,
    pub health: SocketAddr,
}

impl Sidecar {
    pub fn start(scratch: &Scratch, socket: &Path, extra: &[&str]) -> Sidecar {
        let mut args = vec!["--membership", "none"];
        args.extend_from_slice(extra);
        Self::start_with(scratch, socket, &args)
    }

    /// One host of a cluster on this machine: SQLite membership in `db`, the secret in
    /// `secret`, pod name `name` (the host id is `name-<incarnation>`). Beat 1 s, TTL 5 s: these
    /// tests inject no lease faults, and a TTL of a second could fence a host that a busy CI
    /// machine merely starved of CPU.
    pub fn start_clustered(
        scratch: &Scratch,
        socket: &Path,
        name: &str,
        db: &Path,
        secret: &Path,
    ) -> Sidecar {
        Self::start_clustered_with(scratch, socket, name, db, secret, &[])
    }

    /// [`Sidecar::start_clustered`] with `extra` flags after the cluster's.
    pub fn start_clustered_with(
        scratch: &Scratch,
        socket: &Path,
        name: &str,
        db: &Path,
        secret: &Path,
        extra: &[&str],
    ) -> Sidecar {
        let mut args = vec![
            "--membership",
            "sqlite",
            "--sqlite-path",
            db.to_str().unwrap(),
            "--secret-file",
            secret.to_str().unwrap(),
            "--pod-name",
            name,
            "--beat-ms",
            "1000",
            "--ttl-ms",
            "5000",
        ];
        args.extend_from_slice(extra);
        Self::start_with(scratch, socket, &args)
    }

    /// A sidecar on `socket` with `args`, on free health and mesh ports (advertised as
    /// 127.0.0.1). A port taken between picking and binding makes the sidecar exit; it is
    /// started again on other ports (up to three tries).
    pub fn start_with(scratch: &Scratch, socket: &Path, args: &[&str]) -> Sidecar {
        Self::start_with_env(scratch, socket, args, &[])
    }

    /// [`Sidecar::start_with`] with `env` added to the sidecar's environment.
    pub fn start_with_env(
        scratch: &Scratch,
        socket: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Sidecar {
        let mut last = String::new();
        for _ in 0..3 {
            let health: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let mesh = format!("127.0.0.1:{}", free_port());
            let mut cmd = Command::new(bin("sigx-sidecar"));
            cmd.arg("--socket")
                .arg(socket)
                .arg("--health-addr")
                .arg(health.to_string())
                .arg("--mesh-addr")
                .arg(&mesh)
                .arg("--advertise")
                .arg(&mesh)
                .args(args)
                .envs(env.iter().copied());
            let log = scratch.path(&format!("sidecar-{}.log", health.port()));
            let mut sidecar = Sidecar {
                proc: Proc::spawn(cmd, log),
                socket: socket.to_path_buf(),
                health,
            };
            match sidecar.wait_listening() {
                Ok(()) => return sidecar,
                Err(e) => last = e,
            }
        }
        panic!("the sidecar did not start in three tries; the last:\n{last}");
    }

    /// Waits until the health port answers and the socket exists (the sidecar binds
    /// everything before it reports anything); an early exit is an error with the log.
    fn wait_listening(&mut self) -> Result<(), String> {
        for _ in 0..200 {
            if std::net::TcpStream::connect(self.health).is_ok() && self.socket.exists() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.proc.child.try_wait() {
                return Err(format!(
                    "exited ({status}); its log:\n{}",
                    self.proc.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err(format!(
            "not listening within 5s; its log:\n{}",
            self.proc.log_text()
        ))
    }

    /// The HTTP status of `GET path` on the health port.
    pub fn health_status(&self, path: &str) -> u16 {
        sigx_e2e::probe::http_status(self.health, path)
    }

    /// Waits (bounded) until `/readyz` says 200: an app is registered.
    pub fn wait_ready(&self) {
        for _ in 0..200 {
            if self.health_status("/readyz") == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "the sidecar was not ready within 5s; its log:\n{}",
            self.proc.log_text()
        );
    }
}

/// A real `counter-app` on `socket`.
pub fn counter_app(scratch: &Scratch, socket: &Path, env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new(bin("counter-app"));
    cmd.arg("--socket").arg(socket);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc::spawn(cmd, scratch.path(&format!("app-{}.log", free_port())))
}
