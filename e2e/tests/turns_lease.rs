//! Turns are bounded by the lease (issue 12, hole C), with the real binaries: a sidecar stopped
//! with SIGSTOP while its app keeps running a long turn. The app (the Rust SDK) cancels the turn
//! at its not-after, which is before any peer can expire the stalled host, so the peer's
//! activation of the same actor starts only after the old turn stopped running app code; on
//! SIGCONT the fenced sidecar hands its app no stale turn and reports no `ok`.

use sigx_e2e::chaos::{Fleet, FleetConfig, client};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// The counter app's trace events (CLOCK_MONOTONIC stamps: one clock for every process here).
#[derive(Debug, Clone)]
struct Ev {
    t_ns: u64,
    event: String,
    actor: String,
    activation: String,
    host: String,
}

fn events(fleet: &Fleet) -> Vec<Ev> {
    let text = std::fs::read_to_string(fleet.trace_file()).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| Ev {
            t_ns: v["t_ns"].as_u64().unwrap_or(0),
            event: v["event"].as_str().unwrap_or("").to_string(),
            actor: v["actor"].as_str().unwrap_or("").to_string(),
            activation: v["activation"].as_str().unwrap_or("").to_string(),
            host: v["host"].as_str().unwrap_or("").to_string(),
        })
        .collect()
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

const TURN: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_turn_is_cancelled_at_its_not_after_before_a_peer_activates_the_actor() {
    // The proportions: beat 200 ms, TTL 1 s, and every Counter turn takes 3 s — three
    // times the TTL, far longer than the drift margin.
    let mut fleet = Fleet::start(FleetConfig {
        hosts: 2,
        beat_ms: 200,
        ttl_ms: 1_000,
        turn_delay_ms: TURN.as_millis() as u64,
        call_timeout_ms: 10_000,
        ..FleetConfig::default()
    })
    .await;
    let (peer, victim) = (0, 1);
    let victim_id = fleet.pods[victim].id.clone();
    let cv = client(&fleet.pods[victim].socket).with_timeout(Duration::from_secs(10));
    let cp = client(&fleet.pods[peer].socket).with_timeout(Duration::from_secs(10));

    // Long turns through the victim; random placement puts some of the actors on it.
    let mut victim_calls = Vec::new();
    for k in 0..8 {
        let cv = cv.clone();
        victim_calls.push(tokio::spawn(async move {
            cv.call_json::<_, i64>("Counter", &format!("k{k}"), "increment", &1)
                .await
        }));
    }
    // As soon as the victim's app runs one of them, stop the victim's sidecar (not its app).
    let deadline = Instant::now() + Duration::from_secs(10);
    let running: BTreeMap<String, Ev> = loop {
        let running: BTreeMap<String, Ev> = events(&fleet)
            .into_iter()
            .filter(|e| e.host == victim_id && e.event == "turn-start")
            .map(|e| (e.actor.clone(), e))
            .collect();
        if !running.is_empty() {
            break running;
        }
        assert!(
            Instant::now() < deadline,
            "no turn started on {victim_id} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    fleet.sigstop_sidecar(victim);
    let stopped_ns = monotonic_ns();

    // The peer takes the actors over once it has expired the stalled host: keep calling them
    // through the peer until its app has activated every one of them.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut peer_calls = Vec::new();
    let taken_over: BTreeMap<String, u64> = loop {
        let taken: BTreeMap<String, u64> = events(&fleet)
            .into_iter()
            .filter(|e| {
                e.host != victim_id
                    && e.event == "activation-start"
                    && e.t_ns > stopped_ns
                    && running.contains_key(&e.actor)
            })
            .map(|e| (e.actor, e.t_ns))
            .rev()
            .collect();
        if taken.len() == running.len() {
            break taken;
        }
        assert!(
            Instant::now() < deadline,
            "the peer did not take {:?} over within 20 s (took {:?})",
            running.keys().collect::<Vec<_>>(),
            taken.keys().collect::<Vec<_>>()
        );
        for actor in running.keys() {
            let key = actor.trim_start_matches("Counter/").to_string();
            let cp = cp.clone();
            peer_calls.push(tokio::spawn(async move {
                cp.call_json::<_, i64>("Counter", &key, "increment", &1)
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let trace = events(&fleet);
    for (actor, start) in &running {
        let end = trace
            .iter()
            .find(|e| {
                e.event == "turn-end" && e.activation == start.activation && e.t_ns >= start.t_ns
            })
            .unwrap_or_else(|| {
                panic!("{actor}: the turn on {victim_id} never stopped running app code")
            });
        let ran = Duration::from_nanos(end.t_ns - start.t_ns);
        assert!(
            ran < TURN,
            "{actor}: the turn ran {ran:?}, its full {TURN:?}: it was not cancelled at its \
             not-after"
        );
        let peer_start = taken_over[actor];
        eprintln!(
            "{actor}: turn ran {} ms, stopped {} ms after the sidecar stop; peer activated {} ms \
             after the stop",
            ran.as_millis(),
            (end.t_ns as i64 - stopped_ns as i64) / 1_000_000,
            (peer_start - stopped_ns) / 1_000_000
        );
        assert!(
            end.t_ns < peer_start,
            "{actor}: the turn on {victim_id} ran app code until {} ms after the stop, but the \
             peer activated the actor {} ms after it: two activations ran at once",
            (end.t_ns - stopped_ns) / 1_000_000,
            (peer_start - stopped_ns) / 1_000_000
        );
    }

    // On SIGCONT the sidecar fences: its app gets no stale turn, its callers no `ok`.
    let resumed_ns = monotonic_ns();
    fleet.sigcont_sidecar(victim);
    for call in victim_calls {
        let r = tokio::time::timeout(Duration::from_secs(15), call)
            .await
            .expect("every call through the resumed host is answered")
            .unwrap();
        assert!(
            r.is_err(),
            "a 3 s turn cannot finish inside a 1 s lease, yet the call was told ok: {r:?}"
        );
    }
    for call in peer_calls {
        let _ = tokio::time::timeout(Duration::from_secs(15), call).await;
    }
    let stale = events(&fleet)
        .into_iter()
        .filter(|e| e.host == victim_id && e.event == "turn-start" && e.t_ns > resumed_ns)
        .count();
    fleet.shutdown().await;
    assert_eq!(stale, 0, "the resumed, fenced host handed its app turns");
}
