//! Turns bounded by the lease, as the SDK enforces them (app.proto, `Turn.not_after_unix_ms`):
//! a turn received past its not-after never runs, a handler still running at it is cancelled,
//! and a fence notice cancels every running handler and drops every activation. Driven through
//! a `Dispatcher` with paused tokio time and an injected wall clock that follows it.

use bytes::Bytes;
use sigx_sdk::proto::{self as v1, turn, turn_result};
use sigx_sdk::{ActorType, App, Client, Context, Dispatcher, ErrorKind, WallClock};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A wall clock that moves with (paused) tokio time, plus a jump the test can add (a suspend).
#[derive(Clone)]
struct TestWall {
    origin: Instant,
    base: SystemTime,
    jump: Arc<std::sync::Mutex<Duration>>,
}

impl TestWall {
    fn new() -> Self {
        TestWall {
            origin: Instant::now(),
            base: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            jump: Arc::default(),
        }
    }
    fn now(&self) -> SystemTime {
        self.base + (Instant::now() - self.origin) + *self.jump.lock().unwrap()
    }
    fn ms_from_now(&self, d: Duration) -> i64 {
        (self.now() + d)
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }
    fn clock(&self) -> WallClock {
        let me = self.clone();
        Arc::new(move || me.now())
    }
}

struct Probe {
    started: AtomicUsize,
    finished: AtomicUsize,
}

fn app(probe: Arc<Probe>) -> App {
    let slow =
        ActorType::new("Counter", |_ctx: Context| async { Ok(0i64) }).method("slow", move |ctx| {
            let probe = probe.clone();
            async move {
                probe.started.fetch_add(1, Ordering::SeqCst);
                *ctx.state().await += 1;
                tokio::time::sleep(Duration::from_secs(5)).await;
                probe.finished.fetch_add(1, Ordering::SeqCst);
                Ok(Bytes::from_static(b"done"))
            }
        });
    App::new("not-after-app").actor(slow)
}

fn fixture() -> (TestWall, Arc<Probe>, Arc<Dispatcher>) {
    let wall = TestWall::new();
    let probe = Arc::new(Probe {
        started: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
    });
    let d = app(probe.clone())
        .into_dispatcher(Client::lazy("/nonexistent/sigx-sdk-test.sock"))
        .with_wall_clock(wall.clock());
    (wall, probe, Arc::new(d))
}

fn turn(id: u64, kind: turn::Kind, not_after_unix_ms: i64) -> v1::Turn {
    v1::Turn {
        turn_id: id,
        actor: Some(v1::ActorRef {
            actor_type: "Counter".into(),
            key: "a".into(),
        }),
        activation_id: "act-1".into(),
        timeout_ms: 30_000,
        not_after_unix_ms,
        not_after_boot_ms: 0,
        epoch: 1,
        kind: Some(kind),
        trace: None,
    }
}

fn slow(id: u64, not_after_unix_ms: i64) -> v1::Turn {
    turn(
        id,
        turn::Kind::Invoke(v1::Invoke {
            method: "slow".into(),
            payload: Bytes::new(),
        }),
        not_after_unix_ms,
    )
}

fn activate(wall: &TestWall) -> v1::Turn {
    turn(
        1,
        turn::Kind::Activate(v1::Activate {}),
        wall.ms_from_now(Duration::from_secs(10)),
    )
}

