//! The membership provider contract (DESIGN.md §3, `membership/provider.rs`), written once
//! against `Arc<dyn MembershipProvider>` and run by `membership_contract.rs` on every store: the
//! in-process hub (the simulator's store model), SQLite and a real PostgreSQL server. Every
//! check expects exactly the same outcomes from every store; a [`Store`] opens any number of
//! independent handles on one store, as that many processes would. The checks under
//! concurrency (racing writers, the log's order) are in `contract_races.rs`.
//!
//! Where the stores may differ, the difference is a [`Store`] parameter, not a skipped check:
//! how many writes push a cursor out of the compacted log (a setting, not a semantic), and how
//! promptly `notifications()` follows a write (synchronous, a poll, LISTEN/NOTIFY: checked as
//! "eventually, never ahead of the log").
#![allow(dead_code)]

use async_trait::async_trait;
use sigx_sidecar::membership::{
    Change, ChangeBatch, DeleteOutcome, HostDescriptor, HostLoad, HostStatus, LeaseRecord,
    LostCause, MembershipProvider, ProviderError,
};
use std::sync::Arc;
use std::time::Duration;

pub const TTL: Duration = Duration::from_millis(2000);

/// One store, and handles on it.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A new handle for host `id`: a new process, so a new incarnation.
    async fn open(&self, id: &str) -> Arc<dyn MembershipProvider>;
    /// Writes after which a cursor taken before them is older than the compacted log.
    fn compaction_horizon(&self) -> usize;
    /// Makes the store refuse writes until [`Store::restore`]: an outage (memory), another
    /// process holding the write lock past the busy timeout (SQLite), a session holding the
    /// change counter past the lock timeout (PostgreSQL). Reads are not part of it: the hub
    /// refuses them too, the SQL stores still answer them.
    async fn cut_off(&self);
    /// Ends [`Store::cut_off`].
    async fn restore(&self);
}

pub fn descriptor(id: &str) -> HostDescriptor {
    let mut d = HostDescriptor::new(
        id,
        format!("10.0.0.{}:7400", id.len()),
        Some(vec!["Counter".into(), "Mailer".into()]),
        Some(vec!["Counter".into()]),
    );
    d.meta.insert("node".into(), format!("node-{id}"));
    d.started_at_unix_ms = 1_700_000_000_000;
    d
}

fn active(id: &str, n: u64) -> HostDescriptor {
    let mut d = descriptor(id);
    d.status = HostStatus::Active;
    d.active_epoch = n;
    d
}

pub fn version_of(c: &Change) -> u64 {
    match c {
        Change::Upsert(r) => r.version,
        Change::Delete { version, .. } => *version,
    }
}

/// The feed's head, from a snapshot read.
pub async fn head(p: &dyn MembershipProvider) -> u64 {
    p.changes_since(None).await.expect("snapshot read").cursor()
}

/// The changes after `cursor`; a snapshot here is a contract violation.
pub async fn after(p: &dyn MembershipProvider, cursor: u64) -> (Vec<Change>, u64) {
    match p.changes_since(Some(cursor)).await.expect("feed read") {
        ChangeBatch::Changes { changes, cursor } => (changes, cursor),
        ChangeBatch::Snapshot { cursor: at, .. } => panic!(
            "{}: a current cursor {cursor} read a snapshot at {at} instead of the changes",
            p.kind()
        ),
    }
}

/// Asserts that nothing was written after `cursor`.
async fn nothing_after(p: &dyn MembershipProvider, cursor: u64, what: &str) {
    let (changes, at) = after(p, cursor).await;
    assert_eq!(
        (changes.as_slice(), at),
        (&[][..], cursor),
        "{}: {what} wrote to the log",
        p.kind()
    );
}

fn by_id(mut records: Vec<LeaseRecord>) -> Vec<LeaseRecord> {
    records.sort_by(|a, b| a.id().cmp(b.id()));
    records
}

async fn record(p: &dyn MembershipProvider, id: &str) -> LeaseRecord {
    p.read(id)
        .await
        .expect("read")
        .unwrap_or_else(|| panic!("{}: no record {id:?}", p.kind()))
}

fn is_lost(r: Result<u64, ProviderError>, kind: &str, want: LostCause) {
    match r {
        Err(ProviderError::Lost { provider, cause }) => {
            assert_eq!(
                (provider, &cause),
                (kind, &want),
                "the loss names the store"
            )
        }
        other => panic!("{kind}: expected loss ({want:?}), got {other:?}"),
    }
}

