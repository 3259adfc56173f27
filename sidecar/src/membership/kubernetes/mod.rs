//! The Kubernetes provider: one `coordination.k8s.io/v1` Lease per host (DESIGN.md §3).
//!
//! * name = host id; labels `actors.sigx.dev/cluster` and `actors.sigx.dev/role`; the
//!   descriptor as JSON in the `actors.sigx.dev/descriptor` annotation (and the exact TTL in
//!   `actors.sigx.dev/lease-ttl-ms`, since `leaseDurationSeconds` is whole seconds);
//!   `holderIdentity` = `<host-id>/<incarnation>` (one identity, one process: the incarnation
//!   is drawn when the provider is made); `leaseDurationSeconds` = TTL rounded up; `renewTime`
//!   on every write; an owner reference to the Pod when `POD_UID` is known, so the garbage
//!   collector deletes the Lease with its Pod.
//! * Renewal is a PUT carrying the `resourceVersion` we last wrote **and the `metadata.uid` of
//!   the Lease we created**. Why the uid: Leases are `AllowCreateOnUpdate`, so on a real API
//!   server a PUT on a deleted Lease *creates it again* (the create path ignores the
//!   resourceVersion), and a host whose Lease was deleted under it (Pod GC after a force
//!   delete, `kubectl delete lease`, a peer's expiry) would renew happily and bring its id back.
//!   The uid is the one update precondition the server honours: against a deleted Lease the PUT
//!   is a 409 "Precondition failed: UID in precondition: …", against a re-created one likewise.
//!   So renewals never re-create a record. A 409 re-reads the Lease: gone, another uid, or
//!   another holder is proof of loss (`lost()`), and the host fences; still ours (someone
//!   touched a label), we retry with the fresh version.
//! * Join creates the Lease (POST). An existing Lease held by another incarnation is refused
//!   ([`ProviderError::Conflict`]), never taken over; one we hold (a worker-only host rejoining
//!   in the same process) is replaced with our uid as precondition.
//! * Peers list + watch the Leases by the cluster label (kube's `watcher`, which re-lists on
//!   410 Gone); the engine judges expiry on its own monotonic clock since it last saw
//!   `renewTime` change, confirms with a plain GET, and deletes with a `resourceVersion`
//!   precondition.
//!
//! Watch fan-out: every host watches every Lease, so each renewal is delivered to all N hosts:
//! N²/beat watch events per second across the fleet. Measured on the API test double at the
//! default beat of 5 s (`cargo test -p sigx-e2e --test membership_kubernetes watch_fan_out --
//! --ignored --nocapture`): 20, 500 and 1966 events/s at 10, 50 and 100 hosts, against 2, 10 and
//! 19.6 Lease updates/s. Past a few hundred hosts, raise the beat (and the TTL with it).
//!
//! The API server is the membership store, so an API outage longer than the TTL fences every
//! stateful host (none can prove its lease), by design: a host that cannot renew cannot know
//! whether its peers already expired it. The TTL is the trade-off: a longer TTL rides out longer
//! control-plane blips, and makes the fleet slower to notice a dead host (peers wait TTL plus the
//! drift margin before they expire it). Worker-only hosts rejoin when the API is back.

use super::descriptor::HostDescriptor;
use super::heartbeat::LostCause;
use super::provider::{ChangeBatch, DeleteOutcome, LeaseRecord, MembershipProvider, ProviderError};
use crate::clock::SharedClock;
use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod lease_watch;
mod options;

use lease_watch::{Cache, Shared};
pub use options::{KubernetesConfigError, KubernetesOptions};

const KIND: &str = "kubernetes";
/// Label naming the ActorCluster a Lease belongs to.
pub const CLUSTER_LABEL: &str = "actors.sigx.dev/cluster";
/// Label naming the ActorRole of the host.
pub const ROLE_LABEL: &str = "actors.sigx.dev/role";
/// Annotation holding the host descriptor as JSON.
pub const DESCRIPTOR_ANNOTATION: &str = "actors.sigx.dev/descriptor";
/// Annotation holding the exact lease TTL in milliseconds.
pub const TTL_ANNOTATION: &str = "actors.sigx.dev/lease-ttl-ms";
/// Written by the holder on its Lease right before it deletes it (a graceful stop, or a fenced
/// host whose turns are over): the watch's DELETED event carries the Lease's last state, so
/// observers can tell a withdrawal, which they act on at once, from any other deletion
/// (`kubectl delete lease`, Pod garbage collection, a peer's expiry), after which they wait out
/// the TTL (see [`Change::Delete`]).
pub const WITHDRAWN_ANNOTATION: &str = "actors.sigx.dev/withdrawn";

