//! An ActorRole's status from what its Deployment reports; pure, so every rule is unit-tested.
//!
//! `Ready` is what Argo CD's and Flux's health checks read, so it means what `kubectl rollout
//! status` means plus sigx's own bar: the Deployment controller observed the current generation,
//! every desired pod runs the current template (`updatedReplicas`), no old pod is left
//! (`replicas`), all are available, and every host holds a membership Lease. Alongside, kstatus'
//! pair: `Reconciling` while that is expected to come on its own, `Stalled` when it cannot
//! without someone changing something (the API refused the Deployment, the ReplicaSet cannot
//! create pods, the progress deadline passed, the cluster is missing).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use sigx_crds::{ActorRole, ActorRoleStatus, condition_types};

use super::condition;

/// What the role's Deployment and Leases show.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoleObservation {
    /// `status.replicas`: pods of every ReplicaSet of the Deployment.
    pub replicas: i32,
    pub ready_replicas: i32,
    pub updated_replicas: i32,
    pub available_replicas: i32,
    /// Hosts of the role holding a membership Lease.
    pub hosts: i32,
    /// The Deployment's `metadata.generation` and `status.observedGeneration`.
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// The `ReplicaFailure` condition when True: reason and message (the ReplicaSet controller's
    /// report of a pod creation the API refused: quota, Pod Security, a webhook).
    pub replica_failure: Option<(String, String)>,
    /// The `Progressing` condition's message when it is False with `ProgressDeadlineExceeded`.
    pub deadline_exceeded: Option<String>,
    /// Why the role's new pod template waits for another role of its cluster to roll first
    /// (pacing.rs); the Deployment still has the old one.
    pub paced: Option<String>,
}

impl RoleObservation {
    /// Reads a Deployment as the API server returned it.
    pub fn of(deployment: &Deployment, hosts: i32) -> Self {
        let s = deployment.status.clone().unwrap_or_default();
        let conditions = s.conditions.unwrap_or_default();
        let find = |t: &str, status: &str| {
            conditions
                .iter()
                .find(|c| c.type_.as_deref() == Some(t) && c.status.as_deref() == Some(status))
                .cloned()
        };
        Self {
            replicas: s.replicas.unwrap_or(0),
            ready_replicas: s.ready_replicas.unwrap_or(0),
            updated_replicas: s.updated_replicas.unwrap_or(0),
            available_replicas: s.available_replicas.unwrap_or(0),
            hosts,
            generation: deployment.metadata.generation,
            observed_generation: s.observed_generation,
            replica_failure: find("ReplicaFailure", "True").map(|c| {
                (
                    c.reason.unwrap_or_else(|| "ReplicaFailure".into()),
                    c.message.unwrap_or_default(),
                )
            }),
            deadline_exceeded: find("Progressing", "False")
                .filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
                .map(|c| c.message.unwrap_or_default()),
            paced: None,
        }
    }
}

/// Ready / Reconciling / Stalled verdict: (ready, reconciling, stalled, reason, message).
fn verdict(
    want: i32,
    o: &RoleObservation,
    problem: Option<(&str, String)>,
) -> (bool, bool, bool, String, String) {
    if let Some((reason, message)) = problem {
        return (false, false, true, reason.to_owned(), message);
    }
    if let Some((why, message)) = &o.replica_failure {
        return (
            false,
            false,
            true,
            "PodsRejected".into(),
            format!("the ReplicaSet cannot create pods ({why}): {message}"),
        );
    }
    if let Some(message) = &o.deadline_exceeded {
        return (
            false,
            false,
            true,
            "ProgressDeadlineExceeded".into(),
            message.clone(),
        );
    }
    if let Some(message) = &o.paced {
        return (
            false,
            true,
            false,
            super::pacing::PACED_REASON.into(),
            message.clone(),
        );
    }
    if o.generation.is_none() || o.observed_generation < o.generation {
        return (
            false,
            true,
            false,
            "RolloutPending".into(),
            format!(
                "the Deployment controller has not yet observed generation {} of the Deployment",
                o.generation.unwrap_or_default()
            ),
        );
    }
    if o.updated_replicas < want || o.replicas > o.updated_replicas || o.available_replicas < want {
        return (
            false,
            true,
            false,
            "RolloutInProgress".into(),
            format!(
                "rollout in progress: {} of {want} pod(s) updated, {} available, {} in total",
                o.updated_replicas, o.available_replicas, o.replicas
            ),
        );
    }
    if o.hosts < want {
        return (
            false,
            true,
            false,
            "HostsNotJoined".into(),
            format!("{} of {want} host(s) hold a membership Lease", o.hosts),
        );
    }
    (
        true,
        false,
        false,
        "RolloutComplete".into(),
        format!(
            "{want} pod(s) updated and available, {} host(s) joined",
            o.hosts
        ),
    )
}

