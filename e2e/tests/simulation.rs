//! The deterministic simulation (issue 5): seeds of the real sidecar code under faults, judged
//! by the invariant checker. See `e2e/src/sim/mod.rs`.
//!
//! * `replay`: `SIGX_SIM_SEED=<n>` runs one seed twice and checks the verdict replays (the
//!   same violations on the same actors). Built as `make sim` builds it (`--cfg tokio_unstable`,
//!   so turmoil seeds tokio's own RNG from the seed), it also runs the seed in two fresh
//!   processes and requires identical histories, event for event. Without that flag (the
//!   debug build `make test` runs) tokio draws some scheduling choices at random, and only the
//!   verdict replays.
//! * `batch_*`: `SIGX_SIM_SEEDS=<n>` seeds from `SIGX_SIM_SEED_START=<m>` (default 500 from 0),
//!   split over four tests that run in parallel.
//! * `broken_*`: each deliberately broken protocol variant must be caught within a bounded
//!   number of seeds.
//! * `availability_figures`: crash recovery and handoff times (printed for BENCHMARKS.md).
// Real time is read here only to report how long runs took, never inside a simulation.
#![allow(clippy::disallowed_types)]

use sigx_e2e::sim::{self, Promise, Scenario, SimConfig, SimReport};
use sigx_sidecar::directory::ProtocolFaults;
use sigx_sidecar::membership::{ExpiryCheck, SelfFence};
use std::time::Instant;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

fn summary(r: &SimReport) -> String {
    format!(
        "seed {:>6}: {} hosts, {} actors, {} faults, {} calls ({} ok), {} activations, {} violations, fp {:016x}",
        r.seed,
        r.config.initial_hosts,
        r.config.actors,
        r.schedule.0.len(),
        r.calls,
        r.ok_calls,
        r.activations,
        r.violations.len(),
        r.fingerprint
    )
}

#[test]
fn smoke() {
    let t = Instant::now();
    let r = sim::run(SimConfig::random(env_u64("SIGX_SIM_SEED").unwrap_or(1)));
    println!("{}", summary(&r));
    println!("schedule:\n{}", r.schedule);
    println!("took {:?}", t.elapsed());
    let mut kinds = std::collections::BTreeMap::<String, u64>::new();
    for e in &r.history {
        if let sigx_e2e::sim::world::Ev::CallEnd { outcome, .. } = &e.ev {
            *kinds.entry(outcome.clone()).or_default() += 1;
        }
    }
    println!("outcomes: {kinds:?}");
    if !r.violations.is_empty() {
        println!("{}", r.explain());
    }
}

#[test]
fn replay() {
    let seed = env_u64("SIGX_SIM_SEED").unwrap_or(3);
    let a = sim::run(SimConfig::random(seed));
    println!("{}", summary(&a));
    let b = sim::run(SimConfig::random(seed));
    println!("{}", summary(&b));
    if a.fingerprint != b.fingerprint {
        let n = a.history.len().min(b.history.len());
        for i in 0..n {
            if format!("{:?}{}", a.history[i].ev, a.history[i].t_ms)
                != format!("{:?}{}", b.history[i].ev, b.history[i].t_ms)
            {
                println!(
                    "first divergence at event {i}:\n  a: {}\n  b: {}",
                    a.history[i], b.history[i]
                );
                for j in i.saturating_sub(5)..(i + 5).min(n) {
                    println!("  a {}\n  b {}", a.history[j], b.history[j]);
                }
                break;
            }
        }
    }
    // Bit-exact replay is not achieved yet (see the module doc): the verdict must replay.
    let verdict = |r: &SimReport| -> Vec<String> {
        let mut v: Vec<String> = r
            .violations
            .iter()
            .map(|v| format!("{:?} {:?}", v.promise, v.actor))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    assert_eq!(
        verdict(&a),
        verdict(&b),
        "seed {seed} did not replay its verdict"
    );
    assert!(a.calls > 0 && b.calls > 0);
    if a.fingerprint != b.fingerprint {
        println!(
            "note: histories differ in timing (fingerprints {:016x} / {:016x})",
            a.fingerprint, b.fingerprint
        );
    }
    // Built as `make sim` builds it (tokio's RNG seeded by turmoil), a seed must replay event
    // for event in a fresh process, which is what `make sim SEED=<n>` is. (Two runs inside one
    // process can still differ in timing: process-wide state carries over from the first run.)
    if cfg!(tokio_unstable) {
        let fresh = || {
            let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
                .args(["--exact", "replay_fingerprint", "--ignored", "--nocapture"])
                .env("SIGX_SIM_SEED", seed.to_string())
                .output()
                .expect("run the test binary again");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("fingerprint ").map(str::to_owned))
                .unwrap_or_else(|| panic!("no fingerprint from the fresh process:\n{text}"))
        };
        let (x, y) = (fresh(), fresh());
        assert_eq!(
            x, y,
            "seed {seed}: two fresh processes ran different histories (not a bit-exact replay)"
        );
        println!("bit-exact: two fresh processes ran identical histories (fingerprint {x})");
    }
    // `make sim SEED=<n>` is how a reported violation is replayed: show it, and fail.
    assert!(a.violations.is_empty(), "{}", a.explain());
}

