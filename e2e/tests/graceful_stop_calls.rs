//! A graceful stop lets the calls already made through its app socket finish. Two real
//! `sigx-sidecar` processes on one SQLite membership file: a call routed from `a` to a slow
//! actor on `b`, still in flight when `a` gets SIGTERM, is answered. Before, `a` closed its
//! socket ~50 ms after withdrawing and exited, and the caller got `outcome-unknown` for a call
//! that did run (seen as 6 lost calls of a rolling restart on a loaded machine).

mod sdk_support;

use bytes::Bytes;
use sdk_support::{Scratch, Sidecar};
use sigx_sdk::{ActorType, App, Client, Context, WorkerType};
use std::time::Duration;
use tokio::time::Instant;

/// `Slow.sleep` sleeps the milliseconds its payload names and answers the payload.
fn slow_app() -> App {
    App::new("back").actor(
        ActorType::new("Slow", |_ctx: Context| async { Ok(()) }).method(
            "sleep",
            |ctx| async move {
                let ms: u64 = std::str::from_utf8(ctx.payload())
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(ctx.payload().clone())
            },
        ),
    )
}

struct Pair {
    a: Sidecar,
    b: Sidecar,
    ca: Client,
    _apps: Vec<sigx_sdk::ServeHandle>,
}

async fn two_hosts(scratch: &Scratch, drain_ms: u64) -> Pair {
    let db = scratch.path("membership.db");
    let secret = scratch.path("secret");
    std::fs::write(&secret, "a-test-secret-that-is-not-empty").unwrap();
    let drain = drain_ms.to_string();
    let start = |name: &str| {
        let socket = scratch.path(&format!("{name}.sock"));
        Sidecar::start_clustered_with(
            scratch,
            &socket,
            name,
            &db,
            &secret,
            &["--drain-timeout-ms", &drain],
        )
    };
    let (a, b) = (start("a"), start("b"));
    let ca = Client::lazy(&a.socket).with_timeout(Duration::from_secs(10));
    let cb = Client::lazy(&b.socket);
    // `a` registers only a worker, so every `Slow` call through it crosses the mesh to `b`.
    let apps = vec![
        App::new("front")
            .worker(WorkerType::new("Nop").method("nop", |_ctx| async move { Ok(Bytes::new()) }))
            .spawn(&ca),
        slow_app().spawn(&cb),
    ];
    // Placed on `b`, and `a` routes to it: the views have converged.
    let warm = Instant::now() + Duration::from_secs(15);
    while ca
        .call("Slow", "k", "sleep", Bytes::from_static(b"0"))
        .await
        .is_err()
    {
        assert!(Instant::now() < warm, "a never reached the actor on b");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Pair {
        a,
        b,
        ca,
        _apps: apps,
    }
}

/// SIGTERM to `a` (a graceful stop); answers how long it took to exit and its exit code.
async fn terminate(mut sidecar: Sidecar) -> (Duration, Option<i32>) {
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let status = sidecar.proc.terminate(Duration::from_secs(30));
        (t.elapsed(), status.and_then(|s| s.code()))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_through_a_stopping_host_is_answered() {
    let scratch = Scratch::new("graceful-calls");
    let Pair { a, b, ca, _apps } = two_hosts(&scratch, 10_000).await;
    let call = tokio::spawn({
        let ca = ca.clone();
        async move {
            ca.call("Slow", "k", "sleep", Bytes::from_static(b"1500"))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (took, code) = terminate(a).await;
    let answer = call.await.unwrap();
    assert_eq!(
        answer.as_deref().map_err(|e| e.to_string()),
        Ok(&b"1500"[..]),
        "the call made before the stop is answered (the stop took {took:?})"
    );
    assert_eq!(code, Some(0), "a clean exit");
    // It waited for that call (about 1.2 s left of it), not for the drain timeout.
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "the stop took {took:?}"
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_calls_ends_at_the_drain_timeout() {
    let scratch = Scratch::new("graceful-calls-timeout");
    let Pair { a, b, ca, _apps } = two_hosts(&scratch, 600).await;
    let call = tokio::spawn({
        let ca = ca.clone();
        async move {
            ca.call("Slow", "k", "sleep", Bytes::from_static(b"6000"))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (took, code) = terminate(a).await;
    // A call longer than the drain timeout does not hold the stop past it.
    assert_eq!(code, Some(0), "a clean exit");
    assert!(
        took < Duration::from_millis(600 + 2_000),
        "the stop took {took:?}"
    );
    assert!(call.await.unwrap().is_err(), "cut off at the drain timeout");
    drop(b);
}
