//! Distributed tracing against a real OpenTelemetry Collector (e2e/otelcol): two real sidecars
//! exporting over OTLP/gRPC, each with a real counter app; a call made on host A with a known
//! W3C `traceparent` to an actor that can only live on host B. The collector's file must hold one
//! trace with the spans of both hosts, linked caller -> mesh -> activation/turn, and the app must
//! have been handed the turn span's context on its Turn.

mod sdk_support;

use sdk_support::{Proc, Scratch, Sidecar, counter_app, free_port};
use sigx_e2e::otelcol::{Collector, Span};
use sigx_sdk::{ActorType, App, Client, Context, MemberFilter, WorkerType, proto as v1};
use std::path::{Path, PathBuf};
use std::time::Duration;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The socket and the sidecar flags every host of these tests shares: SQLite membership in the
/// scratch directory, one mesh secret, a 1 s beat.
fn member_args(scratch: &Scratch, name: &str) -> (PathBuf, Vec<String>) {
    let db = scratch.path("membership.db");
    let secret = scratch.path("secret");
    std::fs::write(&secret, "a-test-secret-that-is-not-empty").unwrap();
    let socket = scratch.path(&format!("{name}.sock"));
    let args = [
        "--membership",
        "sqlite",
        "--sqlite-path",
        db.to_str().unwrap(),
        "--secret-file",
        secret.to_str().unwrap(),
        "--pod-name",
        name,
        "--beat-ms",
        "1000",
        "--ttl-ms",
        "5000",
    ];
    (socket, args.map(String::from).to_vec())
}

