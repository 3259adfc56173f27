//! The in-process membership hub, for tests and the simulator: the same lease-record semantics
//! as SQLite and Kubernetes (compare-and-swap, an ordered change log, fresh reads), plus fault
//! injection.
//!
//! * [`MemoryHub::kill`]: a crash the host is told about: its record is deleted through the
//!   change log, so every host (itself included) sees the deletion.
//! * [`MemoryHub::expire`]: a TTL lapse nobody is told about: the record vanishes from the store
//!   without a change-log entry. The host finds out at its next write; peers find out through
//!   their own expiry judgement and the fresh read. The one worth reaching for.
//! * [`MemoryHub::take_over`]: another holder writes the record.
//! * [`MemoryHub::kill`] is also what a third-party deletion (`kubectl delete lease`) looks like.
//!
//! Every provider of a hub is its own incarnation (holder `<host-id>/<n>`, `n` counted by the
//! hub, so a simulation stays deterministic): two providers for one host id are two processes.
//! * [`MemoryHub::isolate`]: the host cannot reach the store (its writes and reads fail).
//! * [`MemoryHub::set_outage`]: nobody can reach the store.
//! * [`MemoryHub::freeze_feed`]: the host's change feed stops advancing (a lagging watch) while
//!   its direct reads still work.

use super::descriptor::HostDescriptor;
use super::heartbeat::LostCause;
use super::provider::{
    Change, ChangeBatch, DeleteOutcome, LeaseRecord, MembershipProvider, ProviderError,
};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

const KIND: &str = "memory";
/// Change-log entries kept; an older cursor gets a snapshot (like a 410 Gone).
const LOG_KEEP: usize = 10_000;

#[derive(Default)]
struct HubState {
    seq: u64,
    leases: BTreeMap<String, LeaseRecord>,
    log: VecDeque<(u64, Change)>,
    isolated: HashSet<String>,
    frozen: HashSet<String>,
    outage: bool,
}

impl HubState {
    fn record(&mut self, change: Change) -> u64 {
        self.log.push_back((self.seq, change));
        while self.log.len() > LOG_KEEP {
            self.log.pop_front();
        }
        self.seq
    }
}

struct HubInner {
    state: Mutex<HubState>,
    notify: watch::Sender<u64>,
    writes: AtomicU64,
    incarnations: AtomicU64,
}

/// An in-process membership store shared by the hosts of one test.
#[derive(Clone)]
pub struct MemoryHub {
    inner: Arc<HubInner>,
}

impl Default for MemoryHub {
    fn default() -> Self {
        MemoryHub::new()
    }
}

impl MemoryHub {
    /// An empty hub.
    pub fn new() -> Self {
        MemoryHub {
            inner: Arc::new(HubInner {
                state: Mutex::new(HubState::default()),
                notify: watch::channel(0).0,
                writes: AtomicU64::new(0),
                incarnations: AtomicU64::new(0),
            }),
        }
    }

    /// A provider for the host `host_id`: a new incarnation (the hub's next number), as a new
    /// process would be.
    pub fn provider(&self, host_id: impl Into<String>) -> Arc<MemoryProvider> {
        let n = self.inner.incarnations.fetch_add(1, Ordering::Relaxed) + 1;
        self.provider_as(host_id, &n.to_string())
    }

