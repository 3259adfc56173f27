//! Issue 12, Build item 3, with the real binaries (`sigx-sidecar` + `counter-app`) on 127.0.0.x
//! sharing one SQLite file, beat 250 ms, TTL 1 s:
//!
//! - the SIGSTOP/SIGCONT round the issue found: ~40 actors active on host B, callers on B's own
//!   socket and on a peer's, B's *sidecar alone* stopped for 3 × TTL (its app keeps running),
//!   then resumed; B is replaced by a new pod and the round repeats. Judged from the app-side
//!   trace: no turn run by an app for an activation after a newer activation of that actor
//!   started, no overlapping activations, and every acknowledged increment in the final count.
//! - an app-container restart (kill -9 of the app, a new app on the same socket) under load in a
//!   3-host cluster: no overlapping activations, no lost acknowledged write.
//!
//! `CHAOS_STOP_ROUNDS` (default 6, ~65 s) and `CHAOS_APP_RESTARTS` (default 6) set the sizes;
//! `make bench-chaos` runs 50 of each. `SIGX_BIN_DIR` points the test at other binaries (the
//! report of the pre-fix run names the commit it was built from).

use sigx_e2e::chaos::ledger::{Ledger, read_finals, start_load_into};
use sigx_e2e::chaos::{Fleet, FleetConfig, Report, client, trace};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::time::Instant;

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn actors(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("Counter/c{k}")).collect()
}

fn cfg() -> FleetConfig {
    FleetConfig {
        hosts: 3,
        beat_ms: 250,
        ttl_ms: 1_000,
        turn_delay_ms: 0,
        call_timeout_ms: 10_000,
        ..FleetConfig::default()
    }
}

/// The actors whose activation started on `host` (per the trace), and when each other host
/// first activated one of them after `after_ns`: the takeover time of the round.
fn takeover(evs: &[trace::Event], host: &str, after_ns: u64) -> (usize, Option<Duration>) {
    let on_b: BTreeSet<&str> = evs
        .iter()
        .filter(|e| e.event == "activation-start" && e.host == host && e.t_ns < after_ns)
        .map(|e| e.actor.as_str())
        .collect();
    let first = evs
        .iter()
        .filter(|e| e.event == "activation-start" && e.host != host && e.t_ns > after_ns)
        .filter(|e| on_b.contains(e.actor.as_str()))
        .map(|e| e.t_ns)
        .min();
    (
        on_b.len(),
        first.map(|t| Duration::from_nanos(t - after_ns)),
    )
}

