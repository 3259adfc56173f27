//! Timers end to end on one host over its real Unix socket (app.proto `SetTimer`, `CancelTimer`,
//! `TimerTick`): ticks are turns of their activation, in its turn order, and timers end with it.
//!
//! Absence ("no more ticks") is judged against a second, periodic timer on another actor used as
//! a clock: the test waits for that one's ticks, never for a fixed sleep.

mod support;

use bytes::Bytes;
use sigx_proto::v1::actor_host_client::ActorHostClient;
use sigx_proto::{ActorError, ErrorKind, v1};
use std::collections::HashMap;
use std::time::Duration;
use support::*;
use tokio::time::Instant;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(10);

fn register(idle_ms: u64) -> v1::Register {
    v1::Register {
        actors: vec![
            actor_spec("Ticker", false, idle_ms),
            actor_spec("Clock", false, 0),
        ],
        workers: vec![],
        app_name: "timers-test".into(),
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    host: Option<sigx_sidecar::host::Host>,
    app: TestApp,
    c: ActorHostClient<Channel>,
}

async fn fixture(idle_ms: u64, behaviour: &[(&str, Behaviour)]) -> Fixture {
    fixture_with(idle_ms, behaviour, &[]).await
}

async fn fixture_with(idle_ms: u64, behaviour: &[(&str, Behaviour)], extra: &[&str]) -> Fixture {
    let dir = tempdir();
    let host = start_host(dir.path(), extra).await;
    let behaviour: HashMap<String, Behaviour> = behaviour
        .iter()
        .map(|(m, b)| (m.to_string(), b.clone()))
        .collect();
    let app = TestApp::start(&host.socket, register(idle_ms), behaviour)
        .await
        .unwrap();
    let c = client(&host.socket).await;
    Fixture {
        _dir: dir,
        host: Some(host),
        app,
        c,
    }
}

fn actor(ty: &str, key: &str) -> Option<v1::ActorRef> {
    Some(v1::ActorRef {
        actor_type: ty.into(),
        key: key.into(),
    })
}

impl Fixture {
    /// Activates `ty/key` with a call and returns its activation id.
    async fn activate(&mut self, ty: &str, key: &str) -> String {
        call(&mut self.c, ty, key, "init", b"", 5_000)
            .await
            .unwrap();
        let who = format!("{ty}/{key}");
        self.app
            .events()
            .iter()
            .rev()
            .find(|e| e.actor == who && e.what == "init")
            .expect("the init turn ran")
            .activation_id
            .clone()
    }

    #[allow(clippy::too_many_arguments)]
    async fn set(
        &mut self,
        ty: &str,
        key: &str,
        activation_id: &str,
        name: &str,
        due_ms: u64,
        period_ms: u64,
        payload: &[u8],
    ) -> Result<bool, ActorError> {
        self.c
            .set_timer(v1::SetTimerRequest {
                actor: actor(ty, key),
                activation_id: activation_id.into(),
                name: name.into(),
                due_ms,
                period_ms,
                payload: Bytes::copy_from_slice(payload),
            })
            .await
            .map(|r| r.into_inner().replaced)
            .map_err(|s| ActorError::from_status(&s))
    }

    async fn cancel(&mut self, key: &str, activation_id: &str, name: &str) -> bool {
        self.c
            .cancel_timer(v1::CancelTimerRequest {
                actor: actor("Ticker", key),
                activation_id: activation_id.into(),
                name: name.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .existed
    }

    /// Tick events of timer `name` (of any activation of any actor).
    fn ticks(&self, name: &str) -> Vec<Event> {
        let what = format!("timer:{name}");
        self.app
            .events()
            .into_iter()
            .filter(|e| e.what == what)
            .collect()
    }

    /// Waits until timer `name` has ticked `n` times.
    async fn wait_ticks(&self, name: &str, n: usize) {
        let until = Instant::now() + WAIT;
        while self.ticks(name).len() < n {
            assert!(
                Instant::now() < until,
                "timer {name} ticked {} times within {WAIT:?}, expected {n}",
                self.ticks(name).len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Lets `n` more ticks of a 20 ms clock timer on Clock/c pass (the clock is started on
    /// first use): time enough for anything due to have shown up.
    async fn let_time_pass(&mut self, n: usize) {
        let seen = self.ticks("clock").len();
        if !self.app.events().iter().any(|e| e.actor == "Clock/c") {
            let act = self.activate("Clock", "c").await;
            self.set("Clock", "c", &act, "clock", 20, 20, b"")
                .await
                .unwrap();
        }
        self.wait_ticks("clock", seen + n).await;
    }

    async fn counter(&mut self, name: &str) -> u64 {
        let status = self.c.status(v1::StatusRequest {}).await.unwrap();
        status.into_inner().counters[name]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_timer_ticks_once_with_its_payload_as_a_turn_of_its_activation() {
    let mut f = fixture(0, &[]).await;
    let act = f.activate("Ticker", "a").await;
    assert!(
        !f.set("Ticker", "a", &act, "once", 30, 0, b"p1")
            .await
            .unwrap()
    );
    f.wait_ticks("once", 1).await;
    f.let_time_pass(10).await;
    let ticks = f.ticks("once");
    assert_eq!(ticks.len(), 1, "a one-shot timer ticks once: {ticks:?}");
    assert_eq!(ticks[0].payload, Bytes::from_static(b"p1"));
    assert_eq!(ticks[0].actor, "Ticker/a");
    assert_eq!(ticks[0].activation_id, act);
    // Fired, it is gone: cancelling it finds nothing.
    assert!(!f.cancel("a", &act, "once").await);
    assert_eq!(f.counter("timersSet").await, 2, "once and the clock");
    assert!(f.counter("timerTicks").await >= 11);
    assert_eq!(f.counter("timerFailures").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_ticks_never_overlap_a_long_call_and_skip_rather_than_pile_up() {
    let mut f = fixture(
        0,
        &[("slow", Behaviour::SleepEcho(Duration::from_millis(400)))],
    )
    .await;
    let act = f.activate("Ticker", "a").await;
    f.set("Ticker", "a", &act, "beat", 0, 20, b"b")
        .await
        .unwrap();
    f.wait_ticks("beat", 3).await;
    call(&mut f.c, "Ticker", "a", "slow", b"", 5_000)
        .await
        .unwrap();
    let after = f.ticks("beat").len();
    f.wait_ticks("beat", after + 5).await;

    let events = f.app.events();
    let slow = events.iter().find(|e| e.what == "slow").unwrap();
    let ticks = f.ticks("beat");
    for t in &ticks {
        assert!(
            t.end <= slow.start || t.start >= slow.end,
            "a tick ran during the call: tick {:?}..{:?}, call {:?}..{:?}",
            t.start,
            t.end,
            slow.start,
            slow.end
        );
        assert_eq!(t.payload, Bytes::from_static(b"b"));
    }
    // About 20 ticks fell due during the 400 ms call: they are skipped, not delivered in a
    // burst once it ends (at most the one queued behind the call, then the next on time).
    let burst = ticks
        .iter()
        .filter(|t| t.start >= slow.end && t.start < slow.end + Duration::from_millis(15))
        .count();
    assert!(
        burst <= 2,
        "{burst} ticks within 15 ms of the call's end: piled up"
    );
    let skipped = f.counter("timerTicksSkipped").await;
    assert!(skipped >= 10, "only {skipped} ticks counted as skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_periodic_timer_and_reports_whether_it_existed() {
    let mut f = fixture(0, &[]).await;
    let act = f.activate("Ticker", "a").await;
    f.set("Ticker", "a", &act, "beat", 0, 20, b"")
        .await
        .unwrap();
    f.wait_ticks("beat", 3).await;
    assert!(f.cancel("a", &act, "beat").await, "the timer existed");
    let cancelled_at = Instant::now();
    f.let_time_pass(10).await;
    let late: Vec<Event> = f
        .ticks("beat")
        .into_iter()
        .filter(|t| t.start > cancelled_at)
        .collect();
    assert!(late.is_empty(), "ticks after the cancel: {late:?}");
    assert!(!f.cancel("a", &act, "beat").await, "cancelled already");
    assert!(!f.cancel("a", &act, "never-set").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setting_a_name_again_replaces_the_timer() {
    let mut f = fixture(0, &[]).await;
    let act = f.activate("Ticker", "a").await;
    assert!(
        !f.set("Ticker", "a", &act, "t", 0, 20, b"old")
            .await
            .unwrap()
    );
    f.wait_ticks("t", 2).await;
    assert!(
        f.set("Ticker", "a", &act, "t", 30, 0, b"new")
            .await
            .unwrap(),
        "replaced"
    );
    let replaced_at = Instant::now();
    f.let_time_pass(10).await;
    let after: Vec<Event> = f
        .ticks("t")
        .into_iter()
        .filter(|t| t.start > replaced_at)
        .collect();
    assert_eq!(
        after.len(),
        1,
        "only the new one-shot timer ticks: {after:?}"
    );
    assert_eq!(after[0].payload, Bytes::from_static(b"new"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_do_not_keep_an_activation_alive_and_end_with_it_at_idle() {
    let mut f = fixture(300, &[]).await;
    let act = f.activate("Ticker", "a").await;
    f.set("Ticker", "a", &act, "beat", 0, 20, b"")
        .await
        .unwrap();
    // Ticks do not reset the idle timeout: the activation deactivates ~300 ms after its call.
    let until = Instant::now() + WAIT;
    let deactivated = loop {
        let events = f.app.events();
        if let Some(d) = events
            .iter()
            .find(|e| e.what == "deactivate" && e.activation_id == act)
        {
            break d.clone();
        }
        assert!(Instant::now() < until, "no idle deactivation while ticking");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let ticks = f.ticks("beat");
    assert!(ticks.len() >= 5, "it ticked while alive: {}", ticks.len());
    assert!(
        ticks.iter().all(|t| t.end <= deactivated.start),
        "a tick ran during or after the Deactivate turn"
    );
    // The ended activation takes no timers, and a new activation of the actor has none.
    let err = f
        .set("Ticker", "a", &act, "again", 0, 0, b"")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
    assert!(
        err.message.contains("no live activation") && err.message.contains(&act),
        "{err}"
    );
    let next = f.activate("Ticker", "a").await;
    assert_ne!(next, act);
    f.let_time_pass(10).await;
    assert!(
        f.ticks("beat").iter().all(|t| t.activation_id == act),
        "a new activation inherited a timer"
    );
    assert!(!f.cancel("a", &next, "beat").await, "the new one has none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tick_follows_the_deactivate_turn_of_a_stopping_host() {
    let mut f = fixture(
        0,
        &[("timer:beat", Behaviour::SleepEcho(Duration::from_millis(5)))],
    )
    .await;
    let act = f.activate("Ticker", "a").await;
    f.set("Ticker", "a", &act, "beat", 0, 10, b"")
        .await
        .unwrap();
    f.wait_ticks("beat", 3).await;
    f.host
        .take()
        .unwrap()
        .stop(sigx_sidecar::host::StopKind::Graceful)
        .await;
    let events = f.app.events();
    let deactivated = events
        .iter()
        .find(|e| e.what == "deactivate" && e.activation_id == act)
        .expect("the stop deactivated the activation");
    let ticks = f.ticks("beat");
    assert!(
        ticks.iter().all(|t| t.end <= deactivated.start),
        "a tick ran during or after the Deactivate turn: {ticks:?} vs {deactivated:?}"
    );
}

/// A graceful stop whose drain times out takes every activation out of the routing table while
/// their turns still run. Such a turn's activation is ending: its timers are cancelled, and a
/// timer it sets is accepted and never ticks. Regression: it was told `no live activation`
/// (invalid), so an `on_activate` setting its timers as a stop began failed its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_still_running_after_a_graceful_stop_drained_the_table_still_sets_timers() {
    let mut f = fixture_with(
        0,
        &[("slow", Behaviour::SleepEcho(Duration::from_millis(1500)))],
        &["--drain-timeout-ms", "300"],
    )
    .await;
    let act = f.activate("Ticker", "a").await;
    let hour = 3_600_000;
    f.set("Ticker", "a", &act, "keep", hour, 0, b"")
        .await
        .unwrap();
    let mut slow_client = f.c.clone();
    let _slow =
        tokio::spawn(
            async move { call(&mut slow_client, "Ticker", "a", "slow", b"s", 5_000).await },
        );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let host = f.host.take().unwrap();
    let stop = tokio::spawn(host.stop(sigx_sidecar::host::StopKind::Graceful));
    // Past the drain's timeout: the table is empty, the slow turn still runs.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        f.set("Ticker", "a", &act, "late", 0, 0, b"").await,
        Ok(false),
        "the running turn's activation still runs: its SetTimer is answered"
    );
    assert!(
        !f.cancel("a", &act, "keep").await,
        "the ending activation's timers were cancelled with its end"
    );
    let other = f.set("Ticker", "a", "h1.0.1.999", "t", 0, 0, b"").await;
    assert!(
        other.is_err_and(|e| e.message.contains("no live activation")),
        "an activation that is not running is still refused"
    );
    let _ = stop.await;
    assert!(
        f.ticks("late").is_empty(),
        "a timer set on an ending activation ticked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_timer_needs_a_live_activation_on_this_host_and_valid_limits() {
    let mut f = fixture(0, &[]).await;
    for (key, act) in [("never", "h1.0.1.999"), ("a", "")] {
        let err = f.set("Ticker", key, act, "t", 0, 0, b"").await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
        assert!(
            err.message.contains("no live activation")
                && err.message.contains(&format!("{act:?}"))
                && err.message.contains("from inside a turn"),
            "{err}"
        );
    }
    let act = f.activate("Ticker", "a").await;
    let err = f.set("Ticker", "a", &act, "", 0, 0, b"").await.unwrap_err();
    assert!(err.message.contains("timer name"), "{err}");
    let year = 400 * 24 * 3600 * 1000;
    let err = f
        .set("Ticker", "a", &act, "t", year, 0, b"")
        .await
        .unwrap_err();
    assert!(
        err.message.contains("due_ms") && err.message.contains("reminder"),
        "{err}"
    );
    let big = vec![0u8; 4 * 1024 * 1024 + 1];
    let err = f
        .set("Ticker", "a", &act, "t", 0, 0, &big)
        .await
        .unwrap_err();
    assert!(err.message.contains("payload"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_holds_at_most_1000_timers() {
    let mut f = fixture(0, &[]).await;
    let act = f.activate("Ticker", "a").await;
    let hour = 3_600_000;
    for i in 0..1000 {
        f.set("Ticker", "a", &act, &format!("t{i}"), hour, 0, b"")
            .await
            .unwrap();
    }
    let err = f
        .set("Ticker", "a", &act, "one-more", hour, 0, b"")
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
    assert!(
        err.message.contains("1000 timers") && err.message.contains("cancel one"),
        "{err}"
    );
    // At the bound a name can still be set again (a replace), and a cancel makes room.
    assert!(
        f.set("Ticker", "a", &act, "t7", hour, 0, b"")
            .await
            .unwrap()
    );
    assert!(f.cancel("a", &act, "t3").await);
    f.set("Ticker", "a", &act, "one-more", hour, 0, b"")
        .await
        .unwrap();
    // Other activations have bounds of their own.
    let other = f.activate("Ticker", "b").await;
    f.set("Ticker", "b", &other, "t0", hour, 0, b"")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tick_is_counted_not_retried_and_the_period_goes_on() {
    let mut f = fixture(0, &[("timer:bad", Behaviour::Fail("boom".into()))]).await;
    let act = f.activate("Ticker", "a").await;
    f.set("Ticker", "a", &act, "bad", 0, 20, b"").await.unwrap();
    f.wait_ticks("bad", 4).await;
    f.cancel("a", &act, "bad").await;
    let ticks = f.ticks("bad").len() as u64;
    let failures = f.counter("timerFailures").await;
    assert!(
        failures >= 4 && failures <= ticks,
        "{failures} failures for {ticks} failing ticks"
    );
    // Failed ticks were not retried: no more ticks than periods elapsed.
    let starts: Vec<Instant> = f.ticks("bad").iter().map(|t| t.start).collect();
    let span = *starts.last().unwrap() - starts[0];
    let periods = (span.as_millis() / 20) as usize;
    assert!(
        starts.len() <= periods + 2,
        "{} ticks in {span:?} of a 20 ms timer: retried",
        starts.len()
    );
}

/// A timer whose ticks run longer than its period keeps the activation busy nearly all the
/// time; it still deactivates promptly at its idle timeout, because no tick starts once the
/// activation is idle-due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_timer_does_not_postpone_the_idle_deactivation() {
    let mut f = fixture(
        300,
        &[(
            "timer:busy",
            Behaviour::SleepEcho(Duration::from_millis(100)),
        )],
    )
    .await;
    let act = f.activate("Ticker", "a").await;
    let called = Instant::now();
    f.set("Ticker", "a", &act, "busy", 0, 5, b"").await.unwrap();
    let until = Instant::now() + WAIT;
    let deactivated = loop {
        if let Some(d) = f
            .app
            .events()
            .into_iter()
            .find(|e| e.what == "deactivate" && e.activation_id == act)
        {
            break d;
        }
        assert!(Instant::now() < until, "no idle deactivation");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let after = deactivated.start - called;
    assert!(
        after < Duration::from_millis(1_000),
        "deactivated {after:?} after the last call, with an idle timeout of 300 ms"
    );
    assert!(f.ticks("busy").len() >= 2);
}
