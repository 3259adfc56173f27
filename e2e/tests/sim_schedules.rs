//! The regression corpus of explicit simulator schedules for views and directory eligibility
//! (issue 12, holes A and B; `sigx_e2e::sim::faults::corpus`). Each schedule runs the
//! production code under a few workload seeds: clean with every fix on, and caught (a safety
//! violation) with its fix switched off.

use sigx_e2e::sim::faults::{Named, corpus};
use sigx_e2e::sim::world::Ev;
use sigx_e2e::sim::{self, Promise, SimConfig, SimReport};
use sigx_sidecar::directory::ProtocolFaults;
use sigx_sidecar::membership::{DeletionCheck, ExpiryCheck, SelfFence};
use std::time::Duration;

/// Workload seeds each schedule runs under.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=3;

fn named(name: &str) -> Named {
    corpus()
        .into_iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no schedule {name:?} in the corpus"))
}

/// A steady workload over a few long-lived actors, so activations made before a fault are
/// still live when a broken host activates the same actors again.
fn config(n: &Named, seed: u64) -> SimConfig {
    SimConfig {
        initial_hosts: n.hosts,
        actors: n.actors,
        call_gap_ms: (5, 20),
        call_deadline: Duration::from_millis(1500),
        idle_timeout: Duration::from_secs(30),
        ..SimConfig::scheduled(seed, n.schedule.clone())
    }
}

fn safety(r: &SimReport) -> Vec<&str> {
    r.violations
        .iter()
        .filter(|v| v.promise == Promise::Safety)
        .map(|v| v.what.as_str())
        .collect()
}

/// Every seed clean: no violation at all (safety nor liveness).
fn clean(name: &str, tweak: impl Fn(&mut SimConfig)) {
    let n = named(name);
    for seed in SEEDS {
        let mut cfg = config(&n, seed);
        tweak(&mut cfg);
        let r = sim::run(cfg);
        assert!(
            r.violations.is_empty(),
            "{name} (seed {seed}) with the fix on:\n{}",
            r.explain()
        );
        assert!(r.activations > 0 && r.ok_calls > 0, "{name}: nothing ran");
    }
}

/// Some seed shows a safety violation with the fix switched off.
fn caught(name: &str, broken: impl Fn(&mut SimConfig)) {
    let n = named(name);
    for seed in SEEDS {
        let mut cfg = config(&n, seed);
        broken(&mut cfg);
        let r = sim::run(cfg);
        let found = safety(&r);
        if !found.is_empty() {
            println!("{name}: caught at seed {seed}: {}", found[0]);
            return;
        }
    }
    panic!(
        "{name} with its fix switched off ran clean under seeds {SEEDS:?}: the schedule no longer \
         reproduces the hole ({})",
        n.what
    );
}

fn departures_ahead_of_feed(c: &mut SimConfig) {
    c.expiry_check = ExpiryCheck::PublishAheadOfFeed;
}

fn readiness_kept_and_ids_only(c: &mut SimConfig) {
    c.faults = ProtocolFaults {
        keep_readiness_across_reactivation: true,
        fingerprint_without_epochs: true,
        ..Default::default()
    };
}

fn ids_only_fingerprint(c: &mut SimConfig) {
    c.faults = ProtocolFaults {
        fingerprint_without_epochs: true,
        ..Default::default()
    };
}

#[test]
fn a_stalled_watch_newcomer_departure_is_clean() {
    clean("A_stalled_watch_newcomer_departure", |_| {});
}

#[test]
fn a_stalled_watch_newcomer_departure_is_caught_ahead_of_the_feed() {
    caught(
        "A_stalled_watch_newcomer_departure",
        departures_ahead_of_feed,
    );
}

#[test]
fn b_app_detach_reattach_is_clean() {
    clean("B_app_detach_reattach", |_| {});
}