/// Joining publishes exactly our record; a second incarnation of a live id is refused and writes
/// nothing, also by renewing or withdrawing; the holder rejoins over its own record.
pub async fn join_and_one_identity_one_process(s: Arc<dyn Store>) {
    let (a, a2, o) = (s.open("a").await, s.open("a").await, s.open("o").await);
    let kind = a.kind();
    assert!(
        a.holder().starts_with("a/") && a.holder().len() > 2,
        "{}",
        a.holder()
    );
    assert!(a2.holder().starts_with("a/"), "{}", a2.holder());
    assert_ne!(a.holder(), a2.holder(), "{kind}: two processes look alike");
    let c0 = head(&*o).await;
    let v1 = a.join(&descriptor("a"), TTL).await.unwrap();
    assert!(v1 > c0, "{kind}: version {v1} after head {c0}");
    let r = record(&*o, "a").await;
    assert_eq!(
        (&r.descriptor, r.holder.as_str(), r.ttl, r.version),
        (&descriptor("a"), a.holder(), TTL, v1),
        "{kind}: the record as written"
    );
    let (changes, cursor) = after(&*o, c0).await;
    assert_eq!(
        changes,
        [Change::Upsert(r.clone())],
        "{kind}: the join is one change"
    );
    assert_eq!(cursor, v1, "{kind}: the cursor is the join's version");

    match a2.join(&descriptor("a"), TTL).await {
        Err(ProviderError::Conflict {
            provider,
            id,
            holder,
        }) => assert_eq!(
            (provider, id.as_str(), holder.as_str()),
            (kind, "a", a.holder())
        ),
        other => panic!("{kind}: a second incarnation must conflict, got {other:?}"),
    }
    let holder = a.holder().to_string();
    is_lost(
        a2.renew(&descriptor("a")).await,
        kind,
        LostCause::HolderChanged { holder },
    );
    a2.withdraw()
        .await
        .expect("withdrawing a record we do not hold is fine");
    assert_eq!(
        record(&*o, "a").await,
        r,
        "{kind}: the other incarnation touched it"
    );
    nothing_after(&*o, v1, "a refused join, renewal or withdrawal").await;

    let v2 = a.join(&descriptor("a"), TTL * 2).await.unwrap();
    let r2 = record(&*o, "a").await;
    assert!(v2 > v1, "{kind}");
    assert_eq!(
        (r2.holder.as_str(), r2.ttl, r2.version),
        (a.holder(), TTL * 2, v2),
        "{kind}"
    );
    let b = s.open("b").await;
    let vb = b.join(&descriptor("b"), TTL).await.unwrap();
    assert!(
        vb > v2,
        "{kind}: versions increase across the store ({vb} after {v2})"
    );
}

/// A renewal writes the descriptor, keeps the declared TTL and changes `renew`; once the id is
/// someone else's (our record expired and a new process took the id), our renewal — whose
/// version is stale — is refused as loss and leaves the new record alone.
pub async fn renewals_and_a_stale_renewal_refused(s: Arc<dyn Store>) {
    let (a, o) = (s.open("a").await, s.open("o").await);
    let kind = a.kind();
    let v1 = a.join(&descriptor("a"), TTL).await.unwrap();
    let before = record(&*o, "a").await;
    let v2 = a.renew(&active("a", 3)).await.unwrap();
    assert!(v2 > v1, "{kind}");
    let r = record(&*o, "a").await;
    assert_eq!(
        (&r.descriptor, r.ttl, r.version, r.holder.as_str()),
        (&active("a", 3), TTL, v2, a.holder()),
        "{kind}: the renewal's record"
    );
    assert_ne!(
        r.renew, before.renew,
        "{kind}: renewTime must change on every write"
    );
    assert_eq!(
        after(&*o, v1).await,
        (vec![Change::Upsert(r)], v2),
        "{kind}"
    );

    assert_eq!(o.delete_if("a", v2).await.unwrap(), DeleteOutcome::Deleted);
    let a2 = s.open("a").await;
    let v3 = a2.join(&descriptor("a"), TTL).await.unwrap();
    let theirs = record(&*o, "a").await;
    let holder = a2.holder().to_string();
    is_lost(
        a.renew(&active("a", 3)).await,
        kind,
        LostCause::HolderChanged { holder },
    );
    a.withdraw().await.unwrap();
    assert_eq!(
        record(&*o, "a").await,
        theirs,
        "{kind}: the stale holder wrote over it"
    );
    nothing_after(&*o, v3, "the stale holder").await;
}

