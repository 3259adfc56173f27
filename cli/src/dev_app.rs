//! `sigx dev up --app COMMAND`: the user's own app beside each sidecar, as `dapr run` does.
//!
//! Each `--app` is run through `sh -c` in a process group of its own, with its sidecar's socket
//! (`SIGX_SOCKET`) and its declared types (`SIGX_ACTORS` / `SIGX_WORKERS`, from the `--actors` /
//! `--workers` that follow it on the command line, as an ActorRole declares them) in its
//! environment. Its output goes to the terminal prefixed `host-N |` and to `host-N/app.log`. When
//! it exits it is reported with the end of its output and started again with backoff (or, with
//! `--no-restart`, the cluster stops). On stop the sidecars drain it first; then its whole process
//! group gets SIGTERM (so `sh -c 'a && b'` and what it started stop too).

use super::{Proc, UpError, io_err};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The first restart waits this long; each further one twice as long, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// An app that ran this long before it exited starts again from the first backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(30);

/// One `--app` with the types declared for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppSpec {
    pub command: String,
    pub actors: Option<String>,
    pub workers: Option<String>,
}

/// Pairs every `--actors` / `--workers` with the `--app` before it on the command line (clap's
/// argument indices give the order). Each app takes at most one of each.
pub fn pair(
    apps: &[(usize, String)],
    actors: &[(usize, String)],
    workers: &[(usize, String)],
) -> Result<Vec<AppSpec>, String> {
    let mut specs: Vec<AppSpec> = apps
        .iter()
        .map(|(_, c)| AppSpec {
            command: c.clone(),
            actors: None,
            workers: None,
        })
        .collect();
    for (flag, list) in [("--actors", actors), ("--workers", workers)] {
        for (at, types) in list {
            let Some(owner) = apps.iter().rposition(|(i, _)| i < at) else {
                return Err(format!(
                    "{flag} {types} comes before any --app: write it after the --app whose types \
                     it declares (e.g. --app 'python3 app.py' {flag} {types})"
                ));
            };
            let spec = &mut specs[owner];
            let slot = if flag == "--actors" {
                &mut spec.actors
            } else {
                &mut spec.workers
            };
            if slot.is_some() {
                return Err(format!(
                    "--app {:?} has {flag} twice: give its types comma-separated in one {flag}",
                    spec.command
                ));
            }
            *slot = Some(types.clone());
        }
    }
    if let Some(s) = specs.iter().find(|s| s.command.trim().is_empty()) {
        return Err(format!(
            "--app {:?} is empty: give the command that runs your app",
            s.command
        ));
    }
    Ok(specs)
}

/// The user's app of one host: the running process and what it takes to start it again.
pub struct UserApp {
    pub proc: Proc,
    spec: AppSpec,
    socket: PathBuf,
    index: u32,
    log: Arc<Mutex<tokio::fs::File>>,
    started: Instant,
    restarts: u32,
    next_start: Option<Instant>,
    backoff: Duration,
}

impl UserApp {
    /// Starts `spec` for host `index` beside the sidecar on `socket`, logging to `log`.
    pub async fn start(
        index: u32,
        spec: &AppSpec,
        socket: &Path,
        log: PathBuf,
    ) -> Result<UserApp, UpError> {
        let file = tokio::fs::File::create(&log)
            .await
            .map_err(io_err(format!("create {}", log.display())))?;
        let log_file = Arc::new(Mutex::new(file));
        let proc = spawn(index, spec, socket, &log, &log_file).await?;
        Ok(UserApp {
            proc,
            spec: spec.clone(),
            socket: socket.to_path_buf(),
            index,
            log: log_file,
            started: Instant::now(),
            restarts: 0,
            next_start: None,
            backoff: FIRST_BACKOFF,
        })
    }