/// One host: its sidecar (exporting to `endpoint`) and a counter app writing `trace_file`.
fn host(
    scratch: &Scratch,
    name: &str,
    endpoint: Option<&str>,
    trace_file: &Path,
    workers_only: bool,
) -> (Sidecar, Proc) {
    let (socket, mut args) = member_args(scratch, name);
    if let Some(endpoint) = endpoint {
        args.extend(["--otlp-endpoint".into(), endpoint.into()]);
    }
    // Host A registers only the Echo worker: a Counter can only be placed on host B, so the
    // call from A always crosses the mesh.
    if workers_only {
        args.extend(["--workers".into(), "Echo".into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sidecar = Sidecar::start_with(scratch, &socket, &args);
    let trace = trace_file.to_str().unwrap();
    let mut env = vec![("COUNTER_TRACE_FILE", trace)];
    if workers_only {
        env.push(("SIGX_WORKERS", "Echo"));
    }
    let app = counter_app(scratch, &socket, &env);
    sidecar.wait_ready();
    (sidecar, app)
}

/// Waits (bounded) until host `client`'s view shows both hosts.
async fn converge(client: &Client) {
    for _ in 0..200 {
        match client.members(&MemberFilter::active()).await {
            Ok(m) if m.hosts.len() == 2 => return,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("the two hosts did not see each other within 10s");
}

/// The events of the app's trace file about `actor`.
fn app_events(path: &Path, actor: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("the app's trace file");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["actor"] == actor)
        .collect()
}

fn find<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} span in the trace: {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cross_host_call_is_one_trace_with_the_right_parents() {
    let scratch = Scratch::new("otlp");
    let collector = Collector::start(&scratch.0, free_port());
    let app_trace = scratch.path("app-trace.jsonl");
    let (mut a, _app_a) = host(&scratch, "ha", Some(&collector.endpoint), &app_trace, true);
    let (mut b, _app_b) = host(&scratch, "hb", Some(&collector.endpoint), &app_trace, false);
    let client = Client::lazy(&a.socket).with_timeout(Duration::from_secs(10));
    converge(&client).await;

    let traced = client.with_trace(Some(v1::TraceContext {
        traceparent: format!("00-{TRACE_ID}-{CALLER_SPAN}-01"),
        tracestate: "sigx=test".into(),
    }));
    let reply = traced
        .call("Counter", "traced", "increment", "1")
        .await
        .expect("the traced call");
    assert_eq!(reply.as_ref(), b"1");

    // A clean stop flushes the batch exporters; then wait (bounded) for the collector's file.
    assert!(
        a.proc.terminate(Duration::from_secs(10)).is_some(),
        "host A stops"
    );
    assert!(
        b.proc.terminate(Duration::from_secs(10)).is_some(),
        "host B stops"
    );
    let names = [
        "sigx.call",
        "sigx.directory.lookup",
        "sigx.mesh.deliver",
        "sigx.mesh.receive",
        "sigx.activate",
        "sigx.turn",
    ];
    let all = collector.wait_for(Duration::from_secs(20), |spans| {
        names
            .iter()
            .all(|n| spans.iter().any(|s| s.trace_id == TRACE_ID && s.name == *n))
    });
    let spans: Vec<Span> = all
        .iter()
        .filter(|s| s.trace_id == TRACE_ID)
        .cloned()
        .collect();
    assert!(
        names.iter().all(|n| spans.iter().any(|s| s.name == *n)),
        "the collector did not get every span of the call in trace {TRACE_ID}: got {spans:#?}\n\
         all spans: {all:#?}\ncollector log:\n{}\nhost A log:\n{}\nhost B log:\n{}",
        collector.log_text(),
        a.proc.log_text(),
        b.proc.log_text()
    );

    let call = find(&spans, "sigx.call");
    let lookup = find(&spans, "sigx.directory.lookup");
    let deliver = find(&spans, "sigx.mesh.deliver");
    let receive = find(&spans, "sigx.mesh.receive");
    let activate = find(&spans, "sigx.activate");
    let turn = find(&spans, "sigx.turn");
    // Which host made which span (the resource's sigx.host is `<pod name>-<incarnation>`).
    for (s, pod) in [
        (call, "ha-"),
        (lookup, "ha-"),
        (deliver, "ha-"),
        (receive, "hb-"),
        (activate, "hb-"),
        (turn, "hb-"),
    ] {
        assert!(s.host.starts_with(pod), "{} made by {:?}", s.name, s.host);
    }
    // The parent links: caller's span -> call (A) -> directory look-up and mesh deliver (A) ->
    // mesh receive (B) -> activation and turn. The routing loop makes no span of its own: the
    // call's span covers it, and carries what it learnt.
    assert_eq!(call.parent_span_id, CALLER_SPAN, "sigx.call's parent");
    assert_eq!(lookup.parent_span_id, call.span_id, "the look-up's parent");
    assert_eq!(
        deliver.parent_span_id, call.span_id,
        "the mesh hop's parent"
    );
    assert!(
        !spans.iter().any(|s| s.name == "sigx.route"),
        "no span times the routing a second time: {spans:#?}"
    );
    let attr = |s: &Span, k: &str| sigx_e2e::otelcol::attribute(&s.attributes, k);
    assert!(
        attr(call, "sigx.host").starts_with("hb-"),
        "sigx.call names the host that answered: {:?}",
        call.attributes
    );
    assert_eq!(attr(call, "sigx.route.cached"), "false", "a first call");
    assert_eq!(attr(call, "sigx.route.attempts"), "1", "one host tried");
    assert_eq!(attr(call, "sigx.result"), "ok");
    assert_eq!(attr(call, "sigx.actor.type"), "Counter");
    assert_eq!(receive.parent_span_id, deliver.span_id, "across the mesh");
    assert_eq!(
        activate.parent_span_id, receive.span_id,
        "the activation's parent"
    );
    assert_eq!(turn.parent_span_id, receive.span_id, "the turn's parent");
    assert_eq!(
        sigx_e2e::otelcol::attribute(&turn.attributes, "sigx.actor.key"),
        "traced"
    );

    // The app was handed the turn span's context on the Turn, in the same trace.
    let handed = app_events(&app_trace, "Counter/traced");
    let turn_start = handed
        .iter()
        .find(|e| e["event"] == "turn-start" && e["method"] == "increment")
        .unwrap_or_else(|| panic!("no increment turn in the app's trace: {handed:#?}"));
    assert_eq!(
        turn_start["traceparent"],
        format!("00-{TRACE_ID}-{}-01", turn.span_id),
        "the Turn's traceparent"
    );
    let activation = handed
        .iter()
        .find(|e| e["event"] == "activation-start")
        .unwrap_or_else(|| panic!("no activation in the app's trace: {handed:#?}"));
    assert_eq!(
        activation["traceparent"],
        format!("00-{TRACE_ID}-{}-01", activate.span_id),
        "the Activate turn's traceparent"
    );
}

/// With export off the sidecars make no spans, but the caller's context still crosses the mesh:
/// the app on host B is handed exactly the caller's `traceparent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_export_off_the_callers_context_passes_through_to_the_turn() {
    let scratch = Scratch::new("otlp-off");
    let app_trace = scratch.path("app-trace.jsonl");
    let (a, _app_a) = host(&scratch, "ha", None, &app_trace, true);
    let (_b, _app_b) = host(&scratch, "hb", None, &app_trace, false);
    let client = Client::lazy(&a.socket).with_timeout(Duration::from_secs(10));
    converge(&client).await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let traced = client.with_trace(Some(v1::TraceContext {
        traceparent: traceparent.clone(),
        tracestate: "sigx=test".into(),
    }));
    traced
        .call("Counter", "passed", "increment", "1")
        .await
        .expect("the traced call");
    client
        .call("Counter", "plain", "increment", "1")
        .await
        .expect("the untraced call");
    let handed = app_events(&app_trace, "Counter/passed");
    let turn = handed
        .iter()
        .find(|e| e["event"] == "turn-start" && e["method"] == "increment")
        .unwrap_or_else(|| panic!("no increment turn in the app's trace: {handed:#?}"));
    assert_eq!(
        turn["traceparent"],
        traceparent.as_str(),
        "passed through unchanged"
    );
    let plain = app_events(&app_trace, "Counter/plain");
    assert!(
        plain.iter().all(|e| e.get("traceparent").is_none()),
        "an untraced call's turn carries no trace: {plain:#?}"
    );
}

/// A collector that is down never fails or holds a call, and the sidecar still stops promptly;
/// the failed export is logged, naming the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_no_call_and_is_logged() {
    let scratch = Scratch::new("otlp-down");
    let app_trace = scratch.path("app-trace.jsonl");
    // Nothing listens on this port: every export is refused.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let (mut a, _app_a) = host(&scratch, "ha", Some(&endpoint), &app_trace, true);
    let (mut b, _app_b) = host(&scratch, "hb", Some(&endpoint), &app_trace, false);
    let client = Client::lazy(&a.socket).with_timeout(Duration::from_secs(10));
    converge(&client).await;
    let traced = client.with_trace(Some(v1::TraceContext {
        traceparent: format!("00-{TRACE_ID}-{CALLER_SPAN}-01"),
        tracestate: String::new(),
    }));
    for i in 1..=20 {
        let reply = traced
            .call("Counter", "down", "increment", "1")
            .await
            .expect("a call while the collector is down");
        assert_eq!(reply.as_ref(), i.to_string().as_bytes());
    }
    // The stop flushes: the export fails, is logged, and does not hold the stop up.
    let status = a.proc.terminate(Duration::from_secs(20));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "host A stops cleanly"
    );
    assert!(
        b.proc.terminate(Duration::from_secs(20)).is_some(),
        "host B stops"
    );
    let log = a.proc.log_text();
    assert!(
        log.contains("trace export failed") && log.contains(&endpoint),
        "host A's log does not report the failed export to {endpoint}:\n{log}"
    );
}

/// One host of the three-host trace test: a sidecar exporting to the collector (by flag, or by
/// OpenTelemetry's standard variables alone when `by_env`), serving an in-process SDK `app`.
fn sdk_host(
    scratch: &Scratch,
    name: &str,
    endpoint: &str,
    by_env: bool,
    app: App,
) -> (Sidecar, Client, sigx_sdk::ServeHandle) {
    let (socket, mut args) = member_args(scratch, name);
    let mut env = vec![];
    if by_env {
        env.extend_from_slice(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_on"),
            ("OTEL_SERVICE_NAME", "sigx-by-env"),
        ]);
    } else {
        args.extend(["--otlp-endpoint".into(), endpoint.into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sidecar = Sidecar::start_with_env(scratch, &socket, &args, &env);
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(10));
    let serving = app.spawn(&client);
    sidecar.wait_ready();
    (sidecar, client, serving)
}

/// A call from host A to `Outer` (only on host B), whose turn calls `Inner` (only on host C)
/// through its context's client: every span of the three hosts is one trace, and the nested
/// call's spans hang under B's turn span (parent ids, not only trace ids), down to C's turn and
/// its state commit. Host B is configured by OTEL_* variables only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_from_inside_a_turn_continues_the_trace_across_three_hosts() {
    let scratch = Scratch::new("otlp-nested");
    let collector = Collector::start(&scratch.0, free_port());
    let ep = collector.endpoint.as_str();
    let echo =
        WorkerType::new("Echo").method("echo", |ctx| async move { Ok(ctx.payload().clone()) });
    let outer = ActorType::new("Outer", |_ctx: Context| async { Ok(()) }).method(
        "relay",
        |ctx| async move {
            let inner = ctx.client().call("Inner", ctx.key(), "count", "").await?;
            let seen = serde_json::json!({
                "outer": ctx.traceparent(),
                "inner": serde_json::from_slice::<serde_json::Value>(&inner).unwrap(),
            });
            Ok(seen.to_string().into())
        },
    );
    let inner = ActorType::new("Inner", |_ctx: Context| async { Ok(()) }).method(
        "count",
        |ctx| async move {
            // A durable write: the turn's answer waits for its commit (sigx.state.commit).
            ctx.storage().put("n", &1)?;
            Ok(serde_json::json!({ "inner": ctx.traceparent() })
                .to_string()
                .into())
        },
    );
    let (mut a, client, _serve_a) =
        sdk_host(&scratch, "ha", ep, false, App::new("front").worker(echo));
    let (mut b, _cb, _serve_b) = sdk_host(&scratch, "hb", ep, true, App::new("mid").actor(outer));
    let (mut c, _cc, _serve_c) = sdk_host(&scratch, "hc", ep, false, App::new("back").actor(inner));
    for _ in 0..200 {
        match client.members(&MemberFilter::active()).await {
            Ok(m) if m.hosts.len() == 3 => break,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let traced = client.with_trace(Some(v1::TraceContext {
        traceparent: format!("00-{TRACE_ID}-{CALLER_SPAN}-01"),
        tracestate: String::new(),
    }));
    let reply = traced
        .call("Outer", "n1", "relay", "")
        .await
        .expect("the traced nested call");
    let seen: serde_json::Value = serde_json::from_slice(&reply).unwrap();

    for (p, name) in [(&mut a, "A"), (&mut b, "B"), (&mut c, "C")] {
        assert!(
            p.proc.terminate(Duration::from_secs(10)).is_some(),
            "host {name} stops"
        );
    }
    let done = |spans: &[Span]| {
        let n = |name: &str| {
            spans
                .iter()
                .filter(|s| s.trace_id == TRACE_ID && s.name == name)
                .count()
        };
        n("sigx.call") >= 2
            && n("sigx.turn") >= 2
            && n("sigx.state.commit") >= 1
            && n("sigx.mesh.receive") >= 2
    };
    let all = collector.wait_for(Duration::from_secs(20), done);
    let spans: Vec<Span> = all
        .iter()
        .filter(|s| s.trace_id == TRACE_ID)
        .cloned()
        .collect();
    let dump = || {
        format!(
            "spans of {TRACE_ID}: {spans:#?}\nhost A:\n{}\nhost B:\n{}\nhost C:\n{}",
            a.proc.log_text(),
            b.proc.log_text(),
            c.proc.log_text()
        )
    };
    assert!(done(&spans), "not every span arrived: {}", dump());
    let on = |pod: &str, name: &str| -> Span {
        let found: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name == name && s.host.starts_with(pod))
            .collect();
        assert_eq!(found.len(), 1, "one {name} on {pod}: {}", dump());
        found[0].clone()
    };
    let call_a = on("ha-", "sigx.call");
    let deliver_a = on("ha-", "sigx.mesh.deliver");
    let receive_b = on("hb-", "sigx.mesh.receive");
    let activate_b = on("hb-", "sigx.activate");
    let register_b = on("hb-", "sigx.directory.register");
    let turn_b = on("hb-", "sigx.turn");
    let call_b = on("hb-", "sigx.call");
    let deliver_b = on("hb-", "sigx.mesh.deliver");
    let receive_c = on("hc-", "sigx.mesh.receive");
    let turn_c = on("hc-", "sigx.turn");
    let commit_c = on("hc-", "sigx.state.commit");
    let links = [
        (&call_a, CALLER_SPAN, "A's call under the caller's span"),
        (&deliver_a, &call_a.span_id, "A's mesh hop under its call"),
        (&receive_b, &deliver_a.span_id, "B's receive under A's hop"),
        (
            &activate_b,
            &receive_b.span_id,
            "B's activation under its receive",
        ),
        (
            &register_b,
            &activate_b.span_id,
            "B's directory claim under its activation",
        ),
        (&turn_b, &receive_b.span_id, "B's turn under its receive"),
        // The nested call: made by the app from inside B's turn, with the turn's traceparent.
        (
            &call_b,
            &turn_b.span_id,
            "the nested call under B's turn span",
        ),
        (
            &deliver_b,
            &call_b.span_id,
            "B's mesh hop under the nested call",
        ),
        (&receive_c, &deliver_b.span_id, "C's receive under B's hop"),
        (&turn_c, &receive_c.span_id, "C's turn under its receive"),
        (
            &commit_c,
            &turn_c.span_id,
            "C's state commit under its turn",
        ),
    ];
    for (span, parent, what) in links {
        assert_eq!(&span.parent_span_id, parent, "{what}: {}", dump());
    }
    // What the apps were handed: each turn's own span as its traceparent.
    assert_eq!(
        seen["outer"],
        format!("00-{TRACE_ID}-{}-01", turn_b.span_id)
    );
    assert_eq!(
        seen["inner"]["inner"],
        format!("00-{TRACE_ID}-{}-01", turn_c.span_id)
    );
    // The attributes named by the design: actor type, key, method, host, result kind.
    let attr = |s: &Span, k: &str| sigx_e2e::otelcol::attribute(&s.attributes, k);
    assert_eq!(attr(&call_b, "sigx.actor.type"), "Inner");
    assert_eq!(attr(&call_b, "sigx.actor.key"), "n1");
    assert_eq!(attr(&call_b, "sigx.method"), "count");
    assert!(
        attr(&call_b, "sigx.host").starts_with("hc-"),
        "{:?}",
        call_b.attributes
    );
    assert!(
        attr(&deliver_b, "sigx.peer").starts_with("hc-"),
        "{:?}",
        deliver_b.attributes
    );
    assert_eq!(attr(&commit_c, "sigx.result"), "ok");
    assert_eq!(attr(&commit_c, "sigx.state.store"), "sqlite");
    // Host B exported by OTEL_EXPORTER_OTLP_ENDPOINT, named by OTEL_SERVICE_NAME; the others by
    // flag, under the default name.
    assert_eq!(turn_b.service, "sigx-by-env");
    assert_eq!(turn_c.service, "sigx-sidecar");
}

/// `SIGX_LOG_FORMAT=json` with export on: every line the sidecar writes is a JSON object, and
/// the lines written inside a traced call carry its trace id (the activation's debug line here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_json_lines_carrying_the_trace_id_of_a_call() {
    let scratch = Scratch::new("otlp-json-logs");
    let collector = Collector::start(&scratch.0, free_port());
    let socket = scratch.path("j.sock");
    let mut sidecar = Sidecar::start_with_env(
        &scratch,
        &socket,
        &[
            "--membership",
            "none",
            "--otlp-endpoint",
            &collector.endpoint,
        ],
        &[
            ("SIGX_LOG_FORMAT", "json"),
            ("SIGX_LOG", "info,sigx_sidecar=debug"),
        ],
    );
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(10));
    let counter = ActorType::new("Counter", |_ctx: Context| async { Ok(()) })
        .method("hit", |_ctx| async move { Ok("ok".into()) });
    let _serving = App::new("json-logs").actor(counter).spawn(&client);
    sidecar.wait_ready();
    let traced = client.with_trace(Some(v1::TraceContext {
        traceparent: format!("00-{TRACE_ID}-{CALLER_SPAN}-01"),
        tracestate: String::new(),
    }));
    traced
        .call("Counter", "j", "hit", "")
        .await
        .expect("the traced call");
    assert!(
        sidecar.proc.terminate(Duration::from_secs(10)).is_some(),
        "the sidecar stops"
    );
    let log = sidecar.proc.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {l:?}"))
        })
        .collect();
    assert!(lines.len() > 3, "too few lines: {log}");
    let traced_lines: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["trace_id"] == TRACE_ID).collect();
    assert!(
        traced_lines
            .iter()
            .any(|l| l["fields"]["message"] == "activated"
                && l["span_id"].as_str().is_some_and(|s| s.len() == 16)),
        "no line of the call's activation carries trace id {TRACE_ID}:\n{log}"
    );
    assert!(
        lines.iter().any(|l| l.get("trace_id").is_none()),
        "lines outside any call carry no trace id:\n{log}"
    );
}

