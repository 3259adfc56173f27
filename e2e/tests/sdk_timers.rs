//! Timers through the Rust SDK (`ctx.set_timer`, `ctx.cancel_timer`, `ActorType::on_timer`)
//! against a host in process with a real SQLite state store, over the real Unix socket: a tick
//! is a turn whose storage writes are durable like a method's.

use serde::Deserialize;
use sigx_sdk::{ActorError, ActorType, App, Client, Context, ErrorKind, WorkerType};
use sigx_sidecar::host::{Host, StopKind};
use sigx_sidecar::runtime::ActorId;
use sigx_sidecar::state::sqlite::SqliteStateStore;
use sigx_sidecar::state::{Selection, StateStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Deserialize)]
struct Start {
    name: String,
    after_ms: u64,
    period_ms: Option<u64>,
    payload: String,
}

/// Ticker counts the ticks of each timer in its durable state (`ticks/NAME`) and keeps the last
/// payload (`last/NAME`); Silent sets timers but has no tick handler; Pool is a worker.
fn app() -> App {
    let ticker = ActorType::new("Ticker", |_ctx: Context| async { Ok(()) })
        .idle_timeout(Duration::from_millis(400))
        .json_method("start", |ctx, s: Start| async move {
            let period = s.period_ms.map(Duration::from_millis);
            ctx.set_timer(s.name, Duration::from_millis(s.after_ms), period, s.payload)
                .await
        })
        .json_method("stop", |ctx, name: String| async move {
            ctx.cancel_timer(&name).await
        })
        .json_method("ticks", |ctx, name: String| async move {
            Ok(ctx
                .storage()
                .get::<u64>(&format!("ticks/{name}"))
                .await?
                .unwrap_or(0))
        })
        .json_method("last", |ctx, name: String| async move {
            ctx.storage().get::<String>(&format!("last/{name}")).await
        })
        .on_timer(|ctx, tick| async move {
            let key = format!("ticks/{}", tick.name());
            let n = ctx.storage().get::<u64>(&key).await?.unwrap_or(0) + 1;
            ctx.storage().put(key, &n)?;
            let payload = String::from_utf8_lossy(tick.payload()).into_owned();
            ctx.storage()
                .put(format!("last/{}", tick.name()), &payload)?;
            assert_eq!(ctx.payload(), tick.payload());
            Ok(())
        });
    let silent = ActorType::new("Silent", |_ctx: Context| async { Ok(()) }).json_method(
        "start",
        |ctx, after_ms: u64| async move {
            ctx.set_timer("t", Duration::from_millis(after_ms), None, "")
                .await
        },
    );
    let pool = WorkerType::new("Pool").json_method("start", |ctx, (): ()| async move {
        ctx.set_timer("t", Duration::ZERO, None, "").await
    });
    App::new("timers-e2e")
        .actor(ticker)
        .actor(silent)
        .worker(pool)
}

struct Fixture {
    _dir: tempfile::TempDir,
    host: Option<Host>,
    store: Arc<SqliteStateStore>,
    client: Client,
    _app: sigx_sdk::ServeHandle,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let store = Arc::new(SqliteStateStore::open(&dir.path().join("state.db")).unwrap());
    let host = sigx_e2e::single_host::start(&socket, "h1", store.clone()).await;
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(5));
    let app = app().spawn(&client);
    app.registered(1).await.unwrap();
    Fixture {
        _dir: dir,
        host: Some(host),
        store,
        client,
        _app: app,
    }
}

