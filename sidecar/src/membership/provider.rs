//! The one membership provider trait, and the lease records every provider stores.
//!
//! Every provider is a store of lease records, one per host, with compare-and-swap writes and an
//! ordered change feed: the Kubernetes API (Leases, list + watch), a SQLite file (a lease table
//! and a change log), or an in-process hub. The generic engine in [`super::handle`] drives them
//! all the same way, so the heartbeat, the expiry judgement, fencing and coalescing exist once.

use super::descriptor::HostDescriptor;
use super::heartbeat::LostCause;
use async_trait::async_trait;
use std::time::Duration;
use tokio::sync::watch;

/// One host's lease as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// What the host publishes; `descriptor.id` is the record's name.
    pub descriptor: HostDescriptor,
    /// Who holds the lease (`holderIdentity`): `<host-id>/<incarnation>` for a healthy record
    /// (see [`holder_identity`]), so two processes started with one host id never look alike.
    pub holder: String,
    /// Changes on every write by the holder and only then (`renewTime`). Observers judge expiry by
    /// how long they have seen it stand still, on their own clock; it is never compared with a
    /// local clock.
    pub renew: String,
    /// The lease duration the holder declared.
    pub ttl: Duration,
    /// The store's version of the record (`resourceVersion`, the SQLite change sequence),
    /// compared by compare-and-swap writes and deletes. Increases across the store.
    pub version: u64,
}

impl LeaseRecord {
    /// The record's name: the host id.
    pub fn id(&self) -> &str {
        &self.descriptor.id
    }
}

/// One entry of a store's change feed, in the store's order.
// Upserts are nearly every change and are consumed at once: boxing them would add an
// allocation per renewal to make the rare deletion smaller.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The record was created or written.
    Upsert(LeaseRecord),
    /// The record was deleted at `version`.
    Delete {
        /// The host id.
        id: String,
        /// The store version of the deletion (or of the record's last state).
        version: u64,
        /// The record's own holder withdrew it (a graceful stop, or a fenced host once its
        /// turns were over): proof that the host hands out nothing more, so observers drop it
        /// at once. Any other deletion (a peer's expiry, `kubectl delete lease`, Pod garbage
        /// collection) proves nothing about turns still running on that host: observers drop
        /// it only once its last renewal they saw is older than its TTL plus the margin.
        withdrawn: bool,
    },
}

/// What [`MembershipProvider::changes_since`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeBatch {
    /// The changes after the cursor, in order, and the new cursor.
    Changes {
        /// The changes, oldest first.
        changes: Vec<Change>,
        /// The feed position after the last change.
        cursor: u64,
    },
    /// The cursor is too old (or absent): a complete, consistent snapshot at `cursor`.
    Snapshot {
        /// Every record at `cursor`.
        records: Vec<LeaseRecord>,
        /// The feed position of the snapshot.
        cursor: u64,
    },
}

impl ChangeBatch {
    /// The feed position after this batch.
    pub fn cursor(&self) -> u64 {
        match self {
            ChangeBatch::Changes { cursor, .. } | ChangeBatch::Snapshot { cursor, .. } => *cursor,
        }
    }
}

/// How a compare-and-swap delete ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The record was at the expected version and is gone now.
    Deleted,
    /// There was no record.
    Gone,
    /// The record changed since the version was read: nothing was deleted.
    Changed,
}

/// The holder identity of one incarnation of host `host_id`: `<host-id>/<incarnation>`.
///
/// **One identity, one process** (DESIGN.md §3): the host id names the record, the incarnation
/// names the process that may write it. A provider writes only records whose holder is its own
/// identity, joins only over a record it already holds, and treats every other holder on our
/// record as loss; so a second process started with the same host id is refused instead of
/// silently sharing (and renewing) the first one's lease.
pub fn holder_identity(host_id: &str, incarnation: &str) -> String {
    format!("{host_id}/{incarnation}")
}

/// A fresh incarnation nonce: 64 random bits as 16 hex digits, drawn once per provider (so once
/// per process start in production). The simulator and tests that need determinism pass their
/// own to the providers' `*_as` constructors instead.
pub fn random_incarnation() -> String {
    use rand::RngExt;
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}

/// A store operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The store could not be reached or answered with an error; the operation may be retried.
    #[error("{provider} membership store unavailable during {op}: {detail}")]
    Unavailable {
        /// The provider kind (`memory`, `sqlite`, `kubernetes`).
        provider: &'static str,
        /// The operation (`renew`, `read`, ...).
        op: &'static str,
        /// What the store said.
        detail: String,
    },
    /// Our record is gone or someone else holds it: proof of loss.
    #[error("{provider} membership record lost: {cause:?}")]
    Lost {
        /// The provider kind.
        provider: &'static str,
        /// What proves it.
        cause: LostCause,
    },
    /// Joining found a record with our id held by another holder: another process (or an
    /// earlier one whose record has not expired yet) uses this host id.
    #[error(
        "{provider} membership record {id:?} is held by {holder:?}, another incarnation: a second \
         process was started with the same host id, or an earlier one crashed and its record has \
         not expired yet; give every process its own host id (leave --host-id unset for the pod \
         name plus an incarnation suffix)"
    )]
    Conflict {
        /// The provider kind.
        provider: &'static str,
        /// The record name.
        id: String,
        /// Its holder.
        holder: String,
    },
    /// A record in the store could not be decoded.
    #[error("{provider} membership record {id:?} is malformed: {detail}")]
    Malformed {
        /// The provider kind.
        provider: &'static str,
        /// The record name.
        id: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// A membership store. One provider instance stands for one host: it remembers the version of
/// the record it last wrote, so renewals are compare-and-swap.
#[async_trait]
pub trait MembershipProvider: Send + Sync + 'static {
    /// The provider kind, for logs and errors.
    fn kind(&self) -> &'static str;

    /// The holder identity this provider writes, `<host-id>/<incarnation>` ([`holder_identity`]).
    /// Our record naming any other holder is a write we did not make: loss.
    fn holder(&self) -> &str;

    /// Publishes our record: creates it, or takes it over when a record with our id exists and we
    /// hold it (a worker-only host rejoining, same process). Returns the record's new version. A
    /// record with our id held by another holder (another incarnation) is a
    /// [`ProviderError::Conflict`]: never taken over.
    async fn join(&self, descriptor: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError>;

    /// Renews our lease and writes `descriptor` (a status change is a renewal too), by
    /// compare-and-swap on the version we last wrote; on a conflict, re-reads and retries if we
    /// still hold the record. [`ProviderError::Lost`] if it is gone, held by someone else, or
    /// replaced by a record we did not create. **A renewal never creates a record**: a record
    /// deleted under us stays deleted and we fence.
    async fn renew(&self, descriptor: &HostDescriptor) -> Result<u64, ProviderError>;

    /// Deletes our record (compare-and-swap on the version we last wrote). Already gone is fine.
    async fn withdraw(&self) -> Result<(), ProviderError>;

    /// The changes after `cursor`, or a consistent snapshot when the cursor is `None` or too old
    /// for the feed (a Kubernetes 410 Gone, a compacted SQLite change log).
    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError>;

    /// A hint of the feed position the store has reached; it changes when there is something
    /// new to read. Reads are driven by it through the refresh coalescer.
    fn notifications(&self) -> watch::Receiver<u64>;

    /// A linearizable read of one record (a GET, a SELECT): the expiry confirmation.
    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError>;

    /// Deletes a peer's record if it is still at `version` (the expiry itself).
    async fn delete_if(&self, id: &str, version: u64) -> Result<DeleteOutcome, ProviderError>;
}