#[derive(Default)]
struct Own {
    resource_version: Option<String>,
    /// The `metadata.uid` of the Lease we created (or, rejoining, the one we hold): the
    /// precondition of every PUT and DELETE of ours.
    uid: Option<String>,
    ttl: Duration,
    acquired: Option<Timestamp>,
    last_renew: Option<Timestamp>,
}

/// One host's Lease, and its watch of the cluster's Leases.
pub struct KubernetesProvider {
    api: Api<Lease>,
    opts: KubernetesOptions,
    host_id: String,
    /// Our holder identity, `<host-id>/<incarnation>`.
    holder: String,
    clock: SharedClock,
    own: Mutex<Own>,
    shared: Arc<Shared>,
    watcher: OnceLock<JoinHandle<()>>,
}

impl Drop for KubernetesProvider {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.get() {
            w.abort();
        }
    }
}

fn unavailable(op: &'static str, e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable {
        provider: KIND,
        op,
        detail: e.to_string(),
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn malformed(id: &str, detail: impl Into<String>) -> ProviderError {
    ProviderError::Malformed {
        provider: KIND,
        id: id.to_string(),
        detail: detail.into(),
    }
}

/// Reads a Lease as a lease record.
pub fn record_of(lease: &Lease) -> Result<LeaseRecord, ProviderError> {
    let id = lease.metadata.name.clone().unwrap_or_default();
    let annotations = lease.metadata.annotations.as_ref();
    let json = annotations
        .and_then(|a| a.get(DESCRIPTOR_ANNOTATION))
        .ok_or_else(|| malformed(&id, format!("no {DESCRIPTOR_ANNOTATION} annotation")))?;
    let descriptor = HostDescriptor::from_json(json).map_err(|e| malformed(&id, e.to_string()))?;
    if descriptor.id != id {
        return Err(malformed(
            &id,
            format!("the descriptor names {:?}", descriptor.id),
        ));
    }
    let spec = lease.spec.clone().unwrap_or_default();
    let ttl = annotations
        .and_then(|a| a.get(TTL_ANNOTATION))
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(Duration::from_millis)
        .or_else(|| {
            spec.lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
        })
        .unwrap_or(Duration::from_secs(15));
    // A record cannot hold its host's actors longer than any sidecar may be configured to.
    let ttl = crate::membership::config::published_ttl(ttl);
    let version = lease
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default()
        .parse::<u64>()
        .map_err(|_| malformed(&id, "resourceVersion is not a number"))?;
    Ok(LeaseRecord {
        descriptor,
        holder: spec.holder_identity.unwrap_or_default(),
        renew: spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
        ttl,
        version,
    })
}

impl KubernetesProvider {
    /// A provider for host `host_id` publishing under `opts`, as a new incarnation (a random
    /// nonce). Validates the options (named errors before anything binds); the watch starts
    /// when the engine subscribes.
    pub fn new(
        client: kube::Client,
        opts: KubernetesOptions,
        host_id: impl Into<String>,
        clock: SharedClock,
    ) -> Result<Arc<Self>, KubernetesConfigError> {
        Self::new_as(
            client,
            opts,
            host_id,
            &super::provider::random_incarnation(),
            clock,
        )
    }

    /// Like [`KubernetesProvider::new`], as the given incarnation (deterministic tests).
    pub fn new_as(
        client: kube::Client,
        opts: KubernetesOptions,
        host_id: impl Into<String>,
        incarnation: &str,
        clock: SharedClock,
    ) -> Result<Arc<Self>, KubernetesConfigError> {
        opts.validate()?;
        let host_id = host_id.into();
        Ok(Arc::new(KubernetesProvider {
            api: Api::namespaced(client, &opts.namespace),
            opts,
            holder: super::provider::holder_identity(&host_id, incarnation),
            host_id,
            clock,
            own: Mutex::new(Own::default()),
            shared: Arc::new(Shared {
                cache: Mutex::new(Cache::default()),
                notify: watch::channel(0).0,
                synced: watch::channel(false).0,
            }),
            watcher: OnceLock::new(),
        }))
    }

    /// The options.
    pub fn options(&self) -> &KubernetesOptions {
        &self.opts
    }

    /// A renewTime strictly after the last one we wrote (a wall clock stepped backwards must
    /// not make a renewal look like no change).
    fn renew_time(&self, own: &mut Own) -> Timestamp {
        let wall = Timestamp::try_from(self.clock.wall()).unwrap_or(Timestamp::UNIX_EPOCH);
        let t = match own.last_renew {
            Some(last) if wall <= last => last
                .checked_add(k8s_openapi::jiff::SignedDuration::from_micros(1))
                .unwrap_or(wall),
            _ => wall,
        };
        own.last_renew = Some(t);
        t
    }

    fn lease(&self, descriptor: &HostDescriptor, own: &mut Own) -> Lease {
        let renew = self.renew_time(own);
        let acquired = *own.acquired.get_or_insert(renew);
        let ttl_secs = own.ttl.as_millis().div_ceil(1000).max(1) as i32;
        Lease {
            metadata: ObjectMeta {
                name: Some(descriptor.id.clone()),
                namespace: Some(self.opts.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (CLUSTER_LABEL.to_string(), self.opts.cluster.clone()),
                    (ROLE_LABEL.to_string(), self.opts.role.clone()),
                ])),
                annotations: Some(BTreeMap::from([
                    (DESCRIPTOR_ANNOTATION.to_string(), descriptor.to_json()),
                    (TTL_ANNOTATION.to_string(), own.ttl.as_millis().to_string()),
                ])),
                owner_references: self.opts.pod_uid.as_ref().map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: self.opts.pod_name.clone(),
                        uid: uid.clone(),
                        controller: None,
                        block_owner_deletion: None,
                    }]
                }),
                resource_version: own.resource_version.clone(),
                // The update precondition the server honours: never re-create a deleted Lease.
                uid: own.uid.clone(),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.holder.clone()),
                lease_duration_seconds: Some(ttl_secs),
                acquire_time: Some(MicroTime(acquired)),
                renew_time: Some(MicroTime(renew)),
                ..Default::default()
            }),
        }
    }

    fn written(&self, lease: &Lease) -> Result<u64, ProviderError> {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let version = rv
            .parse::<u64>()
            .map_err(|_| malformed(&self.host_id, "resourceVersion is not a number"))?;
        let mut own = self.own.lock().expect("own lock");
        match (&own.uid, &lease.metadata.uid) {
            // The first write (a create): remember which Lease is ours.
            (None, uid) => own.uid = uid.clone(),
            // A write that answered with another Lease than ours would mean the server created
            // one: never count it as a renewal.
            (Some(ours), Some(uid)) if ours != uid => {
                return Err(ProviderError::Lost {
                    provider: KIND,
                    cause: LostCause::Replaced,
                });
            }
            _ => {}
        }
        own.resource_version = Some(rv);
        Ok(version)
    }

    /// Marks our Lease withdrawn ([`WITHDRAWN_ANNOTATION`]) so that the DELETE after it reads
    /// as a withdrawal to every watcher. A fresh read first: the PUT carries its uid and
    /// resourceVersion as preconditions. A Lease gone or no longer ours has nothing to withdraw.
    async fn mark_withdrawn(&self) -> Result<(), ProviderError> {
        for _ in 0..3 {
            let current = self
                .api
                .get_opt(&self.host_id)
                .await
                .map_err(|e| unavailable("withdraw", e))?;
            let Some(mut lease) = current.filter(|l| self.loss_in(Some(l)).is_none()) else {
                return Ok(());
            };
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(WITHDRAWN_ANNOTATION.into(), "true".into());
            match self
                .api
                .replace(&self.host_id, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    self.own.lock().expect("own lock").resource_version =
                        written.metadata.resource_version;
                    return Ok(());
                }
                Err(e) if api_code(&e) == Some(404) => return Ok(()),
                Err(e) if api_code(&e) == Some(409) => continue,
                Err(e) => return Err(unavailable("withdraw", e)),
            }
        }
        Err(unavailable(
            "withdraw",
            "conflicting writes kept racing the withdrawal mark",
        ))
    }

    /// Why a fresh read of our Lease, taken after a 409, proves it is no longer ours: gone, not
    /// the Lease we created (another uid), or held by another incarnation. None: still ours.
    fn loss_in(&self, current: Option<&Lease>) -> Option<LostCause> {
        let Some(l) = current else {
            return Some(LostCause::Gone);
        };
        let ours = self.own.lock().expect("own lock").uid.clone();
        if ours.is_some() && l.metadata.uid != ours {
            return Some(LostCause::Replaced);
        }
        let holder = Self::holder_of(l);
        (holder != self.holder).then_some(LostCause::HolderChanged { holder })
    }

    fn holder_of(lease: &Lease) -> String {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    }

    fn start_watch(&self) {
        self.watcher.get_or_init(|| {
            lease_watch::spawn(
                self.shared.clone(),
                self.api.clone(),
                self.opts.selector(),
                self.opts.watch_backoff_max,
            )
        });
    }
}

