//! `counter-app`: the example sigx app. A `Counter` actor that holds its count in memory, and an
//! `Echo` worker.
//!
//! * `Counter.increment [amount]` adds `amount` (JSON integer, default 1) and returns the new
//!   value; `Counter.get` returns the value; `Counter.info` returns the value, the activation id
//!   and the host id (to see where an actor lives and when it was re-activated).
//! * A due reminder on a `Counter` (set with `SetReminder`, e.g. `sigx`'s SDKs) adds its
//!   payload (a JSON integer, default 1) to the count.
//! * `Echo.echo` returns its payload; `Echo.whereami` returns the host id that ran it.
//!
//! Counts are durable in the sidecar's state store (`ctx.storage()`, DESIGN.md §11): every
//! increment writes the key `count`, committed before its caller sees the new value, and each
//! activation reads it back, so a count survives idle deactivation, handoffs between hosts and
//! crashes. The store fences by epoch: an activation a newer one superseded cannot write.
//!
//! With `SIGX_ACTORS` / `SIGX_WORKERS` set (the operator sets them from the ActorRole, and the
//! sidecar accepts a registration only of exactly those types), the app registers exactly the
//! declared types, so one image serves every role; a declared type it does not implement is a
//! startup error, not a registration the sidecar would refuse later. Unset, it registers both.
//!
//! Test hook: with `COUNTER_TRACE_FILE` set, the app appends one JSON line per activation start
//! and end and per turn start and end, stamped with the system-wide monotonic clock, so tests
//! that run several hosts on one machine can check that no two activations of one actor ever
//! overlapped, and that no two turns of one activation did.
#![forbid(unsafe_code)]

mod trace;

use clap::Parser;
use sigx_sdk::{ActorError, ActorType, App, Client, Context, DEFAULT_SOCKET, WorkerType};
use std::path::PathBuf;
use std::time::Duration;
use trace::{Event, Trace};

#[derive(Debug, Parser)]
#[command(
    name = "counter-app",
    version,
    about = "The sigx example app: Counter and Echo"
)]
struct Args {
    /// The sidecar's Unix socket.
    #[arg(long, env = "SIGX_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,

    /// Append activation and turn events here, one JSON object per line (a test hook).
    #[arg(long, env = "COUNTER_TRACE_FILE")]
    trace_file: Option<PathBuf>,

    /// Deactivate a counter after this long without calls (default: the sidecar's, 5 min).
    #[arg(long, env = "COUNTER_IDLE_TIMEOUT_MS")]
    idle_timeout_ms: Option<u64>,

    /// Make every Counter turn take at least this long (a test hook: widens the window in which
    /// overlapping turns or activations would show in the trace).
    #[arg(long, env = "COUNTER_TURN_DELAY_MS", default_value_t = 0)]
    turn_delay_ms: u64,

    /// The stateful types this host's role declares, comma-separated (set by the operator).
    /// With this or `--workers` set, the app registers exactly the declared types.
    #[arg(long, env = "SIGX_ACTORS")]
    actors: Option<String>,

    /// The worker types this host's role declares, comma-separated (see `--actors`).
    #[arg(long, env = "SIGX_WORKERS")]
    workers: Option<String>,
}

/// The stateful types this app implements.
const ACTORS: &[&str] = &["Counter"];
/// The worker types this app implements.
const WORKERS: &[&str] = &["Echo"];

/// Which of the app's types it registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Selection {
    counter: bool,
    echo: bool,
}

impl Selection {
    const ALL: Selection = Selection {
        counter: true,
        echo: true,
    };
}

/// A role declaration this app cannot serve.
#[derive(Debug, thiserror::Error)]
enum SelectError {
    #[error(
        "{var} declares the {kind} type {name:?}, which counter-app does not implement (it \
         implements the actor Counter and the worker Echo): fix the ActorRole's {field}, or run \
         the app that implements {name:?} in this role"
    )]
    Unimplemented {
        var: &'static str,
        kind: &'static str,
        field: &'static str,
        name: String,
    },
    #[error(
        "SIGX_ACTORS and SIGX_WORKERS declare no types: counter-app would serve nothing; declare \
         Counter or Echo in the ActorRole"
    )]
    Nothing,
}