/// Whether a ledger problem line says the final value is *below* the acknowledged count.
fn below(problem: &str) -> bool {
    // "<actor>: final value F but OK increments succeeded and AMB are ambiguous"
    let num = |after: &str| -> Option<i64> {
        let rest = problem.split(after).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    };
    matches!((num("final value "), num(" but ")), (Some(f), Some(ok)) if f < ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_sigstop_past_the_ttl_with_its_app_running_serves_no_stale_turn_and_loses_no_write()
{
    const COUNTERS: usize = 120; // ~40 per host of 3
    let rounds = size("CHAOS_STOP_ROUNDS", 6);
    let mut fleet = Fleet::start(cfg()).await;
    let ttl = fleet.ttl();
    let ledger = Arc::new(Ledger::default());
    let peer_socket = fleet.pods[0].socket.clone();
    let mut victim = 2;
    let b_targets: Arc<RwLock<Vec<PathBuf>>> =
        Arc::new(RwLock::new(vec![fleet.pods[victim].socket.clone()]));
    let timeout = Duration::from_secs(10);
    let started = Instant::now();
    let mut notes = Vec::new();
    let mut takeovers = Vec::new();
    let mut fenced_after = Vec::new();
    for round in 0..rounds {
        // Fresh counters each round: actors stay where they live, so the new B gets its share
        // (~1/3) only of actors nobody has activated yet.
        // A host that has just become ready is still joining in its peers' views (placement
        // picks only active hosts): give the new B a moment, or it gets few actors.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let keys = round * COUNTERS..(round + 1) * COUNTERS;
        let on_b = start_load_into(ledger.clone(), b_targets.clone(), keys.clone(), 16, timeout);
        let on_a = start_load_into(
            ledger.clone(),
            Arc::new(RwLock::new(vec![peer_socket.clone()])),
            keys,
            8,
            timeout,
        );
        // Let B's callers activate its share of the actors.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let b_id = fleet.pods[victim].id.clone();
        let stopped_ns = monotonic_ns();
        fleet.sigstop_sidecar(victim);
        // The peer re-activates every actor B holds as soon as it may (B's app still runs and
        // B's own callers still wait on its socket): a `get` through A, retried until it runs.
        let b_actors: BTreeSet<String> = trace::events(&fleet.trace_file())
            .into_iter()
            .filter(|e| e.event == "activation-start" && e.host == b_id)
            .map(|e| e.actor)
            .collect();
        let pc = client(&peer_socket).with_timeout(Duration::from_millis(1_500));
        let probes: Vec<_> = b_actors
            .into_iter()
            .map(|actor| {
                let pc = pc.clone();
                tokio::spawn(async move {
                    let key = actor.trim_start_matches("Counter/").to_string();
                    let t = Instant::now();
                    while t.elapsed() < ttl * 3 {
                        if pc
                            .call_json::<(), i64>("Counter", &key, "get", &())
                            .await
                            .is_ok()
                        {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        tokio::time::sleep(ttl * 3).await;
        for p in probes {
            let _ = p.await;
        }
        fleet.sigcont_sidecar(victim);
        let resumed = Instant::now();
        // The resumed sidecar finds its lease lapsed and fences (/livez 503).
        let mut live = None;
        while resumed.elapsed() < Duration::from_secs(5) {
            live = fleet.probe(victim, "/livez").await;
            if live == Some(503) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            live,
            Some(503),
            "round {round}: {b_id} did not report fenced after resuming; see {}",
            fleet.log_path(&b_id, "sidecar").display()
        );
        fenced_after.push(resumed.elapsed());
        // B's callers get their answers (fenced, or outcome-unknown for turns the app had run),
        // then the fenced pod is replaced, as Kubernetes restarts a pod failing its liveness.
        tokio::time::sleep(Duration::from_millis(500)).await;
        b_targets.write().unwrap().clear();
        let _ = on_a.stop().await;
        let _ = on_b.stop().await;
        fleet.kill9(victim).await;
        let (b_actors, took) = takeover(&trace::events(&fleet.trace_file()), &b_id, stopped_ns);
        takeovers.push(took);
        notes.push(format!(
            "round {round}: {b_id} had activated {b_actors} actors; first peer activation of one \
             {took:?} after SIGSTOP"
        ));
        victim = fleet.spawn_pod().await;
        *b_targets.write().unwrap() = vec![fleet.pods[victim].socket.clone()];
    }
    let finals = read_finals(
        &client(&peer_socket).with_timeout(Duration::from_secs(5)),
        &actors(rounds * COUNTERS),
    )
    .await;
    let stale = trace::stale_turns(&fleet.trace_file());
    let mut report = Report::judge(
        &format!(
            "{rounds} rounds of SIGSTOP of B's sidecar alone for 3 x TTL (3 hosts, beat 250 ms, \
             TTL 1 s, 16 callers on B's socket + 8 on A's, {COUNTERS} counters)"
        ),
        &ledger,
        &finals,
        trace::duplicate_activations(&fleet.trace_file()),
    );
    let mut per_host: std::collections::BTreeMap<String, usize> = Default::default();
    for e in trace::events(&fleet.trace_file()) {
        if e.event == "activation-start" {
            *per_host.entry(e.host).or_default() += 1;
        }
    }
    report
        .notes
        .push(format!("activations per host: {per_host:?}"));
    let taken: Vec<Duration> = takeovers.iter().flatten().copied().collect();
    report.notes.push(format!(
        "stale turns in the app: {}; elapsed {:.1} s",
        stale.len(),
        started.elapsed().as_secs_f64()
    ));
    if let (Some(lo), Some(hi)) = (taken.iter().min(), taken.iter().max()) {
        report.notes.push(format!(
            "takeover (SIGSTOP → first peer activation of a B actor): min {lo:?} max {hi:?} over {} rounds",
            taken.len()
        ));
    }
    report.notes.push(format!(
        "SIGCONT → /livez 503: max {:?}",
        fenced_after.iter().max()
    ));
    report.notes.extend(notes);
    println!("{}", report.render());
    for s in stale.iter().take(10) {
        println!("  ! stale: {s}");
    }
    fleet.shutdown().await;
    assert!(report.sent > 500, "the load ran: {}", report.sent);
    assert!(
        stale.is_empty(),
        "{} stale turns: {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
    assert!(
        report.duplicate_activations.is_empty(),
        "{}",
        report.render()
    );
    // A final value above the acknowledged increments plus the ambiguous ones is a call answered
    // "never ran" (`fenced`) whose turn the app had run: a violation of issue 12's checker. It
    // happened (5-14 per run) while an answer that came back after the lease lapsed was reported
    // as `fenced`; it is outcome-unknown now (runtime/lease.rs `settle`). A lost write (a final
    // value below the acknowledged count, or one value returned twice) fails here too.
    let (phantom, lost): (Vec<&String>, Vec<&String>) = report
        .ledger_problems
        .iter()
        .partition(|p| p.contains("are ambiguous") && !below(p));
    println!(
        "lost acknowledged writes: {}; calls answered never-ran that ran: {}",
        lost.len(),
        phantom.len()
    );
    assert!(lost.is_empty(), "lost acknowledged writes: {lost:?}");
    assert!(
        phantom.is_empty(),
        "calls answered never-ran (fenced) whose turn the app ran: {phantom:?}"
    );
    assert_eq!(
        taken.len(),
        rounds,
        "every round, the peer re-activated one of B's actors while B's app ran: {takeovers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_container_restart_under_load_never_overlaps_activations_nor_loses_a_write() {
    const COUNTERS: usize = 60;
    let restarts = size("CHAOS_APP_RESTARTS", 6);
    let mut fleet = Fleet::start(cfg()).await;
    let ledger = Arc::new(Ledger::default());
    let load = start_load_into(
        ledger,
        fleet.targets.clone(),
        0..COUNTERS,
        12,
        Duration::from_secs(10),
    );
    let started = Instant::now();
    let mut back = Vec::new();
    for r in 0..restarts {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let i = r % 3;
        let t = Instant::now();
        fleet.restart_app(i).await;
        // Back: the new app serves a call through its own socket.
        let c = client(&fleet.pods[i].socket).with_timeout(Duration::from_secs(2));
        while t.elapsed() < Duration::from_secs(15) {
            if c.call_json::<(), i64>("Counter", &format!("probe{r}"), "get", &())
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        back.push(t.elapsed());
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let ledger = load.stop().await;
    let finals = read_finals(
        &client(&fleet.pods[0].socket).with_timeout(Duration::from_secs(5)),
        &actors(COUNTERS),
    )
    .await;
    let stale = trace::stale_turns(&fleet.trace_file());
    let mut report = Report::judge(
        &format!(
            "{restarts} app-container restarts (kill -9 of counter-app, new app on the same socket) \
             in a 3-host cluster under load (12 callers, {COUNTERS} counters)"
        ),
        &ledger,
        &finals,
        trace::duplicate_activations(&fleet.trace_file()),
    );
    report.notes.push(format!(
        "stale turns in the app: {}; restarted app serving again after {back:?}; elapsed {:.1} s",
        stale.len(),
        started.elapsed().as_secs_f64()
    ));
    println!("{}", report.render());
    fleet.shutdown().await;
    assert!(report.sent > 500, "the load ran: {}", report.sent);
    assert!(
        stale.is_empty(),
        "{} stale turns: {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
    assert!(
        report.duplicate_activations.is_empty(),
        "{}",
        report.render()
    );
    assert!(report.ledger_problems.is_empty(), "{}", report.render());
    assert!(
        back.iter().all(|d| *d < Duration::from_secs(15)),
        "a restarted app never served again: {back:?}"
    );
}
