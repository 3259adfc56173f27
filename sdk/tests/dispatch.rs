//! The SDK's turn handling, driven directly through a `Dispatcher` (no sidecar): what a handler
//! sees, how state lives and dies with its activation, and how failures reach the wire.

use bytes::Bytes;
use sigx_sdk::proto::{self as v1, turn, turn_result};
use sigx_sdk::{
    ActorError, ActorType, App, Client, Context, DeactivateReason, ErrorKind, WorkerType,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn client() -> Client {
    // Never dialed by these tests: handlers here make no calls.
    Client::lazy("/nonexistent/sigx-sdk-test.sock")
}

fn turn(id: u64, key: &str, activation: &str, kind: turn::Kind) -> v1::Turn {
    v1::Turn {
        turn_id: id,
        actor: Some(v1::ActorRef {
            actor_type: "Counter".into(),
            key: key.into(),
        }),
        activation_id: activation.into(),
        timeout_ms: 0,
        not_after_unix_ms: 0,
        not_after_boot_ms: 0,
        epoch: 1,
        kind: Some(kind),
        trace: None,
    }
}

fn activate(id: u64, key: &str, activation: &str) -> v1::Turn {
    turn(id, key, activation, turn::Kind::Activate(v1::Activate {}))
}

fn invoke(id: u64, key: &str, activation: &str, method: &str, payload: &str) -> v1::Turn {
    turn(
        id,
        key,
        activation,
        turn::Kind::Invoke(v1::Invoke {
            method: method.into(),
            payload: Bytes::copy_from_slice(payload.as_bytes()),
        }),
    )
}

fn deactivate(id: u64, key: &str, activation: &str) -> v1::Turn {
    turn(
        id,
        key,
        activation,
        turn::Kind::Deactivate(v1::Deactivate {
            reason: DeactivateReason::Idle as i32,
        }),
    )
}

fn ok(result: v1::TurnResult) -> String {
    match result.outcome {
        Some(turn_result::Outcome::Ok(b)) => String::from_utf8(b.to_vec()).unwrap(),
        other => panic!("expected ok, got {other:?}"),
    }
}

fn err(result: v1::TurnResult) -> (ErrorKind, String) {
    match result.outcome {
        Some(turn_result::Outcome::Error(e)) => (ErrorKind::from_proto(e.kind), e.message),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// The counter of the crate docs, plus hooks that let the tests see activation ids and
/// deactivation.
fn counter_app(deactivations: Arc<AtomicUsize>) -> App {
    let counter = ActorType::new("Counter", |_ctx: Context| async { Ok(0i64) })
        .json_method("increment", |ctx, by: Option<i64>| async move {
            let mut n = ctx.state().await;
            *n += by.unwrap_or(1);
            Ok(*n)
        })
        .json_method("get", |ctx, (): ()| async move { Ok(*ctx.state().await) })
        .json_method("whoami", |ctx, (): ()| async move {
            Ok(format!(
                "{}/{}@{}",
                ctx.actor_type(),
                ctx.key(),
                ctx.activation_id()
            ))
        })
        .json_method("fail", |_ctx, msg: String| async move {
            Err::<(), _>(ActorError::app(msg))
        })
        .json_method("nested-timeout", |_ctx, (): ()| async move {
            Err::<(), _>(ActorError::timeout(
                "the nested call to Other/x ran out of time",
            ))
        })
        .method("panic", |_ctx| async move { panic!("counter exploded") })
        .on_deactivate(move |ctx, reason| {
            let deactivations = deactivations.clone();
            async move {
                assert_eq!(reason, DeactivateReason::Idle);
                // The state is still there on the last turn, to be saved.
                let _ = *ctx.state().await;
                deactivations.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        });
    let echo = WorkerType::new("Echo")
        .max_concurrency(7)
        .method("echo", |ctx| async move { Ok(ctx.payload().clone()) });
    App::new("test-app").actor(counter).worker(echo)
}

#[tokio::test]
async fn state_lives_per_activation_and_dies_with_it() {
    let deactivations = Arc::new(AtomicUsize::new(0));
    let d = counter_app(deactivations.clone()).into_dispatcher(client());
    assert_eq!(ok(d.handle(activate(1, "a", "act-1")).await), "");
    assert_eq!(ok(d.handle(activate(2, "b", "act-2")).await), "");
    assert_eq!(
        ok(d.handle(invoke(3, "a", "act-1", "increment", "")).await),
        "1"
    );
    assert_eq!(
        ok(d.handle(invoke(4, "a", "act-1", "increment", "5")).await),
        "6"
    );
    assert_eq!(
        ok(d.handle(invoke(5, "b", "act-2", "get", "")).await),
        "0",
        "b has its own state"
    );
    assert_eq!(
        ok(d.handle(invoke(6, "a", "act-1", "whoami", "")).await),
        "\"Counter/a@act-1\"",
        "the handler sees its actor and activation id"
    );
    assert_eq!(d.live_activations(), 2);

    assert_eq!(ok(d.handle(deactivate(7, "a", "act-1")).await), "");
    assert_eq!(deactivations.load(Ordering::SeqCst), 1);
    assert_eq!(d.live_activations(), 1);
    let (kind, msg) = err(d.handle(invoke(8, "a", "act-1", "get", "")).await);
    assert_eq!(
        kind,
        ErrorKind::Invalid,
        "a turn for a dropped activation: {msg}"
    );

    // A new activation of the same actor starts from fresh state.
    ok(d.handle(activate(9, "a", "act-3")).await);
    assert_eq!(ok(d.handle(invoke(10, "a", "act-3", "get", "")).await), "0");

    assert_eq!(d.drop_all(), 2, "losing the sidecar drops every activation");
    assert_eq!(d.live_activations(), 0);
}

#[tokio::test]
async fn the_result_answers_the_turn_it_was_asked_by() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    let r = d.handle(activate(41, "a", "x")).await;
    assert_eq!(r.turn_id, 41);
    let r = d.handle(invoke(42, "a", "x", "no-such", "")).await;
    assert_eq!(r.turn_id, 42);
}

#[tokio::test]
async fn a_second_activate_with_a_live_id_is_refused() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    ok(d.handle(activate(1, "a", "x")).await);
    ok(d.handle(invoke(2, "a", "x", "increment", "")).await);
    let (kind, _) = err(d.handle(activate(3, "a", "x")).await);
    assert_eq!(kind, ErrorKind::Invalid);
    assert_eq!(
        ok(d.handle(invoke(4, "a", "x", "get", "")).await),
        "1",
        "state kept"
    );
}

#[tokio::test]
async fn unknown_methods_and_types_answer_invalid_naming_what_exists() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    ok(d.handle(activate(1, "a", "x")).await);
    let (kind, msg) = err(d.handle(invoke(2, "a", "x", "decrement", "")).await);
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(
        msg.contains("\"decrement\"") && msg.contains("increment"),
        "{msg}"
    );

    let mut t = invoke(3, "a", "x", "get", "");
    t.actor.as_mut().unwrap().actor_type = "Nope".into();
    let (kind, msg) = err(d.handle(t).await);
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(
        msg.contains("\"Nope\"") && msg.contains("Counter, Echo"),
        "{msg}"
    );
}

#[tokio::test]
async fn app_errors_keep_their_message_and_other_kinds_travel_as_app() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    ok(d.handle(activate(1, "a", "x")).await);
    let (kind, msg) = err(d
        .handle(invoke(2, "a", "x", "fail", "\"out of stock\""))
        .await);
    assert_eq!((kind, msg.as_str()), (ErrorKind::App, "out of stock"));

    let (kind, msg) = err(d.handle(invoke(3, "a", "x", "nested-timeout", "")).await);
    assert_eq!(
        kind,
        ErrorKind::App,
        "TurnError carries only app or invalid"
    );
    assert!(
        msg.starts_with("timeout: "),
        "the original kind stays readable: {msg}"
    );
}

