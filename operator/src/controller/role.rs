//! ActorRole reconciliation: the Deployment with the sidecar and its PodDisruptionBudget, and
//! the role's status (replicas, ready replicas, hosts holding a Lease, selector).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, ActorRole, ActorRoleStatus, condition_types};
use tracing::info;

use super::{Context, condition};
use crate::error::ReconcileError;
use crate::render;

const KIND: &str = "ActorRole";

/// How long to wait before looking again for a cluster that does not exist yet (its creation
/// also triggers the role directly).
const MISSING_CLUSTER_RECHECK: Duration = Duration::from_secs(60);

/// Counts that make up a role's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoleObservation {
    pub replicas: i32,
    pub ready_replicas: i32,
    pub hosts: i32,
}

/// Builds a role's status; pure. `problem` is a reason/message pair when the role cannot be
/// rendered (no cluster, invalid spec).
pub fn role_status(
    role: &ActorRole,
    observed: RoleObservation,
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
    let want = role.spec.replicas;
    let (ready, reason, message) = match &problem {
        Some((reason, message)) => (false, *reason, message.clone()),
        None if observed.ready_replicas < want => (
            false,
            "PodsNotReady",
            format!("{} of {want} pod(s) ready", observed.ready_replicas),
        ),
        None if observed.hosts < want => (
            false,
            "HostsNotJoined",
            format!(
                "{} of {want} host(s) hold a membership Lease",
                observed.hosts
            ),
        ),
        None => (
            true,
            "AllReady",
            format!("{want} pod(s) ready, {} host(s) joined", observed.hosts),
        ),
    };
    let degraded = match &problem {
        Some((reason, message)) => condition(
            previous,
            condition_types::DEGRADED,
            true,
            reason,
            message.clone(),
            generation,
            now,
        ),
        None => condition(
            previous,
            condition_types::DEGRADED,
            false,
            "AsExpected",
            "the Deployment is rendered from the current spec".to_owned(),
            generation,
            now,
        ),
    };
    ActorRoleStatus {
        observed_generation: generation,
        replicas: observed.replicas,
        ready_replicas: observed.ready_replicas,
        hosts: observed.hosts,
        selector,
        conditions: vec![
            condition(
                previous,
                condition_types::READY,
                ready,
                reason,
                message,
                generation,
                now,
            ),
            degraded,
        ],
    }
}

/// Reconciles one ActorRole.
pub async fn reconcile(role: Arc<ActorRole>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let (role, ctx) = (&*role, &*ctx);
    super::instrumented(KIND, role, ctx, |namespace, name| async move {
        reconcile_inner(role, ctx, &namespace, &name).await
    })
    .await
}

