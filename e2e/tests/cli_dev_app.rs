//! `sigx dev up --app COMMAND`: the user's own app (here the real counter-app binary, started as
//! a user would, through a shell command) beside every sidecar: its environment, its prefixed
//! output, a heterogeneous cluster of declared roles, restart or report on exit, and a clean stop.

mod sdk_support;

use sdk_support::dev_up::DevUp;
use sdk_support::{Scratch, bin};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;
use tokio::time::Instant;

fn sigx_call(socket: &Path, target: &str, method: &str) -> Output {
    Command::new(bin("sigx"))
        .args(["call", target, method, "--socket"])
        .arg(socket)
        .env_remove("SIGX_SOCKET")
        .output()
        .expect("run sigx call")
}

fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "sigx call failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Running, not a zombie waiting for its new parent to reap it.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| st.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z'))
}

fn counter_app() -> String {
    bin("counter-app").display().to_string()
}

#[test]
fn dev_up_app_runs_the_command_with_its_socket_and_types_and_stops_it_after_the_drain() {
    let scratch = Scratch::new("devapp");
    let app = format!(
        "echo \"env socket=$SIGX_SOCKET host=$SIGX_HOST_INDEX actors=$SIGX_ACTORS\"; exec {}",
        counter_app()
    );
    let dev = DevUp::start(
        &scratch,
        &["--hosts", "2", "--app", &app, "--actors", "Counter"],
    );
    dev.wait_line("'running'", |l| l.starts_with("running; Ctrl-C"));
    for host in [1, 2] {
        let want = format!(
            "host-{host} | env socket={} host={host} actors=Counter",
            dev.socket(host).display()
        );
        dev.wait_line(&want, |l| l == want);
    }
    // One cluster: the call through host 2 and the one through host 1 reach one activation.
    assert_eq!(
        ok_stdout(&sigx_call(&dev.socket(2), "Counter/a", "increment")),
        "1"
    );
    assert_eq!(
        ok_stdout(&sigx_call(&dev.socket(1), "Counter/a", "increment")),
        "2"
    );
    // Its own output (counter-app logs to stderr) is relayed, prefixed, and kept in app.log.
    let app_log = std::fs::read_to_string(dev.dir.join("host-1/app.log")).unwrap();
    assert!(app_log.contains("env socket="), "{app_log}");
    let dir = dev.dir.clone();
    let (status, out) = dev.interrupt();
    assert!(status.success(), "{out}");
    let stopping = out.find("stopping").expect("says it stops");
    let sidecar_stopped = out.find("sidecar 1 stopped").expect(&out);
    let app_stopped = out
        .find("app 1 (echo")
        .and_then(|i| out[i..].find(") stopped").map(|j| i + j))
        .unwrap_or_else(|| panic!("the app stopped cleanly:\n{out}"));
    assert!(
        stopping < sidecar_stopped && sidecar_stopped < app_stopped,
        "the sidecars stop (draining their apps) before the apps:\n{out}"
    );
    for host in [1, 2] {
        let log = std::fs::read_to_string(dir.join(format!("host-{host}/sidecar.log"))).unwrap();
        assert!(log.contains("listeners-closed"), "graceful stop:\n{log}");
        // One SIGTERM each: a second tells the sidecar to skip its drain.
        assert!(!log.contains("second signal"), "signalled twice:\n{log}");
    }
    assert!(!dir.join("dev.pid").exists());
}