/// The types to register: all of them when the role declares nothing (`None`, `None`: not run
/// by the operator); otherwise exactly the declared ones, since the sidecar refuses any other
/// registration. Names are comma-separated, blanks ignored, as the sidecar reads them.
fn select(actors: Option<&str>, workers: Option<&str>) -> Result<Selection, SelectError> {
    if actors.is_none() && workers.is_none() {
        return Ok(Selection::ALL);
    }
    let names = |list: Option<&str>| -> Vec<String> {
        list.unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    };
    let check = |var, kind, field, list: Vec<String>, known: &[&str]| match list
        .iter()
        .find(|n| !known.contains(&n.as_str()))
    {
        Some(name) => Err(SelectError::Unimplemented {
            var,
            kind,
            field,
            name: name.clone(),
        }),
        None => Ok(!list.is_empty()),
    };
    let counter = check("SIGX_ACTORS", "actor", "spec.actors", names(actors), ACTORS)?;
    let echo = check(
        "SIGX_WORKERS",
        "worker",
        "spec.workers",
        names(workers),
        WORKERS,
    )?;
    if !counter && !echo {
        return Err(SelectError::Nothing);
    }
    Ok(Selection { counter, echo })
}

/// One counter activation's state: the count, and the trace handle whose drop records the end
/// of the activation (after its Deactivate turn, or when the sidecar connection is lost).
struct Count {
    value: i64,
    _activation: trace::ActivationGuard,
}

/// Records a Counter turn's start and end around `body`. The end is recorded by a guard, so a
/// turn the SDK cancels (at its not-after, or on a fence notice) records where it stopped.
async fn traced<T>(
    trace: &Trace,
    ctx: &Context,
    delay: Duration,
    body: impl std::future::Future<Output = T>,
) -> T {
    struct TurnEnd<'a>(&'a Trace, &'a Context);
    impl Drop for TurnEnd<'_> {
        fn drop(&mut self) {
            self.0.record(Event::TurnEnd, self.1);
        }
    }
    trace.record(Event::TurnStart, ctx);
    let _end = TurnEnd(trace, ctx);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    body.await
}

/// The state key holding a counter's value.
const COUNT_KEY: &str = "count";

