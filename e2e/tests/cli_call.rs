//! The `sigx` binary against a real sidecar and the real counter app: what `sigx call` and
//! `sigx status` print, and their exit codes.

mod sdk_support;

use sdk_support::{Scratch, Sidecar, bin, counter_app};
use std::process::{Command, Output};

fn sigx(args: &[&str]) -> Output {
    Command::new(bin("sigx"))
        .args(args)
        .env_remove("SIGX_SOCKET")
        .output()
        .expect("run sigx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct Cluster {
    scratch: Scratch,
    sidecar: Sidecar,
    _app: sdk_support::Proc,
}

impl Cluster {
    fn socket(&self) -> &str {
        self.sidecar.socket.to_str().unwrap()
    }
}

fn one_host(tag: &str) -> Cluster {
    let scratch = Scratch::new(tag);
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &[]);
    let app = counter_app(&scratch, &socket, &[]);
    sidecar.wait_ready();
    Cluster {
        scratch,
        sidecar,
        _app: app,
    }
}

#[test]
fn call_prints_the_reply_and_exits_zero() {
    let c = one_host("call");
    let s = c.socket();
    let out = sigx(&["call", "Counter/a", "increment", "--socket", s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n");

    let out = sigx(&["call", "Counter/a", "increment", "41", "--socket", s]);
    assert_eq!(text(&out.stdout), "42\n");

    // Pretty JSON for a JSON object.
    let out = sigx(&[
        "call",
        "Counter/a",
        "info",
        "--socket",
        s,
        "--timeout",
        "5s",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("{\n  \""), "pretty JSON: {stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["value"], 42);

    // The socket from the environment works as well as the flag.
    let out = Command::new(bin("sigx"))
        .args(["call", "Echo/x", "echo", "\"hello\""])
        .env("SIGX_SOCKET", s)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "\"hello\"\n");
    drop(c.scratch);
}

#[test]
fn call_errors_name_their_kind_and_exit_non_zero() {
    let c = one_host("callerr");
    let s = c.socket();

    let out = sigx(&["call", "Counter/a", "decrement", "--socket", s]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.starts_with("error: invalid: "), "{err}");
    assert!(err.contains("decrement"), "{err}");
    assert!(out.stdout.is_empty());

    let out = sigx(&["call", "Counter/a", "increment", "\"many\"", "--socket", s]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: invalid: "),
        "{}",
        text(&out.stderr)
    );

    let big = (i64::MAX).to_string();
    let out = sigx(&["call", "Counter/o", "increment", &big, "--socket", s]);
    assert!(out.status.success());
    let out = sigx(&["call", "Counter/o", "increment", "--socket", s]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: app: ") && err.contains("overflow"),
        "{err}"
    );
}

#[test]
fn bad_usage_exits_two_and_a_missing_sidecar_exits_three() {
    let scratch = Scratch::new("usage");
    let nowhere = scratch.path("nobody.sock");
    let nowhere = nowhere.to_str().unwrap();

    let out = sigx(&[
        "call",
        "Counter/a",
        "increment",
        "{not json",
        "--socket",
        nowhere,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not JSON"));

    let out = sigx(&["call", "Counter", "increment", "--socket", nowhere]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("<Type>/<key>"));

    let out = sigx(&["call", "Counter/a", "increment", "--socket", nowhere]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains(nowhere), "names the socket it tried: {err}");

    let out = sigx(&["status", "--socket", nowhere]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn status_shows_host_types_activations_and_the_fleet() {
    let c = one_host("status");
    let s = c.socket();
    for key in ["a", "b", "c"] {
        assert!(
            sigx(&[
                "call",
                &format!("Counter/{key}"),
                "increment",
                "--socket",
                s
            ])
            .status
            .success()
        );
    }
    let out = sigx(&["status", "--socket", s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = text(&out.stdout);
    for needle in [
        "state        ready",
        "app          connected",
        "types        Counter (actor), Echo (worker)",
        "activations  3 (Counter=3)",
        "HOST",
    ] {
        assert!(status.contains(needle), "missing {needle:?} in:\n{status}");
    }
    // This sidecar was given no node (no --node / NODE_NAME): the table must not invent one.
    assert!(
        status.contains("the fleet said nothing about where it runs"),
        "{status}"
    );
    // The same status for scripts: one JSON object read by field name.
    let out = sigx(&["status", "--socket", s, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    assert_eq!(j["state"], "ready", "{j}");
    assert_eq!(j["appConnected"], true, "{j}");
    assert_eq!(j["activations"]["Counter"], 3, "{j}");
    assert!(j["counters"]["localDispatches"].as_u64() >= Some(3), "{j}");
    assert_eq!(j["view"]["hosts"][0]["id"], j["host"]["id"], "{j}");
    assert_eq!(j["view"]["nodes"], serde_json::Value::Null, "{j}");
}

#[test]
fn status_counts_the_node_a_host_reports() {
    let scratch = Scratch::new("node");
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &["--node", "rack-7"]);
    let _app = counter_app(&scratch, &socket, &[]);
    sidecar.wait_ready();
    let out = sigx(&["status", "--socket", socket.to_str().unwrap()]);
    let status = text(&out.stdout);
    assert!(status.contains("rack-7"), "{status}");
    assert!(status.contains("1 host(s) / 1 node(s)"), "{status}");
}

#[test]
fn dev_up_runs_the_workload_checks_it_and_stops_cleanly() {
    let scratch = Scratch::new("dev");
    let dir = scratch.path("d");
    let out = Command::new(bin("sigx"))
        .args([
            "dev",
            "up",
            "--workload",
            "100",
            "--exit-after-workload",
            "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("check:    100/100 counters hold exactly their acknowledged increments; 0 lost, 0 doubled"),
        "{stdout}"
    );
    assert!(stdout.contains("PASS"), "{stdout}");
    assert!(stdout.contains("sidecar 1 stopped\n"), "{stdout}");
    assert!(stdout.contains("counter-app 1 stopped\n"), "{stdout}");
    // Every host runs on this machine, and `dev up` says so from the kernel's hostname.
    assert!(stdout.contains("1 host(s) / 1 node(s)"), "{stdout}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("secret"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the generated secret is private");
    assert!(!dir.join("dev.pid").exists(), "released the directory");
}

#[test]
fn dev_up_stops_every_child_cleanly_on_ctrl_c() {
    use std::io::{BufRead, BufReader};
    let scratch = Scratch::new("devint");
    let dir = scratch.path("d");
    let mut child = Command::new(bin("sigx"))
        .args(["dev", "up", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("sigx dev up ended early:\n{seen}"))
            .unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("running; Ctrl-C stops the cluster") {
            break;
        }
    }
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let rest = rest.join("\n");
    assert!(status.success(), "{seen}{rest}");
    assert!(rest.contains("sidecar 1 stopped"), "{rest}");
    assert!(rest.contains("counter-app 1 stopped"), "{rest}");
    let sidecar_log = std::fs::read_to_string(dir.join("host-1/sidecar.log")).unwrap();
    assert!(
        sidecar_log.contains("listeners-closed"),
        "graceful stop:\n{sidecar_log}"
    );
    assert!(!dir.join("dev.pid").exists());
}