#[test]
fn several_apps_with_their_declared_types_make_a_heterogeneous_cluster() {
    let scratch = Scratch::new("devhet");
    let app = format!("exec {}", counter_app());
    let dev = DevUp::start(
        &scratch,
        &[
            "--app",
            &app,
            "--actors",
            "Counter",
            "--app",
            &app,
            "--workers",
            "Echo",
        ],
    );
    dev.wait_line("'running'", |l| l.starts_with("running; Ctrl-C"));
    // --hosts defaults to one per --app; each host registers only what its app declares.
    let status = |host: u32| {
        let out = Command::new(bin("sigx"))
            .args(["status", "--socket"])
            .arg(dev.socket(host))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let one = status(1);
    assert!(one.contains("types        Counter (actor)\n"), "{one}");
    let two = status(2);
    assert!(two.contains("types        Echo (worker)\n"), "{two}");
    // Calls cross to the host whose role serves the type.
    let echo_host = ok_stdout(&sigx_call(&dev.socket(1), "Echo/x", "whereami"));
    assert!(
        two.contains(echo_host.trim_matches('"')),
        "{echo_host} vs\n{two}"
    );
    assert_eq!(
        ok_stdout(&sigx_call(&dev.socket(2), "Counter/a", "increment")),
        "1"
    );
    let (status, out) = dev.interrupt();
    assert!(status.success(), "{out}");
}

#[test]
fn an_app_that_exits_is_reported_and_started_again_or_with_no_restart_stops_the_cluster() {
    let scratch = Scratch::new("devrst");
    // The shell prints its app's pid so the test can kill the app as a crash would.
    let app = format!("{} & echo \"pid $!\"; wait $!", counter_app());
    let dev = DevUp::start(&scratch, &["--app", &app]);
    dev.wait_line("'running'", |l| l.starts_with("running; Ctrl-C"));
    assert_eq!(
        ok_stdout(&sigx_call(&dev.socket(1), "Counter/a", "increment")),
        "1"
    );
    let pid = |dev: &DevUp, n: usize| -> String {
        let mut pids = Vec::new();
        while pids.len() < n {
            let l = dev.wait_line("pid", |l| {
                l.starts_with("host-1 | pid ") && !pids.contains(&l.to_string())
            });
            pids.push(l);
        }
        pids[n - 1].trim_start_matches("host-1 | pid ").to_string()
    };
    let first = pid(&dev, 1);
    assert!(
        Command::new("kill")
            .args(["-9", &first])
            .status()
            .unwrap()
            .success()
    );
    dev.wait_line("the exit report", |l| {
        l.starts_with("app 1 (") && l.contains("exited (exit status: 137)")
    });
    dev.wait_line("the restart", |l| l == "host-1 | app restarted (restart 1)");
    let second = pid(&dev, 2);
    assert_ne!(first, second);
    // The restarted app serves again (its count is durable in the sidecar's state).
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = sigx_call(&dev.socket(1), "Counter/a", "increment");
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ok_stdout(&out), "2");
    let (status, out) = dev.interrupt();
    assert!(status.success(), "{out}");

    let scratch = Scratch::new("devnorst");
    let mut dev = DevUp::start(&scratch, &["--app", &app, "--no-restart"]);
    dev.wait_line("'running'", |l| l.starts_with("running; Ctrl-C"));
    let pid = pid(&dev, 1);
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (status, out) = dev.wait();
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("sigx dev up: app 1 ("), "{out}");
    assert!(out.contains("exited (exit status: 137)"), "{out}");
    assert!(!out.contains("app restarted"), "{out}");
}

#[test]
fn types_before_any_app_and_too_few_hosts_are_usage_errors() {
    let scratch = Scratch::new("devuse");
    let run = |args: &[&str]| {
        Command::new(bin("sigx"))
            .args(["dev", "up", "--dir"])
            .arg(scratch.path("d"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--actors", "Counter", "--app", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--actors Counter comes before any --app"),
        "{err}"
    );
    let out = run(&["--hosts", "1", "--app", "a", "--app", "b"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2 --app commands need at least as many hosts"),
        "{err}"
    );
    // PostgreSQL membership without its database, and a DSN for another provider.
    let out = run(&["--hosts", "2", "--membership", "postgres"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --membership-dsn"), "{err}");
    let out = run(&["--hosts", "2", "--membership-dsn", "host=db"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--membership-dsn only applies to --membership postgres"),
        "{err}"
    );
}

#[test]
fn on_stop_what_the_app_started_is_stopped_too_or_killed_after_the_grace() {
    let scratch = Scratch::new("devgrp");
    // A helper of the app that ignores SIGTERM, as a careless child process would.
    let app = format!(
        "(trap '' TERM; exec sleep 300) & echo \"helper $!\"; exec {}",
        counter_app()
    );
    let dev = DevUp::start(&scratch, &["--app", &app]);
    dev.wait_line("'running'", |l| l.starts_with("running; Ctrl-C"));
    let helper = dev
        .wait_line("the helper's pid", |l| l.starts_with("host-1 | helper "))
        .trim_start_matches("host-1 | helper ")
        .to_string();
    assert!(alive(&helper));
    let (status, out) = dev.interrupt();
    let still = alive(&helper);
    if still {
        let _ = Command::new("kill").args(["-9", &helper]).status();
    }
    assert!(!still, "the helper outlived sigx dev up:\n{out}");
    assert!(status.success(), "{out}");
    assert!(
        out.contains("what it started did not stop within 15s; killed"),
        "{out}"
    );
}

#[test]
fn a_restart_first_stops_what_the_crashed_run_left_behind() {
    let scratch = Scratch::new("devleft");
    // The app crashes; a helper it started ignores SIGTERM and would serve on beside the new run.
    let app = format!(
        "{} & C=$!; echo \"pid $C\"; (trap '' TERM; exec sleep 300) & echo \"helper $!\"; wait $C",
        counter_app()
    );
    let dev = DevUp::start(&scratch, &["--app", &app]);
    dev.wait_line("'running'", |l| l.starts_with("running; Ctrl-C"));
    let field = |prefix: &str| {
        dev.wait_line(prefix, |l| l.starts_with(prefix))
            .trim_start_matches(prefix)
            .to_string()
    };
    let (pid, helper) = (field("host-1 | pid "), field("host-1 | helper "));
    assert!(alive(&helper));
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    dev.wait_line("the restart", |l| l == "host-1 | app restarted (restart 1)");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(&helper) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = alive(&helper);
    if left {
        let _ = Command::new("kill").args(["-9", &helper]).status();
    }
    assert!(
        !left,
        "the crashed run's helper still runs after the restart:\n{}",
        dev.text()
    );
    let (status, out) = dev.interrupt();
    assert!(status.success(), "{out}");
}