fn app(select: Selection, trace: Trace, idle: Option<Duration>, delay: Duration) -> App {
    let t = trace.clone();
    let mut counter = ActorType::new("Counter", move |ctx: Context| {
        let t = t.clone();
        async move {
            // A turn without an epoch comes from a sidecar without state (or a unit test
            // driving the dispatcher directly): the count then lives in memory only.
            let value = if ctx.epoch() == 0 {
                0
            } else {
                ctx.storage().get::<i64>(COUNT_KEY).await?.unwrap_or(0)
            };
            Ok(Count {
                value,
                _activation: t.activation(&ctx),
            })
        }
    });
    if let Some(idle) = idle {
        counter = counter.idle_timeout(idle);
    }
    // Tells the trace that this end is a deactivation (a drop on fence is not).
    counter = counter.on_deactivate(|ctx, _reason| async move {
        ctx.state().await._activation.deactivating();
        Ok(())
    });
    // A due reminder adds its payload (a JSON integer, default 1) to the count, durably, like
    // an increment: `sigx` delivers it at least once, so the trace records every delivery.
    let t0 = trace.clone();
    counter = counter.on_reminder(move |ctx, reminder| {
        let t = t0.clone();
        async move {
            #[allow(clippy::disallowed_methods)]
            let wall_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            t.reminder(&ctx, &reminder, wall_ms);
            let amount: i64 = if reminder.payload.is_empty() {
                1
            } else {
                serde_json::from_slice(&reminder.payload).map_err(|e| {
                    ActorError::invalid(format!(
                        "reminder {:?}: its payload is not a JSON integer: {e}",
                        reminder.name
                    ))
                })?
            };
            let mut count = ctx.state().await;
            let next = count.value.saturating_add(amount);
            // Adding nothing writes nothing: a reminder with payload 0 is a pure wake-up.
            if ctx.epoch() != 0 && next != count.value {
                ctx.storage().put(COUNT_KEY, &next)?;
            }
            count.value = next;
            Ok(())
        }
    });
    let (t1, t2, t3) = (trace.clone(), trace.clone(), trace);
    let counter = counter
        .json_method("increment", move |ctx, amount: Option<i64>| {
            let t = t1.clone();
            async move {
                traced(&t, &ctx, delay, async {
                    let mut count = ctx.state().await;
                    let next = count
                        .value
                        .checked_add(amount.unwrap_or(1))
                        .ok_or_else(|| {
                            ActorError::app(format!("{}: the count would overflow", ctx.key()))
                        })?;
                    if ctx.epoch() != 0 {
                        // Committed with the turn's answer: the caller sees `next` only once
                        // it is durable, and a superseded activation's write is refused.
                        ctx.storage().put(COUNT_KEY, &next)?;
                    }
                    count.value = next;
                    Ok(count.value)
                })
                .await
            }
        })
        .json_method("get", move |ctx, (): ()| {
            let t = t2.clone();
            async move { traced(&t, &ctx, delay, async { Ok(ctx.state().await.value) }).await }
        })
        .json_method("info", move |ctx, (): ()| {
            let t = t3.clone();
            async move {
                traced(&t, &ctx, delay, async {
                    Ok(serde_json::json!({
                        "value": ctx.state().await.value,
                        "activation_id": ctx.activation_id(),
                        "host_id": ctx.host_id(),
                    }))
                })
                .await
            }
        });
    let echo = WorkerType::new("Echo")
        .method("echo", |ctx| async move { Ok(ctx.payload().clone()) })
        .json_method("whereami", |ctx, (): ()| async move {
            Ok(ctx.host_id().to_string())
        });
    let mut app = App::new("counter-app");
    if select.counter {
        app = app.actor(counter);
    }
    if select.echo {
        app = app.worker(echo);
    }
    app
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SIGX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let select = select(args.actors.as_deref(), args.workers.as_deref())?;
    let trace = match &args.trace_file {
        Some(path) => Trace::open(path)?,
        None => Trace::off(),
    };
    let client = Client::lazy(&args.socket);
    tracing::info!(
        socket = %args.socket.display(),
        counter = select.counter,
        echo = select.echo,
        "counter-app serving"
    );
    app(
        select,
        trace,
        args.idle_timeout_ms.map(Duration::from_millis),
        Duration::from_millis(args.turn_delay_ms),
    )
    .serve_until(&client, stop_signal())
    .await?;
    tracing::info!("counter-app stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigx_sdk::proto::{self as v1, turn, turn_result};

    fn turn_for(id: u64, activation: &str, kind: turn::Kind) -> v1::Turn {
        v1::Turn {
            turn_id: id,
            actor: Some(v1::ActorRef {
                actor_type: "Counter".into(),
                key: "k".into(),
            }),
            activation_id: activation.into(),
            timeout_ms: 0,
            not_after_unix_ms: 0,
            not_after_boot_ms: 0,
            epoch: 0,
            kind: Some(kind),
            trace: None,
        }
    }

    fn call(id: u64, activation: &str, method: &str, payload: &str) -> v1::Turn {
        turn_for(
            id,
            activation,
            turn::Kind::Invoke(v1::Invoke {
                method: method.into(),
                payload: payload.as_bytes().to_vec().into(),
            }),
        )
    }

    fn ok(r: v1::TurnResult) -> String {
        match r.outcome {
            Some(turn_result::Outcome::Ok(b)) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn registered(select: Selection) -> (Vec<String>, Vec<String>) {
        let r = app(select, Trace::off(), None, Duration::ZERO).registration();
        (
            r.actors.into_iter().map(|a| a.name).collect(),
            r.workers.into_iter().map(|w| w.name).collect(),
        )
    }

    #[test]
    fn without_a_role_declaration_both_types_are_registered() {
        assert_eq!(select(None, None).unwrap(), Selection::ALL);
        assert_eq!(
            registered(Selection::ALL),
            (vec!["Counter".to_string()], vec!["Echo".to_string()])
        );
    }

    #[test]
    fn a_role_declaration_registers_exactly_the_declared_types() {
        // The example engine role: actors Counter, workers "" (the operator sets both).
        let engine = select(Some("Counter"), Some("")).unwrap();
        assert_eq!(registered(engine), (vec!["Counter".to_string()], vec![]));
        // The example web role: worker Echo only; an unset variable counts as empty.
        let web = select(None, Some(" Echo ")).unwrap();
        assert_eq!(registered(web), (vec![], vec!["Echo".to_string()]));
        let both = select(Some("Counter,"), Some("Echo,Echo")).unwrap();
        assert_eq!(both, Selection::ALL);
    }

    #[test]
    fn a_declared_type_the_app_does_not_implement_is_refused_by_name() {
        let e = select(Some("Counter,billing.Invoice"), Some("")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("SIGX_ACTORS"), "{msg}");
        assert!(msg.contains("\"billing.Invoice\""), "{msg}");
        // A type of the wrong kind is not implemented as that kind either.
        let msg = select(Some("Echo"), None).unwrap_err().to_string();
        assert!(
            msg.contains("SIGX_ACTORS") && msg.contains("actor type \"Echo\""),
            "{msg}"
        );
        let msg = select(Some(""), Some("Counter")).unwrap_err().to_string();
        assert!(msg.contains("SIGX_WORKERS"), "{msg}");
        assert!(matches!(
            select(Some(""), Some(" , ")),
            Err(SelectError::Nothing)
        ));
    }

    #[tokio::test]
    async fn counter_counts_and_the_trace_brackets_activations_and_turns() {
        let dir = std::env::temp_dir().join(format!("counter-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.jsonl");
        let _ = std::fs::remove_file(&path);
        let d = app(
            Selection::ALL,
            Trace::open(&path).unwrap(),
            None,
            Duration::ZERO,
        )
        .into_dispatcher(Client::lazy("/nonexistent.sock"));
        ok(
            d.handle(turn_for(1, "A1", turn::Kind::Activate(v1::Activate {})))
                .await,
        );
        assert_eq!(ok(d.handle(call(2, "A1", "increment", "")).await), "1");
        assert_eq!(ok(d.handle(call(3, "A1", "increment", "41")).await), "42");
        assert_eq!(ok(d.handle(call(4, "A1", "get", "")).await), "42");
        ok(d.handle(turn_for(
            5,
            "A1",
            turn::Kind::Deactivate(v1::Deactivate { reason: 1 }),
        ))
        .await);

        let events: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "activation-start",
                "turn-start",
                "turn-end",
                "turn-start",
                "turn-end",
                "turn-start",
                "turn-end",
                "activation-end"
            ]
        );
        assert!(
            events
                .iter()
                .all(|e| e["actor"] == "Counter/k" && e["activation"] == "A1")
        );
        let times: Vec<u64> = events.iter().map(|e| e["t_ns"].as_u64().unwrap()).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "monotonic: {times:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_overflowing_increment_is_an_app_error_and_keeps_the_count() {
        let d = app(Selection::ALL, Trace::off(), None, Duration::ZERO)
            .into_dispatcher(Client::lazy("/x.sock"));
        ok(
            d.handle(turn_for(1, "A", turn::Kind::Activate(v1::Activate {})))
                .await,
        );
        ok(d.handle(call(2, "A", "increment", &i64::MAX.to_string()))
            .await);
        match d.handle(call(3, "A", "increment", "")).await.outcome {
            Some(turn_result::Outcome::Error(e)) => {
                assert_eq!(e.kind, v1::ErrorKind::App as i32);
                assert!(e.message.contains("overflow"), "{}", e.message);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ok(d.handle(call(4, "A", "get", "")).await),
            i64::MAX.to_string()
        );
    }
}
