//! Membership (DESIGN.md §3): which hosts are alive, as immutable views; this host's own lease,
//! judged by the [`HeartbeatClock`]; fencing of stateful hosts and rejoining of worker-only
//! ones; and the providers: [`memory`] (tests), [`sqlite`] (the embedded default, one machine),
//! [`postgres`] (a fleet of VMs or bare metal) and [`kubernetes`] (one `coordination.k8s.io/v1`
//! Lease per host).
//!
//! The rest of the sidecar holds a [`MembershipHandle`] returned by [`start`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use sigx_sidecar::membership::*;
//! let hub = MemoryHub::new();
//! let descriptor = HostDescriptor::new(
//!     "engine-0-a1b2",
//!     "10.0.0.7:7400",
//!     Some(vec!["Counter".into()]),
//!     Some(vec!["Counter".into()]),
//! );
//! let membership = start(
//!     hub.provider("engine-0-a1b2"),
//!     descriptor,
//!     MembershipConfig::default(),
//!     sigx_sidecar::clock::system(),
//! )
//! .await?;
//! membership.set_status(HostStatus::Active).await?;
//! // Before every activation, turn dispatch and Collect answer:
//! membership.check_lease()?;
//! let owners = membership.view().active_stateful_ids().len();
//! # let _ = owners;
//! # Ok(())
//! # }
//! ```
//!
//! Every provider stores one lease record per host with compare-and-swap writes and an ordered
//! change feed; the engine in [`handle`] drives them all alike (heartbeat, views, expiry
//! judgement, fencing, rejoining, coalescing), so the semantics exist once.

pub mod coalesce;
pub mod config;
pub mod descriptor;
pub mod handle;
pub mod heartbeat;
pub mod held_identity;
pub mod kubernetes;
pub mod load;
pub mod memory;
pub mod postgres;
pub mod provider;
mod rows;
pub mod sqlite;
pub mod view;

pub use coalesce::RefreshCoalescer;
pub use config::{
    DeletionCheck, ExpiryCheck, MembershipConfig, MembershipConfigError, SelfFence, validate_timing,
};
pub use descriptor::{DescriptorError, HostDescriptor, HostLoad, HostStatus};
pub use handle::{MembershipCounters, MembershipHandle, Subscription, start};
pub use heartbeat::{ElapsedRule, FenceReason, HeartbeatClock, LostCause};
pub use kubernetes::{KubernetesConfigError, KubernetesOptions, KubernetesProvider};
pub use load::{LoadBoard, LoadPolicy, LoadPublisher, LoadSample, LoadSource};
pub use memory::{MemoryHub, MemoryProvider};
pub use postgres::{PostgresOpenError, PostgresOptions, PostgresProvider};
pub use provider::{
    Change, ChangeBatch, DeleteOutcome, LeaseRecord, MembershipProvider, ProviderError,
    holder_identity, random_incarnation,
};
pub use sqlite::{SqliteOpenError, SqliteOptions, SqliteProvider};
pub use view::{MemberFilter, MembersMemo, MembershipView, ViewSource, members_memo};

use std::time::Duration;

/// A membership operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// The timing cannot work.
    #[error(transparent)]
    Config(#[from] MembershipConfigError),
    /// The descriptor cannot be published.
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
    /// The store failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// This host fenced itself: terminal.
    #[error("this host is fenced ({0}); restart it to rejoin under a new id")]
    Fenced(FenceReason),
    /// This worker-only host's lease lapsed; it is rejoining under the same id.
    #[error("this worker-only host's lease lapsed ({0}); it is rejoining under the same id")]
    Rejoining(FenceReason),
    /// This host left membership.
    #[error("this host has left membership")]
    Left,
    /// A store operation took too long.
    #[error("membership {op} timed out after {after:?}; is the membership store reachable?")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// How long it was given.
        after: Duration,
    },
}