/// A record deleted under its holder stays deleted: no renewal re-creates it (only a join
/// does), whether a peer expired it or the holder withdrew.
pub async fn deleted_records_stay_deleted(s: Arc<dyn Store>) {
    let (a, b, o) = (s.open("a").await, s.open("b").await, s.open("o").await);
    let kind = a.kind();
    a.join(&descriptor("a"), TTL).await.unwrap();
    let v = a.renew(&active("a", 0)).await.unwrap();
    assert_eq!(o.delete_if("a", v).await.unwrap(), DeleteOutcome::Deleted);
    let c = head(&*o).await;
    for _ in 0..2 {
        is_lost(a.renew(&active("a", 0)).await, kind, LostCause::Gone);
    }
    assert_eq!(
        o.read("a").await.unwrap(),
        None,
        "{kind}: a late renewal resurrected it"
    );
    b.join(&descriptor("b"), TTL).await.unwrap();
    b.withdraw().await.unwrap();
    let c2 = head(&*o).await;
    is_lost(b.renew(&descriptor("b")).await, kind, LostCause::Gone);
    assert_eq!(
        o.read("b").await.unwrap(),
        None,
        "{kind}: renewed after withdrawing"
    );
    nothing_after(&*o, c2, "a renewal of a deleted record").await;
    let (changes, _) = after(&*o, c).await;
    assert_eq!(
        changes.len(),
        2,
        "{kind}: b's join and withdrawal only: {changes:?}"
    );
    match o.changes_since(None).await.unwrap() {
        ChangeBatch::Snapshot { records, .. } => assert!(records.is_empty(), "{records:?}"),
        other => panic!("{kind}: expected a snapshot, got {other:?}"),
    }
    // Joining again is how a worker-only host comes back: that creates a record.
    let v = a.join(&descriptor("a"), TTL).await.unwrap();
    assert_eq!(record(&*o, "a").await.version, v, "{kind}");
}

/// `delete_if` is compare-and-swap on the version: a stale one deletes nothing and writes
/// nothing; the current one deletes once and logs it; then the record is gone.
pub async fn compare_and_swap_deletes(s: Arc<dyn Store>) {
    let (a, o) = (s.open("a").await, s.open("o").await);
    let kind = a.kind();
    let v1 = a.join(&descriptor("a"), TTL).await.unwrap();
    let v2 = a.renew(&descriptor("a")).await.unwrap();
    assert_eq!(
        o.delete_if("a", v1).await.unwrap(),
        DeleteOutcome::Changed,
        "{kind}"
    );
    assert_eq!(
        record(&*o, "a").await.version,
        v2,
        "{kind}: a stale delete deleted it"
    );
    nothing_after(&*o, v2, "a stale delete").await;
    assert_eq!(
        o.delete_if("a", v2).await.unwrap(),
        DeleteOutcome::Deleted,
        "{kind}"
    );
    assert_eq!(o.read("a").await.unwrap(), None, "{kind}");
    let (changes, cursor) = after(&*o, v2).await;
    assert_eq!(
        changes,
        [Change::Delete {
            id: "a".into(),
            version: cursor,
            withdrawn: false
        }],
        "{kind}: one deletion, at the cursor, not a withdrawal"
    );
    assert_eq!(
        o.delete_if("a", v2).await.unwrap(),
        DeleteOutcome::Gone,
        "{kind}"
    );
    assert_eq!(
        o.delete_if("nobody", 1).await.unwrap(),
        DeleteOutcome::Gone,
        "{kind}"
    );
    nothing_after(&*o, cursor, "a delete of nothing").await;
}

/// Hole D: a holder's withdrawal and anyone else's deletion are told apart in the feed (and in
/// a snapshot neither record remains).
pub async fn a_withdrawal_and_an_expiry_are_told_apart(s: Arc<dyn Store>) {
    let (a, b, o) = (s.open("a").await, s.open("b").await, s.open("o").await);
    let kind = a.kind();
    a.join(&descriptor("a"), TTL).await.unwrap();
    let vb = b.join(&descriptor("b"), TTL).await.unwrap();
    a.withdraw().await.unwrap();
    assert_eq!(o.delete_if("b", vb).await.unwrap(), DeleteOutcome::Deleted);
    let (changes, cursor) = after(&*o, vb).await;
    match changes.as_slice() {
        [
            Change::Delete {
                id: ia,
                version: va,
                withdrawn: true,
            },
            Change::Delete {
                id: ib,
                version: vd,
                withdrawn: false,
            },
        ] => {
            assert_eq!((ia.as_str(), ib.as_str()), ("a", "b"), "{kind}");
            assert!(vb < *va && va < vd && *vd == cursor, "{kind}: {changes:?}");
        }
        other => panic!("{kind}: expected a's withdrawal then b's expiry, got {other:?}"),
    }
    a.withdraw().await.expect("withdrawing twice is fine");
    nothing_after(&*o, cursor, "a second withdrawal").await;
}