/// Child of `replay`: one run of `SIGX_SIM_SEED`, its history's fingerprint on stdout.
#[test]
#[ignore]
fn replay_fingerprint() {
    let r = sim::run(config_from_env(env_u64("SIGX_SIM_SEED").unwrap_or(3)));
    println!("fingerprint {:016x}", r.fingerprint);
}

/// Seeds that once found a bug in production code, kept clean for good. A new one is appended
/// here with a line on what it found.
/// * 3458: after a partition healed, a call hyper had never written to a socket failed as
///   `timeout` (not retried) instead of `unreachable` (retried); the liveness probe failed.
/// * 265: a host whose feed lagged judged its directory eligibility on its own stale `active`
///   record: after its app detached and came back (a new active epoch) it served a partition
///   that a peer had owned and granted claims in meanwhile, without collecting: two
///   activations of one actor. Eligibility now also needs the view to show the record the host
///   last wrote.
/// * 350, 351: a host suspended with its lease about to lapse resumed and sent an idle
///   activation its Deactivate, which the app refused as past its not-after (it never ran, and
///   the app still held the activation); the sidecar released the claim anyway and activated
///   the actor again beside it. A Deactivate refused as late is now sent again.
/// * 2003028, 2003541, 2004728, 2008337 (found by the first run on an untuned seed range): a host
///   suspended earlier built its reminder deliveries' deadlines on the lease clock, which lost
///   the suspended span, so on the timer clock every deadline was already past: each delivery
///   failed at once ("fenced", "timeout"), backed off, and reminders due after the faults
///   healed never fired. Deadlines are now built on the timer clock.
/// * 4000219 (the checker, not the sidecar): an Activate the app cancelled at its not-after was
///   recorded as an activation that never ended, so the next activation of the actor, 12 ms
///   later, looked like an overlap. An SDK keeps an instance only once its on-activate returned;
///   the simulated app now ends the interval with the failed Activate's answer.
/// * 5005383 (the harness, not the sidecar): a simulated host's app re-attached in the same
///   millisecond its rolling-restart leave began, and the re-attach's `Active` was written after
///   the leave's `Leaving`. The host kept serving as active while its reminder owner had
///   stopped, so two reminders of its shards never fired. The simulated host now writes its
///   status in decision order and publishes nothing after its leave began, as the production
///   host's single status loop does.
/// * 6020430: a host whose feed had stalled for a second judged a peer expired, and its fresh
///   read found the peer's record gone: deleted by a third party while the peer, cut off from
///   the store, still held a lease this host had not seen renewed. The host took the missing
///   record as proof of expiry, dropped the peer at once, and another host activated an actor
///   the peer was still running until its fence, 60 ms later. A record found missing by a
///   fresh read is now waited out like a deletion the feed shows: TTL plus margin from the read.
/// * 6021965 (a first version of that fix): two observers expired a crashed host; the slower
///   one's fresh read found the record the faster one had deleted, and it waited out a lease
///   from the read even after its feed delivered the deletion. The crashed host's reminder
///   shards recovered too late and a reminder never fired. A deletion the feed delivers now
///   settles the wait by the last renewal seen, as every renewal before it was delivered too.
/// * 6168777 (the judge, not the product): a reminder's attempts each waited out their 1 s
///   bound on a directory partition still recovering after the fleet was quiet; its next
///   attempt, after the 400 ms backoff, was due 14 ms after the run's 300 ms tail ended, and
///   the checker called it never fired. The tail now waits, bounded by one backoff, one poll
///   and one attempt, for every due reminder; it fires at 8742 ms.
const REGRESSION_SEEDS: &[u64] = &[
    3458, 265, 350, 351, 2003028, 2003541, 2004728, 2008337, 4000219, 5005383, 6020430, 6021965,
    6168777,
];

