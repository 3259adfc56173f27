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
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const WRITES: usize = 1_200;
const ROUNDS: usize = 6;
const ACTIVATIONS: usize = 300;

fn app() -> App {
    let counter = ActorType::new("Counter", |ctx: Context| async move {
        Ok(ctx.storage().get::<i64>("v").await?.unwrap_or(0))
    })
    .json_method("set", |ctx, v: i64| async move {
        ctx.storage().put("v", &v)?;
        *ctx.state().await = v;
        Ok(())
    })
    .json_method("get", |ctx, (): ()| async move { Ok(*ctx.state().await) });
    App::new("state-bench").actor(counter)
}

fn p(lat: &mut [f64], q: f64) -> f64 {
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lat[((lat.len() as f64 - 1.0) * q) as usize]
}

async fn start(dir: &Path, store: SharedStateStore) -> (Host, Client, sigx_sdk::ServeHandle) {
    let socket = dir.join("s.sock");
    let host = sigx_e2e::single_host::start(&socket, "bench", store).await;
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(10));
    let serving = app().spawn(&client);
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

async fn direct_upsert(db: &Arc<Mutex<rusqlite::Connection>>, i: usize) {
    let db = db.clone();
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

/// Alternates `ROUNDS` blocks of baseline writes and sigx writes; prints the table.
async fn writes<B, BF>(what: &str, client: &Client, base_write: B)
where
    B: Fn(usize) -> BF,
    BF: std::future::Future<Output = ()>,
{
    for i in 0..100 {
        base_write(i).await;
        client
            .call_json::<i64, ()>("Counter", "w", "set", &(i as i64))
            .await
            .unwrap();
    }
    let (mut base, mut sigx) = (Vec::new(), Vec::new());
    let per_round = WRITES / ROUNDS;
    for round in 0..ROUNDS {
        for i in 0..per_round {
            let t = Instant::now();
            base_write(round * per_round + i).await;
            base.push(t.elapsed().as_secs_f64() * 1e6);
        }
        for i in 0..per_round {
            let t = Instant::now();
            client
                .call_json::<i64, ()>("Counter", "w", "set", &((round * per_round + i) as i64))
                .await
                .unwrap();
            sigx.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let (b50, b99, s50, s99) = (
        p(&mut base, 0.5),
        p(&mut base, 0.99),
        p(&mut sigx, 0.5),
        p(&mut sigx, 0.99),
    );
    println!("{what}: {WRITES} sequential writes each, alternating in {ROUNDS} rounds");
    println!("| path | p50 µs | p99 µs |");
    println!("|---|---|---|");
    println!("| direct single-row upsert (baseline) | {b50:.0} | {b99:.0} |");
    println!("| write through sigx (app → sidecar → store → result) | {s50:.0} | {s99:.0} |");
    println!(
        "| ratio sigx / baseline | {:.2}× | {:.2}× |",
        s50 / b50,
        s99 / b99
    );
    println!();
}

/// The first call to actors whose state is stored (claim + epoch + Activate reading it) next to
/// a warm call, on a host restarted so that none is active.
async fn activations(dir: &Path, store: SharedStateStore) {
    let (host, client, serving) = start(dir, store.clone()).await;
    for k in 0..ACTIVATIONS {
        client
            .call_json::<i64, ()>("Counter", &format!("a{k}"), "set", &(k as i64))
            .await
            .unwrap();
    }
    let _ = serving.shutdown().await;
    host.stop(StopKind::Graceful).await;
    let (host, client, serving) = start(dir, store).await;
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
        let (host, client, serving) = start(dir.path(), store.clone()).await;
        let db = baseline_db(&dir.path().join("state.db"));
        writes("SQLite (WAL, synchronous=FULL)", &client, |i| {
            direct_upsert(&db, i)
        })
        .await;
        let _ = serving.shutdown().await;
        host.stop(StopKind::Fast).await;
        activations(dir.path(), store).await;

        // PostgreSQL: a real server for this run.
        let server = pg::PgServer::start();
        let dsn = server.create_database("bench").await;
        let store: SharedStateStore = Arc::new(PostgresStateStore::open(&dsn).await.unwrap());
        let (host, client, serving) = start(dir.path(), store.clone()).await;
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
        let (pgc, upsert) = (&pgc, &upsert);
        writes("PostgreSQL 15 (local server)", &client, |i| async move {
            pgc.execute(upsert, &[&i.to_string().into_bytes()])
                .await
                .unwrap();
        })
        .await;
        let _ = serving.shutdown().await;
        host.stop(StopKind::Fast).await;
        activations(dir.path(), store).await;
    });
}