    /// Notices an exit (and schedules the restart) or performs a due restart. Returns what to
    /// report, if anything; `Err` when the app exited and restarts are off.
    pub async fn tend(&mut self, restart: bool) -> Result<Option<String>, String> {
        if let Some(at) = self.next_start {
            if Instant::now() < at {
                return Ok(None);
            }
            self.next_start = None;
            // Nothing the previous run started may serve beside the new one.
            if let Some(pid) = self.proc.pid
                && rustix::process::test_kill_process_group(pid).is_ok()
            {
                self.proc.signal(rustix::process::Signal::KILL);
            }
            return match spawn(
                self.index,
                &self.spec,
                &self.socket,
                &self.proc.log,
                &self.log,
            )
            .await
            {
                Ok(p) => {
                    self.proc = p;
                    self.started = Instant::now();
                    self.restarts += 1;
                    Ok(Some(format!(
                        "host-{} | app restarted (restart {})",
                        self.index, self.restarts
                    )))
                }
                Err(e) => Err(format!("host-{}: restarting the app: {e}", self.index)),
            };
        }
        let Some(status) = self.proc.poll_exit() else {
            return Ok(None);
        };
        // The shell is gone; what it started in its group may still run: stop that too.
        self.proc.signal(rustix::process::Signal::TERM);
        let what = format!(
            "{} exited ({status}); the end of {}:\n{}",
            self.proc.name,
            self.proc.log.display(),
            self.proc.log_tail(10)
        );
        if !restart {
            return Err(what);
        }
        if self.started.elapsed() >= HEALTHY_RUN {
            self.backoff = FIRST_BACKOFF;
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.next_start = Some(Instant::now() + wait);
        Ok(Some(format!(
            "{what}\nhost-{} | restarting the app in {} ms",
            self.index,
            wait.as_millis()
        )))
    }
}

async fn spawn(
    index: u32,
    spec: &AppSpec,
    socket: &Path,
    log_path: &Path,
    log: &Arc<Mutex<tokio::fs::File>>,
) -> Result<Proc, UpError> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(&spec.command)
        .env("SIGX_SOCKET", socket)
        .env("SIGX_HOST_INDEX", index.to_string())
        // Its output goes to a pipe and a log file, prefixed: no colour escapes.
        .env("NO_COLOR", "1")
        .env_remove("SIGX_ACTORS")
        .env_remove("SIGX_WORKERS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: Ctrl-C reaches `sigx` only, which stops the sidecars (they drain the
        // app) before the app itself; and SIGTERM to the group reaches what `sh` started.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(a) = &spec.actors {
        cmd.env("SIGX_ACTORS", a);
    }
    if let Some(w) = &spec.workers {
        cmd.env("SIGX_WORKERS", w);
    }
    let name = format!("app {index} ({})", spec.command);
    let mut child = cmd.spawn().map_err(io_err(format!("start {name}")))?;
    let prefix = format!("host-{index} |");
    if let Some(out) = child.stdout.take() {
        tokio::spawn(relay(out, prefix.clone(), log.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(relay(err, prefix, log.clone()));
    }
    Ok(Proc {
        pid: Proc::pid_of(&child),
        name,
        child,
        log: log_path.to_path_buf(),
        exited: None,
        group: true,
        termed: Default::default(),
    })
}

/// Copies one output stream of the app, line by line, to the terminal (prefixed) and its log.
async fn relay(
    stream: impl tokio::io::AsyncRead + Unpin,
    prefix: String,
    log: Arc<Mutex<tokio::fs::File>>,
) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        println!("{prefix} {line}");
        let mut f = log.lock().await;
        let _ = f.write_all(line.as_bytes()).await;
        let _ = f.write_all(b"\n").await;
        let _ = f.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(list: &[(usize, &str)]) -> Vec<(usize, String)> {
        list.iter().map(|(i, s)| (*i, s.to_string())).collect()
    }

    #[test]
    fn types_pair_with_the_app_before_them() {
        let specs = pair(
            &at(&[(2, "python3 a.py"), (6, "node b.js"), (8, "go run .")]),
            &at(&[(4, "Greeter"), (10, "Counter")]),
            &at(&[(7, "Echo")]),
        )
        .unwrap();
        let got: Vec<_> = specs
            .iter()
            .map(|s| {
                (
                    s.command.as_str(),
                    s.actors.as_deref(),
                    s.workers.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("python3 a.py", Some("Greeter"), None),
                ("node b.js", None, Some("Echo")),
                ("go run .", Some("Counter"), None),
            ]
        );
    }

    #[test]
    fn types_before_any_app_or_twice_for_one_are_refused_by_name() {
        let e = pair(&at(&[(4, "x")]), &at(&[(2, "A")]), &[]).unwrap_err();
        assert!(e.contains("--actors A comes before any --app"), "{e}");
        let e = pair(&at(&[(2, "x")]), &[], &at(&[(4, "A"), (6, "B")])).unwrap_err();
        assert!(e.contains("has --workers twice"), "{e}");
        let e = pair(&at(&[(2, " ")]), &[], &[]).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
    }
}
