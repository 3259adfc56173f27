//! State writes through sigx next to the same upsert issued directly to the same store, measured
//! in the same run (DESIGN.md §11; issue 13's targets: ≤ 1.5× on SQLite, ≤ 1.3× on PostgreSQL).
//! PostgreSQL is a real server started for the run (the tests' harness: initdb + pg_ctl).
//!
//! * sigx: an SDK client calls `Counter.set` through the sidecar's Unix socket; the handler puts
//!   one key; the sidecar commits the turn's batch to SQLite under the activation's epoch, then
//!   answers (app → sidecar → store → result).
//! * baseline: one single-row upsert in its own transaction on the same database — SQLite: the same
//!   file and pragmas (WAL, `synchronous = FULL`), `BEGIN IMMEDIATE`, from a blocking task as an
//!   async app would; PostgreSQL: one `INSERT ... ON CONFLICT` over a tokio-postgres connection
//!   (autocommit, the server's default durability).
//! * the same call without the write (`Counter.keep`), and the same call whose handler issues the
//!   baseline upsert to the store itself (`Counter.own`, what an app without sigx state would
//!   do): what the write through sigx adds to a call is `set − keep`, and `set / own` compares the
//!   two ways of making a call durable on the same path.
//! * activation with state load: the first call to an actor whose state is already stored (the
//!   claim, the epoch, the Activate turn reading the state back through the sidecar).
//!
//! Run: `make bench` (or `cargo bench -p sigx-e2e --bench state`).

use sigx_sdk::{ActorType, App, Client, Context};
use sigx_sidecar::host::{Host, StopKind};
use sigx_sidecar::state::SharedStateStore;
use sigx_sidecar::state::postgres::PostgresStateStore;
use sigx_sidecar::state::sqlite::SqliteStateStore;

#[path = "../../sidecar/tests/support/postgres.rs"]
mod pg;
use futures::future::BoxFuture;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const WRITES: usize = 1_200;
const ROUNDS: usize = 6;
const ACTIVATIONS: usize = 300;

/// The baseline write (the `i`th value), callable from the app's handler as well as the bench.
type Writer = Arc<dyn Fn(usize) -> BoxFuture<'static, ()> + Send + Sync>;

fn app(own: Writer) -> App {
    let counter = ActorType::new("Counter", |ctx: Context| async move {
        Ok(ctx.storage().get::<i64>("v").await?.unwrap_or(0))
    })
    .json_method("set", |ctx, v: i64| async move {
        ctx.storage().put("v", &v)?;
        *ctx.state().await = v;
        Ok(())
    })
    .json_method("keep", |ctx, v: i64| async move {
        *ctx.state().await = v;
        Ok(())
    })
    .json_method("own", move |ctx, v: i64| {
        let own = own.clone();
        async move {
            own(v as usize).await;
            *ctx.state().await = v;
            Ok(())
        }
    })
    .json_method("get", |ctx, (): ()| async move { Ok(*ctx.state().await) });
    App::new("state-bench").actor(counter)
}

fn p(lat: &mut [f64], q: f64) -> f64 {
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lat[((lat.len() as f64 - 1.0) * q) as usize]
}

async fn start(
    dir: &Path,
    store: SharedStateStore,
    own: Writer,
) -> (Host, Client, sigx_sdk::ServeHandle) {
    let socket = dir.join("s.sock");
    let host = sigx_e2e::single_host::start(&socket, "bench", store).await;
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(10));
    let serving = app(own).spawn(&client);
    let deadline = Instant::now() + Duration::from_secs(20);
    while client
        .call_json::<(), i64>("Counter", "warm", "get", &())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the bench app never served");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (host, client, serving)
}

fn baseline_db(path: &Path) -> Arc<Mutex<rusqlite::Connection>> {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode.to_lowercase(), "wal");
    conn.execute_batch(
        "PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS bench_kv (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;",
    )
    .unwrap();
    Arc::new(Mutex::new(conn))
}

fn sqlite_writer(db: Arc<Mutex<rusqlite::Connection>>) -> Writer {
    Arc::new(move |i| Box::pin(direct_upsert(db.clone(), i)))
}

async fn direct_upsert(db: Arc<Mutex<rusqlite::Connection>>, i: usize) {
    tokio::task::spawn_blocking(move || {
        let mut conn = db.lock().unwrap();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        tx.execute(
            "INSERT INTO bench_kv (k, v) VALUES ('v', ?1)
             ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            [i.to_string().into_bytes()],
        )
        .unwrap();
        tx.commit().unwrap();
    })
    .await
    .unwrap();
}

/// Times `WRITES` sequential calls of `method` (or of the baseline write when `method` is None),
/// appending microseconds to `into`.
async fn timed(
    client: &Client,
    base: &Writer,
    method: Option<&str>,
    from: usize,
    into: &mut Vec<f64>,
) {
    for i in from..from + WRITES / ROUNDS {
        let t = Instant::now();
        match method {
            None => base(i).await,
            Some(m) => client
                .call_json::<i64, ()>("Counter", "w", m, &(i as i64))
                .await
                .unwrap(),
        }
        into.push(t.elapsed().as_secs_f64() * 1e6);
    }
}