#[test]
fn regression_seeds() {
    for &seed in REGRESSION_SEEDS {
        let r = sim::run(SimConfig::random(seed));
        println!("{}", summary(&r));
        assert!(r.violations.is_empty(), "{}", r.explain());
    }
}

/// Runs every `stride`-th seed of the batch from `part`; fails with the first violation's report.
fn batch(part: u64, stride: u64) {
    let count = env_u64("SIGX_SIM_SEEDS").unwrap_or(500);
    let start = env_u64("SIGX_SIM_SEED_START").unwrap_or(0);
    let t = Instant::now();
    let mut ran = 0;
    let mut failures = Vec::new();
    let mut i = part;
    while i < count {
        let r = sim::run(SimConfig::random(start + i));
        ran += 1;
        if std::env::var("SIGX_SIM_VERBOSE").is_ok() {
            println!("{}", summary(&r));
        }
        if !r.violations.is_empty() {
            println!("{}", r.explain());
            failures.push(r.seed);
            if std::env::var("SIGX_SIM_KEEP_GOING").is_err() {
                break;
            }
        }
        i += stride;
    }
    println!(
        "batch part {part}/{stride}: {ran} seeds from {start} in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "violations at seeds {failures:?}");
}

#[test]
fn batch_0() {
    batch(0, 4);
}
#[test]
fn batch_1() {
    batch(1, 4);
}
#[test]
fn batch_2() {
    batch(2, 4);
}
#[test]
fn batch_3() {
    batch(3, 4);
}

/// Debug aid: `SIGX_SIM_SEED=n SIGX_SIM_FROM=ms SIGX_SIM_TO=ms` prints that window of a seed's
/// whole history.
#[test]
#[ignore]
fn dump() {
    let seed = env_u64("SIGX_SIM_SEED").unwrap_or(0);
    let from = env_u64("SIGX_SIM_FROM").unwrap_or(0);
    let to = env_u64("SIGX_SIM_TO").unwrap_or(u64::MAX);
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(SimTimer)
            .with_ansi(false)
            .with_test_writer()
            .try_init();
    }
    let r = sim::run(config_from_env(seed));
    for e in r.history.iter().filter(|e| e.t_ms >= from && e.t_ms <= to) {
        println!("{e}");
    }
    println!("{}", r.explain());
}

struct SimTimer;

impl tracing_subscriber::fmt::time::FormatTime for SimTimer {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(t) => write!(w, "{:>6}ms", t.as_millis()),
            None => write!(w, "  driver"),
        }
    }
}

/// Runs seeds of a deliberately broken variant until the checker reports a safety violation;
/// returns the first such report. Panics when none is found within `max_seeds`.
fn find_violation(name: &str, max_seeds: u64, make: impl Fn(u64) -> SimConfig) -> SimReport {
    let t = Instant::now();
    for seed in 0..max_seeds {
        let r = sim::run(make(seed));
        if r.violations.iter().any(|v| v.promise == Promise::Safety) {
            println!(
                "{name}: caught at seed {seed} after {} seeds in {:.1}s\n{}",
                seed + 1,
                t.elapsed().as_secs_f64(),
                r.explain()
            );
            return r;
        }
    }
    panic!(
        "{name}: the checker found no safety violation in {max_seeds} seeds: the simulation cannot tell this broken variant from the real protocol"
    );
}

