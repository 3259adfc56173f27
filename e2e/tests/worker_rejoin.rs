//! Real `sigx-sidecar` processes on one SQLite membership file: a worker-only host suspended past
//! its TTL does not fence — it rejoins under the same id, stays live, and serves its workers
//! again — while a stateful host in the same situation fences (see chaos.rs for that side).
//!
//! Needs the binaries built (`make test` builds them first).

mod sdk_support;

use sdk_support::{Proc, Scratch, counter_app, free_port};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn health_status(addr: SocketAddr, path: &str) -> u16 {
    sigx_e2e::probe::http_status(addr, path)
}

struct Pod {
    sidecar: Proc,
    app: Proc,
    socket: std::path::PathBuf,
    health: SocketAddr,
}

fn pod(scratch: &Scratch, name: &str, actors: &str, workers: &str) -> Pod {
    let socket = scratch.path(&format!("{name}.sock"));
    let health: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mesh = format!("127.0.0.1:{}", free_port());
    let db = scratch.path("membership.db");
    let secret = scratch.path("secret");
    if !secret.exists() {
        std::fs::write(&secret, "worker-rejoin-secret").unwrap();
    }
    let mut cmd = Command::new(sdk_support::bin("sigx-sidecar"));
    cmd.args(["--membership", "sqlite", "--host-id", name])
        .args([
            "--sqlite-path",
            db.to_str().unwrap(),
            "--secret-file",
            secret.to_str().unwrap(),
        ])
        .args([
            "--socket",
            socket.to_str().unwrap(),
            "--health-addr",
            &health.to_string(),
        ])
        .args(["--mesh-addr", &mesh, "--advertise", &mesh])
        .args(["--beat-ms", "200", "--ttl-ms", "1000"])
        .args(["--actors", actors, "--workers", workers]);
    let sidecar = Proc::spawn(cmd, scratch.path(&format!("{name}-sidecar.log")));
    for _ in 0..400 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let app = counter_app(
        scratch,
        &socket,
        &[("SIGX_ACTORS", actors), ("SIGX_WORKERS", workers)],
    );
    for _ in 0..400 {
        if health_status(health, "/readyz") == 200 {
            return Pod {
                sidecar,
                app,
                socket,
                health,
            };
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{name} not ready; its log:\n{}", sidecar.log_text());
}

fn counter(status: &sigx_sdk::proto::StatusResponse, name: &str) -> u64 {
    status.counters.get(name).copied().unwrap_or(0)
}

async fn wait_active_in(view_of: &Path, id: &str) -> bool {
    let c = sigx_sdk::Client::lazy(view_of);
    for _ in 0..200 {
        if let Ok(s) = c.status().await
            && s.view
                .is_some_and(|v| v.hosts.iter().any(|h| h.id == id && h.status == 2))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_only_host_suspended_past_its_ttl_rejoins_instead_of_fencing() {
    let scratch = Scratch::new("worker-rejoin");
    let engine = pod(&scratch, "engine", "Counter", "");
    let web = pod(&scratch, "web", "", "Echo");
    assert!(wait_active_in(&engine.socket, "web").await, "web joined");

    // Suspend the whole web pod for 3x TTL: its lease lapses and the engine expires it.
    web.sidecar.signal("STOP");
    web.app.signal("STOP");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = sigx_sdk::Client::lazy(&engine.socket);
    let s = c.status().await.unwrap();
    assert!(
        !s.view.unwrap().hosts.iter().any(|h| h.id == "web"),
        "the engine dropped the suspended worker host"
    );
    web.sidecar.signal("CONT");
    web.app.signal("CONT");

    // It rejoins under the same id, stays live, and serves its worker again.
    assert!(
        wait_active_in(&engine.socket, "web").await,
        "web rejoined under the same id"
    );
    assert_eq!(
        health_status(web.health, "/livez"),
        200,
        "a worker-only host never fences"
    );
    let w = sigx_sdk::Client::lazy(&web.socket).with_timeout(Duration::from_secs(5));
    let status = w.status().await.unwrap();
    assert_eq!(counter(&status, "selfFences"), 0);
    assert!(counter(&status, "rejoins") >= 1, "{:?}", status.counters);
    let echoed = w.call("Echo", "", "echo", "still here").await.unwrap();
    assert_eq!(&echoed[..], b"still here");
    // And the stateful engine still serves its actors to the web host's app.
    let n: i64 = w.call_json("Counter", "k", "increment", &1).await.unwrap();
    assert!(n >= 1);
}
