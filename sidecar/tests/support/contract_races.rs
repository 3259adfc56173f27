//! The provider contract under concurrency (see `contract.rs`): writers racing for one id, a
//! renewal racing its expiry, observers racing to expire one record, and the change log's
//! order as two observers see it while several writers write at once.
#![allow(dead_code)]

use super::contract::{Store, TTL, after, descriptor, head, version_of};
use sigx_sidecar::membership::{
    Change, ChangeBatch, DeleteOutcome, HostDescriptor, HostStatus, LeaseRecord, LostCause,
    MembershipProvider, ProviderError,
};
use std::collections::BTreeMap;
use std::sync::Arc;

fn active(id: &str, n: u64) -> HostDescriptor {
    let mut d = descriptor(id);
    d.status = HostStatus::Active;
    d.active_epoch = n;
    d
}

fn by_id(mut records: Vec<LeaseRecord>) -> Vec<LeaseRecord> {
    records.sort_by(|a, b| a.id().cmp(b.id()));
    records
}

/// Four processes started with one host id join at once: exactly one gets the record, every
/// other is refused naming it, and the log holds one join.
pub async fn racing_joins_of_one_id_let_exactly_one_in(s: Arc<dyn Store>) {
    let o = s.open("o").await;
    let kind = o.kind();
    let c0 = head(&*o).await;
    let mut handles: Vec<Arc<dyn MembershipProvider>> = Vec::new();
    for _ in 0..4 {
        handles.push(s.open("a").await);
    }
    let tasks: Vec<_> = handles
        .iter()
        .map(|p| {
            let p = p.clone();
            tokio::spawn(async move { p.join(&descriptor("a"), TTL).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let won: Vec<usize> = (0..4).filter(|i| results[*i].is_ok()).collect();
    assert_eq!(won.len(), 1, "{kind}: exactly one join wins: {results:?}");
    let winner = handles[won[0]].holder();
    for r in &results {
        match r {
            Ok(_) => {}
            Err(ProviderError::Conflict { holder, id, .. }) => {
                assert_eq!((id.as_str(), holder.as_str()), ("a", winner), "{kind}")
            }
            Err(e) => panic!("{kind}: a losing join must conflict, got {e:?}"),
        }
    }
    let r = o.read("a").await.unwrap().expect("the winner's record");
    assert_eq!(r.holder, winner, "{kind}");
    assert_eq!(
        after(&*o, c0).await,
        (vec![Change::Upsert(r.clone())], r.version)
    );
}

/// A renewal racing a peer's expiry of the version before it: one or the other, never both —
/// the renewal lands and the stale delete changes nothing, or the delete lands and the renewal
/// is loss (and re-creates nothing). The log holds exactly the winner.
pub async fn a_renewal_racing_its_expiry_is_one_or_the_other(s: Arc<dyn Store>) {
    let (a, o) = (s.open("a").await, s.open("o").await);
    let kind = a.kind();
    let (mut renewed, mut expired) = (0, 0);
    for n in 0..12 {
        let v = a.join(&descriptor("a"), TTL).await.unwrap();
        let (ra, ro) = (a.clone(), o.clone());
        let renewal = tokio::spawn(async move { ra.renew(&active("a", n)).await });
        let expiry = tokio::spawn(async move { ro.delete_if("a", v).await });
        let (r, d) = (renewal.await.unwrap(), expiry.await.unwrap().unwrap());
        let (changes, _) = after(&*o, v).await;
        match (r, d) {
            (Ok(v2), DeleteOutcome::Changed) => {
                renewed += 1;
                let rec = o.read("a").await.unwrap().expect("the renewed record");
                assert_eq!(rec.version, v2, "{kind}");
                assert_eq!(changes, [Change::Upsert(rec)], "{kind}");
            }
            (
                Err(ProviderError::Lost {
                    cause: LostCause::Gone,
                    ..
                }),
                DeleteOutcome::Deleted,
            ) => {
                expired += 1;
                assert_eq!(o.read("a").await.unwrap(), None, "{kind}: re-created");
                assert!(
                    matches!(
                        changes[..],
                        [Change::Delete {
                            withdrawn: false,
                            ..
                        }]
                    ),
                    "{kind}: {changes:?}"
                );
            }
            other => panic!("{kind}: a renewal and its expiry both or neither: {other:?}"),
        }
    }
    assert_eq!(renewed + expired, 12, "{kind}");
}

/// One holder's renewals at once (the heartbeat and a status change): each one re-reads and
/// lands on the other's write instead of failing; the record ends at the last of them.
pub async fn one_holders_concurrent_renewals_all_land(s: Arc<dyn Store>) {
    let (a, o) = (s.open("a").await, s.open("o").await);
    let kind = a.kind();
    let v = a.join(&descriptor("a"), TTL).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let a = a.clone();
            tokio::spawn(async move { a.renew(&active("a", n)).await })
        })
        .collect();
    let mut versions = Vec::new();
    for t in tasks {
        versions.push(t.await.unwrap().unwrap_or_else(|e| panic!("{kind}: {e:?}")));
    }
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), 8, "{kind}: two renewals got one version");
    let last = *versions.last().unwrap();
    assert_eq!(o.read("a").await.unwrap().unwrap().version, last, "{kind}");
    let (changes, cursor) = after(&*o, v).await;
    assert_eq!((changes.len(), cursor), (8, last), "{kind}: {changes:?}");
}