/// A snapshot is every record at its cursor; the feed goes on from that cursor with nothing in
/// between; a cursor the store never issued (ahead of its head) reads a snapshot too.
pub async fn a_snapshot_is_the_state_at_its_cursor(s: Arc<dyn Store>) {
    let (a, b, c, o) = (
        s.open("a").await,
        s.open("b").await,
        s.open("c").await,
        s.open("o").await,
    );
    let kind = a.kind();
    a.join(&descriptor("a"), TTL).await.unwrap();
    b.join(&descriptor("b"), TTL).await.unwrap();
    a.renew(&active("a", 1)).await.unwrap();
    b.withdraw().await.unwrap();
    let vc = c.join(&descriptor("c"), TTL).await.unwrap();
    let want = vec![record(&*o, "a").await, record(&*o, "c").await];
    let (records, cursor) = match o.changes_since(None).await.unwrap() {
        ChangeBatch::Snapshot { records, cursor } => (by_id(records), cursor),
        other => panic!("{kind}: no cursor must read a snapshot, got {other:?}"),
    };
    assert_eq!(
        (records, cursor),
        (want.clone(), vc),
        "{kind}: the snapshot"
    );
    nothing_after(&*o, cursor, "nothing").await;
    match o.changes_since(Some(cursor + 1000)).await.unwrap() {
        ChangeBatch::Snapshot {
            records,
            cursor: at,
        } => {
            assert_eq!((by_id(records), at), (want, vc), "{kind}: the snapshot")
        }
        other => panic!("{kind}: a cursor ahead of the head {vc} read {other:?}"),
    }
}

/// An observer whose cursor fell behind the compacted log reads a snapshot at the head; a
/// cursor inside the kept log still reads exactly the changes after it.
pub async fn a_cursor_older_than_the_compacted_log_reads_a_snapshot(s: Arc<dyn Store>) {
    let (w, k, o) = (s.open("w").await, s.open("k").await, s.open("o").await);
    let kind = w.kind();
    k.join(&descriptor("k"), TTL).await.unwrap();
    w.join(&descriptor("w"), TTL).await.unwrap();
    let early = head(&*o).await;
    let mut recent = early;
    let n = s.compaction_horizon();
    for i in 0..n {
        if i + 2 == n {
            recent = head(&*o).await;
        }
        w.renew(&descriptor("w")).await.unwrap();
    }
    let want = vec![record(&*o, "k").await, record(&*o, "w").await];
    match o.changes_since(Some(early)).await.unwrap() {
        ChangeBatch::Snapshot { records, cursor } => {
            assert_eq!(
                (by_id(records), cursor),
                (want.clone(), want[1].version),
                "{kind}: the snapshot is the state at its cursor"
            );
        }
        ChangeBatch::Changes { changes, .. } => panic!(
            "{kind}: a cursor {n} writes old read {} changes, not a snapshot",
            changes.len()
        ),
    }
    let (changes, cursor) = after(&*o, recent).await;
    assert_eq!(changes.len(), 2, "{kind}: {changes:?}");
    assert_eq!(changes[1], Change::Upsert(want[1].clone()), "{kind}");
    assert_eq!(cursor, want[1].version, "{kind}");
}