/// Clock skew between hosts (issue 12): each incarnation's wall clock off true time by up to
/// `offset_ms` and running up to `ppm` fast or slow. Nothing compares wall clocks across hosts
/// (expiry is judged on the observer's monotonic clock, a turn's not-after on its own pod's wall
/// clock), so single activation and the state promises must hold whatever the skew.
fn skewed(seeds: std::ops::Range<u64>, offset_ms: i64, ppm: i64) -> Vec<SimReport> {
    seeds
        .map(|seed| {
            sim::run(SimConfig {
                wall_skew: sim::clock::Skew { offset_ms, ppm },
                ..SimConfig::random(seed)
            })
        })
        .collect()
}

/// NTP-synced proportions (±500 ms, ±500 ppm, a cheap crystal's tolerance): every promise holds,
/// liveness and reminder due times included.
#[test]
fn swarm_seeds_with_skewed_wall_clocks_are_clean() {
    for r in skewed(900_000..900_030, 500, 500) {
        assert!(
            r.activations > 0 && r.ok_calls > 0,
            "seed {}: nothing ran",
            r.seed
        );
        assert!(r.violations.is_empty(), "{}", r.explain());
    }
}

/// Hosts tens of seconds apart (a VM without NTP, ±30 s, ±1000 ppm): every promise holds,
/// reminders included. Due times are set and judged on the store's clock (issue 13), so a
/// reminder set through a host 30 s behind neither fires 30 s early elsewhere nor waits 30 s
/// on an owner 30 s behind.
#[test]
fn far_skewed_wall_clocks_break_no_promise() {
    let mut fired = 0;
    for r in skewed(910_000..910_030, 30_000, 1000) {
        assert!(
            r.activations > 0 && r.ok_calls > 0,
            "seed {}: nothing ran",
            r.seed
        );
        assert!(r.violations.is_empty(), "{}", r.explain());
        fired += r
            .history
            .iter()
            .filter(|e| matches!(e.ev, sim::world::Ev::ReminderFired { .. }))
            .count();
    }
    assert!(
        fired > 0,
        "no reminder fired in 30 seeds: the check judged nothing"
    );
    println!("far skew: 30 seeds, no violation, {fired} reminder deliveries judged");
}

/// The same skew with each host judging due times on its own wall clock (the store's clock
/// switched off): the checker sees a reminder fire before it is due.
#[test]
fn broken_reminders_on_host_wall_clocks_are_caught() {
    find_violation("reminders_on_host_wall_clocks", 30, |seed| SimConfig {
        wall_skew: sim::clock::Skew {
            offset_ms: 30_000,
            ppm: 1000,
        },
        store_clock: false,
        ..SimConfig::random(910_000 + seed)
    });
}

/// NOT CAUGHT (yet): 60 churn seeds (and 120 seeds of the other mixes) ran clean with Rule 1's
/// term re-check switched off. Why, as far as the traces show: a host's term for a partition
/// moves only when it answers a `Collect`, and it answers only a requester that owns the
/// partition in its own view under an equal fingerprint (and the mesh refuses peers it does not
/// know). So by the time the term has moved, the host's view already names the new owner and
/// the re-check's `same_owner` test fails on its own. The term re-check only matters if the
/// owner in the host's view moves away and back within one `Register` round trip; the
/// schedules do not produce that yet. Kept, ignored, so `cargo test -- --ignored broken_skip`
/// can show progress when the schedule improves.
#[test]
#[ignore]
fn broken_skip_term_recheck_is_caught() {
    find_violation("skip_term_recheck", 60, |seed| SimConfig {
        faults: ProtocolFaults {
            skip_term_recheck: true,
            ..ProtocolFaults::default()
        },
        ..SimConfig::churn(seed)
    });
}

#[test]
fn broken_collect_ignores_fingerprint_is_caught() {
    find_violation("collect_ignores_fingerprint", 60, |seed| SimConfig {
        faults: ProtocolFaults {
            collect_ignores_fingerprint: true,
            ..ProtocolFaults::default()
        },
        ..SimConfig::churn(seed)
    });
}

