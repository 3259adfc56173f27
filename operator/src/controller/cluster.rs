//! ActorCluster reconciliation: RBAC for the sidecars, the cluster secret, and the fleet
//! status read from the cluster's Leases.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, ActorClusterStatus, condition_types};
use tracing::{info, warn};

use super::{Context, condition, condition_status};
use crate::error::ReconcileError;
use crate::fleet::{self, FleetSummary};
use crate::render;

const KIND: &str = "ActorCluster";

/// How often a healthy cluster is reconciled with nothing having changed (three reads and
/// applies, and a Secret read; BENCHMARKS.md, "Operator idle API load").
const RESYNC: Duration = Duration::from_secs(300);

/// Whether the cluster's sidecars have a usable secret, and why (for the `SecretReady`
/// condition). Never carries the secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretState {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Builds the status from the fleet summary and the secret state; pure, so the conditions'
/// rules are unit-tested. `stalled` is (reason, message) of what the operator cannot get past
/// without someone changing something: a spec error the API server's validation let through
/// (`InvalidSpec`), a cluster-level object sigx did not make (`NotOwned`), an apply the API
/// server refused (`ApplyRejected`). It makes `Ready` False and `Stalled` True (kstatus).
pub fn cluster_status(
    previous: Option<&ActorClusterStatus>,
    generation: Option<i64>,
    fleet: &FleetSummary,
    secret: &SecretState,
    stalled: Option<(&str, &str)>,
    membership_version: Option<i64>,
    now: &Time,
) -> ActorClusterStatus {
    let prev = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let summary = ActorClusterStatus::summary_line(fleet.hosts, fleet.nodes);
    let (ready, ready_reason, ready_msg) = if let Some((reason, why)) = stalled {
        (false, reason, why.to_owned())
    } else if !secret.ready {
        (false, "SecretNotReady", secret.message.clone())
    } else if fleet.counts.active == 0 {
        (
            false,
            "NoActiveHosts",
            format!("{summary}; no host is active yet"),
        )
    } else {
        (
            true,
            "HostsActive",
            format!("{summary}; {} active", fleet.counts.active),
        )
    };
    let mut troubles = Vec::new();
    if let Some((reason, why)) = stalled {
        troubles.push((reason, why.to_owned()));
    }
    if fleet.counts.fenced > 0 {
        troubles.push((
            "HostsFenced",
            format!(
                "{} host(s) fenced or stopped renewing their Lease; peers will drop them",
                fleet.counts.fenced
            ),
        ));
    }
    if fleet.unreadable > 0 {
        troubles.push((
            "UnreadableDescriptors",
            format!(
                "{} Lease(s) carry no readable {} annotation; check the sidecar version",
                fleet.unreadable,
                fleet::DESCRIPTOR_ANNOTATION
            ),
        ));
    }
    // An invalid spec leaves the secret unread with the same reason: said once.
    if !secret.ready && stalled.is_none_or(|(reason, _)| reason != secret.reason) {
        troubles.push((secret.reason, secret.message.clone()));
    }
    let degraded = match troubles.first() {
        Some((reason, _)) => condition(
            prev,
            condition_types::DEGRADED,
            true,
            reason,
            troubles
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
            generation,
            now,
        ),
        None => condition(
            prev,
            condition_types::DEGRADED,
            false,
            "AsExpected",
            "no host is fenced and every descriptor is readable".to_owned(),
            generation,
            now,
        ),
    };
    ActorClusterStatus {
        observed_generation: generation,
        hosts: fleet.hosts,
        nodes: fleet.nodes,
        counts: fleet.counts,
        roles: fleet.roles.clone(),
        membership_version,
        conditions: vec![
            condition(
                prev,
                condition_types::READY,
                ready,
                ready_reason,
                ready_msg,
                generation,
                now,
            ),
            degraded,
            match stalled {
                Some((reason, why)) => condition(
                    prev,
                    condition_types::STALLED,
                    true,
                    reason,
                    why.to_owned(),
                    generation,
                    now,
                ),
                None => condition(
                    prev,
                    condition_types::STALLED,
                    false,
                    "AsExpected",
                    "the cluster's ServiceAccount, Lease Role and RoleBinding are applied"
                        .to_owned(),
                    generation,
                    now,
                ),
            },
            condition(
                prev,
                condition_types::SECRET_READY,
                secret.ready,
                secret.reason,
                secret.message.clone(),
                generation,
                now,
            ),
        ],
        summary: Some(summary),
    }
}

