//! Wiring: the Lease watch, both controllers, leader election.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use sigx_crds::{ActorCluster, ActorRole, labels};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::warn;

use crate::backoff::{Backoff, WatchBackoff};
use crate::controller::{self as ctl, Context};
use crate::error::ReconcileError;
use crate::fleet::RenewTracker;
use crate::leader::{self, LeaderError, LeaderSettings};
use crate::metrics::{KindLabel, Metrics};
use crate::render::names::MANAGED_BY;

/// How the operator runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch one namespace, or all (None).
    pub namespace: Option<String>,
    /// Server-side apply field manager.
    pub field_manager: String,
    /// This replica's name: leader identity and Event reporting instance.
    pub identity: String,
    /// Quiet period that coalesces bursts of triggers for one object.
    pub debounce: Duration,
    /// First retry delay after a failed reconciliation; doubles per failure of that object.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Backoff of the watches after an error (first delay, cap).
    pub watch_backoff: (Duration, Duration),
    /// Leader election; None runs the controllers unconditionally (one replica only).
    pub leader: Option<LeaderSettings>,
}

impl Settings {
    /// Defaults for one replica without leader election (tests, `sigx dev`).
    pub fn single(identity: impl Into<String>) -> Self {
        Self {
            namespace: None,
            field_manager: "sigx-operator".into(),
            identity: identity.into(),
            debounce: Duration::from_millis(200),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(300),
            watch_backoff: (Duration::from_millis(800), Duration::from_secs(30)),
            leader: None,
        }
    }
}

/// Generates the 32 bytes of a cluster secret from the thread-local CSPRNG (ChaCha, seeded
/// from the OS).
fn os_random() -> [u8; 32] {
    rand::random()
}

/// One operator replica.
pub struct Operator {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    random: Arc<dyn Fn() -> [u8; 32] + Send + Sync>,
    leading: watch::Sender<bool>,
}

impl Operator {
    pub fn new(client: Client, settings: Settings) -> Self {
        Self {
            client,
            settings,
            metrics: Arc::new(Metrics::new()),
            random: Arc::new(os_random),
            leading: watch::channel(false).0,
        }
    }

