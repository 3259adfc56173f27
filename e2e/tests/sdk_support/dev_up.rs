//! A running `sigx dev up` for the CLI tests (`cli_actors`, `cli_dev_app`): the real `sigx`
//! binary as a child process, its output collected line by line.

use super::{Scratch, bin};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A running `sigx dev up`, its stdout collected line by line.
pub struct DevUp {
    pub child: Child,
    pub dir: PathBuf,
    lines: Arc<(Mutex<Vec<String>>, Condvar)>,
}

impl DevUp {
    pub fn start(scratch: &Scratch, args: &[&str]) -> DevUp {
        let dir = scratch.path("d");
        let mut child = Command::new(bin("sigx"))
            .args(["dev", "up", "--dir"])
            .arg(&dir)
            .args(args)
            .env_remove("SIGX_ACTORS")
            .env_remove("SIGX_WORKERS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sigx dev up");
        let lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.0.lock().unwrap().push(line);
                    lines.1.notify_all();
                }
            });
        }
        DevUp { child, dir, lines }
    }

    pub fn socket(&self, host: impl std::fmt::Display) -> PathBuf {
        self.dir.join(format!("host-{host}/sidecar.sock"))
    }

    pub fn text(&self) -> String {
        self.lines.0.lock().unwrap().join("\n")
    }

    /// Waits until `dev up` says the cluster is running.
    pub fn wait_running(&self) {
        self.wait_line("saying it is running", |l| l.starts_with("running; Ctrl-C"));
    }

    /// Waits for a line matching `ok` (30 s), returning it.
    pub fn wait_line(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = self.lines.0.lock().unwrap();
        loop {
            if let Some(l) = seen.iter().find(|l| ok(l)) {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let text = seen.join("\n");
                drop(seen); // no poisoned lock for the reader threads
                panic!("no line {what} within 30 s; sigx dev up printed:\n{text}");
            }
            seen = self.lines.1.wait_timeout(seen, left).unwrap().0;
        }
    }

    /// Ctrl-C, then the exit status and everything printed.
    pub fn interrupt(mut self) -> (std::process::ExitStatus, String) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        self.wait()
    }

    pub fn wait(&mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("sigx dev up did not exit within 60 s:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(200)); // the readers drain the pipes
        (status, self.text())
    }
}

impl Drop for DevUp {
    /// A test that did not stop it: Ctrl-C (the graceful stop), then SIGKILL after 30 s.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