#[async_trait]
impl MembershipProvider for KubernetesProvider {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    async fn join(&self, descriptor: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        let pp = PostParams::default();
        let lease = {
            let mut own = self.own.lock().expect("own lock");
            own.ttl = ttl;
            own.resource_version = None;
            own.uid = None;
            own.acquired = None;
            self.lease(descriptor, &mut own)
        };
        match self.api.create(&pp, &lease).await {
            Ok(created) => return self.written(&created),
            Err(e) if api_code(&e) == Some(409) => {}
            Err(e) => return Err(unavailable("join", e)),
        }
        // It exists: take it over if we hold it (a worker-only host rejoining).
        let existing = self
            .api
            .get_opt(&descriptor.id)
            .await
            .map_err(|e| unavailable("join", e))?;
        let Some(existing) = existing else {
            let created = self
                .api
                .create(&pp, &lease)
                .await
                .map_err(|e| unavailable("join", e))?;
            return self.written(&created);
        };
        let holder = Self::holder_of(&existing);
        if holder != self.holder {
            // Another incarnation's Lease (a second process with our host id): refused, never
            // taken over.
            return Err(ProviderError::Conflict {
                provider: KIND,
                id: descriptor.id.clone(),
                holder,
            });
        }
        let lease = {
            let mut own = self.own.lock().expect("own lock");
            own.resource_version = existing.metadata.resource_version.clone();
            own.uid = existing.metadata.uid.clone();
            self.lease(descriptor, &mut own)
        };
        let replaced = self
            .api
            .replace(&descriptor.id, &pp, &lease)
            .await
            .map_err(|e| unavailable("join", e))?;
        self.written(&replaced)
    }