#[test]
fn b_app_detach_reattach_is_caught_with_readiness_kept() {
    caught("B_app_detach_reattach", readiness_kept_and_ids_only);
}

#[test]
fn b_fingerprint_aba_is_clean() {
    clean("B_fingerprint_aba", |_| {});
}

#[test]
fn b_fingerprint_aba_is_caught_with_an_ids_only_fingerprint() {
    caught("B_fingerprint_aba", ids_only_fingerprint);
}

#[test]
fn d_third_party_deletion_is_clean() {
    clean("D_third_party_deletion", |_| {});
}

#[test]
fn d_third_party_deletion_is_caught_when_peers_trust_the_deletion() {
    caught("D_third_party_deletion", |c| {
        c.deletion_check = DeletionCheck::TrustDeletion;
    });
}

#[test]
fn d_deletion_found_by_a_lagging_reader_is_clean() {
    clean("D_deletion_found_by_a_lagging_reader", |_| {});
}

#[test]
fn d_deletion_found_by_a_lagging_reader_is_caught_when_a_missing_record_is_trusted() {
    caught("D_deletion_found_by_a_lagging_reader", |c| {
        c.deletion_check = DeletionCheck::TrustMissingRecord;
    });
}

#[test]
fn s_wall_step_back_then_suspend_is_clean() {
    clean("S_wall_step_back_then_suspend", |_| {});
}

#[test]
fn s_wall_step_back_then_suspend_is_caught_on_two_clock_readings() {
    caught("S_wall_step_back_then_suspend", |c| {
        c.self_fence = SelfFence::TwoReadings;
    });
}

/// With a boot clock the suspended host fences at the instant it resumes, however its wall
/// clock was stepped, and its app refuses the turns it had queued before the suspend by their
/// boot-clock not-after (`Turn.not_after_boot_ms`), which the step cannot move.
#[test]
fn s_wall_step_back_inside_a_suspend_is_clean_with_a_boot_clock() {
    clean("S_wall_step_back_inside_a_suspend", |c| {
        c.boot_clock = Some(true)
    });
    let n = named("S_wall_step_back_inside_a_suspend");
    let resume_ms = 1800 + 3000;
    for seed in SEEDS {
        let mut cfg = config(&n, seed);
        cfg.boot_clock = Some(true);
        let r = sim::run(cfg);
        let fenced_at_resume = r.history.iter().any(|e| {
            e.t_ms == resume_ms
                && matches!(&e.ev, Ev::Fenced { host, reason }
                    if host == "h1" && reason.starts_with("suspect-wall"))
        });
        assert!(
            fenced_at_resume,
            "seed {seed}: h1 did not fence on resume:\n{}",
            r.explain()
        );
    }
}

/// The platform without `CLOCK_BOOTTIME` keeps this blind spot: the schedule shows it is real
/// (the host serves on after the resume and its activations overlap its peer's), so the boot
/// clock is what closes it on Linux.
#[test]
fn s_wall_step_back_inside_a_suspend_is_caught_without_a_boot_clock() {
    let n = named("S_wall_step_back_inside_a_suspend");
    let mut cfg = config(&n, 1);
    cfg.boot_clock = Some(false);
    let r = sim::run(cfg);
    assert!(
        safety(&r).iter().any(|v| v.contains("overlap")),
        "without a boot clock h1 should serve on after the resume and overlap h2:\n{}",
        r.explain()
    );
}

/// A serving host's wall clock stepped back 30 s (issue 13): reminders are set and judged on the
/// store's clock, so none fires early or late, and every other promise holds.
#[test]
fn r_serving_host_wall_step_back_is_clean() {
    clean("R_serving_host_wall_step_back", |_| {});
}

/// The same step with each host judging due times on its own wall clock: a reminder fires
/// before it is due.
#[test]
fn r_serving_host_wall_step_back_is_caught_on_host_wall_clocks() {
    caught("R_serving_host_wall_step_back", |c| c.store_clock = false);
}
