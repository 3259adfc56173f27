//! One host end to end over its real Unix socket: turn-based delivery, reentrancy, idle
//! deactivation, deadlines, errors, registration rules, and an app that dies mid-turn.

mod support;

use sigx_proto::{ErrorKind, v1};
use std::collections::HashMap;
use std::time::Duration;
use support::*;

fn register(actors: Vec<v1::ActorTypeSpec>, workers: Vec<v1::WorkerTypeSpec>) -> v1::Register {
    v1::Register {
        actors,
        workers,
        app_name: "test-app".into(),
    }
}

fn behaviours(list: &[(&str, Behaviour)]) -> HashMap<String, Behaviour> {
    list.iter()
        .map(|(m, b)| (m.to_string(), b.clone()))
        .collect()
}

/// Every pair of invoke turns on `actor` must not overlap in time.
fn overlapping_pairs(events: &[Event], actor: &str) -> usize {
    let turns: Vec<&Event> = events
        .iter()
        .filter(|e| e.actor == actor && e.what == "work")
        .collect();
    let mut n = 0;
    for (i, a) in turns.iter().enumerate() {
        for b in &turns[i + 1..] {
            if a.start < b.end && b.start < a.end {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_one_actor_never_overlap_but_different_actors_and_reentrant_types_do() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let app = TestApp::start(
        &host.socket,
        register(
            vec![actor_spec("Counter", false, 0), actor_spec("Chat", true, 0)],
            vec![],
        ),
        behaviours(&[("work", Behaviour::SleepEcho(Duration::from_millis(20)))]),
    )
    .await
    .unwrap();

    let mut calls = Vec::new();
    for i in 0..10 {
        for key in ["a", "b"] {
            let socket = host.socket.clone();
            calls.push(tokio::spawn(async move {
                let mut c = client(&socket).await;
                call(
                    &mut c,
                    "Counter",
                    key,
                    "work",
                    format!("{i}").as_bytes(),
                    10_000,
                )
                .await
            }));
        }
        let socket = host.socket.clone();
        calls.push(tokio::spawn(async move {
            let mut c = client(&socket).await;
            call(&mut c, "Chat", "room", "work", b"x", 10_000).await
        }));
    }
    for c in calls {
        c.await.unwrap().expect("call succeeds");
    }
    let events = app.events();
    assert_eq!(
        overlapping_pairs(&events, "Counter/a"),
        0,
        "turn-based delivery broke for Counter/a"
    );
    assert_eq!(
        overlapping_pairs(&events, "Counter/b"),
        0,
        "turn-based delivery broke for Counter/b"
    );
    // Different actors run in parallel: some turn of a overlaps some turn of b.
    let a: Vec<&Event> = events
        .iter()
        .filter(|e| e.actor == "Counter/a" && e.what == "work")
        .collect();
    let b: Vec<&Event> = events
        .iter()
        .filter(|e| e.actor == "Counter/b" && e.what == "work")
        .collect();
    let parallel = a
        .iter()
        .any(|x| b.iter().any(|y| x.start < y.end && y.start < x.end));
    assert!(parallel, "different actors should run in parallel");
    // The reentrant type overlaps its own turns.
    assert!(
        overlapping_pairs(&events, "Chat/room") > 0,
        "a reentrant type should overlap"
    );
    // One activation per actor: exactly one Activate turn each.
    for actor in ["Counter/a", "Counter/b", "Chat/room"] {
        let activations = events
            .iter()
            .filter(|e| e.actor == actor && e.what == "activate")
            .count();
        assert_eq!(activations, 1, "{actor} activated {activations} times");
    }
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_actors_deactivate_and_come_back_with_a_new_activation_id() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let app = TestApp::start(
        &host.socket,
        register(vec![actor_spec("Counter", false, 150)], vec![]),
        HashMap::new(),
    )
    .await
    .unwrap();
    let mut c = client(&host.socket).await;
    call(&mut c, "Counter", "a", "get", b"", 5_000)
        .await
        .unwrap();
    assert!(
        host.runtime
            .is_active(&sigx_sidecar::runtime::ActorId::new("Counter", "a"))
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !host
            .runtime
            .is_active(&sigx_sidecar::runtime::ActorId::new("Counter", "a"))
    );
    call(&mut c, "Counter", "a", "get", b"", 5_000)
        .await
        .unwrap();
    let events = app.events();
    let ids: Vec<&str> = events
        .iter()
        .filter(|e| e.what == "activate")
        .map(|e| e.activation_id.as_str())
        .collect();
    assert_eq!(ids.len(), 2, "{events:?}");
    assert_ne!(ids[0], ids[1], "a re-activation gets a new activation id");
    assert!(
        events
            .iter()
            .any(|e| e.what == "deactivate" && e.activation_id == ids[0])
    );
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_errors_and_bad_input_get_the_right_kinds() {
    let dir = tempdir();
    let host = start_host(dir.path(), &["--max-payload-bytes", "1024"]).await;
    let app = TestApp::start(
        &host.socket,
        register(
            vec![v1::ActorTypeSpec {
                name: "Counter".into(),
                methods: vec!["slow".into(), "boom".into(), "get".into()],
                ..Default::default()
            }],
            vec![v1::WorkerTypeSpec {
                name: "Echo".into(),
                max_concurrency: 2,
                methods: vec![],
            }],
        ),
        behaviours(&[
            ("slow", Behaviour::SleepEcho(Duration::from_millis(400))),
            (
                "boom",
                Behaviour::Fail("counter exploded: negative amount".into()),
            ),
        ]),
    )
    .await
    .unwrap();
    let mut c = client(&host.socket).await;

    let e = call(&mut c, "Counter", "a", "slow", b"", 100)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    // The activation stays turn-based: the next call waits for the slow turn's late answer
    // (its caller gave up long before), then runs.
    let ok = call(&mut c, "Counter", "a", "get", b"after", 5_000)
        .await
        .unwrap();
    assert_eq!(&ok[..], b"after");
    let events = app.events();
    let turn = |what: &str| {
        events
            .iter()
            .find(|e| e.actor == "Counter/a" && e.what == what)
            .unwrap_or_else(|| panic!("no {what} turn in {events:?}"))
            .clone()
    };
    let (slow, get) = (turn("slow"), turn("get"));
    assert!(
        get.start >= slow.end,
        "the next turn started {:?} before the timed-out one ended",
        slow.end - get.start
    );

    let e = call(&mut c, "Counter", "a", "boom", b"", 5_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::App);
    assert!(e.message.contains("counter exploded"), "{e}");

    let e = call(&mut c, "Nope", "a", "get", b"", 5_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("\"Nope\""), "{e}");

    let e = call(&mut c, "Counter", "a", "frobnicate", b"", 5_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("frobnicate"), "{e}");

    let e = call(&mut c, "Counter", "a", "get", &[0u8; 2048], 5_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("1024"), "the error names the limit: {e}");

    // Workers run without identity or activation.
    let ok = call(&mut c, "Echo", "", "anything", b"hi", 5_000)
        .await
        .unwrap();
    assert_eq!(&ok[..], b"hi");
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_rules() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let err = TestApp::start(&host.socket, register(vec![], vec![]), HashMap::new())
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("no actor or worker type"), "{err:?}");

    let err = TestApp::start(
        &host.socket,
        register(
            vec![actor_spec("A", false, 0), actor_spec("A", false, 0)],
            vec![],
        ),
        HashMap::new(),
    )
    .await
    .err()
    .unwrap();
    assert!(err.message().contains("registered twice"), "{err:?}");

    assert_eq!(http_get(host.health_addr, "/readyz").await, 503);
    let first = TestApp::start(
        &host.socket,
        register(vec![actor_spec("A", false, 0)], vec![]),
        HashMap::new(),
    )
    .await
    .unwrap();
    assert_eq!(http_get(host.health_addr, "/readyz").await, 200);
    let err = TestApp::start(
        &host.socket,
        register(vec![actor_spec("B", false, 0)], vec![]),
        HashMap::new(),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("already registered"), "{err:?}");
    drop(first);
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_killed_mid_turn_gives_defined_errors_and_a_new_app_serves_again() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let app = TestApp::start(
        &host.socket,
        register(vec![actor_spec("Counter", false, 0)], vec![]),
        behaviours(&[("hang", Behaviour::Hang)]),
    )
    .await
    .unwrap();
    let socket = host.socket.clone();
    let in_flight = tokio::spawn(async move {
        let mut c = client(&socket).await;
        call(&mut c, "Counter", "a", "hang", b"", 10_000).await
    });
    let socket = host.socket.clone();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = tokio::spawn(async move {
        let mut c = client(&socket).await;
        call(&mut c, "Counter", "a", "get", b"", 10_000).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.kill();
    let e = in_flight.await.unwrap().unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::OutcomeUnknown,
        "the in-flight turn may have run: {e}"
    );
    let e = queued.await.unwrap().unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Unreachable,
        "the queued call never ran: {e}"
    );

    // Not ready until an app registers again; a call now answers clearly.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(http_get(host.health_addr, "/readyz").await, 503);
    assert_eq!(
        http_get(host.health_addr, "/livez").await,
        200,
        "the sidecar survives"
    );
    let mut c = client(&host.socket).await;
    let e = call(&mut c, "Counter", "a", "get", b"", 1_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable);
    assert!(e.message.contains("no app is registered"), "{e}");

    let app2 = TestApp::start(
        &host.socket,
        register(vec![actor_spec("Counter", false, 0)], vec![]),
        HashMap::new(),
    )
    .await
    .unwrap();
    assert_eq!(http_get(host.health_addr, "/readyz").await, 200);
    let ok = call(&mut c, "Counter", "a", "get", b"back", 5_000)
        .await
        .unwrap();
    assert_eq!(&ok[..], b"back");
    assert_eq!(
        app2.events()
            .iter()
            .filter(|e| e.what == "activate")
            .count(),
        1
    );
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_socket_is_never_stolen_and_a_stale_one_is_replaced() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let err = sigx_sidecar::host::Host::start(single_host_config(dir.path(), &[]))
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("refusing to steal"), "{err}");
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
    // A stale socket file (bound, nobody listening) is replaced.
    let stale = std::os::unix::net::UnixListener::bind(dir.path().join("sidecar.sock")).unwrap();
    drop(stale);
    let host = start_host(dir.path(), &[]).await;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&host.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660);
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_app_finishes_its_turns_deactivates_and_then_the_stream_ends() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let mut app = TestApp::start(
        &host.socket,
        register(vec![actor_spec("Counter", false, 0)], vec![]),
        behaviours(&[("slow", Behaviour::SleepEcho(Duration::from_millis(300)))]),
    )
    .await
    .unwrap();
    let mut c = client(&host.socket).await;
    call(&mut c, "Counter", "b", "get", b"", 5_000)
        .await
        .unwrap();
    let socket = host.socket.clone();
    let in_flight = tokio::spawn(async move {
        let mut c = client(&socket).await;
        call(&mut c, "Counter", "a", "slow", b"done", 5_000).await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    app.drain(Duration::from_secs(5)).await;
    assert_eq!(
        &in_flight.await.unwrap().unwrap()[..],
        b"done",
        "the in-flight turn finished"
    );
    let events = app.events();
    for actor in ["Counter/a", "Counter/b"] {
        assert!(
            events
                .iter()
                .any(|e| e.actor == actor && e.what == "deactivate"),
            "{actor} got its Deactivate turn before the stream ended: {events:?}"
        );
    }
    assert!(host.runtime.live_activations().is_empty());
    assert_eq!(http_get(host.health_addr, "/readyz").await, 503);
    host.stop(sigx_sidecar::host::StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_must_register_exactly_the_types_its_role_declares() {
    let dir = tempdir();
    let host = start_host(dir.path(), &["--actors", "Counter", "--workers", "Echo"]).await;
    let err = TestApp::start(
        &host.socket,
        register(
            vec![
                actor_spec("Counter", false, 0),
                actor_spec("Report", false, 0),
            ],
            vec![],
        ),
        HashMap::new(),
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .contains("declares actors [Counter] and workers [Echo]"),
        "{err:?}"
    );
    let ok = TestApp::start(
        &host.socket,
        register(
            vec![actor_spec("Counter", false, 0)],
            vec![v1::WorkerTypeSpec {
                name: "Echo".into(),
                max_concurrency: 1,
                methods: vec![],
            }],
        ),
        HashMap::new(),
    )
    .await;
    assert!(ok.is_ok());
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_serves_grpc_health_and_reflection_so_grpcurl_works() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let channel = connect(&host.socket).await;
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer: {answer:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"sigx.actors.v1.ActorHost".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.ends_with(".Mesh")),
        "the mesh is not served here: {names:?}"
    );
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "sigx.actors.v1.ActorHost".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}