/// Reconciles one ActorCluster.
pub async fn reconcile(
    cluster: Arc<ActorCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let (cluster, ctx) = (&*cluster, &*ctx);
    super::instrumented(KIND, cluster, ctx, |namespace, name| async move {
        reconcile_inner(cluster, ctx, &namespace, &name).await
    })
    .await
}

async fn reconcile_inner(
    cluster: &ActorCluster,
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    let previous = cluster.status.as_ref();
    let generation = cluster.metadata.generation;
    let roles: Vec<Arc<sigx_crds::ActorRole>> = ctx
        .roles
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(namespace) && r.spec.cluster_ref.name == name)
        .collect();
    if cluster.metadata.deletion_timestamp.is_some() {
        // Being deleted (a foreground delete, or another controller's finalizer): writing now
        // would re-add the owner reference the garbage collector is removing from the objects
        // the roles co-own, and hold the deletion up. Nothing to do but say what stays.
        deleting(ctx, cluster, &roles).await;
        return Ok(Action::await_change());
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());

    // A spec the API server's rules would refuse (auth modes, state without its Secret).
    let checked =
        render::secret_source(cluster).and_then(|s| render::state_mode(cluster).map(|_| s));
    let source = match checked {
        Ok(s) => s,
        Err(e) => {
            // CEL refuses this at admission; this guards objects that predate the rule.
            let why = e.to_string();
            let was_invalid = previous
                .and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == condition_types::READY)
                })
                .is_some_and(|c| c.reason == "InvalidSpec");
            if !was_invalid {
                ctx.event(
                    cluster,
                    Event {
                        type_: EventType::Warning,
                        reason: "InvalidSpec".into(),
                        note: Some(why.clone()),
                        action: "Reconcile".into(),
                        secondary: None,
                    },
                )
                .await;
            }
            let secret = SecretState {
                ready: false,
                reason: "InvalidSpec",
                message: why.clone(),
            };
            let status = cluster_status(
                previous,
                generation,
                &FleetSummary::default(),
                &secret,
                Some(("InvalidSpec", &why)),
                None,
                &now,
            );
            write_status(ctx, cluster, namespace, name, status).await?;
            return Ok(Action::await_change());
        }
    };
    let object = format!("{KIND} {namespace}/{name}");
    let sa = render::service_account(cluster).map_err(ReconcileError::render(&object))?;
    let role = render::lease_role(cluster).map_err(ReconcileError::render(&object))?;
    let binding = render::lease_role_binding(cluster).map_err(ReconcileError::render(&object))?;
    // The roles co-own what their pods need, so deleting the cluster first does not break them
    // (see `render::co_owned_by_roles`).
    let live: Vec<&sigx_crds::ActorRole> = roles
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(|r| &**r)
        .collect();
    // In this order, stopping at the first refused: a RoleBinding must not grant Leases to a
    // ServiceAccount someone else made under the cluster's account name.
    let applied = async {
        ctx.apply(namespace, &render::co_owned_by_roles(sa, &live))
            .await?;
        ctx.apply(namespace, &render::co_owned_by_roles(role, &live))
            .await?;
        ctx.apply(namespace, &render::co_owned_by_roles(binding, &live))
            .await
    }
    .await;
    // Refused for good (not ours, forbidden, invalid): said in the status, then retried with
    // the cluster's backoff, since the foreign object's deletion or an RBAC fix is not watched.
    let refused = match applied {
        Ok(_) => None,
        Err(e) => match e.refusal() {
            Some(what) => Some((e, what)),
            None => return Err(e),
        },
    };
    let stalled = refused.as_ref().map(|(e, what)| match e {
        ReconcileError::NotOurs { .. } => ("NotOwned", what.clone()),
        _ => ("ApplyRejected", format!("the API server refused {what}")),
    });
    let secret = super::secret::ensure_secret(cluster, ctx, namespace, &source, &live).await?;
    let secret_ready = secret.ready;

    let tnow = tokio::time::Instant::now();
    let hosts: Vec<fleet::HostRecord> = ctx
        .cluster_leases(namespace, name, None)
        .iter()
        .map(|l| fleet::host_record(l, ctx.renewals.lapsed(l, tnow)))
        .collect();
    let version = ctx.memberships.version(
        namespace,
        name,
        &hosts,
        previous.and_then(|s| s.membership_version),
    );
    let roles: Vec<String> = roles.iter().map(|r| r.name_any()).collect();
    let summary = fleet::summarize(&hosts, roles.iter().map(String::as_str));
    let status = cluster_status(
        previous,
        generation,
        &summary,
        &secret,
        stalled.as_ref().map(|(r, m)| (*r, m.as_str())),
        Some(version),
        &now,
    );

    let before = previous.map(|s| (s.hosts, s.nodes, s.counts));
    if before != Some((status.hosts, status.nodes, status.counts)) {
        let line = status.summary.clone().unwrap_or_default();
        info!(summary = %line, active = status.counts.active, fenced = status.counts.fenced, "fleet changed");
        ctx.event(
            cluster,
            Event {
                type_: EventType::Normal,
                reason: "FleetChanged".into(),
                note: Some(format!(
                    "{line}: {} active, {} joining, {} leaving, {} fenced",
                    status.counts.active,
                    status.counts.joining,
                    status.counts.leaving,
                    status.counts.fenced
                )),
                action: "Observe".into(),
                secondary: None,
            },
        )
        .await;
    }
    let was_degraded =
        previous.and_then(|s| condition_status(&s.conditions, condition_types::DEGRADED));
    let is_degraded = condition_status(&status.conditions, condition_types::DEGRADED);
    let was_stalled = previous
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == condition_types::STALLED)
        })
        .filter(|c| c.status == "True")
        .map(|c| c.reason.as_str());
    if let Some((reason, message)) = &stalled {
        // Once per reason, as a role's problems (not on every retry).
        if was_stalled != Some(*reason) {
            warn!(reason, %message, "cluster stalled");
            ctx.event(
                cluster,
                Event {
                    type_: EventType::Warning,
                    reason: (*reason).into(),
                    note: Some(message.clone()),
                    action: "Reconcile".into(),
                    secondary: None,
                },
            )
            .await;
        }
    } else if is_degraded == Some("True") && was_degraded != Some("True") {
        let note = status
            .conditions
            .iter()
            .find(|c| c.type_ == condition_types::DEGRADED)
            .map(|c| c.message.clone());
        warn!(reason = ?note, "cluster degraded");
        ctx.event(
            cluster,
            Event {
                type_: EventType::Warning,
                reason: "Degraded".into(),
                note,
                action: "Observe".into(),
                secondary: None,
            },
        )
        .await;
    }
    if previous != Some(&status) {
        write_status(ctx, cluster, namespace, name, status).await?;
    }
    if let Some((error, _)) = refused {
        return Err(error);
    }
    // Reconciled on change: a spec, an owned object, a role, a Lease appearing, going,
    // relabelled or starting or ceasing to lapse (`track_leases` judges lapses in memory). Two
    // exceptions poll: a referenced Secret is not watched (watching every Secret in scope would
    // cache them all), so while it is missing or unusable the cluster is looked at every beat;
    // and a slow resync catches what no watch reports (an edit of a referenced Secret).
    Ok(if secret_ready {
        Action::requeue(RESYNC)
    } else {
        Action::requeue(Duration::from_secs(
            u64::try_from(cluster.spec.membership.heartbeat_seconds.max(1)).unwrap_or(5),
        ))
    })
}