    /// Replaces the secret generator (tests).
    pub fn with_random(mut self, random: impl Fn() -> [u8; 32] + Send + Sync + 'static) -> Self {
        self.random = Arc::new(random);
        self
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// True while this replica runs the controllers.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Runs until `shutdown` resolves (then releases the leader Lease), or forever.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), LeaderError> {
        match self.settings.leader.clone() {
            None => {
                self.leading.send_replace(true);
                self.metrics.leader.set(1);
                tokio::select! {
                    _ = self.controllers() => {}
                    _ = shutdown => {}
                }
                self.leading.send_replace(false);
                Ok(())
            }
            Some(l) => {
                let mut leading_rx = self.leading.subscribe();
                let metrics = self.metrics.clone();
                let gauge = async move {
                    loop {
                        metrics
                            .leader
                            .set(i64::from(*leading_rx.borrow_and_update()));
                        if leading_rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                };
                tokio::select! {
                    r = leader::lead(
                        self.client.clone(),
                        &l,
                        &self.settings.identity,
                        &self.leading,
                        || self.controllers(),
                        shutdown,
                    ) => r,
                    _ = gauge => Ok(()),
                }
            }
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        match &self.settings.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// One leadership term: the Lease watch and both controllers, until the future is dropped.
    async fn controllers(&self) {
        let managed = watcher::Config::default()
            .labels(&format!("{MANAGED_BY}={}", labels::MANAGED_BY_VALUE));
        let config = controller::Config::default().debounce(self.settings.debounce);
        let (lease_reader, lease_writer) = reflector::store::<Lease>();
        let (cluster_tx, cluster_rx) = mpsc::unbounded_channel();
        let (role_tx, role_rx) = mpsc::unbounded_channel();
        let renewals = Arc::new(RenewTracker::default());
        let (base, max) = self.settings.watch_backoff;
        let leases = ctl::track_leases(
            self.api::<Lease>(),
            lease_writer,
            renewals.clone(),
            cluster_tx,
            role_tx,
            WatchBackoff::new(base, max),
        );

        let roles = Controller::new(self.api::<ActorRole>(), watcher::Config::default())
            .owns(self.api::<PodDisruptionBudget>(), managed.clone())
            .reconcile_on(UnboundedReceiverStream::new(role_rx))
            .trigger_backoff(WatchBackoff::new(base, max))
            .with_config(config.clone());
        let role_store = roles.store();
        let roles_by_cluster = role_store.clone();
        let paced_siblings = role_store.clone();
        // A Deployment's change reconciles its role (as `owns` would) and the roles of its
        // cluster whose roll waits (pacing.rs): a completed rollout is their turn.
        let roles = roles.watches(
            self.api::<Deployment>(),
            managed.clone(),
            move |deployment| ctl::pacing::roles_to_wake(&deployment, &paced_siblings.state()),
        );
        let roles = roles.watches(
            self.api::<ActorCluster>(),
            watcher::Config::default(),
            move |cluster| {
                let ns = cluster.namespace();
                let name = cluster.name_any();
                roles_by_cluster
                    .state()
                    .into_iter()
                    .filter(|r| r.namespace() == ns && r.spec.cluster_ref.name == name)
                    .map(|r| ObjectRef::from_obj(&*r))
                    .collect::<Vec<_>>()
            },
        );
        let clusters = Controller::new(self.api::<ActorCluster>(), watcher::Config::default())
            .owns(self.api::<Secret>(), managed.clone())
            .owns(self.api::<ServiceAccount>(), managed.clone())
            .owns(self.api::<Role>(), managed.clone())
            .owns(self.api::<RoleBinding>(), managed)
            .watches(
                self.api::<ActorRole>(),
                watcher::Config::default(),
                |role| {
                    role.namespace().map(|ns| {
                        ObjectRef::<ActorCluster>::new(&role.spec.cluster_ref.name).within(&ns)
                    })
                },
            )
            .reconcile_on(UnboundedReceiverStream::new(cluster_rx))
            .trigger_backoff(WatchBackoff::new(base, max))
            .with_config(config);

        let ctx = Arc::new(Context {
            client: self.client.clone(),
            field_manager: self.settings.field_manager.clone(),
            recorder: Recorder::new(
                self.client.clone(),
                Reporter {
                    controller: "sigx-operator".into(),
                    instance: Some(self.settings.identity.clone()),
                },
            ),
            metrics: self.metrics.clone(),
            backoff: Backoff::new(self.settings.backoff_base, self.settings.backoff_max),
            leases: lease_reader,
            renewals,
            memberships: Default::default(),
            roles: role_store,
            random: self.random.clone(),
        });
        let clusters = clusters
            .run(
                ctl::cluster::reconcile,
                error_policy::<ActorCluster>,
                ctx.clone(),
            )
            .for_each(|r| async move { log_outcome("ActorCluster", r) });
        let roles = roles
            .run(ctl::role::reconcile, error_policy::<ActorRole>, ctx)
            .for_each(|r| async move { log_outcome("ActorRole", r) });
        futures::join!(leases, clusters, roles);
    }
}

type Outcome<K> = Result<(ObjectRef<K>, Action), controller::Error<ReconcileError, watcher::Error>>;

fn log_outcome<K: Resource>(kind: &'static str, r: Outcome<K>)
where
    K::DynamicType: std::fmt::Debug,
{
    match r {
        Ok(_) => {}
        // A failed reconciliation was already logged by the error policy.
        Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(e) => tracing::debug!(kind, error = %e, "controller event"),
    }
}

/// Logs the failure, counts it, and retries this object after its own exponential backoff.
fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let kind = K::kind(&());
    let kind: &'static str = if kind == "ActorCluster" {
        "ActorCluster"
    } else {
        "ActorRole"
    };
    ctx.metrics
        .failures
        .get_or_create(&KindLabel { kind })
        .inc();
    let key = format!(
        "{kind}/{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.name_any()
    );
    let delay = ctx.backoff.failed(&key);
    warn!(kind, object = %key, error = %error, retry_in = ?delay, "reconciliation failed");
    Action::requeue(delay)
}