    async fn renew(&self, descriptor: &HostDescriptor) -> Result<u64, ProviderError> {
        let pp = PostParams::default();
        for _ in 0..3 {
            let lease = self.lease(descriptor, &mut self.own.lock().expect("own lock"));
            match self.api.replace(&descriptor.id, &pp, &lease).await {
                Ok(written) => return self.written(&written),
                Err(e) if api_code(&e) == Some(404) => {
                    return Err(ProviderError::Lost {
                        provider: KIND,
                        cause: LostCause::Gone,
                    });
                }
                Err(e) if api_code(&e) == Some(409) => {
                    // Conflict: a stale resourceVersion, or the uid precondition failed (the
                    // Lease was deleted, or deleted and re-created). Only a fresh read tells:
                    // gone, another uid or another holder is proof of loss.
                    let current = self
                        .api
                        .get_opt(&descriptor.id)
                        .await
                        .map_err(|e| unavailable("renew", e))?;
                    if let Some(cause) = self.loss_in(current.as_ref()) {
                        return Err(ProviderError::Lost {
                            provider: KIND,
                            cause,
                        });
                    }
                    // Still ours (someone touched labels, say): retry on its version.
                    self.own.lock().expect("own lock").resource_version =
                        current.and_then(|l| l.metadata.resource_version);
                }
                Err(e) => return Err(unavailable("renew", e)),
            }
        }
        Err(unavailable(
            "renew",
            "conflicting writes kept racing our renewal",
        ))
    }

