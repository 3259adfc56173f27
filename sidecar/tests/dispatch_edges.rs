//! Behaviour that had no test (issue 17, item 6), on in-process hosts over real sockets:
//! an inbound call for a type the host does not register (the mixed-version case), the worker
//! concurrency cap, targeted dispatches, and the slow-turn counter.

mod support;

use sigx_proto::{ErrorKind, v1};
use sigx_sidecar::membership::MemoryHub;
use sigx_sidecar::mesh::DeliverHandler;
use sigx_sidecar::placement::Inbound;
use std::collections::HashMap;
use std::time::Duration;
use support::*;
use tokio::time::Instant;

fn counter(host: &sigx_sidecar::host::Host, name: &str) -> u64 {
    let status = match host.cluster.get() {
        Some(c) => {
            use sigx_sidecar::app::Dispatcher;
            c.router.status()
        }
        None => panic!("{} has not joined", host.id()),
    };
    status
        .counters
        .get(name)
        .copied()
        .unwrap_or_else(|| panic!("no counter {name} in {:?}", status.counters))
}

/// A peer that believes this host serves `Counter` (an older version's view, say) delivers a
/// call to it: the host answers wrong-host *without* an owner hint, so the caller evicts its
/// route and re-places, and the app never sees the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbound_call_for_an_unregistered_type_is_wrong_host_without_a_hint() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let engine = cluster_node(
        dir.path(),
        &hub,
        "engine",
        &["Counter"],
        &[],
        HashMap::new(),
    )
    .await;
    let web = cluster_node(dir.path(), &hub, "web", &[], &["Relay"], HashMap::new()).await;
    let inbound = Inbound::new(web.host.cluster.get().expect("joined").router.clone());
    let req = v1::DeliverRequest {
        actor: Some(v1::ActorRef {
            actor_type: "Counter".into(),
            key: "k1".into(),
        }),
        method: "work".into(),
        payload: bytes::Bytes::from_static(b"x"),
        timeout_ms: 5_000,
        targeted: false,
        trace: None,
    };
    let e = inbound
        .deliver("engine", req, Instant::now() + Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongHost, "{e}");
    assert!(
        e.owner_hint.is_none(),
        "a hint would send the caller back here: {e:?}"
    );
    assert!(
        e.message.contains("does not register type \"Counter\"") && e.message.contains("never ran"),
        "{}",
        e.message
    );
    assert!(
        web.app.events().is_empty(),
        "web's app saw {:?}",
        web.app.events()
    );
    // Called through web's own socket, the same actor is placed on engine and runs there.
    let mut c = client(&web.host.socket).await;
    call(&mut c, "Counter", "k1", "work", b"y", 10_000)
        .await
        .unwrap();
    assert_eq!(engine.host.runtime.live_activations().len(), 1);
}

/// A worker type registered with `max_concurrency: 2` never has more than two turns running
/// in the app at once, however many calls arrive together; and it does run two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_type_runs_at_most_its_max_concurrency_at_once() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![],
            workers: vec![v1::WorkerTypeSpec {
                name: "Echo".into(),
                max_concurrency: 2,
                methods: vec![],
            }],
            app_name: "cap".into(),
        },
        HashMap::from([(
            "work".to_string(),
            Behaviour::SleepEcho(Duration::from_millis(150)),
        )]),
    )
    .await
    .unwrap();
    let mut calls = Vec::new();
    for i in 0..8 {
        let socket = host.socket.clone();
        calls.push(tokio::spawn(async move {
            let mut c = client(&socket).await;
            call(&mut c, "Echo", &format!("w{i}"), "work", b"z", 10_000).await
        }));
    }
    for c in calls {
        c.await.unwrap().unwrap();
    }
    let turns: Vec<Event> = app
        .events()
        .into_iter()
        .filter(|e| e.what == "work")
        .collect();
    assert_eq!(turns.len(), 8);
    let most = turns
        .iter()
        .map(|t| {
            turns
                .iter()
                .filter(|u| u.start <= t.start && t.start < u.end)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most, 2, "turns running at once at the busiest moment");
}

