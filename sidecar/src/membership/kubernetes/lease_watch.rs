//! The Lease watch of one host: kube's list + watch of the cluster's Leases, materialized into a
//! cache with a local, ordered change log that the engine reads by cursor.

use super::record_of;
use crate::membership::provider::{Change, ChangeBatch, LeaseRecord};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, Event};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// Local change-log entries kept; an older cursor reads the cache as a snapshot.
const LOG_KEEP: usize = 4096;

/// The watch's materialized Leases plus a local, ordered log of what changed.
#[derive(Default)]
pub(super) struct Cache {
    pub(super) seq: u64,
    records: BTreeMap<String, LeaseRecord>,
    log: VecDeque<(u64, Change)>,
    /// The seq of the last re-list: an older cursor must read a snapshot.
    reset_at: u64,
    synced: bool,
}

impl Cache {
    fn push(&mut self, change: Change) {
        self.seq += 1;
        match &change {
            Change::Upsert(r) => {
                self.records.insert(r.id().to_string(), r.clone());
            }
            Change::Delete { id, .. } => {
                self.records.remove(id);
            }
        }
        self.log.push_back((self.seq, change));
        while self.log.len() > LOG_KEEP {
            self.log.pop_front();
        }
    }

    pub(super) fn reset(&mut self, records: BTreeMap<String, LeaseRecord>) {
        self.seq += 1;
        self.records = records;
        self.log.clear();
        self.reset_at = self.seq;
        self.synced = true;
    }

    pub(super) fn since(&self, cursor: Option<u64>) -> ChangeBatch {
        let oldest = self.log.front().map(|(s, _)| *s).unwrap_or(self.seq + 1);
        match cursor {
            Some(c)
                if c >= self.reset_at && c <= self.seq && (c + 1 >= oldest || c == self.seq) =>
            {
                ChangeBatch::Changes {
                    changes: self
                        .log
                        .iter()
                        .filter(|(s, _)| *s > c)
                        .map(|(_, ch)| ch.clone())
                        .collect(),
                    cursor: self.seq,
                }
            }
            _ => ChangeBatch::Snapshot {
                records: self.records.values().cloned().collect(),
                cursor: self.seq,
            },
        }
    }
}

pub(super) struct Shared {
    pub(super) cache: Mutex<Cache>,
    pub(super) notify: watch::Sender<u64>,
    pub(super) synced: watch::Sender<bool>,
}

/// A capped exponential backoff for the watch's reconnects (kube's default waits up to 30 s,
/// far past a membership TTL).
struct WatchBackoff {
    next: Duration,
    max: Duration,
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        Some(d)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Duration::from_millis(50).min(self.max);
    }
}

/// Starts the list + watch of the cluster's Leases (kube's `watcher`, which re-lists on 410
/// Gone), materialized into `shared.cache`; every change bumps `shared.notify`.
pub(super) fn spawn(
    shared: Arc<Shared>,
    api: Api<Lease>,
    selector: String,
    max: Duration,
) -> JoinHandle<()> {
    let cfg = watcher::Config::default().labels(&selector);
    tokio::spawn(async move {
        let backoff = WatchBackoff {
            next: Duration::from_millis(50).min(max),
            max,
        };
        let mut stream = watcher::watcher(api, cfg).backoff(backoff).boxed();
        let mut relist: Option<BTreeMap<String, LeaseRecord>> = None;
        while let Some(event) = stream.next().await {
            let decode = |lease: &Lease| match record_of(lease) {
                Ok(r) => Some(r),
                Err(e) => {
                    warn!(error = %e, "ignoring a malformed Lease");
                    None
                }
            };
            let mut cache = shared.cache.lock().expect("cache lock");
            match event {
                Ok(Event::Init) => relist = Some(BTreeMap::new()),
                Ok(Event::InitApply(lease)) => {
                    if let (Some(map), Some(r)) = (relist.as_mut(), decode(&lease)) {
                        map.insert(r.id().to_string(), r);
                    }
                }
                Ok(Event::InitDone) => {
                    cache.reset(relist.take().unwrap_or_default());
                    shared.synced.send_replace(true);
                }
                Ok(Event::Apply(lease)) => {
                    if let Some(r) = decode(&lease) {
                        cache.push(Change::Upsert(r));
                    }
                }
                Ok(Event::Delete(lease)) => {
                    let id = lease.metadata.name.clone().unwrap_or_default();
                    let version = lease
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|rv| rv.parse().ok())
                        .unwrap_or(0);
                    let withdrawn = lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(super::WITHDRAWN_ANNOTATION))
                        .is_some_and(|v| v == "true");
                    cache.push(Change::Delete {
                        id,
                        version,
                        withdrawn,
                    });
                }
                Err(e) => {
                    debug!(error = %e, "lease watch failed; it re-lists after a backoff");
                    continue;
                }
            }
            let seq = cache.seq;
            drop(cache);
            shared.notify.send_replace(seq);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_cursor_reads_a_snapshot() {
        let mut c = Cache::default();
        c.reset(BTreeMap::new());
        let at = c.seq;
        c.push(Change::Delete {
            id: "x".into(),
            version: 3,
            withdrawn: true,
        });
        assert!(
            matches!(c.since(Some(at)), ChangeBatch::Changes { ref changes, .. } if changes.len() == 1)
        );
        c.reset(BTreeMap::new());
        assert!(matches!(c.since(Some(at)), ChangeBatch::Snapshot { .. }));
        assert!(matches!(c.since(None), ChangeBatch::Snapshot { .. }));
    }
}
