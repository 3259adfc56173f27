//! Reminders end to end on one host (DESIGN.md §11), through the real app socket and a real
//! SQLite state file: a due reminder activates its actor and arrives as a `Reminder` turn with
//! its payload; a one-shot one is deleted once delivered, a periodic one keeps its period until
//! deleted; a failing delivery is retried with backoff and then abandoned, and counted; bad
//! requests are refused by name; a reminder outlives its host.

mod support;

use sigx_proto::v1;
use sigx_proto::v1::actor_host_client::ActorHostClient;
use sigx_sidecar::host::{Host, HostOptions, StopKind};
use sigx_sidecar::reminders::SchedulerConfig;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use support::{Behaviour, Event, TestApp, actor_spec, connect, single_host_config};
use tonic::transport::Channel;

struct Fixture {
    host: Host,
    app: TestApp,
    client: ActorHostClient<Channel>,
}

async fn start(dir: &Path, behaviour: HashMap<String, Behaviour>) -> Fixture {
    let db = dir.join("state.db");
    let cfg = single_host_config(
        dir,
        &["--state", "sqlite", "--state-path", db.to_str().unwrap()],
    );
    let opts = HostOptions {
        reminders: Some(SchedulerConfig {
            retry_min: Duration::from_millis(50),
            retry_max: Duration::from_millis(200),
            max_attempts: 3,
            call_timeout: Duration::from_secs(5),
            ..SchedulerConfig::default()
        }),
        ..HostOptions::default()
    };
    let host = Host::start_with(cfg, opts).await.unwrap();
    let app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Invoice", false, 0)],
            workers: vec![v1::WorkerTypeSpec {
                name: "Pdf".into(),
                max_concurrency: 0,
                methods: vec![],
            }],
            app_name: "reminders-test".into(),
        },
        behaviour,
    )
    .await
    .unwrap();
    let client = ActorHostClient::new(connect(&host.socket).await);
    Fixture { host, app, client }
}

fn invoice(key: &str) -> Option<v1::ActorRef> {
    Some(v1::ActorRef {
        actor_type: "Invoice".into(),
        key: key.into(),
    })
}

fn set_in(
    key: &str,
    name: &str,
    in_ms: u64,
    period_ms: u64,
    payload: &str,
) -> v1::SetReminderRequest {
    v1::SetReminderRequest {
        actor: invoice(key),
        name: name.into(),
        due: Some(v1::set_reminder_request::Due::DueInMs(in_ms)),
        period_ms,
        payload: payload.as_bytes().to_vec().into(),
        epoch: 0,
    }
}

/// The reminder turns the app ran, as (name, due, attempt), in order.
fn reminder_turns(app: &TestApp) -> Vec<(String, i64, u32)> {
    app.events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e: &Event| {
            let rest = e.what.strip_prefix("reminder:")?;
            let mut parts = rest.rsplitn(3, ':');
            let attempt = parts.next()?.parse().ok()?;
            let due = parts.next()?.parse().ok()?;
            Some((parts.next()?.to_string(), due, attempt))
        })
        .collect()
}