    async fn withdraw(&self) -> Result<(), ProviderError> {
        self.mark_withdrawn().await?;
        for _ in 0..3 {
            let (rv, uid) = {
                let own = self.own.lock().expect("own lock");
                (own.resource_version.clone(), own.uid.clone())
            };
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: rv,
                    uid,
                }),
                ..Default::default()
            };
            match self.api.delete(&self.host_id, &dp).await {
                Ok(_) => return Ok(()),
                Err(e) if api_code(&e) == Some(404) => return Ok(()),
                Err(e) if api_code(&e) == Some(409) => {
                    let current = self
                        .api
                        .get_opt(&self.host_id)
                        .await
                        .map_err(|e| unavailable("withdraw", e))?;
                    if self.loss_in(current.as_ref()).is_some() {
                        // Gone, or not ours any more: nothing of ours to withdraw.
                        return Ok(());
                    }
                    self.own.lock().expect("own lock").resource_version =
                        current.and_then(|l| l.metadata.resource_version);
                }
                Err(e) => return Err(unavailable("withdraw", e)),
            }
        }
        Err(unavailable(
            "withdraw",
            "conflicting writes kept racing the delete",
        ))
    }

    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        self.start_watch();
        let mut synced = self.shared.synced.subscribe();
        if !*synced.borrow_and_update() {
            // The first view waits for the watch's initial list.
            tokio::time::timeout(Duration::from_secs(10), synced.wait_for(|s| *s))
                .await
                .map_err(|_| unavailable("read changes", "the Lease watch has not synced in 10 s"))?
                .map_err(|e| unavailable("read changes", e))?;
        }
        Ok(self.shared.cache.lock().expect("cache lock").since(cursor))
    }

    fn notifications(&self) -> watch::Receiver<u64> {
        self.start_watch();
        self.shared.notify.subscribe()
    }

    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        // A GET without resourceVersion is a quorum read: linearizable.
        match self.api.get_opt(id).await {
            Ok(Some(lease)) => record_of(&lease).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(unavailable("read", e)),
        }
    }

    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(version.to_string()),
                uid: None,
            }),
            ..Default::default()
        };
        match self.api.delete(id, &dp).await {
            Ok(_) => Ok(DeleteOutcome::Deleted),
            Err(e) if api_code(&e) == Some(404) => Ok(DeleteOutcome::Gone),
            Err(e) if api_code(&e) == Some(409) => Ok(DeleteOutcome::Changed),
            Err(e) => Err(unavailable("delete", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_reads_back_as_the_record_it_was_written_from() {
        let d = HostDescriptor::new("engine-0-ab12", "10.0.0.7:7400", None, None);
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(d.id.clone()),
                resource_version: Some("42".into()),
                annotations: Some(BTreeMap::from([(
                    DESCRIPTOR_ANNOTATION.to_string(),
                    d.to_json(),
                )])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(d.id.clone()),
                lease_duration_seconds: Some(2),
                renew_time: Some(MicroTime(Timestamp::from_millisecond(1_000).unwrap())),
                ..Default::default()
            }),
        };
        let r = record_of(&lease).unwrap();
        assert_eq!(r.descriptor, d);
        assert_eq!((r.version, r.ttl), (42, Duration::from_secs(2)));
        assert_eq!(r.holder, d.id);
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(TTL_ANNOTATION.into(), "1500".into());
        assert_eq!(record_of(&lease).unwrap().ttl, Duration::from_millis(1500));
        // A TTL no sidecar may be configured with is clamped, so the record still expires.
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(TTL_ANNOTATION.into(), u64::MAX.to_string());
        assert_eq!(
            record_of(&lease).unwrap().ttl,
            crate::membership::config::MAX_TTL
        );
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(TTL_ANNOTATION.into(), "1500".into());
        lease.metadata.annotations = None;
        assert!(matches!(
            record_of(&lease),
            Err(ProviderError::Malformed { .. })
        ));
    }
}