#[test]
fn broken_expiry_without_fresh_read_is_caught() {
    find_violation("expiry_check=TrustLocalJudgement", 60, |seed| SimConfig {
        expiry_check: ExpiryCheck::TrustLocalJudgement,
        ..SimConfig::random(seed)
    });
}

/// The issue's own example: an expired host that keeps serving. Cut off from the store, it
/// cannot renew; its peers expire it and place its actors anew while it still runs turns.
#[test]
fn broken_expired_host_keeps_serving_is_caught() {
    find_violation("expired_host_keeps_serving", 60, |seed| SimConfig {
        self_fence: SelfFence::Never,
        ..SimConfig::random(seed)
    });
}

fn stale_writes(r: &SimReport) -> usize {
    r.violations
        .iter()
        .filter(|v| v.what.starts_with("stale write accepted"))
        .count()
}

fn refused_commits(r: &SimReport) -> usize {
    r.history
        .iter()
        .filter(|e| {
            matches!(
                e.ev,
                sim::world::Ev::StateCommit {
                    accepted: false,
                    ..
                }
            )
        })
        .count()
}

/// The state store is the last line behind the leases (issue 13): with self-fencing broken
/// (expired hosts keep serving, so zombie activations run turns and try to write), the store
/// refuses every batch whose epoch a newer activation superseded. The checker sees those
/// refusals and no stale write stored.
#[test]
fn behind_a_broken_self_fence_the_store_refuses_every_stale_write() {
    // Swarm schedules enable a random subset of fault kinds per seed, so zombies appear only in
    // some: run at least 12 seeds, and on until some zombie write reached the store.
    let (mut refused, mut seeds) = (0, 0);
    for seed in 0..80 {
        let r = sim::run(SimConfig {
            self_fence: SelfFence::Never,
            ..SimConfig::random(seed)
        });
        assert_eq!(stale_writes(&r), 0, "seed {seed}: {}", r.explain());
        refused += refused_commits(&r);
        seeds += 1;
        if seeds >= 12 && refused > 0 {
            break;
        }
    }
    assert!(
        refused > 0,
        "in {seeds} seeds no zombie write ever reached the store: the test shows nothing"
    );
    println!("{seeds} seeds with self-fencing off: {refused} stale batches refused, none stored");
}

/// The same zombies against a store without its epoch fence (the broken variant): the checker
/// catches a stale write stored.
#[test]
fn broken_store_without_its_epoch_fence_is_caught() {
    for seed in 0..60 {
        let r = sim::run(SimConfig {
            self_fence: SelfFence::Never,
            state_check: sim::state::StateCheck::AcceptStale,
            ..SimConfig::random(seed)
        });
        if stale_writes(&r) > 0 {
            println!("caught at seed {seed}:\n{}", r.explain());
            return;
        }
    }
    panic!("60 seeds of a store without its epoch fence stored no stale write the checker saw");
}

fn median_max(v: &mut [u64]) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() - 1])
}