fn error_kind(r: &v1::TurnResult) -> (ErrorKind, String) {
    match &r.outcome {
        Some(turn_result::Outcome::Error(e)) => (ErrorKind::from_proto(e.kind), e.message.clone()),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_turn_received_past_its_not_after_is_refused_and_never_runs() {
    let (wall, probe, d) = fixture();
    assert!(matches!(
        d.handle(activate(&wall)).await.outcome,
        Some(turn_result::Outcome::Ok(_))
    ));
    // Sent 1 ms before the lease bound, read 2 s later (the sidecar was stopped meanwhile).
    let stale = slow(2, wall.ms_from_now(Duration::from_millis(1)));
    *wall.jump.lock().unwrap() += Duration::from_secs(2);
    let r = d.handle(stale).await;
    let (kind, message) = error_kind(&r);
    assert_eq!(kind, ErrorKind::Unreachable, "{message}");
    assert!(message.contains("never ran"), "{message}");
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        0,
        "no handler code ran"
    );
    // Exactly at the not-after counts as past.
    let r = d.handle(slow(3, wall.ms_from_now(Duration::ZERO))).await;
    assert_eq!(error_kind(&r).0, ErrorKind::Unreachable);
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_handler_still_running_at_its_not_after_is_cancelled_never_ok() {
    let (wall, probe, d) = fixture();
    d.handle(activate(&wall)).await;
    let started = Instant::now();
    // The handler needs 5 s; the lease allows 1.5 s.
    let r = d
        .handle(slow(2, wall.ms_from_now(Duration::from_millis(1_500))))
        .await;
    let (kind, message) = error_kind(&r);
    assert_eq!(kind, ErrorKind::Timeout, "{message}");
    assert!(message.contains("not-after"), "{message}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1_500) && took < Duration::from_millis(1_700),
        "cancelled at the not-after, after {took:?}"
    );
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    // Cancelled means stopped: the rest of the handler never runs.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_suspend_that_jumps_the_wall_clock_cancels_at_once() {
    let (wall, probe, d) = fixture();
    d.handle(activate(&wall)).await;
    let running = {
        let d = d.clone();
        let t = slow(2, wall.ms_from_now(Duration::from_secs(3)));
        tokio::spawn(async move { d.handle(t).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A VM suspend: the wall clock jumps 10 s while tokio's clock moved on by nothing.
    *wall.jump.lock().unwrap() += Duration::from_secs(10);
    let r = tokio::time::timeout(Duration::from_millis(200), running)
        .await
        .expect("noticed within one poll of the wall clock")
        .unwrap();
    assert_eq!(error_kind(&r).0, ErrorKind::Timeout);
    assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fence_notice_cancels_running_turns_and_drops_every_activation() {
    let (wall, probe, d) = fixture();
    d.handle(activate(&wall)).await;
    assert_eq!(d.live_activations(), 1);
    let running = {
        let d = d.clone();
        let t = slow(2, wall.ms_from_now(Duration::from_secs(10)));
        tokio::spawn(async move { d.handle(t).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    assert_eq!(d.fence(), 1, "one activation dropped");
    assert_eq!(d.live_activations(), 0);
    let r = tokio::time::timeout(Duration::from_millis(10), running)
        .await
        .expect("cancelled at once")
        .unwrap();
    let (kind, message) = error_kind(&r);
    assert_eq!(kind, ErrorKind::Timeout);
    assert!(message.contains("fenced"), "{message}");
    assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn without_a_not_after_an_old_sidecars_turn_runs_to_the_end() {
    let (wall, probe, d) = fixture();
    d.handle(activate(&wall)).await;
    let r = d.handle(slow(2, 0)).await;
    assert!(matches!(r.outcome, Some(turn_result::Outcome::Ok(_))));
    assert_eq!(probe.finished.load(Ordering::SeqCst), 1);
}

/// A boot clock that moves with (paused) tokio time plus a suspend the test adds; the wall
/// clock of [`TestWall`] gets the same suspend and a step back on top.
fn boot_clock(wall: &TestWall, suspended: Arc<std::sync::Mutex<Duration>>) -> sigx_sdk::BootClock {
    let origin = wall.origin;
    Arc::new(move || {
        Some(Duration::from_secs(1_000) + (Instant::now() - origin) + *suspended.lock().unwrap())
    })
}

fn boot_ms_from_now(boot: &sigx_sdk::BootClock, d: Duration) -> u64 {
    (boot().unwrap() + d).as_millis() as u64
}

/// Regression (issue 12, simulator schedule `S_wall_step_back_inside_a_suspend`): a turn queued
/// before a VM suspend, read at the resume after NTP stepped the wall clock back. By the wall
/// clock it is still in time; by the boot clock it is 3 s past its not-after, and peers may
/// hold the actor. It is refused and never runs.
#[tokio::test(start_paused = true)]
async fn a_turn_past_its_boot_not_after_is_refused_though_the_wall_clock_was_stepped_back() {
    let wall = TestWall::new();
    let suspended = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let boot = boot_clock(&wall, suspended.clone());
    let probe = Arc::new(Probe {
        started: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
    });
    let d = app(probe.clone())
        .into_dispatcher(Client::lazy("/nonexistent/sigx-sdk-test.sock"))
        .with_wall_clock(wall.clock())
        .with_boot_clock(boot.clone());
    d.handle(activate(&wall)).await;
    let mut queued = slow(2, wall.ms_from_now(Duration::from_secs(1)));
    queued.not_after_boot_ms = boot_ms_from_now(&boot, Duration::from_secs(1));
    // A 4 s suspend, and the wall clock stepped back 30 s at the resume.
    *suspended.lock().unwrap() += Duration::from_secs(4);
    {
        let mut jump = wall.jump.lock().unwrap();
        *jump += Duration::from_secs(4);
        *jump = jump.saturating_sub(Duration::from_secs(30));
    }
    let r = d.handle(queued.clone()).await;
    let (kind, message) = error_kind(&r);
    assert_eq!(kind, ErrorKind::Unreachable, "{message}");
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        0,
        "no handler code ran"
    );

    // The same turn on a platform without a boot clock: only the wall clock judges, and it
    // was fooled. This is what the boot clock is for.
    let bootless = app(probe.clone())
        .into_dispatcher(Client::lazy("/nonexistent/sigx-sdk-test.sock"))
        .with_wall_clock(wall.clock())
        .with_boot_clock(Arc::new(|| None));
    bootless.handle(activate(&wall)).await;
    let running = tokio::spawn(async move { bootless.handle(queued).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        1,
        "the wall clock let it run"
    );
    running.abort();
}

/// A handler still running when the boot clock passes its not-after is cancelled, whatever the
/// wall clock says.
#[tokio::test(start_paused = true)]
async fn a_running_handler_is_cancelled_at_its_boot_not_after() {
    let wall = TestWall::new();
    let boot = boot_clock(&wall, Arc::default());
    let probe = Arc::new(Probe {
        started: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
    });
    let d = Arc::new(
        app(probe.clone())
            .into_dispatcher(Client::lazy("/nonexistent/sigx-sdk-test.sock"))
            .with_wall_clock(wall.clock())
            .with_boot_clock(boot.clone()),
    );
    d.handle(activate(&wall)).await;
    // The wall bound is far; the boot bound is 1 s away.
    let mut t = slow(2, wall.ms_from_now(Duration::from_secs(60)));
    t.not_after_boot_ms = boot_ms_from_now(&boot, Duration::from_secs(1));
    let started = Instant::now();
    let r = d.handle(t).await;
    assert_eq!(error_kind(&r).0, ErrorKind::Timeout);
    assert!(Instant::now() - started <= Duration::from_millis(1_100));
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
}
