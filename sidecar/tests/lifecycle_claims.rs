//! Lifecycle turns and graceful stops keep their claims until the app has answered (DESIGN.md
//! §8): several hosts in one process (memory membership, the real mesh over loopback TCP, the
//! real directory and routing loop) with raw-protocol apps whose Activate or Deactivate turns
//! take longer than the sidecar waits for them.

mod support;

use sigx_proto::v1;
use sigx_sidecar::directory::partition;
use sigx_sidecar::host::{Host, HostOptions, StopKind, dir_view};
use sigx_sidecar::membership::{HostStatus, MemoryHub};
use sigx_sidecar::mesh::{Connector, TcpConnector};
use sigx_sidecar::runtime::ActorId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use support::relay;
use support::*;
use tokio::time::Instant;

struct Node {
    host: Host,
    app: TestApp,
}

/// A host registering the stateful type `Counter` (idle timeout `idle_ms`, 0 = never), started
/// with `extra` flags, its app behaving as `behaviour` says.
async fn node(
    dir: &std::path::Path,
    hub: &MemoryHub,
    id: &str,
    extra: &[&str],
    idle_ms: u64,
    behaviour: HashMap<String, Behaviour>,
) -> Node {
    node_dialing(
        dir,
        hub,
        id,
        extra,
        idle_ms,
        behaviour,
        Arc::new(TcpConnector),
    )
    .await
}

/// [`node`] whose mesh dials through `connector`.
async fn node_dialing(
    dir: &std::path::Path,
    hub: &MemoryHub,
    id: &str,
    extra: &[&str],
    idle_ms: u64,
    behaviour: HashMap<String, Behaviour>,
    connector: Arc<dyn Connector>,
) -> Node {
    let cfg = cluster_host_config(dir, id, extra);
    let host = Host::start_with(
        cfg,
        HostOptions {
            provider: Some(hub.provider(id)),
            connector,
            ..HostOptions::default()
        },
    )
    .await
    .unwrap();
    let app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Counter", false, idle_ms)],
            workers: vec![],
            app_name: id.into(),
        },
        behaviour,
    )
    .await
    .unwrap();
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    Node { host, app }
}

/// Waits until every host's own view shows every host of `ids` active.
async fn converged(nodes: &[&Node], ids: &[&str]) {
    for n in nodes {
        let m = &n.host.cluster.get().expect("joined").membership;
        m.wait_for_view(Duration::from_secs(10), |v| {
            ids.iter()
                .all(|id| v.get(id).is_some_and(|h| h.status == HostStatus::Active))
        })
        .await
        .expect("views converge");
    }
}

