//! The real `counter-app` killed with -9 mid-turn, beside a real sidecar: callers get defined
//! errors (the turn in flight is `outcome-unknown`, a call queued behind it `unreachable`: it
//! never ran), the sidecar survives and reports not-ready, and a restarted app serves again.

mod sdk_support;

use sdk_support::{Scratch, Sidecar, counter_app};
use sigx_sdk::{Client, ErrorKind};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_killed_mid_turn_fails_its_callers_definitely_and_a_new_app_serves() {
    let scratch = Scratch::new("killed");
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &[]);
    let trace = scratch.path("trace.jsonl");
    let mut app = counter_app(
        &scratch,
        &socket,
        &[
            ("COUNTER_TURN_DELAY_MS", "2000"),
            ("COUNTER_TRACE_FILE", trace.to_str().unwrap()),
        ],
    );
    sidecar.wait_ready();
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(20));

    let in_flight = tokio::spawn({
        let c = client.clone();
        async move { c.call("Counter", "k", "increment", "").await }
    });
    // Kill only once the app's own trace shows the turn running (a busy machine may take a
    // while to get there; the turn then has two seconds to go).
    let mut waited = Duration::ZERO;
    while !std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .contains("\"turn-start\"")
    {
        assert!(waited < Duration::from_secs(10), "the turn never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    let queued = tokio::spawn({
        let c = client.clone();
        async move { c.call("Counter", "k", "increment", "").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.child.kill().unwrap(); // SIGKILL
    app.child.wait().unwrap();

    let e = in_flight.await.unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutcomeUnknown, "the turn in flight: {e}");
    let e = queued.await.unwrap().unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Unreachable,
        "the call that never ran: {e}"
    );

    assert_eq!(sidecar.health_status("/livez"), 200, "the sidecar survives");
    assert_ne!(sidecar.health_status("/readyz"), 200, "no app, not ready");
    let e = client.call("Counter", "k", "get", "").await.unwrap_err();
    assert_ne!(e.kind, ErrorKind::App, "nobody to run it: {e}");

    let _again = counter_app(&scratch, &socket, &[]);
    sidecar.wait_ready();
    let n: i64 = client
        .call_json("Counter", "k", "increment", &())
        .await
        .unwrap();
    assert_eq!(n, 1, "a new app, a new activation");
}
