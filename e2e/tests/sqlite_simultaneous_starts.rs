//! Real `sigx-sidecar` processes started at the same moment on a fresh SQLite membership file
//! (and the state file beside it), as `sigx dev up` and a node's pods do: every one of them must
//! start and become ready. Before the open was retried, about one round in twenty lost a
//! sidecar to `database is locked`, exit 64 (issue 17).
//!
//! `SIGX_START_ROUNDS` sets the number of rounds (default 10). Needs the binaries built
//! (`cargo build --workspace --bins`; `make test` does).

mod sdk_support;

use sdk_support::{Proc, Scratch, counter_app};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tokio::time::Instant;

const HOSTS: usize = 3;

fn rounds() -> usize {
    match std::env::var("SIGX_START_ROUNDS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("SIGX_START_ROUNDS={v:?} is not a number of rounds")),
        Err(_) => 10,
    }
}

/// The health address a sidecar started with `--health-addr 127.0.0.1:0` logs it bound, once it
/// has (ports picked by the test and bound later could be taken in between by another process,
/// which would be a failure of the test, not of the start).
fn logged_health(log: &str) -> Option<SocketAddr> {
    let line = log
        .lines()
        .find(|l| l.contains("listening; waiting for the app"))?;
    let value = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("health="))?;
    value.parse().ok()
}

/// The last lines of a log, for a failure message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// One round: `HOSTS` sidecars released together by a barrier onto one fresh file, then one
/// counter app each. Returns a description of every host that did not become ready.
fn round(n: usize) -> Vec<String> {
    let scratch = Arc::new(Scratch::new(&format!("s3-{n}")));
    let secret = scratch.path("secret");
    std::fs::write(&secret, "simultaneous-starts-secret").unwrap();
    let barrier = Arc::new(Barrier::new(HOSTS));
    let starts: Vec<_> = (0..HOSTS)
        .map(|i| {
            let (scratch, barrier, secret) = (scratch.clone(), barrier.clone(), secret.clone());
            std::thread::spawn(move || {
                let socket = scratch.path(&format!("h{i}.sock"));
                let mut cmd = Command::new(sdk_support::bin("sigx-sidecar"));
                cmd.args(["--membership", "sqlite", "--host-id", &format!("h{i}")])
                    .arg("--sqlite-path")
                    .arg(scratch.path("membership.db"))
                    .arg("--secret-file")
                    .arg(&secret)
                    .arg("--socket")
                    .arg(&socket)
                    .args(["--health-addr", "127.0.0.1:0"])
                    .args(["--mesh-addr", "127.0.0.1:0", "--advertise", "127.0.0.1:0"])
                    .args(["--beat-ms", "200", "--ttl-ms", "1000"]);
                barrier.wait();
                let proc = Proc::spawn(cmd, scratch.path(&format!("h{i}.log")));
                (i, proc, socket)
            })
        })
        .collect();
    let mut hosts: Vec<_> = starts.into_iter().map(|t| t.join().unwrap()).collect();
    let mut failed = Vec::new();
    let mut apps: Vec<Option<Proc>> = (0..HOSTS).map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, proc, socket) in hosts.iter_mut() {
        let mut health = None;
        let ready = loop {
            if let Ok(Some(status)) = proc.child.try_wait() {
                break Err(format!("exited {status}"));
            }
            if Instant::now() > deadline {
                break Err("not ready within 30 s".to_string());
            }
            // The app starts once its sidecar's socket exists, as a native sidecar's would.
            if apps[*i].is_none() && socket.exists() {
                apps[*i] = Some(counter_app(&scratch, socket, &[]));
            }
            if health.is_none() {
                health = logged_health(&proc.log_text());
            }
            if let Some(addr) = health
                && sigx_e2e::probe::http_status(addr, "/readyz") == 200
            {
                break Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Err(why) = ready {
            failed.push(format!(
                "round {n}, h{i}: {why}; its log ends:\n{}",
                tail(&proc.log_text())
            ));
        }
    }
    drop(apps);
    drop(hosts);
    failed
}

#[test]
fn three_sidecars_started_at_once_on_a_fresh_sqlite_file_all_become_ready() {
    let rounds = rounds();
    let started = Instant::now();
    let mut failed = Vec::new();
    for n in 0..rounds {
        failed.extend(round(n));
    }
    eprintln!(
        "{rounds} rounds of {HOSTS} simultaneous starts: {} starts, {} failed, {:.1} s",
        rounds * HOSTS,
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "{} of {} starts failed:\n{}",
        failed.len(),
        rounds * HOSTS,
        failed.join("\n\n")
    );
}