/// Builds a role's status. `problem` is a reason/message pair when the role's Deployment cannot
/// be (re)written: no cluster, an invalid spec, an apply the API refused.
pub fn role_status(
    role: &ActorRole,
    observed: &RoleObservation,
    selector: Option<String>,
    problem: Option<(&str, String)>,
    now: &Time,
) -> ActorRoleStatus {
    let previous = role
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = role.metadata.generation;
    let cond = |type_: &str, ok: bool, reason: &str, message: String| -> Condition {
        condition(previous, type_, ok, reason, message, generation, now)
    };
    let (ready, reconciling, stalled, reason, message) =
        verdict(role.spec.replicas, observed, problem);
    let degraded = if stalled {
        cond(condition_types::DEGRADED, true, &reason, message.clone())
    } else {
        cond(
            condition_types::DEGRADED,
            false,
            "AsExpected",
            "the Deployment is rendered from the current spec and its pods can be created"
                .to_owned(),
        )
    };
    let (reconciling_reason, stalled_reason) = match (reconciling, stalled) {
        (true, _) => (reason.as_str(), "Progressing"),
        (_, true) => ("Stalled", reason.as_str()),
        _ => ("RolloutComplete", "Progressing"),
    };
    let quiet = |what: &str| {
        if ready {
            "the rollout completed".to_owned()
        } else {
            format!("not {what}: {message}")
        }
    };
    ActorRoleStatus {
        observed_generation: generation,
        replicas: observed.replicas,
        ready_replicas: observed.ready_replicas,
        hosts: observed.hosts,
        selector,
        conditions: vec![
            cond(condition_types::READY, ready, &reason, message.clone()),
            cond(
                condition_types::RECONCILING,
                reconciling,
                reconciling_reason,
                if reconciling {
                    message.clone()
                } else {
                    quiet("reconciling")
                },
            ),
            cond(
                condition_types::STALLED,
                stalled,
                stalled_reason,
                if stalled {
                    message.clone()
                } else {
                    quiet("stalled")
                },
            ),
            degraded,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(replicas: i32) -> ActorRole {
        serde_json::from_value(json!({
            "apiVersion": "actors.sigx.dev/v1alpha1",
            "kind": "ActorRole",
            "metadata": {"name": "engine", "namespace": "apps", "uid": "u", "generation": 4},
            "spec": {
                "clusterRef": {"name": "demo"},
                "replicas": replicas,
                "actors": ["Counter"],
                "template": {"spec": {"containers": [{"name": "app", "image": "x"}]}}
            }
        }))
        .unwrap()
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap())
    }

    fn done(n: i32) -> RoleObservation {
        RoleObservation {
            replicas: n,
            ready_replicas: n,
            updated_replicas: n,
            available_replicas: n,
            hosts: n,
            generation: Some(2),
            observed_generation: Some(2),
            replica_failure: None,
            deadline_exceeded: None,
            paced: None,
        }
    }

    fn get<'a>(s: &'a ActorRoleStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    fn check(o: RoleObservation, ready: &str, reason: &str) -> ActorRoleStatus {
        let s = role_status(&role(3), &o, Some("sel".into()), None, &now());
        let r = get(&s, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            (ready, reason),
            "{o:?}"
        );
        s
    }

    #[test]
    fn ready_means_the_rollout_completed_and_hosts_joined() {
        let s = check(done(3), "True", "RolloutComplete");
        assert_eq!(get(&s, "Reconciling").status, "False");
        assert_eq!(get(&s, "Stalled").status, "False");
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.selector.as_deref(), Some("sel"));

        let unobserved = RoleObservation {
            observed_generation: Some(1),
            ..done(3)
        };
        let s = check(unobserved, "False", "RolloutPending");
        assert_eq!(get(&s, "Reconciling").status, "True");
        // Ready pods of the old template are not a finished rollout.
        for o in [
            RoleObservation {
                updated_replicas: 2,
                ..done(3)
            },
            RoleObservation {
                replicas: 4,
                ..done(3)
            },
            RoleObservation {
                available_replicas: 1,
                ..done(3)
            },
        ] {
            let s = check(o, "False", "RolloutInProgress");
            assert_eq!(get(&s, "Reconciling").status, "True");
            assert_eq!(get(&s, "Stalled").status, "False");
        }
        check(
            RoleObservation {
                hosts: 1,
                ..done(3)
            },
            "False",
            "HostsNotJoined",
        );
    }

    #[test]
    fn rejections_and_deadlines_stall_with_the_api_message() {
        let rejected = RoleObservation {
            replica_failure: Some((
                "FailedCreate".into(),
                "pods \"x\" is forbidden: quota".into(),
            )),
            ..done(3)
        };
        let s = check(rejected, "False", "PodsRejected");
        let stalled = get(&s, "Stalled");
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", "PodsRejected")
        );
        assert!(stalled.message.contains("FailedCreate") && stalled.message.contains("quota"));
        assert_eq!(get(&s, "Reconciling").status, "False");
        assert_eq!(get(&s, "Degraded").status, "True");
        let late = RoleObservation {
            deadline_exceeded: Some("ReplicaSet \"x\" has timed out progressing.".into()),
            ..done(3)
        };
        check(late, "False", "ProgressDeadlineExceeded");
        // A roll held for another role's: in progress, not Ready, not stalled.
        let paced = RoleObservation {
            paced: Some("waiting for role web".into()),
            ..done(3)
        };
        let s = role_status(&role(3), &paced, None, None, &now());
        let ready = get(&s, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "RollPaced")
        );
        assert_eq!(ready.message, "waiting for role web");
        assert_eq!(get(&s, "Reconciling").status, "True");
        assert_eq!(get(&s, "Stalled").status, "False");
        let p = role_status(
            &role(3),
            &done(3),
            None,
            Some(("ClusterNotFound", "m".into())),
            &now(),
        );
        assert_eq!(get(&p, "Ready").status, "False");
        assert_eq!(get(&p, "Stalled").reason, "ClusterNotFound");
        assert_eq!(get(&p, "Degraded").reason, "ClusterNotFound");
    }
}