impl Fixture {
    async fn start(&self, key: &str, name: &str, after_ms: u64, period_ms: Option<u64>) -> bool {
        #[derive(serde::Serialize)]
        struct S<'a> {
            name: &'a str,
            after_ms: u64,
            period_ms: Option<u64>,
            payload: String,
        }
        let s = S {
            name,
            after_ms,
            period_ms,
            payload: format!("payload of {name}"),
        };
        self.client
            .call_json("Ticker", key, "start", &s)
            .await
            .unwrap()
    }

    async fn ticks(&self, key: &str, name: &str) -> u64 {
        self.client
            .call_json("Ticker", key, "ticks", &name)
            .await
            .unwrap()
    }

    /// Waits until timer `name` of Ticker/`key` has `n` ticks in the store.
    async fn wait_ticks(&self, key: &str, name: &str, n: u64) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = self.ticks(key, name).await;
            if seen >= n {
                return;
            }
            assert!(
                Instant::now() < until,
                "{name}: {seen} ticks stored, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn counter(&self, name: &str) -> u64 {
        self.client.status().await.unwrap().counters[name]
    }

    async fn live(&self) -> u64 {
        let status = self.client.status().await.unwrap();
        status.activations.iter().map(|a| a.activations).sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticks_writes_are_durable_read_back_by_later_turns_and_activations() {
    let mut f = fixture().await;
    assert!(!f.start("a", "once", 20, None).await);
    f.wait_ticks("a", "once", 1).await;
    let last: Option<String> = f
        .client
        .call_json("Ticker", "a", "last", &"once")
        .await
        .unwrap();
    assert_eq!(last.as_deref(), Some("payload of once"));
    // The activation goes idle (ticks do not keep it), and a new one reads the tick's writes
    // from the store.
    let until = Instant::now() + Duration::from_secs(10);
    while f.live().await > 0 {
        assert!(Instant::now() < until, "the activation never went idle");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.ticks("a", "once").await, 1);
    f.host.take().unwrap().stop(StopKind::Graceful).await;
    let actor = ActorId::new("Ticker", "a");
    let epoch = f.store.next_epoch(&actor).await.unwrap();
    let got = f
        .store
        .read(&actor, epoch, &Selection::Keys(vec!["ticks/once".into()]))
        .await
        .unwrap();
    assert_eq!(got[0].1.as_deref(), Some(&b"1"[..]), "in the store itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_sets_replaces_and_cancels_timers_from_inside_turns() {
    let f = fixture().await;
    assert!(!f.start("b", "beat", 0, Some(20)).await);
    f.wait_ticks("b", "beat", 3).await;
    let cancelled: bool = f
        .client
        .call_json("Ticker", "b", "stop", &"beat")
        .await
        .unwrap();
    assert!(cancelled);
    let after_cancel = f.ticks("b", "beat").await;
    // A marker timer set after the cancel ticks 100 ms later: the cancelled one stayed quiet.
    assert!(!f.start("b", "marker", 100, None).await);
    f.wait_ticks("b", "marker", 1).await;
    assert_eq!(
        f.ticks("b", "beat").await,
        after_cancel,
        "ticked after its cancel"
    );
    let again: bool = f
        .client
        .call_json("Ticker", "b", "stop", &"beat")
        .await
        .unwrap();
    assert!(!again, "nothing left to cancel");
    // Setting a name again replaces it.
    assert!(!f.start("b", "r", 3_600_000, None).await);
    assert!(f.start("b", "r", 10, None).await, "replaced");
    f.wait_ticks("b", "r", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_without_a_handler_fail_and_workers_have_no_timers() {
    let f = fixture().await;
    let _: bool = f
        .client
        .call_json("Silent", "s", "start", &0u64)
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while f.counter("timerFailures").await < 1 {
        assert!(
            Instant::now() < until,
            "the unhandled tick was not counted as failed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let err: ActorError = f
        .client
        .call_json::<(), bool>("Pool", "p", "start", &())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
    assert!(err.message.contains("worker type"), "{err}");
}

/// A tick is a turn like any other at the store: when a newer activation of the actor exists
/// (its epoch taken straight from the shared store, as another host would), the tick's write is
/// refused, the activation is superseded and dropped, and its timers go with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticks_stale_epoch_supersedes_the_activation_and_ends_its_timers() {
    let f = fixture().await;
    assert!(!f.start("z", "beat", 0, Some(20)).await);
    f.wait_ticks("z", "beat", 2).await;
    let actor = ActorId::new("Ticker", "z");
    f.store.next_epoch(&actor).await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while f.counter("staleEpochs").await < 1 || f.live().await > 0 {
        assert!(
            Instant::now() < until,
            "the stale tick did not supersede the activation"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(f.counter("timerFailures").await >= 1);
    let ticks = f.counter("timerTicks").await;
    // Nothing ticks any more: a one-shot marker on another actor fires, the count stays put
    // but for the marker's own tick.
    assert!(!f.start("m", "marker", 100, None).await);
    f.wait_ticks("m", "marker", 1).await;
    assert_eq!(
        f.counter("timerTicks").await,
        ticks + 1,
        "the superseded timer ticked on"
    );
}