async fn wait_for<F: Fn() -> bool>(what: &str, within: Duration, ok: F) {
    let end = tokio::time::Instant::now() + within;
    while !ok() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn counters(client: &mut ActorHostClient<Channel>) -> HashMap<String, u64> {
    client
        .status(v1::StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .counters
}

async fn listed(client: &mut ActorHostClient<Channel>, key: &str) -> Vec<v1::ReminderInfo> {
    client
        .list_reminders(v1::ListRemindersRequest {
            actor: invoice(key),
        })
        .await
        .unwrap()
        .into_inner()
        .reminders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_reminder_activates_its_actor_arrives_once_and_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = start(dir.path(), HashMap::new()).await;
    let due = f
        .client
        .set_reminder(set_in("inv-1", "overdue", 300, 0, "pay up"))
        .await
        .unwrap()
        .into_inner()
        .due_unix_ms;
    assert_eq!(listed(&mut f.client, "inv-1").await.len(), 1);
    wait_for("the reminder turn", Duration::from_secs(5), || {
        !reminder_turns(&f.app).is_empty()
    })
    .await;
    let events = f.app.events.lock().unwrap().clone();
    let activate = events.iter().position(|e| e.what == "activate");
    let reminder = events.iter().position(|e| e.what.starts_with("reminder:"));
    assert!(
        activate.is_some() && activate < reminder,
        "the reminder activated its actor first: {events:?}"
    );
    assert_eq!(events[reminder.unwrap()].actor, "Invoice/inv-1");
    assert_eq!(
        reminder_turns(&f.app),
        [("overdue".to_string(), due, 1)],
        "delivered with its name, due time and first attempt"
    );
    // Settled: deleted from the store, and not delivered again.
    let mut client = f.client.clone();
    let end = tokio::time::Instant::now() + Duration::from_secs(3);
    while !listed(&mut client, "inv-1").await.is_empty() {
        assert!(
            tokio::time::Instant::now() < end,
            "the one-shot reminder was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(reminder_turns(&f.app).len(), 1, "delivered exactly once");
    let c = counters(&mut f.client).await;
    assert_eq!((c["remindersSet"], c["remindersFired"]), (1, 1), "{c:?}");
    assert!(c["reminderLatenessMsMax"] < 1000, "{c:?}");
    f.host.stop(StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_reminder_keeps_its_period_until_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = start(dir.path(), HashMap::new()).await;
    let first = f
        .client
        .set_reminder(set_in("inv-2", "tick", 100, 200, ""))
        .await
        .unwrap()
        .into_inner()
        .due_unix_ms;
    wait_for("five ticks", Duration::from_secs(5), || {
        reminder_turns(&f.app).len() >= 5
    })
    .await;
    let ticks = reminder_turns(&f.app);
    // Each occurrence is due on the period's grid from the first. An occurrence whose delivery
    // came later than a whole period (a loaded machine) skips to the next due time after it,
    // by design: the grid holds, the count of skips is bounded by the lateness.
    let mut last = first - 200;
    for (i, (name, due, attempt)) in ticks.iter().take(5).enumerate() {
        assert_eq!((name.as_str(), *attempt), ("tick", 1));
        assert!(
            *due > last && (*due - first) % 200 == 0,
            "occurrence {i} keeps the period: {ticks:?}"
        );
        last = *due;
    }
    assert_eq!(
        ticks[0].1, first,
        "the first occurrence is due when set: {ticks:?}"
    );
    let existed = f
        .client
        .delete_reminder(v1::DeleteReminderRequest {
            actor: invoice("inv-2"),
            name: "tick".into(),
            epoch: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .existed;
    assert!(existed);
    let after_delete = reminder_turns(&f.app).len();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // A delivery already running when the delete landed may finish; nothing after it.
    assert!(
        reminder_turns(&f.app).len() <= after_delete + 1,
        "ticks went on after the delete: {:?}",
        reminder_turns(&f.app)
    );
    f.host.stop(StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_reminder_is_retried_with_backoff_then_abandoned_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let behaviour = HashMap::from([(
        "reminder:flaky".to_string(),
        Behaviour::Fail("the printer is out of paper".into()),
    )]);
    let mut f = start(dir.path(), behaviour).await;
    let due = f
        .client
        .set_reminder(set_in("inv-3", "flaky", 50, 0, ""))
        .await
        .unwrap()
        .into_inner()
        .due_unix_ms;
    wait_for("three attempts", Duration::from_secs(5), || {
        reminder_turns(&f.app).len() >= 3
    })
    .await;
    let mut client = f.client.clone();
    let end = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let c = counters(&mut client).await;
        if c["remindersAbandoned"] == 1 {
            assert_eq!(
                (c["remindersRetried"], c["remindersFired"]),
                (2, 0),
                "{c:?}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < end, "never abandoned: {c:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        reminder_turns(&f.app),
        [
            ("flaky".to_string(), due, 1),
            ("flaky".to_string(), due, 2),
            ("flaky".to_string(), due, 3)
        ],
        "every retry keeps the occurrence's due time and counts its attempt"
    );
    assert!(
        listed(&mut f.client, "inv-3").await.is_empty(),
        "abandoned one-shots go"
    );
    f.host.stop(StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reminder_requests_are_refused_by_name_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = start(dir.path(), HashMap::new()).await;
    let refused = |r: Result<tonic::Response<v1::SetReminderResponse>, tonic::Status>| {
        let s = r.unwrap_err();
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
        s.message().to_string()
    };
    let mut no_due = set_in("inv-4", "x", 0, 0, "");
    no_due.due = None;
    assert!(refused(f.client.set_reminder(no_due).await).contains("no due time"));
    assert!(
        refused(f.client.set_reminder(set_in("inv-4", "x", 0, 50, "")).await)
            .contains("minimum of 100 ms")
    );
    assert!(
        refused(f.client.set_reminder(set_in("inv-4", "", 0, 0, "")).await).contains("1..=256")
    );
    let big = "x".repeat(64 * 1024 + 1);
    assert!(
        refused(
            f.client
                .set_reminder(set_in("inv-4", "x", 0, 0, &big))
                .await
        )
        .contains("over the limit")
    );
    let mut worker = set_in("k", "x", 0, 0, "");
    worker.actor = Some(v1::ActorRef {
        actor_type: "Pdf".into(),
        key: "k".into(),
    });
    assert!(refused(f.client.set_reminder(worker).await).contains("worker type"));
    assert!(listed(&mut f.client, "inv-4").await.is_empty());
    // sigx's own turn kinds cannot be called from outside.
    let call = f
        .client
        .call(v1::CallRequest {
            actor: invoice("inv-4"),
            method: "$reminder".into(),
            payload: Default::default(),
            timeout_ms: 1000,
            trace: None,
            locality: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(call.code(), tonic::Code::InvalidArgument);
    assert!(call.message().contains("reserved"), "{call:?}");
    assert!(reminder_turns(&f.app).is_empty());
    f.host.stop(StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_claimed_before_a_restart_fires_after_it_without_waiting_out_the_old_claim() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = start(dir.path(), HashMap::new()).await;
    let due = f
        .client
        .set_reminder(set_in("inv-5", "later", 900, 0, "kept"))
        .await
        .unwrap()
        .into_inner()
        .due_unix_ms;
    // Claimed within the look-ahead (1 s), then the host stops before it is due.
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.host.stop(StopKind::Graceful).await;
    assert!(reminder_turns(&f.app).is_empty(), "not due before the stop");
    drop(f.app);
    let g = start(dir.path(), HashMap::new()).await;
    wait_for(
        "the reminder on the restarted host",
        Duration::from_secs(5),
        || !reminder_turns(&g.app).is_empty(),
    )
    .await;
    assert_eq!(reminder_turns(&g.app), [("later".to_string(), due, 1)]);
    g.host.stop(StopKind::Graceful).await;
}

/// The epoch `sigx_actor_epochs` holds for Invoice/`key` in the host's state file.
fn epoch_in(dir: &Path, key: &str) -> u64 {
    let db = rusqlite::Connection::open(dir.join("state.db")).unwrap();
    db.query_row(
        "SELECT epoch FROM sigx_actor_epochs WHERE actor_type = 'Invoice' AND actor_key = ?1",
        [key],
        |r| r.get::<_, i64>(0),
    )
    .unwrap() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_change_fenced_by_a_superseded_epoch_is_refused_and_drops_the_activation() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = start(dir.path(), HashMap::new()).await;
    support::call(&mut f.client, "Invoice", "inv-6", "touch", b"", 2_000)
        .await
        .unwrap();
    let epoch = epoch_in(dir.path(), "inv-6");
    assert!(epoch > 0, "activating with a state store takes an epoch");

    // Fenced by the live activation's epoch: accepted.
    let mut first = set_in("inv-6", "bill", 60_000, 0, "v1");
    first.epoch = epoch;
    f.client.set_reminder(first).await.unwrap();

    // Another host takes the actor over (what its activation does to the store).
    rusqlite::Connection::open(dir.path().join("state.db"))
        .unwrap()
        .execute(
            "UPDATE sigx_actor_epochs SET epoch = epoch + 1 \
             WHERE actor_type = 'Invoice' AND actor_key = 'inv-6'",
            [],
        )
        .unwrap();

    let refused = |s: tonic::Status| {
        assert_eq!(s.code(), tonic::Code::Aborted, "{s:?}");
        let e = sigx_proto::ActorError::from_status(&s);
        assert_eq!(e.kind, sigx_proto::ErrorKind::StaleEpoch, "{e:?}");
    };
    let mut stale_set = set_in("inv-6", "bill", 1_000, 0, "v2");
    stale_set.epoch = epoch;
    refused(f.client.set_reminder(stale_set).await.unwrap_err());
    refused(
        f.client
            .delete_reminder(v1::DeleteReminderRequest {
                actor: invoice("inv-6"),
                name: "bill".into(),
                epoch,
            })
            .await
            .unwrap_err(),
    );
    let kept = listed(&mut f.client, "inv-6").await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        &kept[0].payload[..],
        b"v1",
        "the stale change wrote nothing"
    );
    assert!(counters(&mut f.client).await["staleEpochs"] >= 2);

    // The superseded activation was dropped: the next call activates afresh, on a newer epoch.
    support::call(&mut f.client, "Invoice", "inv-6", "touch", b"", 2_000)
        .await
        .unwrap();
    assert_eq!(epoch_in(dir.path(), "inv-6"), epoch + 2);
    f.host.stop(StopKind::Graceful).await;
}