/// Availability figures (DESIGN targets: crash recovery ≤ TTL + 1 s simulated; handoff ≤
/// 250 ms): one crash, one join or one graceful leave per run, under a steady workload.
/// `SIGX_SIM_AVAIL_SEEDS=<n>` runs more (BENCHMARKS.md uses 200 in release).
#[test]
fn availability_figures() {
    let n = env_u64("SIGX_SIM_AVAIL_SEEDS").unwrap_or(2);
    let t = Instant::now();
    let (mut crash, mut handoff_join, mut handoff_leave) = (Vec::new(), Vec::new(), Vec::new());
    let mut converged = Vec::new();
    let (mut calls, mut failed) = (0, 0);
    for seed in 0..n {
        for scenario in [Scenario::Crash, Scenario::Join, Scenario::Leave] {
            let r = sim::run(SimConfig::availability(seed, scenario));
            assert!(r.violations.is_empty(), "{}", r.explain());
            match scenario {
                Scenario::Crash => {
                    crash.extend(r.figures.crash_recovery_ms.iter().copied());
                    converged.extend(r.figures.crash_converged_ms.iter().copied());
                }
                Scenario::Join => handoff_join.extend(r.figures.handoff_ms.iter().copied()),
                _ => handoff_leave.extend(r.figures.handoff_ms.iter().copied()),
            }
            calls += r.figures.handoff_calls;
            failed += r.figures.handoff_failed_calls;
        }
    }
    let ttl = SimConfig::random(0).ttl.as_millis() as u64;
    let (cm, cx) = median_max(&mut crash);
    let (vm, vx) = median_max(&mut converged);
    let (jm, jx) = median_max(&mut handoff_join);
    let (lm, lx) = median_max(&mut handoff_leave);
    println!(
        "availability over {n} seeds per scenario ({:.1}s): crash→membership and directory \
         converged median {vm} ms max {vx} ms; crash→callable median {cm} ms max {cx} ms \
         ({} actors; TTL {ttl} ms); handoff after join median {jm} ms max {jx} ms; after graceful \
         leave median {lm} ms max {lx} ms; calls issued during handoffs {calls}, failed {failed}",
        t.elapsed().as_secs_f64(),
        crash.len()
    );
    assert!(
        !crash.is_empty(),
        "no actor was affected by the crashes: the figure means nothing"
    );
}

