//! Placement decisions per second (`cargo bench -p sigx-sidecar --bench placement`, part of
//! `make bench`): `least-loaded` against `random` in the same run, over views of 10, 100 and
//! 1,000 active hosts, through the production path (`placement::choose_with`: the eligibility
//! filter over the view, then the policy; `least-loaded` reads two estimates from the load board
//! and counts its pick on it). A seeded RNG, as the simulator uses, so runs compare.
//!
//! Output is one line per figure: `name<TAB>value<TAB>unit`.

use rand::SeedableRng;
use sigx_sidecar::membership::{HostDescriptor, HostLoad, HostStatus, LoadBoard, MembershipView};
use sigx_sidecar::placement::{Policy, choose_with};
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

fn descriptor(i: usize) -> HostDescriptor {
    let mut d = HostDescriptor::new(
        format!("engine-{i:04}-a1b2c3"),
        format!("10.0.{}.{}:7400", i / 250, i % 250),
        Some(vec!["Counter".into(), "Relay".into()]),
        Some(vec!["Counter".into()]),
    );
    d.status = HostStatus::Active;
    d.load = Some(HostLoad {
        activations: (i as u64 * 7919) % 1000,
        turns_per_sec: 0,
    });
    d
}

/// Decisions per second of `policy` over `hosts` active hosts, over at least `min` of time.
fn rate(policy: Policy, hosts: usize, min: Duration) -> f64 {
    let descriptors: Vec<HostDescriptor> = (0..hosts).map(descriptor).collect();
    let board = LoadBoard::default();
    for d in &descriptors {
        board.observe(d);
    }
    let view = MembershipView::new(1, descriptors);
    let rng = Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(7)));
    let mut n = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < min {
        for _ in 0..1_000 {
            let h = choose_with(
                policy,
                &view,
                "Counter",
                "engine-0000-a1b2c3",
                Some(&rng),
                Some(&board),
                sigx_sidecar::placement::Locality::Any,
            )
            .expect("placeable");
            black_box(h);
        }
        n += 1_000;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let min = Duration::from_millis(
        std::env::var("SIGX_BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000),
    );
    for hosts in [10, 100, 1_000] {
        let random = rate(Policy::Random, hosts, min);
        let least = rate(Policy::LeastLoaded, hosts, min);
        println!("placement_random_{hosts}_hosts\t{random:.0}\tdecisions/s");
        println!("placement_least_loaded_{hosts}_hosts\t{least:.0}\tdecisions/s");
        println!(
            "placement_least_loaded_vs_random_{hosts}_hosts\t{:.2}\tratio",
            least / random
        );
    }
}
