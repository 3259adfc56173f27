//! Turns bounded by the lease (DESIGN.md §8): every stateful turn's not-after, the check made at
//! the moment a turn is handed to the app, what its answer may become once the lease lapsed, the
//! fence notice, and the wait a fenced host makes before it withdraws its record.

use super::{Runtime, TurnOutcome};
use sigx_proto::ActorError;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A turn's not-after on the two clocks the app can judge it by (app.proto,
/// `Turn.not_after_unix_ms` and `Turn.not_after_boot_ms`): the same instant on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAfter {
    /// Unix milliseconds on the pod's wall clock.
    pub unix_ms: i64,
    /// Milliseconds on the machine's boot clock; 0 where it has none.
    pub boot_ms: u64,
}

impl Runtime {
    /// Checks the lease synchronously, at the moment a stateful turn is handed to the app, and
    /// returns the turn's not-after (Unix ms, wall clock): the earlier of `deadline` and the
    /// lease's validity minus the drift margin. A lease that ends before the turn could start
    /// answers `fenced` without sending anything (the turn never ran).
    pub(crate) fn lease_not_after(&self, deadline: Instant) -> Result<NotAfter, ActorError> {
        let lease = self.inner.gate.serving_until()?;
        // The caller's deadline, not the lease, is what ran out: say so (the turn never ran).
        if deadline <= Instant::now() {
            return Err(ActorError::timeout(format!(
                "the call's deadline passed on host {} before its turn was handed to the app:                  the turn never ran",
                self.inner.cfg.host_id
            )));
        }
        let not_after = self.not_after(deadline, lease);
        if lease.is_some() && not_after.unix_ms <= self.inner.cfg.clock.wall_unix_ms() {
            return Err(ActorError::fenced(format!(
                "host {}'s lease ends within its drift margin: the turn was not handed to the \
                 app and never ran; the host fences unless its next lease write lands",
                self.inner.cfg.host_id
            )));
        }
        Ok(not_after)
    }

    /// The not-after of a turn handed out now: `deadline` (a monotonic instant) carried over to
    /// the wall clock, capped by `lease` (a wall-clock instant), and the time left until then
    /// carried over to the boot clock. Rounded down to the millisecond: earlier is always safe.
    pub fn not_after(&self, deadline: Instant, lease: Option<SystemTime>) -> NotAfter {
        let clock = &self.inner.cfg.clock;
        let wall = clock.wall();
        let boot = clock.boot();
        let by_deadline = wall + deadline.saturating_duration_since(Instant::now());
        let bound = lease.map_or(by_deadline, |l| l.min(by_deadline));
        let left = bound.duration_since(wall).unwrap_or(Duration::ZERO);
        NotAfter {
            unix_ms: bound
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            boot_ms: boot.map_or(0, |b| (b + left).as_millis() as u64),
        }
    }