    /// A provider for the host `host_id` as the given incarnation.
    pub fn provider_as(
        &self,
        host_id: impl Into<String>,
        incarnation: &str,
    ) -> Arc<MemoryProvider> {
        let host_id = host_id.into();
        Arc::new(MemoryProvider {
            hub: self.clone(),
            holder: super::provider::holder_identity(&host_id, incarnation),
            host_id,
            feed_reads: AtomicU64::new(0),
            fresh_reads: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.inner.state.lock().expect("hub lock")
    }

    fn notify(&self, seq: u64) {
        self.inner.notify.send_replace(seq);
    }

    /// A third party deletes a host's record through the change log (`kubectl delete lease`,
    /// Pod garbage collection): the host learns it from its own feed and fences (or, worker-only,
    /// rejoins); its peers drop it only once its lease would have lapsed anyway.
    pub fn kill(&self, host_id: &str) -> bool {
        let mut s = self.lock();
        if s.leases.remove(host_id).is_none() {
            return false;
        }
        s.seq += 1;
        let seq_now = s.seq;
        let seq = s.record(Change::Delete {
            id: host_id.to_string(),
            version: seq_now,
            withdrawn: false,
        });
        drop(s);
        self.notify(seq);
        true
    }

    /// Someone else takes the record over (as a misconfigured duplicate or an operator might):
    /// written through the change log with `holder` as its holder.
    pub fn take_over(&self, host_id: &str, holder: &str) -> bool {
        let mut s = self.lock();
        let Some(mut record) = s.leases.get(host_id).cloned() else {
            return false;
        };
        s.seq += 1;
        record.holder = holder.to_string();
        record.version = s.seq;
        record.renew = s.seq.to_string();
        s.leases.insert(host_id.to_string(), record.clone());
        let seq = s.record(Change::Upsert(record));
        drop(s);
        self.notify(seq);
        true
    }

    /// A TTL lapse nobody is told about: the record vanishes without a change-log entry.
    pub fn expire(&self, host_id: &str) -> bool {
        self.lock().leases.remove(host_id).is_some()
    }

    /// Cuts `host_id` off the store (its every call fails) until [`MemoryHub::heal`].
    pub fn isolate(&self, host_id: &str) {
        self.lock().isolated.insert(host_id.to_string());
    }

    /// Reconnects `host_id`.
    pub fn heal(&self, host_id: &str) {
        self.lock().isolated.remove(host_id);
    }

    /// Makes every call fail (a store outage), or ends the outage.
    pub fn set_outage(&self, down: bool) {
        self.lock().outage = down;
    }

    /// Stops (or resumes) `host_id`'s change feed: its reads of the feed return nothing new,
    /// while its direct reads still see the store (a lagging watch).
    pub fn freeze_feed(&self, host_id: &str, frozen: bool) {
        let mut s = self.lock();
        if frozen {
            s.frozen.insert(host_id.to_string());
        } else {
            s.frozen.remove(host_id);
        }
        let seq = s.seq;
        drop(s);
        self.notify(seq);
    }

    /// The record of `host_id` as the store holds it.
    pub fn record(&self, host_id: &str) -> Option<LeaseRecord> {
        self.lock().leases.get(host_id).cloned()
    }

    /// The ids in the store, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.lock().leases.keys().cloned().collect()
    }

    /// Successful writes so far (joins, renewals, deletes).
    pub fn writes(&self) -> u64 {
        self.inner.writes.load(Ordering::Relaxed)
    }
}

/// One host's connection to a [`MemoryHub`].
pub struct MemoryProvider {
    hub: MemoryHub,
    host_id: String,
    holder: String,
    feed_reads: AtomicU64,
    fresh_reads: AtomicU64,
}

impl MemoryProvider {
    /// Reads of the change feed so far (what refresh coalescing saves).
    pub fn feed_reads(&self) -> u64 {
        self.feed_reads.load(Ordering::Relaxed)
    }

    /// Fresh single-record reads so far (expiry confirmations).
    pub fn fresh_reads(&self) -> u64 {
        self.fresh_reads.load(Ordering::Relaxed)
    }

    fn reachable(&self, s: &HubState, op: &'static str) -> Result<(), ProviderError> {
        if s.outage || s.isolated.contains(&self.host_id) {
            return Err(ProviderError::Unavailable {
                provider: KIND,
                op,
                detail: "the memory hub is unreachable (fault injected)".into(),
            });
        }
        Ok(())
    }

    fn write(&self, s: &mut HubState, descriptor: &HostDescriptor, ttl: Duration) -> u64 {
        s.seq += 1;
        // Kept as the other stores keep it (they store JSON and `ttl_ms`): normalized, in
        // whole milliseconds.
        let record = LeaseRecord {
            descriptor: descriptor.clone().normalized(),
            holder: self.holder.clone(),
            renew: s.seq.to_string(),
            ttl: Duration::from_millis(ttl.as_millis() as u64),
            version: s.seq,
        };
        s.leases.insert(descriptor.id.clone(), record.clone());
        let seq = s.record(Change::Upsert(record));
        self.hub.inner.writes.fetch_add(1, Ordering::Relaxed);
        seq
    }
}

#[async_trait]
impl MembershipProvider for MemoryProvider {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    async fn join(&self, descriptor: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        let mut s = self.hub.lock();
        self.reachable(&s, "join")?;
        if let Some(existing) = s.leases.get(&descriptor.id)
            && existing.holder != self.holder
        {
            return Err(ProviderError::Conflict {
                provider: KIND,
                id: descriptor.id.clone(),
                holder: existing.holder.clone(),
            });
        }
        let seq = self.write(&mut s, descriptor, ttl);
        drop(s);
        self.hub.notify(seq);
        Ok(seq)
    }

