//! The real `counter-app` in the roles of `examples/k8s/`: the operator sets `SIGX_ACTORS` /
//! `SIGX_WORKERS` on the sidecar and the app alike, the sidecar accepts only a registration of
//! exactly those types, and the app registers exactly those. Without the env the app registers
//! both types and the sidecar refuses it (the check this relies on is real).
//!
//! Needs the binaries built: `cargo build -p sigx-sidecar -p sigx-example-counter -p sigx-cli`.

mod sdk_support;

use sdk_support::{Proc, Scratch, Sidecar, bin, counter_app};
use std::process::{Command, Output};
use std::time::Duration;

fn sigx(socket: &std::path::Path, args: &[&str]) -> Output {
    Command::new(bin("sigx"))
        .args(args)
        .arg("--socket")
        .arg(socket)
        .env_remove("SIGX_SOCKET")
        .output()
        .expect("run sigx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits (bounded) for the process to exit on its own.
fn exit_within(proc: &mut Proc, within: Duration) -> std::process::ExitStatus {
    let step = Duration::from_millis(25);
    let mut waited = Duration::ZERO;
    while waited < within {
        if let Some(status) = proc.child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(step);
        waited += step;
    }
    panic!(
        "counter-app still running after {within:?}; its log:\n{}",
        proc.log_text()
    );
}

/// The example engine role: actor Counter, no workers.
const ENGINE: [&str; 4] = ["--actors", "Counter", "--workers", ""];

#[test]
fn in_the_engine_role_the_app_is_accepted_and_serves_only_counter() {
    let scratch = Scratch::new("role-engine");
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &ENGINE);
    let _app = counter_app(
        &scratch,
        &socket,
        &[("SIGX_ACTORS", "Counter"), ("SIGX_WORKERS", "")],
    );
    sidecar.wait_ready();

    let out = sigx(&socket, &["call", "Counter/a", "increment", "41"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "41\n");
    let out = sigx(&socket, &["call", "Counter/a", "increment"]);
    assert_eq!(text(&out.stdout), "42\n");

    // Echo is not this role's: the app did not register it.
    let out = sigx(&socket, &["call", "Echo/x", "echo", "\"hi\""]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let out = sigx(&socket, &["status"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("types        Counter (actor)\n"),
        "{stdout}"
    );
}

#[test]
fn in_the_web_role_the_app_is_accepted_and_serves_only_echo() {
    let scratch = Scratch::new("role-web");
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &["--actors", "", "--workers", "Echo"]);
    let _app = counter_app(
        &scratch,
        &socket,
        &[("SIGX_ACTORS", ""), ("SIGX_WORKERS", "Echo")],
    );
    sidecar.wait_ready();

    let out = sigx(&socket, &["call", "Echo/x", "echo", "\"hi\""]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "\"hi\"\n");
    let out = sigx(&socket, &["call", "Counter/a", "increment"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}

#[test]
fn without_the_role_env_the_app_registers_both_and_the_sidecar_refuses_it() {
    let scratch = Scratch::new("role-none");
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &ENGINE);
    let mut app = counter_app(&scratch, &socket, &[]);
    let status = exit_within(&mut app, Duration::from_secs(10));
    assert!(!status.success(), "refused, the app stops: {status}");
    let log = app.log_text();
    assert!(
        log.contains("registers actors [Counter] and workers [Echo]")
            && log.contains("declares actors [Counter] and workers []"),
        "{log}"
    );
    assert_ne!(sidecar.health_status("/readyz"), 200);
}

#[test]
fn a_declared_type_the_app_does_not_implement_stops_it_with_the_name() {
    let scratch = Scratch::new("role-bad");
    let socket = scratch.path("s.sock");
    let mut app = counter_app(
        &scratch,
        &socket,
        &[
            ("SIGX_ACTORS", "Counter,billing.Invoice"),
            ("SIGX_WORKERS", ""),
        ],
    );
    let status = exit_within(&mut app, Duration::from_secs(10));
    assert!(!status.success(), "{status}");
    let log = app.log_text();
    assert!(
        log.contains("SIGX_ACTORS declares the actor type \"billing.Invoice\""),
        "{log}"
    );
}