/// A reminder firing is a trace of its own: a root `sigx.reminder.fire` span naming the reminder,
/// with the turn it ran (and whatever routing it took) under it, and the app handed that turn's
/// context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_firing_is_a_root_span_with_its_turn_under_it() {
    let scratch = Scratch::new("otlp-reminder");
    let collector = Collector::start(&scratch.0, free_port());
    let socket = scratch.path("r.sock");
    let mut sidecar = Sidecar::start(&scratch, &socket, &["--otlp-endpoint", &collector.endpoint]);
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(10));
    let (fired_tx, mut fired_rx) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
    let alarm = ActorType::new("Alarm", |_ctx: Context| async { Ok(()) }).on_reminder(
        move |ctx, _reminder| {
            let _ = fired_tx.send(ctx.traceparent().map(str::to_string));
            async { Ok(()) }
        },
    );
    let _serving = App::new("reminders").actor(alarm).spawn(&client);
    sidecar.wait_ready();
    client
        .set_reminder(
            "Alarm",
            "r1",
            "wake",
            sigx_sdk::Due::In(Duration::from_millis(100)),
            None,
            "",
        )
        .await
        .expect("set the reminder");
    let handed = tokio::time::timeout(Duration::from_secs(20), fired_rx.recv())
        .await
        .expect("the reminder fired within 20 s")
        .expect("a firing");
    assert!(
        sidecar.proc.terminate(Duration::from_secs(10)).is_some(),
        "the sidecar stops"
    );
    let all = collector.wait_for(Duration::from_secs(20), |spans| {
        spans.iter().any(|s| s.name == "sigx.reminder.fire")
            && spans.iter().any(|s| s.name == "sigx.turn")
    });
    let fire = all
        .iter()
        .find(|s| s.name == "sigx.reminder.fire")
        .unwrap_or_else(|| panic!("no sigx.reminder.fire span: {all:#?}"));
    assert_eq!(fire.parent_span_id, "", "a firing is a root: {fire:#?}");
    let attr = |s: &Span, k: &str| sigx_e2e::otelcol::attribute(&s.attributes, k);
    assert_eq!(attr(fire, "sigx.reminder.name"), "wake");
    assert_eq!(attr(fire, "sigx.actor.key"), "r1");
    assert_eq!(attr(fire, "sigx.result"), "ok");
    let turn = all
        .iter()
        .find(|s| s.name == "sigx.turn" && s.trace_id == fire.trace_id)
        .unwrap_or_else(|| panic!("no turn in the firing's trace: {all:#?}"));
    // Up from the turn, through any routing span, to the firing.
    let mut at = turn;
    while at.parent_span_id != fire.span_id {
        at = all
            .iter()
            .find(|s| s.span_id == at.parent_span_id && s.trace_id == fire.trace_id)
            .unwrap_or_else(|| panic!("{} does not lead up to the firing: {all:#?}", at.name));
    }
    assert_eq!(
        handed.as_deref(),
        Some(format!("00-{}-{}-01", fire.trace_id, turn.span_id).as_str()),
        "the app was handed the reminder turn's context"
    );
}