/// `read` is fresh: it answers the store's state right after another handle's write, never the
/// reader's feed position; and `notifications()` reaches every write's position, never passing
/// the log's head.
pub async fn reads_are_fresh_and_notifications_follow(s: Arc<dyn Store>) {
    let (w, x, o) = (s.open("w").await, s.open("x").await, s.open("o").await);
    let kind = w.kind();
    let mut hint = o.notifications();
    let stale = head(&*o).await;
    assert_eq!(o.read("w").await.unwrap(), None, "{kind}");
    let v1 = w.join(&descriptor("w"), TTL).await.unwrap();
    assert_eq!(
        record(&*o, "w").await.version,
        v1,
        "{kind}: a stale read after a join"
    );
    let v2 = w.renew(&active("w", 0)).await.unwrap();
    assert_eq!(
        record(&*o, "w").await.version,
        v2,
        "{kind}: a stale read after a renewal"
    );
    assert_eq!(x.delete_if("w", v2).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(
        o.read("w").await.unwrap(),
        None,
        "{kind}: a stale read after a delete"
    );
    let v3 = w.join(&descriptor("w"), TTL).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), hint.wait_for(|s| *s >= v3))
        .await
        .unwrap_or_else(|_| panic!("{kind}: notifications never reached {v3}"))
        .unwrap();
    assert!(
        *hint.borrow() <= head(&*o).await,
        "{kind}: a hint past the head"
    );
    let (changes, _) = after(&*o, stale).await;
    assert_eq!(changes.len(), 4, "{kind}: {changes:?}");
}

/// A record reads back as every store keeps it, in the feed, a snapshot and a read alike: the
/// descriptor normalized (type lists sorted and deduplicated, as the JSON stores decode it),
/// its load included, and the TTL in whole milliseconds (the stores keep `ttl_ms`).
pub async fn records_read_back_as_the_stores_keep_them(s: Arc<dyn Store>) {
    let (a, o) = (s.open("a").await, s.open("o").await);
    let kind = a.kind();
    let c0 = head(&*o).await;
    let mut d = descriptor("a");
    d.types = Some(vec!["Mailer".into(), "Counter".into(), "Mailer".into()]);
    d.load = Some(HostLoad {
        activations: 7,
        turns_per_sec: 3,
    });
    a.join(&d, Duration::from_micros(1_500_700)).await.unwrap();
    let r = record(&*o, "a").await;
    assert_eq!(
        r.descriptor,
        d.clone().normalized(),
        "{kind}: the descriptor"
    );
    assert_eq!(r.ttl, Duration::from_millis(1500), "{kind}: the TTL");
    assert_eq!(
        after(&*o, c0).await.0,
        [Change::Upsert(r.clone())],
        "{kind}"
    );
    match o.changes_since(None).await.unwrap() {
        ChangeBatch::Snapshot { records, .. } => assert_eq!(records, [r], "{kind}"),
        other => panic!("{kind}: {other:?}"),
    }
}

fn unavailable<T: std::fmt::Debug>(r: Result<T, ProviderError>, kind: &str, what: &str) {
    match r {
        Err(ProviderError::Unavailable { provider, .. }) => assert_eq!(provider, kind, "{what}"),
        other => panic!("{kind}: {what} on a store refusing writes must be Unavailable: {other:?}"),
    }
}

/// A store that cannot take writes answers every write `Unavailable` (retryable: never loss,
/// never a conflict) and changes nothing; once it takes writes again the same handles go on
/// where they were: the holder's record is still its own.
pub async fn a_store_refusing_writes_is_unavailable_and_changes_nothing(s: Arc<dyn Store>) {
    let (a, b, n, o) = (
        s.open("a").await,
        s.open("b").await,
        s.open("n").await,
        s.open("o").await,
    );
    let kind = a.kind();
    a.join(&descriptor("a"), TTL).await.unwrap();
    let vb = b.join(&descriptor("b"), TTL).await.unwrap();
    let c = head(&*o).await;
    let before = vec![record(&*o, "a").await, record(&*o, "b").await];
    s.cut_off().await;
    unavailable(a.renew(&active("a", 0)).await, kind, "a renewal");
    unavailable(n.join(&descriptor("n"), TTL).await, kind, "a join");
    unavailable(b.withdraw().await, kind, "a withdrawal");
    unavailable(o.delete_if("b", vb).await, kind, "a delete");
    s.restore().await;
    nothing_after(&*o, c, "a refused write").await;
    let now = vec![record(&*o, "a").await, record(&*o, "b").await];
    assert_eq!(now, before, "{kind}: a refused write changed a record");
    assert_eq!(o.read("n").await.unwrap(), None, "{kind}");
    let va = a.renew(&active("a", 0)).await.unwrap();
    assert!(va > c, "{kind}");
    b.withdraw().await.unwrap();
    n.join(&descriptor("n"), TTL).await.unwrap();
    assert_eq!(
        o.delete_if("a", va).await.unwrap(),
        DeleteOutcome::Deleted,
        "{kind}"
    );
    let (changes, _) = after(&*o, c).await;
    assert_eq!(changes.len(), 4, "{kind}: {changes:?}");
}