/// Alternates `ROUNDS` blocks of each path, so that all see the same machine; prints the table.
async fn writes(what: &str, client: &Client, base: &Writer) {
    const PATHS: [Option<&str>; 4] = [None, Some("set"), Some("keep"), Some("own")];
    for i in 0..100 {
        base(i).await;
        for m in PATHS.iter().flatten() {
            client
                .call_json::<i64, ()>("Counter", "w", m, &(i as i64))
                .await
                .unwrap();
        }
    }
    let mut lat: [Vec<f64>; 4] = Default::default();
    let per_round = WRITES / ROUNDS;
    for round in 0..ROUNDS {
        for (k, m) in PATHS.iter().enumerate() {
            timed(client, base, *m, round * per_round, &mut lat[k]).await;
        }
    }
    let [mut base_l, mut set, mut keep, mut own] = lat;
    let (b50, b99) = (p(&mut base_l, 0.5), p(&mut base_l, 0.99));
    let (s50, s99) = (p(&mut set, 0.5), p(&mut set, 0.99));
    let (k50, k99) = (p(&mut keep, 0.5), p(&mut keep, 0.99));
    let (o50, o99) = (p(&mut own, 0.5), p(&mut own, 0.99));
    println!("{what}: {WRITES} sequential calls on each path, alternating in {ROUNDS} rounds");
    println!("| path | p50 µs | p99 µs |");
    println!("|---|---|---|");
    println!("| direct single-row upsert (baseline) | {b50:.0} | {b99:.0} |");
    println!(
        "| write through sigx (`set`: app → sidecar → store → result) | {s50:.0} | {s99:.0} |"
    );
    println!("| the same call without the write (`keep`) | {k50:.0} | {k99:.0} |");
    println!(
        "| the same call, the handler upserting to the store itself (`own`) | {o50:.0} | {o99:.0} |"
    );
    println!(
        "| ratio `set` / baseline (issue 13's figure, end to end) | {:.2}× | {:.2}× |",
        s50 / b50,
        s99 / b99
    );
    println!(
        "| what the write adds to a call, `set − keep` at p50, / baseline p50 | {:.0} µs = {:.2}× | |",
        s50 - k50,
        (s50 - k50) / b50
    );
    println!(
        "| ratio `set` / `own` (sigx state against writing the store from the handler) | {:.2}× | {:.2}× |",
        s50 / o50,
        s99 / o99
    );
    println!();
}

/// The first call to actors whose state is stored (claim + epoch + Activate reading it) next to
/// a warm call, on a host restarted so that none is active.
async fn activations(dir: &Path, store: SharedStateStore, own: Writer) {
    let (host, client, serving) = start(dir, store.clone(), own.clone()).await;
    for k in 0..ACTIVATIONS {
        client
            .call_json::<i64, ()>("Counter", &format!("a{k}"), "set", &(k as i64))
            .await
            .unwrap();
    }
    let _ = serving.shutdown().await;
    host.stop(StopKind::Graceful).await;
    let (host, client, serving) = start(dir, store, own).await;
    let mut first = Vec::new();
    for k in 0..ACTIVATIONS {
        let t = Instant::now();
        let v: i64 = client
            .call_json("Counter", &format!("a{k}"), "get", &())
            .await
            .unwrap();
        first.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(v, k as i64, "the activation loaded the stored state");
    }
    let mut warm = Vec::new();
    for k in 0..ACTIVATIONS {
        let t = Instant::now();
        let _: i64 = client
            .call_json("Counter", &format!("a{k}"), "get", &())
            .await
            .unwrap();
        warm.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!("| call ({ACTIVATIONS} actors) | p50 µs | p99 µs |");
    println!("|---|---|---|");
    println!(
        "| first call: claim + epoch + Activate reading its state | {:.0} | {:.0} |",
        p(&mut first, 0.5),
        p(&mut first, 0.99)
    );
    println!(
        "| warm call to the same actor (baseline) | {:.0} | {:.0} |",
        p(&mut warm, 0.5),
        p(&mut warm, 0.99)
    );
    println!();
    let _ = serving.shutdown().await;
    host.stop(StopKind::Graceful).await;
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SIGX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // SQLite.
        let dir = tempfile::tempdir().unwrap();
        let store: SharedStateStore =
            Arc::new(SqliteStateStore::open(&dir.path().join("state.db")).unwrap());
        let own = sqlite_writer(baseline_db(&dir.path().join("state.db")));
        let (host, client, serving) = start(dir.path(), store.clone(), own.clone()).await;
        writes("SQLite (WAL, synchronous=FULL)", &client, &own).await;
        let _ = serving.shutdown().await;
        host.stop(StopKind::Fast).await;
        activations(dir.path(), store, own).await;

        // PostgreSQL: a real server for this run.
        let server = pg::PgServer::start();
        let dsn = server.create_database("bench").await;
        let store: SharedStateStore = Arc::new(PostgresStateStore::open(&dsn).await.unwrap());
        let (pgc, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        pgc.batch_execute("CREATE TABLE bench_kv (k TEXT PRIMARY KEY, v BYTEA NOT NULL)")
            .await
            .unwrap();
        let upsert = pgc
            .prepare(
                "INSERT INTO bench_kv (k, v) VALUES ('v', $1)
                 ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            )
            .await
            .unwrap();
        let pg_conn = Arc::new((pgc, upsert));
        let own: Writer = Arc::new(move |i| {
            let pg_conn = pg_conn.clone();
            Box::pin(async move {
                let (pgc, upsert) = &*pg_conn;
                pgc.execute(upsert, &[&i.to_string().into_bytes()])
                    .await
                    .unwrap();
            })
        });
        let (host, client, serving) = start(dir.path(), store.clone(), own.clone()).await;
        writes("PostgreSQL 15 (local server)", &client, &own).await;
        let _ = serving.shutdown().await;
        host.stop(StopKind::Fast).await;
        activations(dir.path(), store, own).await;
    });
}