async fn write_status(
    ctx: &Context,
    cluster: &ActorCluster,
    namespace: &str,
    name: &str,
    status: ActorClusterStatus,
) -> Result<(), ReconcileError> {
    if cluster.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<ActorCluster> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = json!({
        "apiVersion": "actors.sigx.dev/v1alpha1",
        "kind": "ActorCluster",
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

/// What a cluster being deleted tells: which roles keep its objects alive.
async fn deleting(ctx: &Context, cluster: &ActorCluster, roles: &[Arc<sigx_crds::ActorRole>]) {
    let names: Vec<String> = roles.iter().map(|r| r.name_any()).collect();
    let note = if names.is_empty() {
        "deleting: no ActorRole references this cluster; its ServiceAccount, RBAC and generated Secret go with it".to_owned()
    } else {
        format!(
            "deleting while ActorRole(s) {} reference this cluster: their pods keep running with the ServiceAccount, Lease RBAC and generated Secret the roles co-own; delete the roles to remove them, or re-create the cluster to resume",
            names.join(", ")
        )
    };
    info!(roles = ?names, "cluster is being deleted");
    ctx.event(
        cluster,
        Event {
            type_: EventType::Normal,
            reason: "Deleting".into(),
            note: Some(note),
            action: "Delete".into(),
            secondary: None,
        },
    )
    .await;
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