/// `DispatchOn` to a chosen host runs there (its app answers) and counts one targeted
/// dispatch on the calling host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_on_a_chosen_host_runs_there_and_is_counted_as_targeted() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let a = cluster_node(dir.path(), &hub, "a", &[], &["Relay"], HashMap::new()).await;
    let b = cluster_node(dir.path(), &hub, "b", &[], &["Relay"], HashMap::new()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = counter(&a.host, "targetedDispatches");
    let mut c = client(&a.host.socket).await;
    for _ in 0..3 {
        let r = c
            .dispatch_on(v1::DispatchOnRequest {
                host_id: "b".into(),
                worker: Some(v1::ActorRef {
                    actor_type: "Relay".into(),
                    key: String::new(),
                }),
                method: "work".into(),
                payload: bytes::Bytes::from_static(b"to-b"),
                timeout_ms: 5_000,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(&r.payload[..], b"to-b");
    }
    assert_eq!(counter(&a.host, "targetedDispatches") - before, 3);
    assert_eq!(
        b.app.events().iter().filter(|e| e.what == "work").count(),
        3
    );
    assert!(
        a.app.events().iter().all(|e| e.what != "work"),
        "a ran a turn meant for b"
    );
}

/// Everything the process logs at WARN, as JSON lines (the sidecar's own log format), for the
/// slow-turn test to read back. Process-wide: this binary's other tests log into it too, so the
/// reader filters by actor and method.
fn captured_warnings() -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    use std::sync::{Arc, Mutex, OnceLock};
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || Capture(sink.clone()))
            .try_init()
            .expect("the slow-turn test installs the only subscriber of this binary");
        buf
    })
    .clone()
}

struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The slow-turn warnings logged for `actor`'s `method`, as parsed JSON lines.
fn slow_turn_lines(log: &std::sync::Mutex<Vec<u8>>, actor: &str, method: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON log line");
            let f = &v["fields"];
            f["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("slow turn"))
                && f["actor"] == actor
                && f["method"] == method
        })
        .map(str::to_string)
        .collect()
}

/// A turn longer than `--slow-turn-ms` counts as slow (the warning's counter), logs one WARN
/// line naming the actor, the method and the threshold, and still answers; a quick one neither
/// counts nor logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_the_slow_turn_threshold_is_counted_and_still_answers() {
    let log = captured_warnings();
    let dir = tempdir();
    let host = start_host(dir.path(), &["--slow-turn-ms", "50"]).await;
    let _app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Counter", false, 0)],
            workers: vec![],
            app_name: "slow".into(),
        },
        HashMap::from([
            (
                "slow".to_string(),
                Behaviour::SleepEcho(Duration::from_millis(200)),
            ),
            (
                "quick".to_string(),
                Behaviour::SleepEcho(Duration::from_millis(1)),
            ),
        ]),
    )
    .await
    .unwrap();
    let mut c = client(&host.socket).await;
    call(&mut c, "Counter", "a", "quick", b"q", 5_000)
        .await
        .unwrap();
    assert_eq!(host.runtime.counters().snapshot()["slowTurns"], 0);
    assert_eq!(
        &call(&mut c, "Counter", "a", "slow", b"s", 5_000)
            .await
            .unwrap()[..],
        b"s"
    );
    assert_eq!(host.runtime.counters().snapshot()["slowTurns"], 1);
    assert!(slow_turn_lines(&log, "Counter/a", "quick").is_empty());
    let lines = slow_turn_lines(&log, "Counter/a", "slow");
    assert_eq!(lines.len(), 1, "one warning per slow turn: {lines:?}");
    let line: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["fields"]["after_ms"], 50, "{line}");
}

/// A fenced host keeps serving its own workers (the seed's rule; workers carry no
/// single-activation promise) and refuses stateful calls as `fenced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_host_still_serves_its_own_workers_and_refuses_actors() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let h = cluster_node(
        dir.path(),
        &hub,
        "h",
        &["Counter"],
        &["Relay"],
        HashMap::new(),
    )
    .await;
    let mut c = client(&h.host.socket).await;
    call(&mut c, "Counter", "k", "work", b"1", 5_000)
        .await
        .unwrap();
    // A third party deletes h's record: proof of loss, h fences at once.
    assert!(hub.kill("h"));
    let mut fence = h.host.state.watch_fence();
    tokio::time::timeout(Duration::from_secs(5), fence.wait_for(|f| f.is_some()))
        .await
        .expect("h fenced")
        .unwrap();
    let e = call(&mut c, "Counter", "k", "work", b"2", 5_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Fenced, "{e}");
    assert_eq!(
        &call(&mut c, "Relay", "", "work", b"3", 5_000)
            .await
            .unwrap()[..],
        b"3",
        "the fenced host's own worker still answers"
    );
}