    async fn renew(&self, descriptor: &HostDescriptor) -> Result<u64, ProviderError> {
        let mut s = self.hub.lock();
        self.reachable(&s, "renew")?;
        let ttl = match s.leases.get(&descriptor.id) {
            None => {
                return Err(ProviderError::Lost {
                    provider: KIND,
                    cause: LostCause::Gone,
                });
            }
            Some(r) if r.holder != self.holder => {
                return Err(ProviderError::Lost {
                    provider: KIND,
                    cause: LostCause::HolderChanged {
                        holder: r.holder.clone(),
                    },
                });
            }
            Some(r) => r.ttl,
        };
        let seq = self.write(&mut s, descriptor, ttl);
        drop(s);
        self.hub.notify(seq);
        Ok(seq)
    }

    async fn withdraw(&self) -> Result<(), ProviderError> {
        let mut s = self.hub.lock();
        self.reachable(&s, "withdraw")?;
        match s.leases.get(&self.host_id) {
            Some(r) if r.holder == self.holder => {}
            _ => return Ok(()),
        }
        s.leases.remove(&self.host_id);
        s.seq += 1;
        let seq_now = s.seq;
        let seq = s.record(Change::Delete {
            id: self.host_id.clone(),
            version: seq_now,
            withdrawn: true,
        });
        self.hub.inner.writes.fetch_add(1, Ordering::Relaxed);
        drop(s);
        self.hub.notify(seq);
        Ok(())
    }

    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        self.feed_reads.fetch_add(1, Ordering::Relaxed);
        let s = self.hub.lock();
        self.reachable(&s, "read changes")?;
        if let Some(c) = cursor {
            if s.frozen.contains(&self.host_id) {
                return Ok(ChangeBatch::Changes {
                    changes: Vec::new(),
                    cursor: c,
                });
            }
            let oldest = s.log.front().map(|(seq, _)| *seq).unwrap_or(s.seq + 1);
            // A cursor ahead of the head was never issued by this store (as SQLite and
            // PostgreSQL, whose file or database was replaced): a snapshot, never an empty batch
            // that moves the cursor back while the observer keeps its view.
            if c <= s.seq && (c + 1 >= oldest || c == s.seq) {
                return Ok(ChangeBatch::Changes {
                    changes: s
                        .log
                        .iter()
                        .filter(|(seq, _)| *seq > c)
                        .map(|(_, ch)| ch.clone())
                        .collect(),
                    cursor: s.seq,
                });
            }
        }
        Ok(ChangeBatch::Snapshot {
            records: s.leases.values().cloned().collect(),
            cursor: s.seq,
        })
    }

    fn notifications(&self) -> watch::Receiver<u64> {
        self.hub.inner.notify.subscribe()
    }

    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        self.fresh_reads.fetch_add(1, Ordering::Relaxed);
        let s = self.hub.lock();
        self.reachable(&s, "read")?;
        Ok(s.leases.get(id).cloned())
    }

    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError> {
        let mut s = self.hub.lock();
        self.reachable(&s, "delete")?;
        match s.leases.get(id) {
            None => return Ok(DeleteOutcome::Gone),
            Some(r) if r.version != version => return Ok(DeleteOutcome::Changed),
            Some(_) => {}
        }
        s.leases.remove(id);
        s.seq += 1;
        let seq_now = s.seq;
        let seq = s.record(Change::Delete {
            id: id.to_string(),
            version: seq_now,
            withdrawn: false,
        });
        self.hub.inner.writes.fetch_add(1, Ordering::Relaxed);
        drop(s);
        self.hub.notify(seq);
        Ok(DeleteOutcome::Deleted)
    }
}
