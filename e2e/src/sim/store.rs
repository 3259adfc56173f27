//! The membership store as one simulated host sees it: the production [`MemoryHub`] (lease
//! records, compare-and-swap, an ordered change log, fresh reads, isolate/outage faults) behind
//! a thin wrapper that
//!
//! * hangs every call while the host is suspended (a frozen VM sends nothing; a call it had in
//!   flight completes after it resumes), and
//! * keeps the checker's record of the host's lease: when, in true simulated time, the lease
//!   the host holds lapses. It mirrors the HeartbeatClock's rule — the window counts from the
//!   *start* of the last confirmed write, and a write confirmed after the window closed saves
//!   nothing — so the checker can end every activation of the host no later than that instant.

use super::world::{HostShared, Shared};
use async_trait::async_trait;
use sigx_sidecar::membership::{
    Change, ChangeBatch, DeleteOutcome, HostDescriptor, HostStatus, LeaseRecord,
    MembershipProvider, MemoryProvider, ProviderError,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Whether one host's change feed (its watch) is stalled. Only reads that follow a cursor are
/// held: a snapshot read (`changes_since(None)`, a relist) reads the store as it is, as do fresh
/// reads and writes. Relies on the hub's log numbering every change with its own store version
/// (`Upsert.record.version`, `Delete.version`), consecutively.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FeedHold {
    /// The feed delivers everything.
    #[default]
    Open,
    /// Stall where the feed is at its next read.
    Stall,
    /// Deliver nothing after this store version.
    At(u64),
    /// Deliver up to and including `host`'s next record with `status`, then stall there.
    Until { host: String, status: HostStatus },
}

fn version_of(c: &Change) -> u64 {
    match c {
        Change::Upsert(r) => r.version,
        Change::Delete { version, .. } => *version,
    }
}

/// One host's handle on the shared store.
pub struct SimProvider {
    pub inner: Arc<MemoryProvider>,
    pub shared: Arc<Shared>,
    pub host: Arc<HostShared>,
    pub ttl: Duration,
}

impl SimProvider {
    async fn unfrozen(&self) {
        let mut rx = self.host.suspended.subscribe();
        let _ = rx.wait_for(|s| !*s).await;
    }

    fn lease_write_started(&self, arm: bool) -> u64 {
        let start = self.host.eff_now(&self.shared);
        let mut lease = self.host.lease.lock().expect("lease lock");
        if arm || lease.lapse_ms.is_none() {
            // `arm()` comes right before every join write (and a failed join disarms): the
            // window counts from here.
            lease.lapse_ms = Some(start + self.ttl.as_millis() as u64);
        }
        start
    }

    fn lease_write_confirmed(&self, start: u64) {
        let done = self.shared.now_ms();
        let mut lease = self.host.lease.lock().expect("lease lock");
        if let Some(lapse) = lease.lapse_ms
            && done <= lapse
        {
            lease.lapse_ms = Some(lapse.max(start + self.ttl.as_millis() as u64));
        }
    }
}

#[async_trait]
impl MembershipProvider for SimProvider {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn holder(&self) -> &str {
        self.inner.holder()
    }

    async fn join(&self, descriptor: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        let start = self.lease_write_started(true);
        self.unfrozen().await;
        let r = self.inner.join(descriptor, ttl).await;
        if r.is_ok() {
            self.lease_write_confirmed(start);
        }
        r
    }

    async fn renew(&self, descriptor: &HostDescriptor) -> Result<u64, ProviderError> {
        let start = self.lease_write_started(false);
        self.unfrozen().await;
        let r = self.inner.renew(descriptor).await;
        if r.is_ok() {
            self.lease_write_confirmed(start);
        }
        r
    }

    async fn withdraw(&self) -> Result<(), ProviderError> {
        self.unfrozen().await;
        self.inner.withdraw().await
    }

    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        self.unfrozen().await;
        let Some(c) = cursor else {
            return self.inner.changes_since(None).await;
        };
        let hold = self.host.feed_hold.lock().expect("feed hold lock").clone();
        let nothing = ChangeBatch::Changes {
            changes: Vec::new(),
            cursor: c,
        };
        match hold {
            FeedHold::Open => self.inner.changes_since(cursor).await,
            FeedHold::Stall => {
                *self.host.feed_hold.lock().expect("feed hold lock") = FeedHold::At(c);
                Ok(nothing)
            }
            FeedHold::At(limit) if c >= limit => Ok(nothing),
            FeedHold::At(limit) => Ok(match self.inner.changes_since(cursor).await? {
                ChangeBatch::Changes { changes, cursor } => ChangeBatch::Changes {
                    changes: changes
                        .into_iter()
                        .filter(|ch| version_of(ch) <= limit)
                        .collect(),
                    cursor: cursor.min(limit),
                },
                snapshot => snapshot,
            }),
            FeedHold::Until { host, status } => {
                Ok(match self.inner.changes_since(cursor).await? {
                    ChangeBatch::Changes {
                        mut changes,
                        cursor,
                    } => {
                        let hit = changes.iter().position(|ch| {
                        matches!(ch, Change::Upsert(r) if r.id() == host && r.descriptor.status == status)
                    });
                        match hit {
                            Some(i) => {
                                changes.truncate(i + 1);
                                let at = version_of(&changes[i]);
                                *self.host.feed_hold.lock().expect("feed hold lock") =
                                    FeedHold::At(at);
                                ChangeBatch::Changes {
                                    changes,
                                    cursor: at,
                                }
                            }
                            None => ChangeBatch::Changes { changes, cursor },
                        }
                    }
                    snapshot => snapshot,
                })
            }
        }
    }

    fn notifications(&self) -> watch::Receiver<u64> {
        self.inner.notifications()
    }

    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        self.unfrozen().await;
        self.inner.read(id).await
    }

    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError> {
        self.unfrozen().await;
        self.inner.delete_if(id, version).await
    }
}
