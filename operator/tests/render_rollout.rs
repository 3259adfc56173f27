//! Rollout, disruption and spread of a role's pods (operator/src/render/rollout.rs): the
//! one-host-at-a-time defaults, the role's overrides, and a default topology spread across nodes
//! and zones that a template's own replaces.

mod support;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use sigx_operator::render;
use support::*;

#[test]
fn the_role_may_change_the_rollout_and_the_disruption_budget() {
    let c = cluster(json!({}));
    let r = role(one_app(), None);
    let d = render::deployment(&c, &r).unwrap();
    let ru = d
        .spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .clone()
        .unwrap();
    assert_eq!(
        (ru.max_surge, ru.max_unavailable),
        (Some(IntOrString::Int(1)), Some(IntOrString::Int(0)))
    );
    assert_eq!(d.spec.min_ready_seconds, None);
    let pdb = render::pod_disruption_budget(&c, &r).unwrap().spec.unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));

    let mut r = role(one_app(), None);
    r.spec.rollout = Some(
        serde_json::from_value(json!({"maxSurge": "25%", "maxUnavailable": 1,
            "minReadySeconds": 10, "maxDisruption": "10%"}))
        .unwrap(),
    );
    let d = render::deployment(&c, &r).unwrap();
    let ru = d
        .spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .clone()
        .unwrap();
    assert_eq!(ru.max_surge, Some(IntOrString::String("25%".into())));
    assert_eq!(ru.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(d.spec.min_ready_seconds, Some(10));
    let pdb = render::pod_disruption_budget(&c, &r).unwrap().spec.unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::String("10%".into())));
}

#[test]
fn pods_spread_across_nodes_and_zones_unless_the_template_says_otherwise() {
    let d = render::deployment(&cluster(json!({})), &role(one_app(), None)).unwrap();
    let spread = pod(&d).topology_spread_constraints.clone().unwrap();
    let keys: Vec<_> = spread.iter().map(|s| s.topology_key.as_str()).collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    for s in &spread {
        assert_eq!(
            s.when_unsatisfiable, "ScheduleAnyway",
            "a preference, never unschedulable"
        );
        assert_eq!(s.max_skew, 1);
        assert_eq!(
            s.label_selector.as_ref().unwrap().match_labels,
            d.spec.selector.match_labels,
            "counts this role's pods"
        );
        assert_eq!(
            s.match_label_keys.as_deref(),
            Some(&["pod-template-hash".to_owned()][..])
        );
    }

    let own = role(
        json!({"containers": [{"name": "app", "image": "a"}],
            "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "rack",
                "whenUnsatisfiable": "DoNotSchedule"}]}),
        None,
    );
    let d = render::deployment(&cluster(json!({})), &own).unwrap();
    let spread = pod(&d).topology_spread_constraints.clone().unwrap();
    assert_eq!(spread.len(), 1);
    assert_eq!(spread[0].topology_key, "rack");
}
