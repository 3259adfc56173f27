//! The two controllers and what they share.
//!
//! - [`cluster`]: ActorCluster → ServiceAccount, Role and RoleBinding on Leases, the generated
//!   Secret, and a status aggregated from the cluster's Leases.
//! - [`role`]: ActorRole → Deployment and PodDisruptionBudget, and the role's status.
//!
//! Both render desired objects with the pure functions in [`crate::render`] and write them with
//! server-side apply under one field manager, so a reconciliation is idempotent and a no-op when
//! nothing changed. One Lease watch ([`track_leases`]) feeds both: it keeps the Lease cache,
//! notes when each `renewTime` changed (for lapse judgement), and triggers a reconciliation only
//! when something the status shows changed — not on every heartbeat.

pub mod cluster;
pub mod pacing;
pub mod role;
mod role_status;
mod secret;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sigx_crds::{ActorCluster, ActorRole, labels};
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::error::ReconcileError;
use crate::fleet::{DESCRIPTOR_ANNOTATION, MembershipVersions, RenewTracker};
use crate::metrics::Metrics;

/// A namespaced kind the operator reads and server-side applies.
pub(crate) trait Applied:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}

impl<K> Applied for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

/// Everything a reconciliation needs.
pub struct Context {
    pub client: Client,
    /// The server-side apply field manager (`sigx-operator`).
    pub field_manager: String,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    /// Every sigx Lease in scope (labelled with a cluster).
    pub leases: Store<Lease>,
    pub renewals: Arc<RenewTracker>,
    pub memberships: MembershipVersions,
    /// The role controller's cache of ActorRoles.
    pub roles: Store<ActorRole>,
    /// The source of generated cluster secrets: 32 bytes from the OS-seeded CSPRNG in
    /// production, injectable so tests never depend on randomness.
    pub random: Arc<dyn Fn() -> [u8; 32] + Send + Sync>,
}

impl Context {
    /// Server-side applies `obj`, never onto an object sigx did not make: the live object is
    /// read first, and one without sigx's managed-by label is refused as
    /// [`ReconcileError::NotOurs`]. The read is needed because an apply onto a foreign object
    /// conflicts only where both set a field to different values: a foreign ServiceAccount
    /// (sigx sets only its labels and owner references), or a RoleBinding with the same
    /// `roleRef`, would be silently co-owned, labelled as sigx's and later garbage-collected
    /// with the cluster. An object sigx made is applied with force (a `kubectl scale`, an older
    /// operator's field manager are put back); an absent one without, so one someone makes in
    /// between conflicts rather than being adopted.
    pub(crate) async fn apply<K>(&self, namespace: &str, obj: &K) -> Result<K, ReconcileError>
    where
        K: Applied,
    {
        let live = self.live_of(namespace, obj).await?;
        self.apply_over(namespace, obj, live.as_ref()).await
    }

    /// The live object of `obj`'s name, if sigx made it (one without sigx's managed-by label
    /// is refused as [`ReconcileError::NotOurs`]): the first half of [`Context::apply`], for a
    /// caller that decides from the live object whether to apply.
    pub(crate) async fn live_of<K>(
        &self,
        namespace: &str,
        obj: &K,
    ) -> Result<Option<K>, ReconcileError>
    where
        K: Applied,
    {
        let name = obj.name_any();
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let what = format!("{} {namespace}/{name}", K::kind(&()));
        let live = api
            .get_opt(&name)
            .await
            .map_err(ReconcileError::kube("reading", what.clone()))?;
        if let Some(live) = live.as_ref().filter(|l| !made_by_sigx(l.meta())) {
            return Err(self.not_ours(what, live.meta()));
        }
        Ok(live)
    }

