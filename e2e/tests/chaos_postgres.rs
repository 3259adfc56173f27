//! The chaos fleet on a real PostgreSQL state store (issue 13): three real pods keep their actor
//! state and reminders in one PostgreSQL server started by the test. kill -9 of a pod right after
//! acknowledged writes loses none of them (the ledger reads every counter back and checks it
//! against every acknowledged increment), and reminders due around the crash still fire.

#[path = "../../sidecar/tests/support/postgres.rs"]
mod pg;

use sigx_e2e::chaos::ledger::{read_finals, start_load};
use sigx_e2e::chaos::reminders::{ReminderReport, deliveries, now_ms, set_spread};
use sigx_e2e::chaos::{Fleet, FleetConfig, Report, client, trace};
use std::time::Duration;

const COUNTERS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_on_postgres_state_loses_no_acknowledged_write_and_misses_no_reminder() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("fleet").await;
    let mut fleet = Fleet::start(FleetConfig {
        state_dsn: Some(dsn),
        ..FleetConfig::default()
    })
    .await;
    let ttl = fleet.ttl().as_millis() as i64;
    let sockets = fleet.targets.read().unwrap().clone();
    let t0 = now_ms();
    let want = set_spread(&sockets, 20, 10, t0 + 2_500, Duration::from_secs(5), 16).await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 8, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // Acknowledged writes a moment ago, some of them on this pod's activations.
    let killed_at = now_ms();
    fleet.kill9(1).await;
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let ledger = load.stop().await;
    let c = client(&fleet.pods[0].socket).with_timeout(Duration::from_secs(5));
    let actors: Vec<String> = (0..COUNTERS).map(|k| format!("Counter/c{k}")).collect();
    let finals = read_finals(&c, &actors).await;
    let report = Report::judge(
        "kill -9 of one of 3 pods under load, state in PostgreSQL",
        &ledger,
        &finals,
        trace::duplicate_activations(&fleet.trace_file()),
    );
    println!("{}", report.render());
    let wait_until = t0 + 7_500 + ttl + 5_000;
    if now_ms() < wait_until {
        tokio::time::sleep(Duration::from_millis((wait_until - now_ms()) as u64)).await;
    }
    let reminders = ReminderReport::judge(
        &want,
        &deliveries(&fleet.trace_file()),
        Some((killed_at - 1_000, killed_at + ttl + 1_000)),
    );
    println!("{}", reminders.render());
    fleet.shutdown().await;
    assert!(report.sent > 100, "the load ran: {}", report.sent);
    assert!(report.ledger_problems.is_empty(), "{}", report.render());
    assert!(
        report.duplicate_activations.is_empty(),
        "{}",
        report.render()
    );
    assert!(reminders.missing.is_empty(), "{}", reminders.render());
    assert_eq!(reminders.duplicates, 0, "{}", reminders.render());
}