/// Waits until `app` has finished a turn of kind `what` on `actor`.
async fn app_finished(app: &TestApp, actor: &str, what: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !app
        .events()
        .iter()
        .any(|e| e.actor == actor && e.what == what)
    {
        assert!(
            Instant::now() < deadline,
            "the app never finished a {what} turn on {actor}: {:?}",
            app.events()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn behaviour(list: &[(&str, Behaviour)]) -> HashMap<String, Behaviour> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Hole E. Host b stops gracefully, but its app takes 400 ms over the Deactivate turn of X and
/// b's drain timeout is 100 ms. b must not withdraw its record then: a withdrawal tells a that
/// b unregistered X, and a would activate X at once while b's app still runs Deactivate. b
/// fences and lets its record lapse instead; a's call is delayed (b unreachable, then expired or
/// its late Unregister arrives), never run beside b's app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_whose_deactivation_overruns_lets_the_record_lapse_instead_of_withdrawing() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let local = ["--placement", "prefer-local"];
    let a = node(dir.path(), &hub, "a", &local, 0, HashMap::new()).await;
    let b = node(
        dir.path(),
        &hub,
        "b",
        &["--placement", "prefer-local", "--drain-timeout-ms", "100"],
        0,
        behaviour(&[(DEACTIVATE, Behaviour::SleepEcho(Duration::from_millis(400)))]),
    )
    .await;
    converged(&[&a, &b], &["a", "b"]).await;
    let mut cb = client(&b.host.socket).await;
    call(&mut cb, "Counter", "x", "work", b"1", 5_000)
        .await
        .expect("x activates on b");
    assert!(b.host.runtime.is_active(&ActorId::new("Counter", "x")));

    let b_state = b.host.state.clone();
    let b_app = b.app;
    b.host.stop(StopKind::Graceful).await;
    assert!(
        b_state.fence_reason().is_some(),
        "a stop that could not deactivate everything fences instead of leaving"
    );
    let a_view = a.host.cluster.get().unwrap().membership.view();
    assert!(
        a_view.get("b").is_some(),
        "b's record is left to lapse, not withdrawn: {a_view:?}"
    );

    let mut ca = client(&a.host.socket).await;
    call(&mut ca, "Counter", "x", "work", b"2", 5_000)
        .await
        .expect("the call is delayed by the handoff, not failed");
    app_finished(&b_app, "Counter/x", "deactivate", Duration::from_secs(3)).await;
    let overlaps = overlapping_activations(&[("a", &a.app), ("b", &b_app)]);
    assert!(
        overlaps.is_empty(),
        "two activations ran at once: {overlaps:?}"
    );
    a.host.stop(StopKind::Graceful).await;
}

/// Hole F. b's app takes 800 ms over X's Activate turn, b's lifecycle turns time out after
/// 300 ms. The caller is told `timeout` at 300 ms, but b keeps X's claim until the app has
/// answered (then deactivates it, since nobody waits for it, and releases). Released at 300 ms,
/// X could be activated by a while b's app is still in Activate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activate_turn_that_overruns_keeps_its_claim_until_the_app_answers() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let a = node(
        dir.path(),
        &hub,
        "a",
        &["--placement", "prefer-local"],
        0,
        HashMap::new(),
    )
    .await;
    let b = node(
        dir.path(),
        &hub,
        "b",
        &["--placement", "prefer-local", "--call-timeout-ms", "300"],
        0,
        behaviour(&[(ACTIVATE, Behaviour::SleepEcho(Duration::from_millis(800)))]),
    )
    .await;
    converged(&[&a, &b], &["a", "b"]).await;
    let mut cb = client(&b.host.socket).await;
    let e = call(&mut cb, "Counter", "x", "work", b"1", 5_000)
        .await
        .expect_err("the activation overran its timeout");
    assert_eq!(e.kind, sigx_proto::ErrorKind::Timeout, "{e}");

    // While b's app is still in Activate, a asks for X.
    let mut ca = client(&a.host.socket).await;
    let _ = call(&mut ca, "Counter", "x", "work", b"2", 2_000).await;
    app_finished(&b.app, "Counter/x", "activate", Duration::from_secs(3)).await;
    let overlaps = overlapping_activations(&[("a", &a.app), ("b", &b.app)]);
    assert!(
        overlaps.is_empty(),
        "two activations ran at once: {overlaps:?}"
    );
    // The late activation is ended the regular way, and its claim released after that.
    app_finished(&b.app, "Counter/x", "deactivate", Duration::from_secs(3)).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while b.host.runtime.lifecycles() > 0 {
        assert!(Instant::now() < deadline, "b's activation never released");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    call(&mut ca, "Counter", "x", "work", b"3", 5_000)
        .await
        .expect("once released, x activates again");
    let overlaps = overlapping_activations(&[("a", &a.app), ("b", &b.app)]);
    assert!(
        overlaps.is_empty(),
        "two activations ran at once: {overlaps:?}"
    );
    a.host.stop(StopKind::Graceful).await;
    b.host.stop(StopKind::Graceful).await;
}

/// Idle deactivation racing a call: X goes idle on the only host and its app takes 400 ms over
/// the Deactivate turn. A call arriving meanwhile meets X's claim, still held by the ending
/// activation. That answer is a handoff: it carries a retry-after, and the routing loop waits
/// within the call's deadline (its three retries used to be spent in ~60 ms, failing the call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_racing_an_idle_deactivation_waits_for_it_and_succeeds() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let a = node(
        dir.path(),
        &hub,
        "a",
        &[],
        100,
        behaviour(&[(DEACTIVATE, Behaviour::SleepEcho(Duration::from_millis(400)))]),
    )
    .await;
    converged(&[&a], &["a"]).await;
    let x = ActorId::new("Counter", "x");
    let mut ca = client(&a.host.socket).await;
    call(&mut ca, "Counter", "x", "work", b"1", 5_000)
        .await
        .expect("x activates");
    // The idle deactivation starts: X leaves the table, its Deactivate turn runs.
    let deadline = Instant::now() + Duration::from_secs(3);
    while a.host.runtime.is_active(&x) {
        assert!(Instant::now() < deadline, "x never went idle");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        a.host.runtime.lifecycles() > 0,
        "the idle activation still holds its claim"
    );
    let t = Instant::now();
    call(&mut ca, "Counter", "x", "work", b"2", 5_000)
        .await
        .expect("a call racing the idle deactivation waits for it, then runs");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let overlaps = overlapping_activations(&[("a", &a.app)]);
    assert!(
        overlaps.is_empty(),
        "two activations ran at once: {overlaps:?}"
    );
    a.host.stop(StopKind::Graceful).await;
}

