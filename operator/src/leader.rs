//! Leader election on a Lease (`kube-lease-manager`), so two operator replicas are safe: only
//! the holder runs the controllers.
//!
//! On top of the lease manager, the leader checks for itself that the Lease still names it and
//! was renewed recently. Unless it confirms a fresh renewal, it stops its controllers
//! `duration − grace/2` after the last renewal it saw (on its own monotonic clock; the API may
//! be unreachable, say) — half a grace before any other replica can consider the Lease expired
//! and start its own, so two replicas never reconcile at once (barring clock rates that differ
//! by more than that margin).

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

/// If the Lease names `identity`, how old its last renewal is by the holder's own wall clock
/// (it wrote `renewTime` with that same clock, so no cross-host clock comparison is involved).
/// None if it names someone else, is gone, or cannot be read.
async fn confirm(api: &Api<Lease>, name: &str, identity: &str) -> Option<Duration> {
    let spec = api.get(name).await.ok()?.spec?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renewed = spec.renew_time?.0;
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed);
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    let lasts = Duration::from_secs(u64::try_from(spec.lease_duration_seconds?).ok()?);
    (age < lasts).then_some(age)
}

/// Runs `term()` while this replica leads; stops it (drops the future) when leadership is lost
/// or cannot be confirmed, and starts a fresh one when it is regained. Returns when `shutdown`
/// resolves, releasing the Lease. (A standby of kube-lease-manager 0.13 still sleeps until the
/// expiry it last read, so even a graceful handover takes up to one Lease duration.)
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
    // The manager renews `grace` before expiry; the watchdog gives up half a grace later, and
    // so still half a grace before any standby may take the Lease over.
    let confirm_every = Duration::from_millis((settings.grace_seconds.max(1) * 1000 / 4).max(100));
    let must_confirm_within = Duration::from_millis(
        (settings.duration_seconds * 1000)
            .saturating_sub(settings.grace_seconds * 500)
            .max(1),
    );

    let run = async {
        loop {
            // Wait until the manager says we lead and the Lease confirms it.
            loop {
                if *is_leader.borrow_and_update()
                    && confirm(&api, &settings.lease_name, identity)
                        .await
                        .is_some()
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
            // Leading ends at (last renewal seen) + duration − grace/2 on this replica's
            // monotonic clock unless a newer renewal is confirmed first.
            let watchdog = async {
                let mut deadline = Instant::now() + must_confirm_within;
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline) => {
                            warn!(
                                identity,
                                "cannot confirm a fresh renewal of the leader Lease; stepping down before it could expire"
                            );
                            return;
                        }
                        _ = tokio::time::sleep(confirm_every) => {
                            if let Some(age) = confirm(&api, &settings.lease_name, identity).await {
                                deadline = Instant::now() + must_confirm_within.saturating_sub(age);
                            }
                        }
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
    // Closing the channel makes the manager release the Lease (clears the holder).
    drop(is_leader);
    if let Some(handle) = guard.0.take() {
        let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
    }
    result
}