/// Debug aid: prints the fault schedules of seeds (`SIGX_SIM_SEEDS`, churn mix with
/// `SIGX_SIM_CHURN=1`) without running them.
#[test]
#[ignore]
fn schedules() {
    use rand::SeedableRng;
    for seed in 0..env_u64("SIGX_SIM_SEEDS").unwrap_or(20) {
        let cfg = if std::env::var("SIGX_SIM_CHURN").is_ok() {
            SimConfig::churn(seed)
        } else {
            SimConfig::random(seed)
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let s = sim::faults::random(&mut rng, cfg.mix, 1000, 4000, 1000, cfg.max_faults);
        println!("seed {seed} hosts {}:\n{s}", cfg.initial_hosts);
    }
}

/// The config the debug aids use: `SIGX_SIM_CHURN=1` for the churn mix, `SIGX_SIM_BROKEN=`
/// `term` | `collect` | `expiry` | `fence` for a broken variant.
fn config_from_env(seed: u64) -> SimConfig {
    let mut cfg = if std::env::var("SIGX_SIM_CHURN").is_ok() {
        SimConfig::churn(seed)
    } else {
        SimConfig::random(seed)
    };
    match std::env::var("SIGX_SIM_SCENARIO").as_deref() {
        Ok("crash") => cfg = SimConfig::availability(seed, Scenario::Crash),
        Ok("join") => cfg = SimConfig::availability(seed, Scenario::Join),
        Ok("leave") => cfg = SimConfig::availability(seed, Scenario::Leave),
        _ => {}
    }
    match std::env::var("SIGX_SIM_BROKEN").as_deref() {
        Ok("term") => cfg.faults.skip_term_recheck = true,
        Ok("collect") => cfg.faults.collect_ignores_fingerprint = true,
        Ok("expiry") => cfg.expiry_check = ExpiryCheck::TrustLocalJudgement,
        Ok("fence") => cfg.self_fence = SelfFence::Never,
        _ => {}
    }
    cfg
}

/// Debug aid: one line per seed of an availability scenario (`SIGX_SIM_SCENARIO`).
#[test]
#[ignore]
fn availability_seeds() {
    for seed in 0..env_u64("SIGX_SIM_AVAIL_SEEDS").unwrap_or(20) {
        let r = sim::run(config_from_env(seed));
        println!("{} figures {:?}", summary(&r), r.figures);
    }
}

/// Debug aid: runs `SIGX_SIM_SEEDS` seeds twice each and prints those whose histories differ.
#[test]
#[ignore]
fn replay_many() {
    let start = env_u64("SIGX_SIM_SEED_START").unwrap_or(0);
    let n = env_u64("SIGX_SIM_SEEDS").unwrap_or(20);
    let mut differ = Vec::new();
    for seed in start..start + n {
        let a = sim::run(config_from_env(seed));
        let b = sim::run(config_from_env(seed));
        if a.fingerprint != b.fingerprint {
            differ.push(seed);
        }
    }
    println!(
        "{} of {n} seeds replayed bit-exact; differ: {differ:?}",
        n - differ.len() as u64
    );
}

/// Timers run in the simulation (issue 13): every activation sets a periodic timer in its
/// Activate turn through the production `Runtime::set_timer`, and each tick is a turn of that
/// activation, so the checker's rules on turns (none outside its activation, none after its host
/// fenced or lapsed, no two activations at once) judge timer ticks too. Clean seeds tick.
#[test]
fn timers_tick_as_turns_of_their_activation_in_clean_seeds() {
    let mut ticks = 0;
    for seed in 0..4 {
        let r = sim::run(SimConfig::random(seed));
        assert!(r.violations.is_empty(), "{}", r.explain());
        ticks += r
            .history
            .iter()
            .filter(|e| matches!(e.ev, sim::world::Ev::TimerTick { .. }))
            .count();
    }
    println!("4 clean seeds: {ticks} timer ticks");
    assert!(ticks > 20, "{ticks} timer ticks in 4 seeds");
}

/// Reminders run in the simulation (issue 13): the production scheduler on every host, the
/// workload setting one-shot reminders through the `SetReminder` path, the checker asking that
/// every reminder due before the quiet end fired (rule 7). Clean seeds deliver their reminders;
/// with each owner's shards frozen at its first view (a departed owner's shards never taken
/// over), some seed loses a reminder and is caught.
#[test]
fn reminders_fire_once_faults_heal_and_frozen_ownership_is_caught() {
    let count = |r: &SimReport, set: bool| {
        r.history
            .iter()
            .filter(|e| match e.ev {
                sim::world::Ev::ReminderSet { .. } => set,
                sim::world::Ev::ReminderFired { .. } => !set,
                _ => false,
            })
            .count()
    };
    let (mut set, mut fired) = (0, 0);
    for seed in 0..4 {
        let r = sim::run(SimConfig::random(seed));
        assert!(r.violations.is_empty(), "{}", r.explain());
        set += count(&r, true);
        fired += count(&r, false);
    }
    println!("4 clean seeds: {set} reminders set, {fired} deliveries");
    assert!(
        set > 20 && fired >= set / 2,
        "{set} reminders set, {fired} deliveries"
    );
    for seed in 0..40 {
        let r = sim::run(SimConfig {
            reminder_ownership_frozen: true,
            ..SimConfig::random(seed)
        });
        if let Some(v) = r.violations.iter().find(|v| v.what.contains("never fired")) {
            println!(
                "frozen reminder ownership: caught at seed {seed}: {}",
                v.what
            );
            return;
        }
    }
    panic!("frozen reminder ownership ran clean for 40 seeds: rule 7 cannot see lost reminders");
}

/// Rebalancing (the production rebalancer and its redirect gate) under the random fault mix:
/// activations handed away by a host above its peers' mean, while hosts crash, pause,
/// partition and restart, never leave two activations of one actor running and break no other
/// promise. More actors than the default, so that hosts are lumpy enough to move some.
#[test]
fn rebalancing_under_random_faults_keeps_every_promise() {
    let seeds = env_u64("SIGX_SIM_REBALANCE_SEEDS").unwrap_or(12);
    let mut asked = 0;
    let mut failures = Vec::new();
    for seed in 0..seeds {
        let base = SimConfig::random(seed);
        let r = sim::run(SimConfig {
            rebalance: true,
            actors: base.actors * 3,
            ..base
        });
        asked += r.rebalance_asked;
        if !r.violations.is_empty() {
            println!("{}", r.explain());
            failures.push(seed);
        }
    }
    println!("{seeds} seeds, {asked} activations asked to move");
    assert!(failures.is_empty(), "violations at seeds {failures:?}");
    assert!(
        asked > 0,
        "no seed rebalanced: the test would prove nothing"
    );
}
