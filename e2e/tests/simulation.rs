//! The deterministic simulation (issue 5): seeds of the real sidecar code under faults, judged
//! by the invariant checker. See `e2e/src/sim/mod.rs`.
//!
//! * `replay`: `SIGX_SIM_SEED=<n>` replays one seed (printing its report); without it, shows
//!   that one seed replays exactly (equal history fingerprints).
//! * `batch_*`: `SIGX_SIM_SEEDS=<n>` seeds from `SIGX_SIM_SEED_START=<m>` (default 200 from 0),
//!   split over four tests that run in parallel.
//! * `broken_*`: each deliberately broken protocol variant must be caught within a bounded
//!   number of seeds.
//! * `availability_figures`: crash recovery and handoff times (printed for BENCHMARKS.md).

use sigx_e2e::sim::{self, Scenario, SimConfig, SimReport};
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
    assert_eq!(
        a.fingerprint, b.fingerprint,
        "seed {seed} did not replay exactly"
    );
}
