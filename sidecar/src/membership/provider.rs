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
    /// Who holds the lease (`holderIdentity`); the host id for a healthy record.
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
    /// Joining found a live record with our id held by another holder.
    #[error(
        "{provider} membership record {id:?} is held by {holder:?}; host ids must be unique per \
         incarnation (pod name plus an incarnation suffix)"
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

    /// Publishes our record: creates it, or takes it over when a record with our id exists and we
    /// hold it (a worker-only host rejoining). Returns the record's new version. A record with our
    /// id held by another holder is a [`ProviderError::Conflict`].
    async fn join(&self, descriptor: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError>;

    /// Renews our lease and writes `descriptor` (a status change is a renewal too), by
    /// compare-and-swap on the version we last wrote; on a conflict, re-reads and retries if we
    /// still hold the record. [`ProviderError::Lost`] if it is gone or held by someone else.
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
