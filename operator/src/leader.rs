//! Leader election on a Lease (`kube-lease-manager`), so two operator replicas are safe: only
//! the holder runs the controllers.
//!
//! On top of the lease manager, the leader checks for itself that the Lease still names it and
//! was renewed recently. If it cannot confirm that for `duration − grace` on its own monotonic
//! clock (the API is unreachable, say), it stops its controllers — before any other replica can
//! consider the Lease expired and start its own, so two replicas never reconcile at once.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

/// Where and how long the leader Lease is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderSettings {
    pub lease_name: String,
    pub lease_namespace: String,
    /// How long a Lease lasts without renewal: the worst-case handover time after a crash.
    pub duration_seconds: u64,
    /// How long before expiry the holder renews. Must be less than the duration.
    pub grace_seconds: u64,
}

/// Leader election failed to start or its manager stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("could not set up the leader Lease {namespace}/{name}: {source}")]
    Setup {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error("the leader-election task stopped unexpectedly")]
    ManagerStopped,
}

/// Aborts the lease manager's task when leadership is abandoned without a graceful release
/// (the process is killed, the future dropped): the Lease then lapses after its duration.
struct AbortOnDrop(
    Option<JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>>,
);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// Whether the Lease names `identity` and its renewal is not older than its duration by the
/// holder's own wall clock (it wrote `renewTime` with that same clock).
async fn confirm(api: &Api<Lease>, name: &str, identity: &str) -> bool {
    let Ok(lease) = api.get(name).await else {
        return false;
    };
    let Some(spec) = lease.spec else { return false };
    if spec.holder_identity.as_deref() != Some(identity) {
        return false;
    }
    match (spec.renew_time, spec.lease_duration_seconds) {
        (Some(renew), Some(secs)) => {
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(renew.0);
            age.as_secs() < i64::from(secs)
        }
        _ => false,
    }
}

/// Runs `term()` while this replica leads; stops it (drops the future) when leadership is lost
/// or cannot be confirmed, and starts a fresh one when it is regained. Returns when `shutdown`
/// resolves, releasing the Lease so a standby takes over at once.
pub async fn lead<F, Fut>(
    client: Client,
    settings: &LeaderSettings,
    identity: &str,
    leading: &watch::Sender<bool>,
    mut term: F,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LeaderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let manager = LeaseManagerBuilder::new(client.clone(), &settings.lease_name)
        .with_namespace(&settings.lease_namespace)
        .with_identity(identity)
        .with_duration(settings.duration_seconds)
        .with_grace(settings.grace_seconds)
        .with_field_manager(format!("sigx-operator-{identity}"))
        .build()
        .await
        .map_err(|source| LeaderError::Setup {
            namespace: settings.lease_namespace.clone(),
            name: settings.lease_name.clone(),
            source,
        })?;
    let (mut is_leader, handle) = manager.watch().await;
    let mut guard = AbortOnDrop(Some(handle));
    let api: Api<Lease> = Api::namespaced(client, &settings.lease_namespace);
    let confirm_every = Duration::from_millis(settings.grace_seconds.max(1) * 1000 / 2);
    let must_confirm_within = Duration::from_secs(
        settings
            .duration_seconds
            .saturating_sub(settings.grace_seconds)
            .max(1),
    );

    let run = async {
        loop {
            // Wait until the manager says we lead and the Lease confirms it.
            loop {
                if *is_leader.borrow_and_update()
                    && confirm(&api, &settings.lease_name, identity).await
                {
                    break;
                }
                tokio::select! {
                    changed = is_leader.changed() => changed.map_err(|_| LeaderError::ManagerStopped)?,
                    _ = tokio::time::sleep(confirm_every) => {}
                }
            }
            info!(identity, lease = %settings.lease_name, "leading: starting the controllers");
            leading.send_replace(true);
            let watchdog = async {
                let mut confirmed = Instant::now();
                loop {
                    tokio::time::sleep(confirm_every).await;
                    if confirm(&api, &settings.lease_name, identity).await {
                        confirmed = Instant::now();
                    } else if confirmed.elapsed() >= must_confirm_within {
                        warn!(
                            identity,
                            "cannot confirm the leader Lease; stepping down before it could expire"
                        );
                        return;
                    }
                }
            };
            let lost = async {
                while *is_leader.borrow_and_update() {
                    if is_leader.changed().await.is_err() {
                        break;
                    }
                }
                warn!(identity, "lost the leader Lease: stopping the controllers");
            };
            tokio::select! {
                _ = term() => warn!("the controllers stopped on their own; restarting them"),
                _ = lost => {}
                _ = watchdog => {}
            }
            leading.send_replace(false);
        }
    };
    let result = tokio::select! {
        r = run => r,
        _ = shutdown => Ok(()),
    };
    leading.send_replace(false);
    // Closing the channel makes the manager release the Lease, so a standby takes over at once.
    drop(is_leader);
    if let Some(handle) = guard.0.take() {
        let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
    }
    result
}
