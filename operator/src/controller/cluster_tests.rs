//! Unit tests of cluster.rs: the ActorCluster status rules.

use super::*;
use sigx_crds::{HostCounts, NodeCount};

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap())
}

fn ok_secret() -> SecretState {
    SecretState {
        ready: true,
        reason: "Generated",
        message: "m".into(),
    }
}

fn cond<'a>(
    s: &'a ActorClusterStatus,
    t: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    s.conditions.iter().find(|c| c.type_ == t).unwrap()
}

#[test]
fn ready_needs_an_active_host_and_a_secret() {
    let fleet = FleetSummary {
        hosts: 3,
        nodes: NodeCount::Known(1),
        counts: HostCounts {
            active: 3,
            ..Default::default()
        },
        ..Default::default()
    };
    let s = cluster_status(None, Some(2), &fleet, &ok_secret(), None, Some(7), &now());
    assert_eq!(s.summary.as_deref(), Some("3 host(s) / 1 node(s)"));
    assert_eq!(cond(&s, "Ready").status, "True");
    assert_eq!(cond(&s, "Degraded").status, "False");
    assert_eq!(s.observed_generation, Some(2));

    let empty = cluster_status(
        None,
        Some(2),
        &FleetSummary::default(),
        &ok_secret(),
        None,
        None,
        &now(),
    );
    assert_eq!(cond(&empty, "Ready").reason, "NoActiveHosts");
    assert_eq!(
        empty.summary.as_deref(),
        Some("0 host(s) / node(s) unknown")
    );

    let missing = SecretState {
        ready: false,
        reason: "SecretNotFound",
        message: "x".into(),
    };
    let s = cluster_status(None, Some(2), &fleet, &missing, None, None, &now());
    assert_eq!(cond(&s, "Ready").reason, "SecretNotReady");
    assert_eq!(cond(&s, "SecretReady").status, "False");
    assert_eq!(cond(&s, "Degraded").reason, "SecretNotFound");
}

#[test]
fn an_object_not_ours_stalls_the_cluster_until_it_is_gone() {
    let fleet = FleetSummary {
        hosts: 1,
        counts: HostCounts {
            active: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let why = "ServiceAccount apps/demo-sigx already exists and is not managed by sigx";
    let s = cluster_status(
        None,
        Some(1),
        &fleet,
        &ok_secret(),
        Some(("NotOwned", why)),
        None,
        &now(),
    );
    for (t, status) in [
        ("Ready", "False"),
        ("Stalled", "True"),
        ("Degraded", "True"),
    ] {
        assert_eq!(
            (cond(&s, t).status.as_str(), cond(&s, t).reason.as_str()),
            (status, "NotOwned"),
            "{t}"
        );
        assert_eq!(cond(&s, t).message, why, "{t}");
    }
    assert_eq!(
        cond(&s, "SecretReady").status,
        "True",
        "the secret is judged on its own"
    );
    let cleared = cluster_status(Some(&s), Some(1), &fleet, &ok_secret(), None, None, &now());
    assert_eq!(cond(&cleared, "Ready").status, "True");
    assert_eq!(cond(&cleared, "Stalled").status, "False");
    assert_eq!(cond(&cleared, "Degraded").status, "False");
}

#[test]
fn fenced_hosts_degrade_and_transition_times_are_kept() {
    let mut fleet = FleetSummary {
        hosts: 2,
        counts: HostCounts {
            active: 1,
            fenced: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let first = cluster_status(None, Some(1), &fleet, &ok_secret(), None, None, &now());
    assert_eq!(cond(&first, "Degraded").status, "True");
    assert_eq!(cond(&first, "Degraded").reason, "HostsFenced");
    let later = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
    fleet.counts.active = 1;
    let second = cluster_status(
        Some(&first),
        Some(1),
        &fleet,
        &ok_secret(),
        None,
        None,
        &later,
    );
    assert_eq!(
        cond(&second, "Degraded").last_transition_time,
        cond(&first, "Degraded").last_transition_time,
        "no transition, no new timestamp"
    );
    fleet.counts.fenced = 0;
    let third = cluster_status(
        Some(&second),
        Some(1),
        &fleet,
        &ok_secret(),
        None,
        None,
        &later,
    );
    assert_eq!(cond(&third, "Degraded").status, "False");
    assert_eq!(cond(&third, "Degraded").last_transition_time, later);
}