    /// What a stateful turn's answer becomes for its caller: never success once the lease has
    /// lapsed (outcome unknown: the app may have run it) — the answer may come from an activation another host already holds — and never
    /// success for a turn the app refused or cancelled at its not-after.
    pub(crate) fn settle(&self, outcome: TurnOutcome) -> TurnOutcome {
        if let Err(fenced) = self.inner.gate.check_serving() {
            self.inner
                .counters
                .turns_past_not_after
                .fetch_add(1, Ordering::Relaxed);
            // Not `fenced`: that kind promises the call never ran, and this turn was handed to
            // the app, which may have run it (found by e2e/tests/single_activation.rs: callers
            // told `fenced` for increments the app had applied).
            return Err(ActorError::outcome_unknown(format!(
                "{}; the turn was handed to the app but its answer came back after the lease \
                 lapsed and is not reported (it may have run on state another host now holds): \
                 outcome unknown, not retried",
                fenced.message
            )));
        }
        if let Err(e) = &outcome
            && e.kind == sigx_proto::ErrorKind::Timeout
        {
            self.inner
                .counters
                .turns_past_not_after
                .fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    /// The host fenced: tells the app (`FenceNotice`: it drops every activation and cancels its
    /// turns) and drops every activation here.
    pub fn fence(&self, reason: &str) {
        if let Some(app) = self.app() {
            app.notify_fenced(reason);
        }
        self.drop_all();
    }

    /// Resolves once no turn handed to the app can still be running in a compliant app: each
    /// was answered or is past its not-after (on the wall clock, polled, so a suspend that
    /// jumps it is noticed). A fenced host withdraws its record only after this (DESIGN.md §8).
    pub async fn turns_settled(&self) {
        let clock = self.inner.cfg.clock.clone();
        loop {
            let now = clock.wall_unix_ms();
            let Some(latest) = self.inner.outstanding.latest_running(now) else {
                return;
            };
            let wait = Duration::from_millis((latest - now).clamp(1, 50) as u64);
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::registry::{ActorType, Registry};
    use super::super::{ActivationGate, ActorId, RuntimeConfig};
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use async_trait::async_trait;
    use bytes::Bytes;
    use sigx_proto::{ErrorKind, v1};
    use std::collections::{BTreeMap, HashSet};
    use std::sync::{Arc, Mutex};
    use tokio::sync::mpsc;

    /// A gate whose lease bound and fencing the test sets.
    #[derive(Default)]
    struct TestLease {
        until: Mutex<Option<SystemTime>>,
        fenced: Mutex<bool>,
    }

    #[async_trait]
    impl ActivationGate for TestLease {
        fn check_serving(&self) -> Result<(), ActorError> {
            if *self.fenced.lock().unwrap() {
                Err(ActorError::fenced("this host is fenced: test"))
            } else {
                Ok(())
            }
        }
        fn serving_until(&self) -> Result<Option<SystemTime>, ActorError> {
            self.check_serving()?;
            Ok(*self.until.lock().unwrap())
        }
        async fn claim(&self, _: &ActorId, _: &str, _: Instant) -> Result<(), ActorError> {
            Ok(())
        }
        async fn release(&self, _: &ActorId, _: &str) {}
    }

    type Rx = mpsc::UnboundedReceiver<Result<v1::SidecarMessage, tonic::Status>>;

    struct Fixture {
        clock: ManualClock,
        lease: Arc<TestLease>,
        rt: Runtime,
        app: Arc<super::super::AppSession>,
        rx: Rx,
    }

    fn fixture() -> Fixture {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let lease = Arc::new(TestLease::default());
        let rt = Runtime::new(
            RuntimeConfig {
                clock: Arc::new(clock.clone()),
                ..RuntimeConfig::default()
            },
            lease.clone(),
        );
        let registry = Registry {
            app_name: "lease-test".into(),
            actors: BTreeMap::from([(
                "Counter".to_string(),
                ActorType {
                    name: "Counter".into(),
                    reentrant: false,
                    idle_timeout: Duration::from_secs(300),
                    methods: HashSet::new(),
                },
            )]),
            workers: BTreeMap::new(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let app = rt.attach(registry, tx).unwrap();
        Fixture {
            clock,
            lease,
            rt,
            app,
            rx,
        }
    }

    fn ms(t: SystemTime) -> i64 {
        t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
    }

    async fn next_turn(rx: &mut Rx) -> v1::Turn {
        match rx.recv().await {
            Some(Ok(v1::SidecarMessage {
                msg: Some(v1::sidecar_message::Msg::Turn(t)),
            })) => t,
            other => panic!("expected a turn, got {other:?}"),
        }
    }

    fn answer(app: &super::super::AppSession, turn: &v1::Turn) {
        app.complete(v1::TurnResult {
            turn_id: turn.turn_id,
            outcome: Some(v1::turn_result::Outcome::Ok(Bytes::from_static(b"ok"))),
            writes: Vec::new(),
        });
    }

    fn invoke(f: &Fixture, deadline: Instant) -> tokio::task::JoinHandle<TurnOutcome> {
        invoke_on(f, "a", deadline)
    }

    fn invoke_on(
        f: &Fixture,
        key: &str,
        deadline: Instant,
    ) -> tokio::task::JoinHandle<TurnOutcome> {
        let rt = f.rt.clone();
        let actor = ActorId::new("Counter", key);
        tokio::spawn(async move { rt.invoke(&actor, "add", Bytes::new(), deadline).await })
    }

    /// The boot-clock not-after is the same instant as the wall one: the time left carried over
    /// to the boot clock at hand-off. Zero where the clock has no boot clock.
    #[tokio::test(start_paused = true)]
    async fn the_boot_not_after_is_the_wall_one_carried_to_the_boot_clock() {
        let f = fixture();
        let lease_end = f.clock.wall() + Duration::from_secs(3);
        let bootless =
            f.rt.not_after(Instant::now() + Duration::from_secs(10), Some(lease_end));
        assert_eq!(bootless.unix_ms, ms(lease_end));
        assert_eq!(bootless.boot_ms, 0, "no boot clock: not set");

        let clock =
            ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000)).with_boot_clock();
        clock.suspend(Duration::from_secs(7)); // the boot clock is not the wall clock
        let rt = Runtime::new(
            RuntimeConfig {
                clock: Arc::new(clock.clone()),
                ..RuntimeConfig::default()
            },
            f.lease.clone(),
        );
        let boot_now = clock.boot().unwrap();
        let lease_end = clock.wall() + Duration::from_secs(3);
        let by_lease = rt.not_after(Instant::now() + Duration::from_secs(10), Some(lease_end));
        assert_eq!(by_lease.unix_ms, ms(lease_end));
        assert_eq!(
            by_lease.boot_ms,
            (boot_now + Duration::from_secs(3)).as_millis() as u64
        );
        let by_deadline = rt.not_after(
            Instant::now() + Duration::from_millis(1_500),
            Some(lease_end),
        );
        assert_eq!(
            by_deadline.boot_ms,
            (boot_now + Duration::from_millis(1_500)).as_millis() as u64
        );
    }

    #[tokio::test(start_paused = true)]
    async fn not_after_is_the_earlier_of_the_deadline_and_the_lease() {
        let mut f = fixture();
        // The lease ends first: 3 s from now on the wall clock; the call has 10 s.
        let lease_end = f.clock.wall() + Duration::from_secs(3);
        *f.lease.until.lock().unwrap() = Some(lease_end);
        let call = invoke(&f, Instant::now() + Duration::from_secs(10));
        let activate = next_turn(&mut f.rx).await;
        assert!(matches!(activate.kind, Some(v1::turn::Kind::Activate(_))));
        assert_eq!(activate.not_after_unix_ms, ms(lease_end), "Activate too");
        answer(&f.app, &activate);
        let turn = next_turn(&mut f.rx).await;
        assert_eq!(turn.not_after_unix_ms, ms(lease_end));
        assert_eq!(
            turn.timeout_ms, 10_000,
            "timeout_ms still carries the deadline"
        );
        answer(&f.app, &turn);
        assert_eq!(call.await.unwrap().unwrap(), Bytes::from_static(b"ok"));

        // The deadline ends first: the lease was renewed far ahead; time moved on.
        f.clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(250)).await;
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() + Duration::from_secs(60));
        let call = invoke(&f, Instant::now() + Duration::from_millis(2_500));
        let turn = next_turn(&mut f.rx).await;
        assert_eq!(turn.not_after_unix_ms, ms(f.clock.wall()) + 2_500);
        answer(&f.app, &turn);
        call.await.unwrap().unwrap();

        // No lease bound (a single host): the deadline alone.
        *f.lease.until.lock().unwrap() = None;
        let call = invoke(&f, Instant::now() + Duration::from_secs(7));
        let turn = next_turn(&mut f.rx).await;
        assert_eq!(turn.not_after_unix_ms, ms(f.clock.wall()) + 7_000);
        answer(&f.app, &turn);
        call.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_already_past_its_margin_sends_nothing_and_answers_fenced() {
        let mut f = fixture();
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() + Duration::from_secs(30));
        let call = invoke(&f, Instant::now() + Duration::from_secs(10));
        let activate = next_turn(&mut f.rx).await;
        answer(&f.app, &activate);
        answer(&f.app, &next_turn(&mut f.rx).await);
        call.await.unwrap().unwrap();
        // Still valid (no fence yet), but validity minus the margin is behind the wall clock.
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() - Duration::from_millis(1));
        let err = invoke(&f, Instant::now() + Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Fenced, "{err}");
        assert!(err.message.contains("never ran"), "{err}");
        assert!(f.rx.try_recv().is_err(), "no turn was handed to the app");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_past_at_hand_off_sends_nothing_and_answers_timeout_not_fenced() {
        let mut f = fixture();
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() + Duration::from_secs(30));
        let call = invoke(&f, Instant::now() + Duration::from_secs(10));
        answer(&f.app, &next_turn(&mut f.rx).await);
        answer(&f.app, &next_turn(&mut f.rx).await);
        call.await.unwrap().unwrap();
        // The lease is fine; the caller's deadline is what ran out.
        let err = invoke(&f, Instant::now()).await.unwrap().unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
        assert!(err.message.contains("never ran"), "{err}");
        assert!(f.rx.try_recv().is_err(), "no turn was handed to the app");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_comes_back_after_the_lease_lapsed_is_outcome_unknown_never_ok() {
        let mut f = fixture();
        let call = invoke(&f, Instant::now() + Duration::from_secs(10));
        answer(&f.app, &next_turn(&mut f.rx).await);
        let turn = next_turn(&mut f.rx).await;
        // The lease lapses while the app runs the turn; its `ok` arrives afterwards.
        *f.lease.fenced.lock().unwrap() = true;
        answer(&f.app, &turn);
        let err = call.await.unwrap().unwrap_err();
        // The app may have run it: never `fenced`, which says the call never ran.
        assert_eq!(err.kind, ErrorKind::OutcomeUnknown, "{err}");
        assert_eq!(f.rt.counters().snapshot()["turnsPastNotAfter"], 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_apps_not_after_answers_are_never_success() {
        let mut f = fixture();
        for (i, (kind, says)) in [
            (ErrorKind::Unreachable, "never ran"),
            (ErrorKind::Timeout, "may have run in part"),
        ]
        .into_iter()
        .enumerate()
        {
            let call = invoke(&f, Instant::now() + Duration::from_secs(10));
            if i == 0 {
                answer(&f.app, &next_turn(&mut f.rx).await);
            }
            let turn = next_turn(&mut f.rx).await;
            f.app.complete(v1::TurnResult {
                turn_id: turn.turn_id,
                outcome: Some(v1::turn_result::Outcome::Error(v1::TurnError {
                    kind: kind.to_proto() as i32,
                    message: "past not-after".into(),
                })),
                writes: Vec::new(),
            });
            let err = call.await.unwrap().unwrap_err();
            // TIMEOUT: never success, and never an answer the routing loop would retry.
            assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
            assert!(err.message.contains(says), "{err}");
        }
        assert_eq!(f.rt.counters().snapshot()["turnsPastNotAfter"], 2);
    }

    #[tokio::test(start_paused = true)]
    async fn turns_settled_waits_for_each_answer_or_its_not_after() {
        let mut f = fixture();
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() + Duration::from_secs(2));
        let _call = invoke(&f, Instant::now() + Duration::from_secs(30));
        let activate = next_turn(&mut f.rx).await;
        answer(&f.app, &activate);
        let turn = next_turn(&mut f.rx).await;
        // Handed out and not answered: the app may run it until its not-after, 2 s from now.
        let started = Instant::now();
        f.rt.turns_settled().await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2_100),
            "waited {waited:?}"
        );
        drop(turn);

        // Answered turns do not hold it up at all.
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() + Duration::from_secs(20));
        let _call = invoke_on(&f, "b", Instant::now() + Duration::from_secs(30));
        let activate = next_turn(&mut f.rx).await;
        answer(&f.app, &activate);
        let turn = next_turn(&mut f.rx).await;
        let settled = {
            let rt = f.rt.clone();
            tokio::spawn(async move { rt.turns_settled().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!settled.is_finished(), "a turn is running");
        answer(&f.app, &turn);
        tokio::time::timeout(Duration::from_millis(100), settled)
            .await
            .expect("settled once the turn answered")
            .unwrap();
    }

    /// A timer tick is a turn like a call's: its not-after is the earlier of the host's call
    /// timeout and the lease, it carries the activation's id and epoch, and a fenced host sends
    /// no tick at all.
    #[tokio::test(start_paused = true)]
    async fn a_timer_tick_is_bounded_by_the_call_timeout_and_the_lease_and_a_fenced_host_sends_none()
     {
        let mut f = fixture();
        let lease_end = f.clock.wall() + Duration::from_secs(5);
        *f.lease.until.lock().unwrap() = Some(lease_end);
        let call = invoke(&f, Instant::now() + Duration::from_secs(10));
        let activate = next_turn(&mut f.rx).await;
        answer(&f.app, &activate);
        let turn = next_turn(&mut f.rx).await;
        answer(&f.app, &turn);
        call.await.unwrap().unwrap();

        let actor = ActorId::new("Counter", "a");
        let spec = crate::runtime::TimerSpec {
            name: "t".into(),
            due: Duration::from_secs(1),
            period: Some(Duration::from_secs(1)),
            payload: Bytes::from_static(b"p"),
        };
        assert!(!f.rt.set_timer(&actor, &turn.activation_id, spec).unwrap());
        // The lease ends before the call timeout (30 s by default): it bounds the tick.
        let tick = next_turn(&mut f.rx).await;
        let Some(v1::turn::Kind::Timer(t)) = &tick.kind else {
            panic!("expected a timer tick, got {tick:?}");
        };
        assert_eq!(
            (t.name.as_str(), &t.payload[..], t.period_ms),
            ("t", &b"p"[..], 1_000)
        );
        assert_eq!(tick.not_after_unix_ms, ms(lease_end));
        assert_eq!(tick.timeout_ms, 30_000);
        assert_eq!(
            (tick.activation_id.as_str(), tick.epoch),
            (turn.activation_id.as_str(), turn.epoch)
        );
        answer(&f.app, &tick);
        // The lease renewed far ahead: the call timeout bounds it.
        *f.lease.until.lock().unwrap() = Some(f.clock.wall() + Duration::from_secs(600));
        let tick = next_turn(&mut f.rx).await;
        assert_eq!(tick.not_after_unix_ms, ms(f.clock.wall()) + 30_000);
        answer(&f.app, &tick);
        let ticks = f.rt.counters().snapshot()["timerTicks"];
        assert_eq!(ticks, 2);

        // Fenced: the fence notice, and no tick after it.
        *f.lease.fenced.lock().unwrap() = true;
        f.rt.fence("test");
        tokio::time::sleep(Duration::from_secs(10)).await;
        let mut sent = Vec::new();
        while let Ok(m) = f.rx.try_recv() {
            sent.push(m.unwrap().msg);
        }
        assert!(
            matches!(&sent[..], [Some(v1::sidecar_message::Msg::Fenced(_))]),
            "{sent:?}"
        );
        assert_eq!(f.rt.counters().snapshot()["timerTicks"], ticks);
    }
}