    /// The second half of [`Context::apply`]: applies `obj` over `live` as [`Context::live_of`]
    /// read it (with force onto sigx's own object, without onto none).
    pub(crate) async fn apply_over<K>(
        &self,
        namespace: &str,
        obj: &K,
        live: Option<&K>,
    ) -> Result<K, ReconcileError>
    where
        K: Applied,
    {
        let name = obj.name_any();
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let what = format!("{} {namespace}/{name}", K::kind(&()));
        let mut params = PatchParams::apply(&self.field_manager);
        if live.is_some() {
            params = params.force();
        }
        match api.patch(&name, &params, &Patch::Apply(obj)).await {
            Err(kube::Error::Api(s)) if s.code == 409 && live.is_none() => {
                // Made by someone else since the read.
                let meta = self.live_of(namespace, obj).await.err();
                Err(meta.unwrap_or_else(|| self.not_ours(what, &Default::default())))
            }
            done => done.map_err(ReconcileError::kube("applying", what)),
        }
    }

    /// The refusal of an object sigx did not make, naming its field managers.
    fn not_ours(
        &self,
        object: String,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> ReconcileError {
        let mut managers: Vec<String> = meta
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.clone())
            .filter(|m| *m != self.field_manager)
            .collect();
        managers.dedup();
        ReconcileError::NotOurs {
            object,
            managers: if managers.is_empty() {
                "another manager".to_owned()
            } else {
                managers.join(", ")
            },
        }
    }

    /// Publishes an Event about `obj`. Events are best effort: a failure is logged, never
    /// fails the reconciliation.
    pub(crate) async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, event: Event) {
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, reason = %event.reason, "could not publish an event");
        }
    }

    /// The Leases of one cluster (optionally one role of it).
    pub(crate) fn cluster_leases(
        &self,
        namespace: &str,
        cluster: &str,
        role: Option<&str>,
    ) -> Vec<Arc<Lease>> {
        self.leases
            .state()
            .into_iter()
            .filter(|l| l.metadata.namespace.as_deref() == Some(namespace))
            .filter(|l| {
                let lbl = l.metadata.labels.as_ref();
                lbl.and_then(|m| m.get(labels::CLUSTER)).map(String::as_str) == Some(cluster)
                    && role.is_none_or(|r| {
                        lbl.and_then(|m| m.get(labels::ROLE)).map(String::as_str) == Some(r)
                    })
            })
            .collect()
    }
}

/// A condition, keeping `lastTransitionTime` from `previous` when the status did not change.
/// What every reconcile does around its own work: a span naming the object, the reconcile
/// counter and duration histogram by kind, and resetting the object's error backoff on success.
/// `work` gets the object's namespace and name.
pub(crate) async fn instrumented<K, Fut>(
    kind: &'static str,
    obj: &K,
    ctx: &Context,
    work: impl FnOnce(String, String) -> Fut,
) -> Result<kube::runtime::controller::Action, ReconcileError>
where
    K: ResourceExt,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, ReconcileError>>,
{
    use tracing::Instrument;
    let name = obj.name_any();
    let namespace = obj.namespace().ok_or_else(|| ReconcileError::NoNamespace {
        kind,
        name: name.clone(),
    })?;
    let span = tracing::info_span!("reconcile", kind, namespace = %namespace, name = %name);
    let key = format!("{kind}/{namespace}/{name}");
    let started = tokio::time::Instant::now();
    let result = work(namespace, name).instrument(span).await;
    let label = crate::metrics::KindLabel { kind };
    ctx.metrics.reconciles.get_or_create(&label).inc();
    ctx.metrics
        .duration
        .get_or_create(&label)
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.backoff.succeeded(&key);
    }
    result
}

pub(crate) fn condition(
    previous: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// The `status` of a condition type in a list, if present.
pub(crate) fn condition_status<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// Descriptor annotation, cluster label, role label.
type Fingerprint = (Option<String>, Option<String>, Option<String>);

/// The parts of a Lease whose change the status shows (not `renewTime`).
fn fingerprint(lease: &Lease) -> Fingerprint {
    let labels = lease.metadata.labels.as_ref();
    (
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DESCRIPTOR_ANNOTATION))
            .cloned(),
        labels.and_then(|l| l.get(labels::CLUSTER)).cloned(),
        labels.and_then(|l| l.get(labels::ROLE)).cloned(),
    )
}

