//! ActorRole reconciliation: the Deployment with the sidecar and its PodDisruptionBudget, and
//! the role's status (replicas, ready replicas, hosts holding a Lease, selector).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, ActorRole, ActorRoleStatus, condition_types};
use tracing::info;

use super::Context;
pub use super::role_status::{RoleObservation, role_status};
use crate::error::ReconcileError;
use crate::render;

const KIND: &str = "ActorRole";

/// How long to wait before looking again for a cluster that does not exist yet (its creation
/// also triggers the role directly).
const MISSING_CLUSTER_RECHECK: Duration = Duration::from_secs(60);
/// How soon a role whose roll is paced looks again whether its turn has come, if no event of
/// its cluster's Deployments said so first (`pacing::roles_to_wake`). It is also how soon it
/// sees that the roll ahead of it crash-loops: a pod's status wakes nothing here (the operator
/// watches no pods), and a crash loop changes no Deployment. A paced role costs a Deployment
/// and a pod LIST per recheck, only while a roll is held.
const PACED_RECHECK: Duration = Duration::from_secs(15);

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
    if role.metadata.deletion_timestamp.is_some() {
        // Being deleted: the garbage collector takes the Deployment; re-applying it (with its
        // owner reference) would only hold a foreground deletion up.
        return Ok(Action::await_change());
    }
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
        ..RoleObservation::default()
    };

    let found = clusters
        .get_opt(cluster_name)
        .await
        .map_err(ReconcileError::kube(
            "reading",
            format!("ActorCluster {namespace}/{cluster_name}"),
        ))?;
    let missing = match &found {
        None => Some((
            "ClusterNotFound",
            format!(
                "ActorCluster {cluster_name} does not exist in namespace {namespace}; create it or fix spec.clusterRef"
            ),
        )),
        Some(c) if c.metadata.deletion_timestamp.is_some() => Some((
            "ClusterDeleting",
            format!("ActorCluster {cluster_name} is being deleted"),
        )),
        Some(_) => None,
    };
    let Some(cluster) = found.filter(|_| missing.is_none()) else {
        let (reason, why) = missing.unwrap_or_default();
        // The pods keep what they need: the role co-owns the cluster's ServiceAccount, RBAC
        // and generated Secret (render::co_owned_by_roles), so they stay until the role goes.
        let message = format!(
            "{why}; this role's pods keep running with its ServiceAccount and Secret, which the role co-owns, but the Deployment is not updated until the cluster exists again"
        );
        problem(ctx, role, reason, message.clone()).await;
        let status = role_status(
            role,
            &observed_before,
            previous.selector.clone(),
            Some((reason, message)),
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
            render::role_lease_binding(&cluster, role)?,
        ))
    });
    let (deployment, pdb, selector, binding) = match rendered {
        Ok(r) => r,
        Err(e) => {
            // The spec cannot be rendered (a reserved name in the template, ...): retrying will
            // not help until the user changes it, which triggers a new reconciliation.
            let (reason, message) = (e.reason(), e.to_string());
            problem(ctx, role, reason, message.clone()).await;
            let status = role_status(
                role,
                &observed_before,
                previous.selector.clone(),
                Some((reason, message)),
                &now,
            );
            write_status(ctx, role, namespace, name, status).await?;
            return Ok(Action::await_change());
        }
    };
    // Before the Deployment, so the pods' own account can renew Leases from their first beat.
    if let Err(e) = sync_role_binding(ctx, role, namespace, name, binding.as_ref()).await {
        return Err(refused(ctx, role, &observed_before, &previous, e, &now).await);
    }
    let live = match ctx.live_of(namespace, &deployment).await {
        Ok(live) => live,
        Err(e) => return Err(refused(ctx, role, &observed_before, &previous, e, &now).await),
    };
    let paced = match super::pacing::hold(ctx, &cluster, role, &deployment, live.as_ref()).await {
        Ok(paced) => paced,
        Err(e) => return Err(refused(ctx, role, &observed_before, &previous, e, &now).await),
    };
    if let (Some(why), Some(live)) = (paced, live.as_ref()) {
        // Its turn comes when the rolling role's Deployment completes: that Deployment's
        // change wakes this role (`pacing::roles_to_wake`); the requeue is a safety net.
        info!(why = %why, "roll paced");
        let mut observed = RoleObservation::of(live, hosts);
        observed.paced = Some(why);
        let status = role_status(role, &observed, Some(selector), None, &now);
        write_status(ctx, role, namespace, name, status).await?;
        return Ok(Action::requeue(PACED_RECHECK));
    }
    let applied = match ctx.apply_over(namespace, &deployment, live.as_ref()).await {
        Ok(d) => d,
        Err(e) => return Err(refused(ctx, role, &observed_before, &previous, e, &now).await),
    };
    if let Err(e) = ctx.apply(namespace, &pdb).await {
        return Err(refused(ctx, role, &observed_before, &previous, e, &now).await);
    }

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
    let observed = RoleObservation::of(&applied, hosts);
    let status = role_status(role, &observed, Some(selector), None, &now);
    if let Some(stalled) = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_types::STALLED && c.status == "True")
    {
        problem(ctx, role, &stalled.reason, stalled.message.clone()).await;
    }
    write_status(ctx, role, namespace, name, status).await?;
    Ok(Action::await_change())
}

/// Applies the RoleBinding of the role's own ServiceAccount, or deletes the one this role owns
/// once its template no longer names an account of its own (account.rs).
async fn sync_role_binding(
    ctx: &Context,
    role: &ActorRole,
    namespace: &str,
    name: &str,
    binding: Option<&RoleBinding>,
) -> Result<(), ReconcileError> {
    if let Some(binding) = binding {
        ctx.apply(namespace, binding).await?;
        return Ok(());
    }
    let binding_name = render::names::role_lease_binding(name);
    let api: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), namespace);
    let what = || format!("RoleBinding {namespace}/{binding_name}");
    let found = api
        .get_opt(&binding_name)
        .await
        .map_err(ReconcileError::kube("reading", what()))?;
    let ours = found.is_some_and(|b| {
        b.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(&o.uid) == role.metadata.uid.as_ref())
    });
    if ours {
        match api.delete(&binding_name, &DeleteParams::default()).await {
            Ok(_) => {
                info!(binding = %binding_name, "the template no longer names its own ServiceAccount: removed its Lease RoleBinding")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(ReconcileError::kube("deleting", what())(e)),
        }
    }
    Ok(())
}

/// An apply the API server refused for good (invalid template, a webhook or policy denial):
/// reported on the role as a Stalled condition with the server's message and a Warning Event,
/// then retried with the object's backoff (a webhook may be fixed without the role changing).
/// Transient failures are only retried.
async fn refused(
    ctx: &Context,
    role: &ActorRole,
    observed: &RoleObservation,
    previous: &ActorRoleStatus,
    error: ReconcileError,
    now: &Time,
) -> ReconcileError {
    let Some(what) = error.refusal() else {
        return error;
    };
    let (reason, message) = match &error {
        ReconcileError::NotOurs { .. } => ("NotOwned", what),
        _ => ("ApplyRejected", format!("the API server refused {what}")),
    };
    problem(ctx, role, reason, message.clone()).await;
    let status = role_status(
        role,
        observed,
        previous.selector.clone(),
        Some((reason, message)),
        now,
    );
    let (namespace, name) = (role.namespace().unwrap_or_default(), role.name_any());
    if let Err(e) = write_status(ctx, role, &namespace, &name, status).await {
        tracing::warn!(error = %e, "could not report the refused apply in the role's status");
    }
    error
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
