//! The Rust SDK against a real `sigx-sidecar` process: an app served in-process with the SDK,
//! calls through the sidecar's Unix socket, errors by kind, idle re-activation, reconnection.
//!
//! Multi-threaded runtimes: the support helpers wait with blocking sleeps, and the app served in
//! process must keep answering (a GOAWAY, a turn) meanwhile.

mod sdk_support;

use sdk_support::{Scratch, Sidecar};
use sigx_sdk::{
    ActorError, ActorType, App, Client, Context, ErrorKind, MemberFilter, ServeState, WorkerType,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Counter with a few extra methods to provoke each kind of answer.
fn app(deactivations: Arc<AtomicUsize>) -> App {
    let counter = ActorType::new("Counter", |_ctx: Context| async { Ok(0i64) })
        .idle_timeout(Duration::from_secs(1))
        .json_method("increment", |ctx, by: Option<i64>| async move {
            let mut n = ctx.state().await;
            let before = *n;
            // Yield inside the turn: were two turns of one activation ever interleaved, both
            // would read the same `before` and one increment would be lost.
            tokio::time::sleep(Duration::from_millis(1)).await;
            *n = before + by.unwrap_or(1);
            Ok(*n)
        })
        .json_method("get", |ctx, (): ()| async move { Ok(*ctx.state().await) })
        .json_method("activation", |ctx, (): ()| async move {
            Ok(ctx.activation_id().to_string())
        })
        .json_method("fail", |_ctx, msg: String| async move {
            Err::<(), _>(ActorError::app(msg))
        })
        .json_method("slow", |_ctx, ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        })
        .on_deactivate(move |ctx, _reason| {
            let d = deactivations.clone();
            async move {
                // The last turn may read state (to save it): the activation has left the
                // routing table by now, and the read must still find it. Counted only if it did.
                ctx.storage().get_bytes("probe").await?;
                d.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        });
    let echo =
        WorkerType::new("Echo").method("echo", |ctx| async move { Ok(ctx.payload().clone()) });
    App::new("sdk-e2e")
        .actor(counter)
        .actor(meeting("Room", true))
        .actor(meeting("Queue", false))
        .worker(echo)
}

/// A type whose `meet` turn succeeds only when `n` turns of the same activation are inside it
/// at once (waiting up to 1 s): a reentrant type lets them meet, a turn-based one never does.
fn meeting(name: &str, reentrant: bool) -> ActorType<Arc<tokio::sync::watch::Sender<usize>>> {
    ActorType::new(name, |_ctx: Context| async {
        Ok(Arc::new(tokio::sync::watch::channel(0usize).0))
    })
    .reentrant(reentrant)
    .json_method("meet", |ctx, n: usize| async move {
        // Take the shared counter and release the state lock at once: the lock guards state,
        // the sidecar decides whether turns overlap.
        let present = ctx.state().await.clone();
        present.send_modify(|p| *p += 1);
        let mut rx = present.subscribe();
        let met = tokio::time::timeout(Duration::from_secs(1), rx.wait_for(|p| *p >= n))
            .await
            .is_ok();
        drop(rx);
        if met {
            Ok(())
        } else {
            present.send_modify(|p| *p -= 1);
            Err(ActorError::app("met nobody: turns did not overlap"))
        }
    })
}

struct World {
    _scratch: Scratch,
    sidecar: Sidecar,
    client: Client,
    serving: sigx_sdk::ServeHandle,
    deactivations: Arc<AtomicUsize>,
}

async fn world(tag: &str) -> World {
    let scratch = Scratch::new(tag);
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &[]);
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(5));
    let deactivations = Arc::new(AtomicUsize::new(0));
    let serving = app(deactivations.clone()).spawn(&client);
    tokio::time::timeout(Duration::from_secs(5), serving.registered(1))
        .await
        .expect("registered within 5s")
        .expect("registered");
    World {
        _scratch: scratch,
        sidecar,
        client,
        serving,
        deactivations,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_increments_and_concurrent_calls_are_each_counted_once() {
    let w = world("count").await;
    let c = w.client.actor("Counter", "a");
    for expected in 1..=3i64 {
        let n: i64 = c.call_json("increment", &()).await.unwrap();
        assert_eq!(n, expected);
    }
    let n: i64 = c.call_json("increment", &10).await.unwrap();
    assert_eq!(n, 13);

    let calls = (0..40).map(|_| {
        let c = c.clone();
        async move { c.call_json::<(), i64>("increment", &()).await.unwrap() }
    });
    let mut seen = futures::future::join_all(calls).await;
    seen.sort();
    assert_eq!(
        seen,
        (14..=53).collect::<Vec<i64>>(),
        "each turn saw the one before it"
    );
    assert_eq!(c.call_json::<(), i64>("get", &()).await.unwrap(), 53);

    let other: i64 = w
        .client
        .call_json("Counter", "b", "get", &())
        .await
        .unwrap();
    assert_eq!(other, 0, "another key is another actor");
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_reach_the_caller_by_kind() {
    let w = world("errors").await;
    let e = w
        .client
        .call("Counter", "a", "fail", "\"out of stock\"")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::App, "{e}");
    assert_eq!(e.message, "out of stock");

    let e = w
        .client
        .call("Counter", "a", "decrement", "")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "unknown method: {e}");
    assert!(e.message.contains("decrement"), "{e}");

    let e = w.client.call("Nope", "a", "get", "").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "unknown type: {e}");

    let e = w
        .client
        .call("Counter", "a", "increment", "\"x\"")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "bad payload: {e}");

    let e = w
        .client
        .with_timeout(Duration::from_millis(200))
        .call("Counter", "slow", "slow", "1000")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");

    // After all that, the actor still works.
    let n: i64 = w
        .client
        .call_json("Counter", "a", "increment", &())
        .await
        .unwrap();
    assert_eq!(n, 1);
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_actor_is_deactivated_and_comes_back_as_a_new_activation() {
    let w = world("idle").await;
    let first: String = w
        .client
        .call_json("Counter", "i", "activation", &())
        .await
        .unwrap();
    let again: String = w
        .client
        .call_json("Counter", "i", "activation", &())
        .await
        .unwrap();
    assert_eq!(first, again, "one activation while calls keep coming");
    assert!(!first.is_empty());
    w.client
        .call("Counter", "i", "increment", "")
        .await
        .unwrap();

    let mut waited = Duration::ZERO;
    while w.deactivations.load(Ordering::SeqCst) == 0 {
        assert!(
            waited < Duration::from_secs(5),
            "no Deactivate turn after the idle timeout"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    let next: String = w
        .client
        .call_json("Counter", "i", "activation", &())
        .await
        .unwrap();
    assert_ne!(
        next, first,
        "a new activation has a new id (the fencing token)"
    );
    let n: i64 = w
        .client
        .call_json("Counter", "i", "get", &())
        .await
        .unwrap();
    assert_eq!(n, 0, "in-memory state went with the old activation");
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_reconnects_when_the_sidecar_restarts() {
    let mut w = world("reconnect").await;
    let n: i64 = w
        .client
        .call_json("Counter", "r", "increment", &())
        .await
        .unwrap();
    assert_eq!(n, 1);

    w.sidecar.proc.terminate(Duration::from_secs(10));
    let mut state = w.serving.watch();
    tokio::time::timeout(
        Duration::from_secs(5),
        state.wait_for(|s| matches!(s, ServeState::Connecting { .. })),
    )
    .await
    .expect("the app noticed the sidecar left")
    .unwrap();
    drop(state);

    // A new sidecar on the same socket path; the app finds it by itself.
    let scratch_socket = w.sidecar.socket.clone();
    w.sidecar = Sidecar::start(&w._scratch, &scratch_socket, &[]);
    let host = tokio::time::timeout(Duration::from_secs(10), w.serving.registered(2))
        .await
        .expect("re-registered within 10s")
        .unwrap();
    w.sidecar.wait_ready();
    assert!(!host.is_empty());
    let n: i64 = w
        .client
        .call_json("Counter", "r", "increment", &())
        .await
        .unwrap();
    assert_eq!(n, 1, "a restarted sidecar starts with no activations");
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_worker_on_and_on_change_see_the_host() {
    let w = world("members").await;
    let members = w.client.members(&MemberFilter::active()).await.unwrap();
    assert_eq!(members.hosts.len(), 1);
    let me = members.hosts[0].clone();
    assert!(me.registers("Echo") && me.registers("Counter"));
    let none = w
        .client
        .members(&MemberFilter::active().registers("Nope"))
        .await
        .unwrap();
    assert!(none.hosts.is_empty(), "filtered by type: {none:?}");

    let reply = w
        .client
        .worker_on(&me.id, "Echo")
        .call("echo", "hi")
        .await
        .unwrap();
    assert_eq!(&reply[..], b"hi");
    let e = w
        .client
        .worker_on(&me.id, "Counter")
        .call("get", "")
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Invalid,
        "a stateful type is refused: {e}"
    );
    let e = w
        .client
        .worker_on("no-such-host", "Echo")
        .call("echo", "hi")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _sub = w.client.on_change(MemberFilter::any(), move |m| {
        let _ = tx.send(m.hosts.iter().map(|h| h.id.clone()).collect::<Vec<_>>());
    });
    let ids = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids, vec![me.id.clone()]);
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_stops_leaves_the_sidecar_not_ready() {
    let w = world("stop").await;
    assert_eq!(w.sidecar.health_status("/readyz"), 200);
    w.serving.shutdown().await.unwrap();
    let mut waited = Duration::ZERO;
    while w.sidecar.health_status("/readyz") == 200 {
        assert!(waited < Duration::from_secs(5), "still ready with no app");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    let e = w.client.call("Counter", "a", "get", "").await.unwrap_err();
    assert_ne!(e.kind, ErrorKind::App, "no app to answer: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_type_overlaps_turns_and_a_turn_based_one_never_does() {
    let w = world("reentrant").await;
    let meet = |t: &'static str| {
        let client = w.client.clone();
        async move { client.call(t, "k", "meet", "3").await }
    };
    let room = futures::future::join_all((0..3).map(|_| meet("Room"))).await;
    assert!(
        room.iter().all(|r| r.is_ok()),
        "reentrant turns met: {room:?}"
    );

    let queue = futures::future::join_all((0..3).map(|_| meet("Queue"))).await;
    for r in &queue {
        let e = r.as_ref().expect_err("a turn-based type ran turns at once");
        assert_eq!(e.kind, ErrorKind::App, "{e}");
        assert!(e.message.contains("met nobody"), "{e}");
    }
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_app_is_drained_and_its_actors_deactivate_through_it() {
    let w = world("drain").await;
    for k in 0..5 {
        w.client
            .call("Counter", format!("d{k}"), "increment", "")
            .await
            .unwrap();
    }
    assert_eq!(w.deactivations.load(Ordering::SeqCst), 0);
    let deactivations = w.deactivations.clone();
    tokio::time::timeout(Duration::from_secs(40), w.serving.shutdown())
        .await
        .expect("drained within the bound")
        .unwrap();
    assert_eq!(
        deactivations.load(Ordering::SeqCst),
        5,
        "every activation got its Deactivate turn before the app left"
    );
    // The sidecar notices the app's side of the stream closing a moment later.
    let mut waited = Duration::ZERO;
    loop {
        let status = w.client.status().await.unwrap();
        assert!(
            status.activations.iter().all(|a| a.activations == 0),
            "drained: {:?}",
            status.activations
        );
        if !status.app_connected {
            break;
        }
        assert!(
            waited < Duration::from_secs(5),
            "the app still counts as connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_change_survives_a_panicking_callback_and_a_sidecar_restart() {
    let mut w = world("onchange").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let _sub = w.client.on_change(MemberFilter::any(), move |m| {
        seen.fetch_add(1, Ordering::SeqCst);
        panic!("a subscriber that always panics ({} hosts)", m.hosts.len());
    });
    let wait_for = |n: usize| {
        let calls = calls.clone();
        async move {
            let mut waited = Duration::ZERO;
            while calls.load(Ordering::SeqCst) < n {
                assert!(
                    waited < Duration::from_secs(10),
                    "callback ran fewer than {n} times"
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
                waited += Duration::from_millis(25);
            }
        }
    };
    wait_for(1).await;
    // The connection goes away and comes back: the subscription re-subscribes by itself and
    // the (still panicking) callback hears the new sidecar's view.
    w.sidecar.proc.terminate(Duration::from_secs(10));
    let socket = w.sidecar.socket.clone();
    w.sidecar = Sidecar::start(&w._scratch, &socket, &[]);
    wait_for(2).await;
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_the_sidecar_refuses_stops_serving_with_its_reason() {
    let scratch = Scratch::new("refused");
    let socket = scratch.path("s.sock");
    // The role declares other types than the app registers: retrying would be refused forever.
    let _sidecar = Sidecar::start(
        &scratch,
        &socket,
        &["--actors", "Ledger", "--workers", "Echo"],
    );
    let client = Client::lazy(&socket);
    let serving = app(Default::default()).spawn(&client);
    let end = tokio::time::timeout(Duration::from_secs(10), serving.join())
        .await
        .expect("serving ends by itself");
    match end {
        Err(sigx_sdk::ServeError::Invalid(why)) => {
            assert!(
                why.contains("Ledger"),
                "names what the role declares: {why}"
            )
        }
        other => panic!("expected an invalid registration, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_stops_answering_costs_a_caller_its_deadline_not_forever() {
    let w = world("frozen").await;
    let client = w.client.with_timeout(Duration::from_millis(300));
    client.call("Counter", "f", "increment", "").await.unwrap();
    w.sidecar.proc.signal("STOP");
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        client.call("Counter", "f", "increment", ""),
    )
    .await;
    w.sidecar.proc.signal("CONT");
    let e = outcome
        .expect("the call gave up by itself (the transport deadline backs the call's own)")
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    w.serving.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_registering_with_a_frozen_sidecar_can_still_stop() {
    let scratch = Scratch::new("frozenreg");
    let socket = scratch.path("s.sock");
    let sidecar = Sidecar::start(&scratch, &socket, &[]);
    sidecar.proc.signal("STOP");
    let serving = app(Default::default()).spawn(&Client::lazy(&socket));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        matches!(serving.state(), ServeState::Connecting { .. }),
        "{:?}",
        serving.state()
    );
    let stopped = tokio::time::timeout(Duration::from_secs(3), serving.shutdown()).await;
    sidecar.proc.signal("CONT");
    stopped
        .expect("a stop is heard while the registration hangs")
        .unwrap();
}

/// The runtime threads of process `pid` (tokio names them `tokio-rt-worker`).
fn runtime_workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "tokio-rt-worker")
                })
                .count()
        })
        .unwrap_or(0)
}

/// `--worker-threads` sizes the sidecar's runtime (a small pod's sidecar may want one thread),
/// and a sidecar on one thread serves calls as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_runs_on_the_runtime_threads_it_is_given() {
    for threads in [1usize, 3] {
        let scratch = Scratch::new(&format!("threads-{threads}"));
        let socket = scratch.path("sidecar.sock");
        let n = threads.to_string();
        let sidecar = Sidecar::start(&scratch, &socket, &["--worker-threads", &n]);
        let client = Client::lazy(&socket).with_timeout(Duration::from_secs(5));
        let serving = app(Arc::new(AtomicUsize::new(0))).spawn(&client);
        tokio::time::timeout(Duration::from_secs(5), serving.registered(1))
            .await
            .expect("registered within 5s")
            .expect("registered");
        let total: i64 = client
            .call_json("Counter", "a", "increment", &2)
            .await
            .unwrap();
        assert_eq!(total, 2, "calls work on {threads} thread(s)");
        assert_eq!(runtime_workers(sidecar.proc.child.id()), threads);
        serving.shutdown().await.unwrap();
    }
}

/// A turn exposes its W3C trace context (`ctx.trace()`, `ctx.traceparent()`), and a call made
/// through the turn's `ctx.client()` carries it: with export off the sidecar passes the context
/// through unchanged, so the nested turn sees exactly the outer caller's. A call through a client
/// without the turn's trace reaches an untraced turn (the check can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_exposes_its_trace_and_a_nested_call_carries_it() {
    let scratch = Scratch::new("trace");
    let socket = scratch.path("s.sock");
    let _sidecar = Sidecar::start(&scratch, &socket, &[]);
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(5));
    let seen = |ctx: &Context| {
        ctx.trace()
            .map(|t| format!("{}|{}", t.traceparent, t.tracestate))
    };
    let relay = ActorType::new("Relay", |_ctx: Context| async { Ok(()) })
        .json_method("inner", move |ctx, (): ()| async move { Ok(seen(&ctx)) })
        .json_method("outer", move |ctx, detached: bool| async move {
            let via = if detached {
                ctx.client().with_trace(None)
            } else {
                ctx.client().clone()
            };
            let inner: Option<String> = via
                .call_json("Relay", &format!("{}-inner", ctx.key()), "inner", &())
                .await?;
            Ok((seen(&ctx), ctx.traceparent().map(str::to_string), inner))
        });
    let serving = App::new("sdk-trace").actor(relay).spawn(&client);
    tokio::time::timeout(Duration::from_secs(5), serving.registered(1))
        .await
        .expect("registered within 5s")
        .expect("registered");
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = client.with_trace(Some(sigx_sdk::proto::TraceContext {
        traceparent: parent.into(),
        tracestate: "sigx=rust".into(),
    }));
    let want = Some(format!("{parent}|sigx=rust"));
    type Seen = (Option<String>, Option<String>, Option<String>);
    let (outer, traceparent, inner): Seen = traced
        .call_json("Relay", "o", "outer", &false)
        .await
        .unwrap();
    assert_eq!(outer, want, "the outer turn's trace");
    assert_eq!(traceparent.as_deref(), Some(parent));
    assert_eq!(inner, want, "the nested call carried the turn's trace");
    let (outer, _, inner): Seen = traced
        .call_json("Relay", "d", "outer", &true)
        .await
        .unwrap();
    assert_eq!((outer, inner), (want, None), "a client without the trace");
    let plain: Option<String> = client.call_json("Relay", "p", "inner", &()).await.unwrap();
    assert_eq!(plain, None, "an untraced call's turn has no trace");
    serving.shutdown().await.unwrap();
}

/// `DispatchOn` (a worker call to a chosen host) carries the caller's trace to the worker's
/// turn, as `Call` does; without one the turn is untraced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_on_carries_the_callers_trace_to_the_workers_turn() {
    let scratch = Scratch::new("trace-dispatch");
    let socket = scratch.path("s.sock");
    let _sidecar = Sidecar::start(&scratch, &socket, &[]);
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(5));
    let probe = WorkerType::new("Probe").json_method("seen", |ctx, (): ()| async move {
        Ok(ctx.trace().map(|t| t.traceparent.clone()))
    });
    let serving = App::new("sdk-trace-dispatch").worker(probe).spawn(&client);
    tokio::time::timeout(Duration::from_secs(5), serving.registered(1))
        .await
        .expect("registered within 5s")
        .expect("registered");
    let host = client.status().await.unwrap().host.unwrap().id;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = client.with_trace(Some(sigx_sdk::proto::TraceContext {
        traceparent: parent.into(),
        tracestate: String::new(),
    }));
    let seen = |c: Client| {
        let host = host.clone();
        async move {
            let reply = c
                .dispatch_on(
                    host,
                    "Probe",
                    "w",
                    "seen",
                    bytes::Bytes::from_static(b"null"),
                )
                .await
                .unwrap();
            serde_json::from_slice::<Option<String>>(&reply).unwrap()
        }
    };
    assert_eq!(seen(traced).await.as_deref(), Some(parent));
    assert_eq!(seen(client.clone()).await, None);
    serving.shutdown().await.unwrap();
}