/// Three observers expire one record at once: one deletes it, the others find it gone, and
/// the log holds one deletion.
pub async fn racing_expiries_delete_once(s: Arc<dyn Store>) {
    let a = s.open("a").await;
    let kind = a.kind();
    let v = a.join(&descriptor("a"), TTL).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let o = s.open(&format!("o{i}")).await;
        tasks.push(tokio::spawn(async move { o.delete_if("a", v).await }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap().unwrap());
    }
    outcomes.sort_by_key(|o| *o != DeleteOutcome::Deleted);
    assert_eq!(
        outcomes,
        [
            DeleteOutcome::Deleted,
            DeleteOutcome::Gone,
            DeleteOutcome::Gone
        ],
        "{kind}"
    );
    let (changes, _) = after(&*a, v).await;
    assert_eq!(changes.len(), 1, "{kind}: one deletion: {changes:?}");
}

/// What one writer did, in its program order: upserts with the versions it was told, then maybe
/// a deletion (its own withdrawal, or a peer's expiry).
pub struct Script {
    id: String,
    upserts: Vec<u64>,
    deleted: Option<bool>,
}

/// Several writers at once and two observers, one reading as fast as it can while they write,
/// one reading once at the end: both see one sequence, every change once, numbered
/// consecutively (what the simulator's feed holds rely on), each batch continuing right after
/// the cursor before it; every write is in it at the version its writer was told, in its
/// writer's order, and applying it to the first snapshot gives the last.
pub async fn two_observers_see_one_gap_free_order(s: Arc<dyn Store>) {
    let (o1, o2) = (s.open("o1").await, s.open("o2").await);
    let kind = o1.kind();
    let (start, before) = match o1.changes_since(None).await.unwrap() {
        ChangeBatch::Snapshot { records, cursor } => (cursor, records),
        other => panic!("{kind}: {other:?}"),
    };
    let writers: Vec<_> = (0..6)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let id = format!("h{i}");
                let (p, peer) = (s.open(&id).await, s.open("peer").await);
                let mut upserts = vec![p.join(&descriptor(&id), TTL).await.unwrap()];
                for n in 0..12 {
                    upserts.push(p.renew(&active(&id, n)).await.unwrap());
                    tokio::task::yield_now().await;
                }
                let deleted = match i % 3 {
                    0 => p.withdraw().await.map(|_| Some(true)).unwrap(),
                    1 => {
                        let last = *upserts.last().unwrap();
                        assert_eq!(
                            peer.delete_if(&id, last).await.unwrap(),
                            DeleteOutcome::Deleted
                        );
                        Some(false)
                    }
                    _ => None,
                };
                Script {
                    id,
                    upserts,
                    deleted,
                }
            })
        })
        .collect();
    let mut batches = Vec::new();
    let mut cursor = start;
    while !writers.iter().all(|w| w.is_finished()) {
        let (changes, at) = after(&*o1, cursor).await;
        batches.push((cursor, changes, at));
        cursor = at;
        tokio::task::yield_now().await;
    }
    let mut scripts = Vec::new();
    for w in writers {
        scripts.push(w.await.expect("a writer failed"));
    }
    let (changes, at) = after(&*o1, cursor).await;
    batches.push((cursor, changes, at));
    let mut seen: Vec<Change> = Vec::new();
    for (from, changes, to) in &batches {
        match changes.first() {
            None => assert_eq!(from, to, "{kind}: an empty batch moved the cursor"),
            Some(first) => {
                assert_eq!(
                    version_of(first),
                    from + 1,
                    "{kind}: batch after {from} has a gap"
                );
                assert_eq!(
                    version_of(changes.last().unwrap()),
                    *to,
                    "{kind}: cursor of batch"
                );
            }
        }
        seen.extend(changes.iter().cloned());
    }
    let (all, end) = after(&*o2, start).await;
    assert_eq!(end, head(&*o2).await, "{kind}: the end is the head");
    assert_eq!(
        seen.len(),
        all.len(),
        "{kind}: the observers saw different amounts"
    );
    assert!(seen == all, "{kind}: the observers saw different orders");
    let versions: Vec<u64> = all.iter().map(version_of).collect();
    let want: Vec<u64> = (start + 1..=end).collect();
    assert!(
        versions == want,
        "{kind}: not every change once, consecutively: {versions:?}"
    );
    let writes: usize = scripts
        .iter()
        .map(|s| s.upserts.len() + s.deleted.is_some() as usize)
        .sum();
    assert_eq!(all.len(), writes, "{kind}: every write is one change");
    for script in &scripts {
        let mine: Vec<&Change> = all.iter().filter(|c| change_id(c) == script.id).collect();
        let ups: Vec<u64> = mine
            .iter()
            .filter(|c| matches!(c, Change::Upsert(_)))
            .map(|c| version_of(c))
            .collect();
        assert_eq!(
            ups, script.upserts,
            "{kind}: {}'s upserts at their versions",
            script.id
        );
        let deletion = mine.last().and_then(|c| match c {
            Change::Delete { withdrawn, .. } => Some(*withdrawn),
            Change::Upsert(_) => None,
        });
        assert_eq!(
            deletion, script.deleted,
            "{kind}: {}'s deletion, last",
            script.id
        );
    }
    let mut state: BTreeMap<String, LeaseRecord> = before
        .into_iter()
        .map(|r| (r.id().to_string(), r))
        .collect();
    for c in all {
        match c {
            Change::Upsert(r) => {
                state.insert(r.id().to_string(), r);
            }
            Change::Delete { id, .. } => {
                state.remove(&id);
            }
        }
    }
    let last = match o2.changes_since(None).await.unwrap() {
        ChangeBatch::Snapshot { records, .. } => by_id(records),
        other => panic!("{kind}: {other:?}"),
    };
    assert_eq!(
        state.into_values().collect::<Vec<_>>(),
        last,
        "{kind}: feed ≠ snapshot"
    );
}

fn change_id(c: &Change) -> &str {
    match c {
        Change::Upsert(r) => r.id(),
        Change::Delete { id, .. } => id,
    }
}