fn refs(
    lease: &Lease,
) -> (
    Option<ObjectRef<ActorCluster>>,
    Option<ObjectRef<ActorRole>>,
) {
    let ns = lease.metadata.namespace.clone().unwrap_or_default();
    let l = lease.metadata.labels.as_ref();
    (
        l.and_then(|l| l.get(labels::CLUSTER))
            .map(|c| ObjectRef::new(c).within(&ns)),
        l.and_then(|l| l.get(labels::ROLE))
            .map(|r| ObjectRef::new(r).within(&ns)),
    )
}

/// How often the Lease cache is looked at for hosts that stopped renewing (no API call).
const LAPSE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

fn lease_id(lease: &Lease) -> (String, String) {
    (lease.namespace().unwrap_or_default(), lease.name_any())
}

/// Watches every Lease labelled with a cluster: fills the cache, records renewals, and asks for
/// a reconciliation of the cluster and role a Lease belongs to when its descriptor or labels
/// change, it appears or goes, or it starts or stops counting as lapsed.
pub(crate) async fn track_leases(
    api: Api<Lease>,
    writer: reflector::store::Writer<Lease>,
    renewals: Arc<RenewTracker>,
    clusters: mpsc::UnboundedSender<ObjectRef<ActorCluster>>,
    roles: mpsc::UnboundedSender<ObjectRef<ActorRole>>,
    backoff: crate::backoff::WatchBackoff,
) {
    let mut last: HashMap<(String, String), Fingerprint> = HashMap::new();
    let config = watcher::Config::default().labels(labels::CLUSTER);
    let cache = writer.as_reader();
    let mut events = reflector(writer, watcher(api, config).backoff(backoff)).boxed();
    // A host that stops renewing sends no event: its lapse is noticed by looking, in memory,
    // once a second; only a change of verdict triggers a reconciliation.
    let mut lapsed: HashMap<(String, String), bool> = HashMap::new();
    let mut tick = tokio::time::interval(LAPSE_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let notify = |lease: &Lease| {
        let (c, r) = refs(lease);
        if let Some(c) = c {
            let _ = clusters.send(c);
        }
        if let Some(r) = r {
            let _ = roles.send(r);
        }
    };
    loop {
        let event = tokio::select! {
            e = events.next() => match e {
                Some(e) => e,
                None => break,
            },
            _ = tick.tick() => {
                let now = tokio::time::Instant::now();
                let leases = cache.state();
                lapsed.retain(|k, _| leases.iter().any(|l| lease_id(l) == *k));
                for lease in leases {
                    let verdict = renewals.lapsed(&lease, now);
                    if lapsed.insert(lease_id(&lease), verdict).is_some_and(|v| v != verdict) {
                        notify(&lease);
                    }
                }
                continue;
            }
        };
        let now = tokio::time::Instant::now();
        match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                renewals.observe(&lease, now);
                let key = (lease.namespace().unwrap_or_default(), lease.name_any());
                let print = fingerprint(&lease);
                let previous = last.insert(key, print.clone());
                if previous.as_ref() != Some(&print) {
                    if let Some((_, Some(old_cluster), old_role)) = previous {
                        // Relabelled: the old cluster and role lose a host.
                        let ns = lease.namespace().unwrap_or_default();
                        let _ = clusters.send(ObjectRef::new(&old_cluster).within(&ns));
                        if let Some(r) = old_role {
                            let _ = roles.send(ObjectRef::new(&r).within(&ns));
                        }
                    }
                    notify(&lease);
                }
            }
            Ok(watcher::Event::Delete(lease)) => {
                renewals.forget(&lease);
                last.remove(&(lease.namespace().unwrap_or_default(), lease.name_any()));
                notify(&lease);
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::warn!(error = %e, "watching sigx Leases failed; retrying with backoff")
            }
        }
    }
}

/// Whether sigx made the object: it carries `app.kubernetes.io/managed-by: sigx-operator`.
fn made_by_sigx(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(crate::render::names::MANAGED_BY))
        .is_some_and(|v| v == sigx_crds::labels::MANAGED_BY_VALUE)
}