async fn reconcile_inner(
    role: &ActorRole,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let cluster_name = &role.spec.cluster_ref.name;
    let clusters: Api<ActorCluster> = Api::namespaced(ctx.client.clone(), namespace);
    let hosts = i32::try_from(
        ctx.cluster_leases(namespace, cluster_name, Some(name))
            .len(),
    )
    .unwrap_or(i32::MAX);
    let previous = role.status.clone().unwrap_or_default();
    let observed_before = RoleObservation {
        replicas: previous.replicas,
        ready_replicas: previous.ready_replicas,
        hosts,
    };

    let Some(cluster) = clusters
        .get_opt(cluster_name)
        .await
        .map_err(ReconcileError::kube(
            "reading",
            format!("ActorCluster {namespace}/{cluster_name}"),
        ))?
    else {
        let message = format!(
            "ActorCluster {cluster_name} does not exist in namespace {namespace}; create it or fix spec.clusterRef"
        );
        problem(ctx, role, "ClusterNotFound", message.clone()).await;
        let status = role_status(
            role,
            observed_before,
            previous.selector.clone(),
            Some(("ClusterNotFound", message)),
            &now,
        );
        write_status(ctx, role, namespace, name, status).await?;
        return Ok(Action::requeue(MISSING_CLUSTER_RECHECK));
    };

    let rendered = render::deployment(&cluster, role).and_then(|d| {
        Ok((
            d,
            render::pod_disruption_budget(&cluster, role)?,
            render::selector_string(&cluster, role)?,
        ))
    });
    let (deployment, pdb, selector) = match rendered {
        Ok(r) => r,
        Err(e) => {
            // The spec cannot be rendered (a reserved name in the template, ...): retrying will
            // not help until the user changes it, which triggers a new reconciliation.
            let message = e.to_string();
            problem(ctx, role, "InvalidSpec", message.clone()).await;
            let status = role_status(
                role,
                observed_before,
                previous.selector.clone(),
                Some(("InvalidSpec", message)),
                &now,
            );
            write_status(ctx, role, namespace, name, status).await?;
            return Ok(Action::await_change());
        }
    };
    let applied = ctx.apply(namespace, &deployment).await?;
    ctx.apply(namespace, &pdb).await?;

    if previous.observed_generation != role.metadata.generation {
        info!(replicas = role.spec.replicas, generation = ?role.metadata.generation, "rendered the Deployment");
        ctx.event(
            role,
            Event {
                type_: EventType::Normal,
                reason: "Rendered".into(),
                note: Some(format!(
                    "Deployment {} and its PodDisruptionBudget rendered for generation {} ({} replica(s))",
                    applied.name_any(),
                    role.metadata.generation.unwrap_or_default(),
                    role.spec.replicas
                )),
                action: "Apply".into(),
                secondary: Some(applied.object_ref(&())),
            },
        )
        .await;
    }
    let dstatus = applied.status.clone().unwrap_or_default();
    let observed = RoleObservation {
        replicas: dstatus.replicas.unwrap_or(0),
        ready_replicas: dstatus.ready_replicas.unwrap_or(0),
        hosts,
    };
    let status = role_status(role, observed, Some(selector), None, &now);
    write_status(ctx, role, namespace, name, status).await?;
    Ok(Action::await_change())
}

/// Publishes a Warning the first time a role hits a problem (not on every retry).
async fn problem(ctx: &Context, role: &ActorRole, reason: &str, message: String) {
    let already = role
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == condition_types::DEGRADED)
        })
        .is_some_and(|c| c.status == "True" && c.reason == reason);
    if !already {
        ctx.event(
            role,
            Event {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(message),
                action: "Reconcile".into(),
                secondary: None,
            },
        )
        .await;
    }
}

async fn write_status(
    ctx: &Context,
    role: &ActorRole,
    namespace: &str,
    name: &str,
    status: ActorRoleStatus,
) -> Result<(), ReconcileError> {
    if role.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<ActorRole> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = json!({
        "apiVersion": "actors.sigx.dev/v1alpha1",
        "kind": "ActorRole",
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(&ctx.field_manager).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(ReconcileError::kube(
        "writing status",
        format!("{KIND} {namespace}/{name}"),
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ready_needs_ready_pods_and_joined_hosts() {
        let r = role(3);
        let obs = |ready, hosts| RoleObservation {
            replicas: 3,
            ready_replicas: ready,
            hosts,
        };
        let s = role_status(&r, obs(3, 3), Some("sel".into()), None, &now());
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.selector.as_deref(), Some("sel"));
        assert_eq!(
            role_status(&r, obs(2, 3), None, None, &now()).conditions[0].reason,
            "PodsNotReady"
        );
        assert_eq!(
            role_status(&r, obs(3, 1), None, None, &now()).conditions[0].reason,
            "HostsNotJoined"
        );
        let p = role_status(
            &r,
            obs(3, 3),
            None,
            Some(("ClusterNotFound", "m".into())),
            &now(),
        );
        assert_eq!(p.conditions[0].status, "False");
        assert_eq!(p.conditions[1].status, "True");
        assert_eq!(p.conditions[1].reason, "ClusterNotFound");
    }
}
