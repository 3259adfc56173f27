//! `/drain` on the health port (the app container's preStop hook in a pod, host/drain.rs): it
//! drains the attached app as the app's own `Drain` would — in-flight turns finish, every
//! activation gets its Deactivate turn — and answers only then; it is off without a token and
//! refuses a request without the right one.

mod support;

use sigx_proto::v1;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "r-uid-engine";

/// `GET path` with an optional drain token: (status, body).
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let header = token
        .map(|t| format!("X-Sigx-Drain-Token: {t}\r\n"))
        .unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n{header}\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (code, body)
}

async fn until_ready(addr: SocketAddr) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while http_get(addr, "/readyz").await != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the host becomes ready once the app registered");
}

fn counter_app() -> v1::Register {
    v1::Register {
        actors: vec![actor_spec("Counter", false, 0)],
        workers: vec![],
        app_name: "test-app".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_answers_once_in_flight_turns_finished_and_activations_deactivated() {
    let dir = tempdir();
    let host = start_host(dir.path(), &["--drain-token", TOKEN]).await;
    let app = TestApp::start(
        &host.socket,
        counter_app(),
        HashMap::from([(
            "slow".to_string(),
            Behaviour::SleepEcho(Duration::from_millis(400)),
        )]),
    )
    .await
    .unwrap();
    until_ready(host.health_addr).await;
    let mut c = client(&host.socket).await;
    call(&mut c, "Counter", "b", "get", b"", 5_000)
        .await
        .unwrap();
    let socket = host.socket.clone();
    let in_flight = tokio::spawn(async move {
        let mut c = client(&socket).await;
        call(&mut c, "Counter", "a", "slow", b"done", 5_000).await
    });
    tokio::time::timeout(Duration::from_secs(5), async {
        while host.runtime.in_flight() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the slow turn is in flight");

    // Refused without the token, and with a wrong one: nothing drained.
    assert_eq!(get(host.health_addr, "/drain", None).await.0, 403);
    assert_eq!(get(host.health_addr, "/drain", Some("guess")).await.0, 403);
    assert_eq!(http_get(host.health_addr, "/readyz").await, 200);

    let (code, body) = get(host.health_addr, "/drain", Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    // Answered only after the drain: the turn was answered, both activations deactivated.
    assert!(host.runtime.live_activations().is_empty());
    assert_eq!(host.runtime.in_flight(), 0);
    let events = app.events();
    for actor in ["Counter/a", "Counter/b"] {
        assert!(
            events
                .iter()
                .any(|e| e.actor == actor && e.what == "deactivate"),
            "{actor} got its Deactivate turn before /drain answered: {events:?}"
        );
    }
    assert_eq!(&in_flight.await.unwrap().unwrap()[..], b"done");
    assert_eq!(http_get(host.health_addr, "/readyz").await, 503);
    // A second hook (another app container) finds nothing left to wait for.
    let (code, body) = get(host.health_addr, "/drain", Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_is_off_without_a_token_and_trivial_without_an_app() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let (code, body) = get(host.health_addr, "/drain", Some(TOKEN)).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("SIGX_DRAIN_TOKEN"), "{body}");
    host.stop(sigx_sidecar::host::StopKind::Fast).await;

    let dir = tempdir();
    let host = start_host(dir.path(), &["--drain-token", TOKEN]).await;
    let (code, body) = get(host.health_addr, "/drain", Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("nothing to drain"), "{body}");
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}

/// In a pod the operator sets `SIGX_SOCKET_MODE=666`: the app need not share the sidecar's UID
/// or group (render/security.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_gets_the_configured_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let host = start_host(dir.path(), &["--socket-mode", "666"]).await;
    let mode = std::fs::metadata(&host.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o666);
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}
