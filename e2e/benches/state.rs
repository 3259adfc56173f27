//! State writes through sigx next to the same upsert issued directly to the same store, measured
//! in the same run (DESIGN.md §11; issue 13's targets: ≤ 1.5× on SQLite).
//!
//! * sigx: an SDK client calls `Counter.set` through the sidecar's Unix socket; the handler puts
//!   one key; the sidecar commits the turn's batch to SQLite under the activation's epoch, then
//!   answers (app → sidecar → store → result).
//! * baseline: one single-row upsert in its own `BEGIN IMMEDIATE` transaction on the same database
//!   file, same pragmas (WAL, `synchronous = FULL`), from a blocking task as an async app would.
//! * activation with state load: the first call to an actor whose state is already stored (the
//!   claim, the epoch, the Activate turn reading the state back through the sidecar).
//!
//! Run: `make bench` (or `cargo bench -p sigx-e2e --bench state`).

use sigx_sdk::{ActorType, App, Client, Context};
use sigx_sidecar::host::{Host, HostOptions, StopKind};
use sigx_sidecar::state::sqlite::SqliteStateStore;
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

async fn start(dir: &Path) -> (Host, Client, sigx_sdk::ServeHandle) {
    let socket = dir.join("s.sock");
    let store = Arc::new(SqliteStateStore::open(&dir.join("state.db")).unwrap());
    let args = [
        "sigx-sidecar",
        "--membership",
        "none",
        "--socket",
        socket.to_str().unwrap(),
        "--health-addr",
        "127.0.0.1:0",
        "--host-id",
        "bench",
    ];
    let cfg = <sigx_sidecar::config::Args as clap::Parser>::try_parse_from(args)
        .unwrap()
        .validate()
        .unwrap();
    let host = Host::start_with(
        cfg,
        HostOptions {
            state: Some(store),
            ..HostOptions::default()
        },
    )
    .await
    .unwrap();
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
        let dir = tempfile::tempdir().unwrap();
        let (host, client, serving) = start(dir.path()).await;
        let db = baseline_db(&dir.path().join("state.db"));
        for i in 0..100 {
            direct_upsert(&db, i).await;
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
                direct_upsert(&db, round * per_round + i).await;
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
        println!("sigx state benchmark (SQLite, WAL, synchronous=FULL; {WRITES} sequential writes each, alternating in {ROUNDS} rounds)");
        println!("| path | p50 µs | p99 µs |");
        println!("|---|---|---|");
        println!("| direct single-row upsert (baseline) | {b50:.0} | {b99:.0} |");
        println!("| write through sigx (app → sidecar → store → result) | {s50:.0} | {s99:.0} |");
        println!("| ratio sigx / baseline | {:.2}× | {:.2}× |", s50 / b50, s99 / b99);

        // Activation with state load: actors whose state is stored, then left idle-free but
        // never activated on this host yet (written by the direct path's store through sigx on
        // a first pass, then the host restarted so none is active).
        for k in 0..ACTIVATIONS {
            client
                .call_json::<i64, ()>("Counter", &format!("a{k}"), "set", &(k as i64))
                .await
                .unwrap();
        }
        let _ = serving.shutdown().await;
        host.stop(StopKind::Graceful).await;
        let (host, client, serving) = start(dir.path()).await;
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
        println!();
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
        let _ = serving.shutdown().await;
        host.stop(StopKind::Graceful).await;
    });
}
