//! How a role's pods are replaced, disrupted and spread.
//!
//! - Rollouts add one pod before removing one by default (maxSurge 1, maxUnavailable 0), so a
//!   rollout hands actors over one host at a time; `spec.rollout.maxSurge`/`maxUnavailable`
//!   trade that for speed on large roles, and `minReadySeconds` makes the Deployment wait
//!   before it counts a new pod available.
//! - The PodDisruptionBudget lets voluntary disruptions take one pod at a time by default;
//!   `spec.rollout.maxDisruption` changes it.
//! - Unless the template has `topologySpreadConstraints` of its own, the pods are spread across
//!   nodes and zones as a preference (`ScheduleAnyway`: a single-node or single-zone cluster
//!   still schedules them), counted per ReplicaSet (`matchLabelKeys: [pod-template-hash]`) so a
//!   rollout's old pods do not skew where the new ones go. A role whose hosts all sit on one
//!   node loses every activation at once when that node goes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{PodSpec, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sigx_crds::ActorRole;

/// The topology keys pods are spread over by default: nodes, then zones.
pub const SPREAD_KEYS: [&str; 2] = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"];

/// The Deployment's rolling update: the role's `spec.rollout`, else maxSurge 1, maxUnavailable 0.
pub fn strategy(role: &ActorRole) -> DeploymentStrategy {
    let rollout = role.spec.rollout.as_ref();
    DeploymentStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(
                rollout
                    .and_then(|r| r.max_surge.clone())
                    .unwrap_or(IntOrString::Int(1)),
            ),
            max_unavailable: Some(
                rollout
                    .and_then(|r| r.max_unavailable.clone())
                    .unwrap_or(IntOrString::Int(0)),
            ),
        }),
    }
}

/// The Deployment's `minReadySeconds`, when the role sets one.
pub fn min_ready_seconds(role: &ActorRole) -> Option<i32> {
    role.spec.rollout.as_ref().and_then(|r| r.min_ready_seconds)
}

/// The PodDisruptionBudget's `maxUnavailable`: the role's `spec.rollout.maxDisruption`, else 1.
pub fn max_disruption(role: &ActorRole) -> IntOrString {
    role.spec
        .rollout
        .as_ref()
        .and_then(|r| r.max_disruption.clone())
        .unwrap_or(IntOrString::Int(1))
}

/// Spreads the pods across [`SPREAD_KEYS`] unless the template spreads them itself.
pub(super) fn add_default_spread(pod: &mut PodSpec, selector: &BTreeMap<String, String>) {
    if pod
        .topology_spread_constraints
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        return;
    }
    pod.topology_spread_constraints = Some(
        SPREAD_KEYS
            .iter()
            .map(|key| TopologySpreadConstraint {
                max_skew: 1,
                topology_key: (*key).to_owned(),
                when_unsatisfiable: "ScheduleAnyway".to_owned(),
                label_selector: Some(LabelSelector {
                    match_labels: Some(selector.clone()),
                    match_expressions: None,
                }),
                match_label_keys: Some(vec!["pod-template-hash".to_owned()]),
                ..TopologySpreadConstraint::default()
            })
            .collect(),
    );
}