#[tokio::test]
async fn a_payload_that_is_not_the_expected_json_is_invalid() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    ok(d.handle(activate(1, "a", "x")).await);
    let (kind, msg) = err(d.handle(invoke(2, "a", "x", "increment", "\"five\"")).await);
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(msg.contains("Counter/a.increment"), "{msg}");
    assert_eq!(
        ok(d.handle(invoke(3, "a", "x", "get", "")).await),
        "0",
        "nothing ran"
    );
}

#[tokio::test]
async fn a_panicking_handler_answers_app_and_the_dispatcher_goes_on() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    ok(d.handle(activate(1, "a", "x")).await);
    let (kind, msg) = err(d.handle(invoke(2, "a", "x", "panic", "")).await);
    assert_eq!(kind, ErrorKind::App);
    assert!(msg.contains("counter exploded"), "{msg}");
    assert_eq!(
        ok(d.handle(invoke(3, "a", "x", "increment", "")).await),
        "1"
    );
}

#[tokio::test]
async fn workers_answer_without_activations() {
    let d = counter_app(Default::default()).into_dispatcher(client());
    let mut t = invoke(1, "any", "", "echo", "hello");
    t.actor.as_mut().unwrap().actor_type = "Echo".into();
    assert_eq!(ok(d.handle(t).await), "hello");
    assert_eq!(d.live_activations(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_is_the_turns_timeout_from_its_arrival() {
    let app = App::new("t").actor(
        ActorType::new("Counter", |_ctx: Context| async { Ok(()) }).json_method(
            "left",
            |ctx, (): ()| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(ctx.time_left().map(|d| d.as_millis() as u64))
            },
        ),
    );
    let d = app.into_dispatcher(client());
    ok(d.handle(activate(1, "a", "x")).await);
    let mut t = invoke(2, "a", "x", "left", "");
    t.timeout_ms = 1_000;
    assert_eq!(ok(d.handle(t).await), "700");
    assert_eq!(
        ok(d.handle(invoke(3, "a", "x", "left", "")).await),
        "null",
        "no deadline"
    );
}

#[test]
fn the_registration_describes_every_type_and_option() {
    let app = counter_app(Default::default());
    let reg = app.registration();
    assert_eq!(reg.app_name, "test-app");
    assert_eq!(reg.actors.len(), 1);
    let c = &reg.actors[0];
    assert_eq!(c.name, "Counter");
    assert!(!c.reentrant);
    assert_eq!(c.idle_timeout_ms, 0, "0 = the sidecar's default");
    assert_eq!(
        c.methods,
        [
            "fail",
            "get",
            "increment",
            "nested-timeout",
            "panic",
            "whoami"
        ]
    );
    assert_eq!(reg.workers[0].name, "Echo");
    assert_eq!(reg.workers[0].max_concurrency, 7);
    assert_eq!(reg.workers[0].methods, ["echo"]);

    let reg = App::new("r")
        .actor(
            ActorType::<u8>::with_default_state("Room")
                .reentrant(true)
                .idle_timeout(Duration::from_secs(2)),
        )
        .registration();
    assert!(reg.actors[0].reentrant);
    assert_eq!(reg.actors[0].idle_timeout_ms, 2_000);
}

#[test]
fn malformed_declarations_are_refused_before_any_connection() {
    let dup = App::new("d")
        .actor(ActorType::<u8>::with_default_state("Counter"))
        .worker(WorkerType::new("Counter"));
    let e = dup.validate().unwrap_err().to_string();
    assert!(e.contains("\"Counter\" is declared twice"), "{e}");

    let empty = App::new("e").worker(WorkerType::new(" "));
    assert!(
        empty
            .validate()
            .unwrap_err()
            .to_string()
            .contains("empty name")
    );

    let none = App::new("n");
    assert!(
        none.validate()
            .unwrap_err()
            .to_string()
            .contains("no actor or worker type")
    );

    assert!(counter_app(Default::default()).validate().is_ok());
}

/// A turn's writes travel with its `ok` result, in order, and reads inside the turn see them;
/// a failed turn writes nothing (no sidecar is needed: the reads hit the turn's own writes).
#[tokio::test]
async fn a_turns_writes_travel_with_its_success_only_and_reads_see_them() {
    let counter = ActorType::new("Counter", |_ctx: Context| async { Ok(()) })
        .json_method("save", |ctx, n: i64| async move {
            let st = ctx.storage();
            st.put("count", &n)?;
            st.put_bytes("raw", Bytes::from_static(b"x"));
            st.delete("raw");
            // Read-your-writes: the pending put and delete, before any commit.
            let seen: Option<i64> = st.get("count").await?;
            let raw = st.get_bytes("raw").await?;
            Ok((seen, raw.is_none(), st.epoch()))
        })
        .json_method("save-then-fail", |ctx, n: i64| async move {
            ctx.storage().put("count", &n)?;
            Err::<(), _>(ActorError::app("changed my mind"))
        });
    let d = App::new("t").actor(counter).into_dispatcher(client());
    ok(d.handle(activate(1, "a", "A")).await);
    let r = d.handle(invoke(2, "a", "A", "save", "7")).await;
    let writes = r.writes.clone();
    assert_eq!(ok(r), "[7,true,1]");
    let ops: Vec<(String, Option<Vec<u8>>)> = writes
        .into_iter()
        .map(|w| {
            (
                w.key,
                match w.op {
                    Some(v1::state_write::Op::Put(v)) => Some(v.to_vec()),
                    _ => None,
                },
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("count".to_string(), Some(b"7".to_vec())),
            ("raw".to_string(), Some(b"x".to_vec())),
            ("raw".to_string(), None),
        ],
        "the batch in the order written"
    );
    let r = d.handle(invoke(3, "a", "A", "save-then-fail", "8")).await;
    assert!(
        r.writes.is_empty(),
        "a failed turn writes nothing: {:?}",
        r.writes
    );
    assert_eq!(err(r).0, ErrorKind::App);
}

fn tick(id: u64, key: &str, activation: &str, name: &str, payload: &str) -> v1::Turn {
    turn(
        id,
        key,
        activation,
        turn::Kind::Timer(v1::TimerTick {
            name: name.into(),
            payload: Bytes::copy_from_slice(payload.as_bytes()),
            period_ms: 250,
            due_unix_ms: 1_700_000_000_000,
            skipped: 2,
        }),
    )
}

#[tokio::test]
async fn a_timer_tick_runs_on_timer_with_the_activations_state_and_its_writes_travel() {
    let ticker = ActorType::new("Counter", |_ctx: Context| async {
        Ok(Vec::<String>::new())
    })
    .json_method("seen", |ctx, (): ()| async move {
        Ok(ctx.state().await.clone())
    })
    .on_timer(|ctx, tick| async move {
        assert_eq!(tick.period(), Some(Duration::from_millis(250)));
        assert_eq!(tick.skipped(), 2);
        assert_eq!(ctx.payload(), tick.payload());
        assert_eq!(ctx.method(), "");
        if tick.name() == "bad" {
            return Err(ActorError::app("tick failed"));
        }
        let seen = format!(
            "{}:{}",
            tick.name(),
            String::from_utf8_lossy(tick.payload())
        );
        ctx.storage().put_bytes("last", seen.clone());
        ctx.state().await.push(seen);
        Ok(())
    });
    let d = App::new("t").actor(ticker).into_dispatcher(client());
    ok(d.handle(activate(1, "k", "A1")).await);
    let r = d.handle(tick(2, "k", "A1", "flush", "p")).await;
    assert_eq!(
        r.writes.len(),
        1,
        "the tick's write travels with its result"
    );
    assert_eq!(ok(r), "");
    let (kind, msg) = err(d.handle(tick(3, "k", "A1", "bad", "")).await);
    assert_eq!((kind, msg.as_str()), (ErrorKind::App, "tick failed"));
    assert_eq!(
        ok(d.handle(invoke(4, "k", "A1", "seen", "")).await),
        r#"["flush:p"]"#
    );
    // A tick for an activation this app does not hold (or a type without on_timer) is invalid.
    let (kind, msg) = err(d.handle(tick(5, "k", "gone", "flush", "")).await);
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(msg.contains("not live"), "{msg}");
    let plain = App::new("p")
        .actor(ActorType::new("Counter", |_ctx: Context| async { Ok(()) }))
        .into_dispatcher(client());
    ok(plain.handle(activate(1, "k", "A1")).await);
    let (kind, msg) = err(plain.handle(tick(2, "k", "A1", "flush", "")).await);
    assert_eq!(kind, ErrorKind::Invalid);
    assert!(msg.contains("no on_timer handler"), "{msg}");
}