/// The CI failure of `a_rolling_restart_under_load_loses_no_call`: a call reached a host just
/// before it started draining, its activation was still claiming (the directory owner's answer
/// slow), and the graceful stop waited for that claim until the call's deadline (10 s), the
/// caller timing out with it. A stop abandons a claim still in progress: nothing ran in the app,
/// so there is nothing to wait for, and the caller is told to place the actor elsewhere.
///
/// Calls enter at b, which owns the actors' directory partitions and places some on a; a's
/// Registers reach b but b's answers to a are held, so a's claims cannot finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_abandons_claims_still_in_progress_instead_of_waiting_out_their_deadline() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let (open_tx, open_rx) = tokio::sync::watch::channel(true);
    let a = node_dialing(
        dir.path(),
        &hub,
        "a",
        &["--drain-timeout-ms", "20000"],
        0,
        HashMap::new(),
        Arc::new(relay::HoldAnswers {
            held: None,
            open: open_rx,
        }),
    )
    .await;
    let b = node(dir.path(), &hub, "b", &[], 0, HashMap::new()).await;
    converged(&[&a, &b], &["a", "b"]).await;
    let view = dir_view(&b.host.cluster.get().unwrap().membership.view());
    let keys: Vec<String> = (0..400)
        .map(|k| format!("k{k}"))
        .filter(|k| {
            view.owner(partition("Counter", k))
                .is_some_and(|o| &*o.id == "b")
        })
        .take(24)
        .collect();
    assert_eq!(keys.len(), 24, "b owns about half of the partitions");
    open_tx.send(false).unwrap();
    let socket = b.host.socket.clone();
    let calls: Vec<_> = keys
        .iter()
        .map(|k| {
            let (socket, k) = (socket.clone(), k.clone());
            tokio::spawn(async move {
                let mut c = client(&socket).await;
                call(&mut c, "Counter", &k, "work", b"1", 12_000).await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.host.runtime.lifecycles() == 0 {
        assert!(Instant::now() < deadline, "b placed none of 24 actors on a");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let claiming = a.host.runtime.lifecycles();
    let a_state = a.host.state.clone();
    let a_app = a.app;
    let started = Instant::now();
    a.host.stop(StopKind::Graceful).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the stop waited {took:?} for {claiming} claim(s) that had run nothing"
    );
    assert!(
        a_state.fence_reason().is_none(),
        "nothing ran in a's app, so the stop withdraws instead of lapsing"
    );
    let activated_on_a: Vec<String> = a_app
        .events()
        .iter()
        .map(|e| format!("{} {}", e.actor, e.what))
        .collect();
    assert!(
        activated_on_a.is_empty(),
        "no claim on a could finish, so a's app ran nothing: {activated_on_a:?}"
    );
    // The abandoned calls are re-placed (on b, the host left) within their deadline.
    for c in calls {
        c.await
            .unwrap()
            .expect("a call whose claim was abandoned is re-placed, not failed");
    }
    let _ = open_tx.send(true);
    b.host.stop(StopKind::Graceful).await;
}
