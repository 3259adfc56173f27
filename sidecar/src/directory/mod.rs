//! The in-mesh, partitioned, strongly consistent actor directory (DESIGN.md §4).
//!
//! There is no external store: the directory is split into [`PARTITIONS`] partitions, each owned
//! by one active stateful host chosen by rendezvous hashing over the owner's current view
//! ([`hash`]). This module is both sides of the protocol:
//!
//! * **owner side** — per-partition state (`ready` / `recovering`), the entries, and the answers
//!   to `Lookup`, `Register`, `Unregister` ([`Directory`] implements the mesh's
//!   [`DirectoryHandler`]);
//! * **host side** — the per-partition *term* and the live activations of this host, the
//!   [`ActivationGate`](crate::runtime::ActivationGate) that enforces Rule 1 ([`gate`]), and the
//!   `Collect` answers of Rule 2;
//! * **the collector** ([`collect`]) — a task that makes newly owned partitions ready by
//!   collection (Rule 2) and sweeps departed hosts (Rule 3).
//!
//! Every per-partition decision is taken under that partition's lock, which is never held
//! across an `.await`.
//!
//! # Why a partition stays ready across view changes
//!
//! A partition is ready when this host owns it in its *current* view, it was made ready at term
//! `t`, and this host's term for it is still `t`. Any other host that became owner in between
//! (even in a view this host's watcher skipped) had to collect from this host, which bumps the
//! term — so an unchanged term proves nobody else granted a claim for the partition since.

pub mod collect;
pub mod gate;
pub mod hash;
pub mod listing;
pub mod table;
pub mod view;

pub use gate::{DirectoryGate, Located};
pub use hash::{PARTITIONS, partition};
pub use listing::{ListPage, Skipped};
pub use view::{DirView, KnownFromViews, PeerInfo, PeerStatus, ViewCell, ViewSource};

use crate::mesh::{DirectoryHandler, MeshClient};
use crate::runtime::ActorId;
use sigx_proto::ActorError;
use sigx_proto::v1::{
    ActorRef, CollectRequest, CollectResponse, DirectoryEntry, DirectoryStatus, ListEntriesRequest,
    ListEntriesResponse, LookupRequest, LookupResponse, RegisterRequest, RegisterResponse,
    UnregisterRequest, UnregisterResponse,
};
use std::collections::HashMap;
use std::hash::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;
use table::{EntryTable, HostInterner};
use tokio::sync::Notify;

/// The longest actor type name accepted (wire contract: `ActorRef.actor_type`).
pub const MAX_TYPE_LEN: usize = 128;
/// The longest actor key accepted, bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// The longest activation id accepted, bytes.
pub const MAX_ACTIVATION_LEN: usize = 128;

/// Deliberately broken protocol variants, for the tests and the simulator that must show their
/// checkers catch a violation. Never enable in production: each one switches off a rule that
/// the single-activation guarantee rests on.
#[derive(Debug, Clone, Default)]
pub struct ProtocolFaults {
    /// Rule 1 without the term re-check: a grant is accepted even if a new owner collected this
    /// partition from us while the `Register` was in flight.
    pub skip_term_recheck: bool,
    /// Rule 2 without the view agreement: `Collect` is answered even when the requester's view
    /// fingerprint differs from the responder's (or the requester does not own the partition in
    /// the responder's view), and the requester accepts answers given under another
    /// fingerprint.
    pub collect_ignores_fingerprint: bool,
    /// Rule 2 with the fingerprint over host ids only, not their active epochs: a host that
    /// went `active → joining → active` is taken for its earlier activation by a peer whose
    /// feed missed the `joining` (the model's A-B-A counterexample).
    pub fingerprint_without_epochs: bool,
    /// Rule 2 without forgetting: a partition made ready stays ready when this host drops out
    /// of directory eligibility and comes back (its app detached and re-attached), serving
    /// the table it had before, which misses every claim granted meanwhile (issue 12, hole B).
    pub keep_readiness_across_reactivation: bool,
}

/// Timings of the directory protocol.
#[derive(Debug, Clone)]
pub struct DirectoryConfig {
    /// The `retry_after` sent with `recovering` answers.
    pub retry_after: Duration,
    /// Per-RPC timeout of directory calls (`Register`, each batch of a `Collect` round, ...),
    /// within any deadline.
    pub rpc_timeout: Duration,
    /// Pause between failed collection rounds (a peer not converged or unreachable).
    pub collect_retry: Duration,
    /// How long `release` keeps trying to unregister.
    pub release_timeout: Duration,
    /// Broken variants for checker tests. Default: none.
    pub faults: ProtocolFaults,
}

impl Default for DirectoryConfig {
    fn default() -> Self {
        DirectoryConfig {
            retry_after: Duration::from_millis(20),
            rpc_timeout: Duration::from_secs(2),
            collect_retry: Duration::from_millis(50),
            release_timeout: Duration::from_secs(5),
            faults: ProtocolFaults::default(),
        }
    }
}

/// The directory's counters (DESIGN.md §4).
#[derive(Debug, Default)]
struct Counters {
    host_sweeps: AtomicU64,
    swept_entries: AtomicU64,
    sweeps_skipped_graceful: AtomicU64,
    collections_run: AtomicU64,
    collection_time_ms: AtomicU64,
    collections_restarted: AtomicU64,
    conflicting_reports: AtomicU64,
    lazy_evictions: AtomicU64,
}

/// A snapshot of the directory's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirectoryCounters {
    /// Departed hosts whose entries this host swept from the partitions it owns.
    pub host_sweeps: u64,
    /// Entries those sweeps removed.
    pub swept_entries: u64,
    /// Departures not swept because the host announced `leaving` first (it unregistered).
    pub sweeps_skipped_graceful: u64,
    /// Partitions this host owns in its view that are not ready (being collected).
    pub partitions_recovering: u64,
    /// Collection rounds completed.
    pub collections_run: u64,
    /// Total wall time of completed collection rounds, milliseconds.
    pub collection_time_ms: u64,
    /// Rounds abandoned because the view changed while they ran (and started again at once).
    pub collections_restarted: u64,
    /// Actors reported live on two hosts by one collection (a bug signal; never resolved
    /// silently).
    pub conflicting_reports: u64,
    /// Entries of departed hosts evicted by a lookup or register.
    pub lazy_evictions: u64,
    /// Entries held as owner.
    pub entries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    /// Not owner, or never made ready.
    Idle,
    /// Owner in the current view, collecting.
    Recovering,
    /// Ready since this host's term for the partition was `term`, made ready while this host
    /// was active in its own view under active epoch `epoch`.
    Ready { term: u64, epoch: u64 },
}

/// One partition, both sides.
#[derive(Debug)]
struct Partition {
    /// Host side: bumped on every `Collect` this host answers for the partition.
    term: u64,
    /// Host side: this host's live activations in the partition.
    live: HashMap<ActorId, Arc<str>>,
    /// Owner side.
    state: OwnerState,
    /// Owner side: the entries (or, when no longer owner, what was held as owner).
    table: EntryTable,
}

impl Partition {
    fn new() -> Self {
        Partition {
            term: 0,
            live: HashMap::new(),
            state: OwnerState::Idle,
            table: EntryTable::default(),
        }
    }

    /// Ready, under this host's current active epoch (`None`: not directory-eligible in its
    /// own view). A host that dropped out of eligibility and came back has a new epoch, so
    /// nothing it made ready before counts: it collects anew (DESIGN.md §4, Rule 2), even when
    /// its view watcher never saw the views in between.
    fn is_ready_under(&self, epoch: Option<u64>) -> bool {
        matches!(self.state, OwnerState::Ready { term, epoch: e }
            if term == self.term && epoch == Some(e))
    }
}

/// An internal directory answer other than OK.
#[derive(Debug, Clone)]
enum Refusal {
    NotOwner(Option<Arc<str>>),
    Recovering,
    NotConverged,
}

pub(crate) struct Inner {
    me: Arc<str>,
    views: Arc<dyn ViewSource>,
    mesh: Arc<MeshClient>,
    parts: Box<[Mutex<Partition>]>,
    hasher: RandomState,
    /// Host ids of entries. Lock order: a partition lock, then this.
    hosts: RwLock<HostInterner>,
    counters: Counters,
    /// Collection round durations by outcome (`/metrics`).
    rounds: crate::metrics::OutcomeHistogram,
    /// Remote owner RPC durations by RPC and outcome (`/metrics`).
    rpcs: crate::metrics::RpcHistogram,
    config: DirectoryConfig,
    kick: Notify,
}

/// The directory of one host. Cheap to clone.
#[derive(Clone)]
pub struct Directory {
    inner: Arc<Inner>,
    _tasks: Arc<collect::Tasks>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("host", &self.inner.me)
            .finish_non_exhaustive()
    }
}

/// Checks the actor of a directory request from a peer (type and key lengths).
#[doc(hidden)]
pub fn validate_actor(actor: Option<&ActorRef>) -> Result<&ActorRef, ActorError> {
    let a = actor.ok_or_else(|| ActorError::invalid("directory request without an actor"))?;
    if a.actor_type.is_empty() || a.actor_type.len() > MAX_TYPE_LEN {
        return Err(ActorError::invalid(format!(
            "actor type must be 1..={MAX_TYPE_LEN} bytes, got {}",
            a.actor_type.len()
        )));
    }
    if a.key.len() > MAX_KEY_LEN {
        return Err(ActorError::invalid(format!(
            "actor key must be at most {MAX_KEY_LEN} bytes, got {}",
            a.key.len()
        )));
    }
    Ok(a)
}

/// Checks the entry of a peer's `Register` or `Unregister`: its actor, that it names the peer
/// itself, and its activation id.
#[doc(hidden)]
pub fn validate_entry<'a>(
    entry: Option<&'a DirectoryEntry>,
    peer: &str,
) -> Result<(&'a ActorRef, &'a DirectoryEntry), ActorError> {
    let e = entry.ok_or_else(|| ActorError::invalid("directory request without an entry"))?;
    let actor = validate_actor(e.actor.as_ref())?;
    if e.host_id != peer {
        return Err(ActorError::invalid(format!(
            "host {peer:?} tried to change a directory entry naming host {:?}: a host may only \
             register and unregister its own activations",
            e.host_id
        )));
    }
    if e.activation_id.is_empty() || e.activation_id.len() > MAX_ACTIVATION_LEN {
        return Err(ActorError::invalid(format!(
            "activation id must be 1..={MAX_ACTIVATION_LEN} bytes"
        )));
    }
    Ok((actor, e))
}

fn entry_proto(actor_type: &str, key: &str, host: &str, activation: &str) -> DirectoryEntry {
    DirectoryEntry {
        actor: Some(ActorRef {
            actor_type: actor_type.to_owned(),
            key: key.to_owned(),
        }),
        host_id: host.to_owned(),
        activation_id: activation.to_owned(),
    }
}

impl Inner {
    fn part(&self, p: u32) -> MutexGuard<'_, Partition> {
        self.parts[p as usize].lock().expect("partition lock")
    }

    fn host_name(&self, i: u32) -> Arc<str> {
        self.hosts
            .read()
            .expect("host interner lock")
            .name(i)
            .clone()
    }

    fn host_number(&self, id: &Arc<str>) -> u32 {
        if let Some(i) = self.hosts.read().expect("host interner lock").find(id) {
            return i;
        }
        self.hosts.write().expect("host interner lock").intern(id)
    }

    /// This host's active epoch in `view`, if it is directory-eligible there *and* that record
    /// is the one it last wrote. A host whose feed lags can still see its earlier `active`
    /// record after its app detached (it published `joining`) or after it came back under a new
    /// active epoch; meanwhile a peer that saw the change owned its partitions and granted
    /// claims without collecting from it. Judged on the stale record it would serve those
    /// partitions as still ready (seed 265 of the simulation: two activations).
    fn own_epoch(&self, view: &DirView) -> Option<u64> {
        let me = view.get(&self.me).filter(|h| h.is_directory_eligible())?;
        if self.config.faults.keep_readiness_across_reactivation {
            return Some(0);
        }
        match self.views.own_record() {
            Some((status, epoch)) if status != PeerStatus::Active || epoch != me.epoch => None,
            _ => Some(me.epoch),
        }
    }

    /// Whether `part` is ready for this host in `view`.
    fn is_ready(&self, part: &Partition, view: &DirView) -> bool {
        part.is_ready_under(self.own_epoch(view))
    }

    /// The fingerprint views are compared by (Rule 2).
    fn fingerprint(&self, view: &DirView) -> u64 {
        if self.config.faults.fingerprint_without_epochs {
            view.fingerprint_ids_only()
        } else {
            view.fingerprint()
        }
    }

    fn retry_after_ms(&self) -> u64 {
        self.config.retry_after.as_millis() as u64
    }

    /// The owner-side gate every owner answer passes, under the partition lock.
    fn owner_check(&self, part: &Partition, p: u32, view: &DirView) -> Result<(), Refusal> {
        match view.owner(p) {
            Some(o) if o.id == self.me => {}
            Some(o) => return Err(Refusal::NotOwner(Some(o.id.clone()))),
            None => return Err(Refusal::NotOwner(None)),
        }
        if self.views.check_lease().is_err() {
            // A fenced owner grants nothing; the caller refreshes its view (we withdraw).
            return Err(Refusal::NotConverged);
        }
        if !self.is_ready(part, view) {
            self.kick.notify_one();
            return Err(Refusal::Recovering);
        }
        Ok(())
    }

    fn refusal_fields(&self, r: &Refusal) -> (i32, String, u64) {
        match r {
            Refusal::NotOwner(hint) => (
                DirectoryStatus::NotOwner as i32,
                hint.as_deref().unwrap_or("").to_owned(),
                0,
            ),
            Refusal::Recovering => (
                DirectoryStatus::Recovering as i32,
                String::new(),
                self.retry_after_ms(),
            ),
            Refusal::NotConverged => (
                DirectoryStatus::NotConverged as i32,
                String::new(),
                self.retry_after_ms(),
            ),
        }
    }

    /// Owner side of `Lookup`.
    pub(crate) fn owner_lookup(&self, req: &LookupRequest) -> Result<LookupResponse, ActorError> {
        let actor = validate_actor(req.actor.as_ref())?;
        let p = partition(&actor.actor_type, &actor.key);
        let view = self.views.view();
        let mut part = self.part(p);
        if let Err(r) = self.owner_check(&part, p, &view) {
            let (status, owner_hint, retry_after_ms) = self.refusal_fields(&r);
            return Ok(LookupResponse {
                status,
                entry: None,
                owner_hint,
                retry_after_ms,
            });
        }
        let found = part
            .table
            .get(&self.hasher, &actor.actor_type, &actor.key)
            .map(|e| (self.host_name(e.host), e.activation.to_owned()));
        let entry = match found {
            // Lazy eviction (Rule 3): the entry's host left this owner's view. An owner only ever
            // admits entries for hosts in its view, and views only move forward, so absence
            // means departed — never "unknown to a lagging view". Likewise a host this view
            // shows unable to hold the claim (no app: back to `joining`; or no longer
            // registering the type) runs no such activation: its entry is stale.
            Some((host, _))
                if view
                    .get(&host)
                    .is_none_or(|h| !h.may_hold_claim_of(&actor.actor_type)) =>
            {
                part.table
                    .remove_if(&self.hasher, &actor.actor_type, &actor.key, |_| true);
                self.counters.lazy_evictions.fetch_add(1, Ordering::Relaxed);
                None
            }
            Some((host, act)) => Some(entry_proto(&actor.actor_type, &actor.key, &host, &act)),
            None => None,
        };
        Ok(LookupResponse {
            status: DirectoryStatus::Ok as i32,
            entry,
            owner_hint: String::new(),
            retry_after_ms: 0,
        })
    }

    /// Owner side of `Register`.
    pub(crate) fn owner_register(
        &self,
        peer: &str,
        req: &RegisterRequest,
    ) -> Result<RegisterResponse, ActorError> {
        let (actor, e) = validate_entry(req.entry.as_ref(), peer)?;
        let p = partition(&actor.actor_type, &actor.key);
        let view = self.views.view();
        let mut part = self.part(p);
        let refuse = |r: Refusal| {
            let (status, owner_hint, retry_after_ms) = self.refusal_fields(&r);
            Ok(RegisterResponse {
                status,
                winner: None,
                owner_hint,
                retry_after_ms,
            })
        };
        if let Err(r) = self.owner_check(&part, p, &view) {
            return refuse(r);
        }
        // Never record a claim for a host this owner cannot see as active: its view lags ours
        // (or ours lags), and an entry naming an unknown host could never be judged departed.
        let requester = match view.get(peer) {
            Some(h) if h.status == PeerStatus::Active && h.stateful => h.id.clone(),
            _ => return refuse(Refusal::NotConverged),
        };
        let existing = part
            .table
            .get(&self.hasher, &actor.actor_type, &actor.key)
            .map(|x| (self.host_name(x.host), x.activation.to_owned()));
        let winner = match existing {
            // Only a host that can still hold this claim keeps winning it: an entry naming a
            // host without an app (or no longer registering the type) would otherwise turn every
            // Register away for an actor nobody runs, for as long as that host stays in the view.
            Some((host, act))
                if view
                    .get(&host)
                    .is_some_and(|h| h.may_hold_claim_of(&actor.actor_type)) =>
            {
                entry_proto(&actor.actor_type, &actor.key, &host, &act)
            }
            stale => {
                if stale.is_some() {
                    self.counters.lazy_evictions.fetch_add(1, Ordering::Relaxed);
                }
                let host = self.host_number(&requester);
                part.table.insert(
                    &self.hasher,
                    &actor.actor_type,
                    &actor.key,
                    host,
                    &e.activation_id,
                );
                e.clone()
            }
        };
        Ok(RegisterResponse {
            status: DirectoryStatus::Ok as i32,
            winner: Some(winner),
            owner_hint: String::new(),
            retry_after_ms: 0,
        })
    }

    /// Owner side of `Unregister` (conditional on host and activation id).
    pub(crate) fn owner_unregister(
        &self,
        peer: &str,
        req: &UnregisterRequest,
    ) -> Result<UnregisterResponse, ActorError> {
        let (actor, e) = validate_entry(req.entry.as_ref(), peer)?;
        let p = partition(&actor.actor_type, &actor.key);
        let view = self.views.view();
        let mut part = self.part(p);
        if let Err(r) = self.owner_check(&part, p, &view) {
            let (status, owner_hint, retry_after_ms) = self.refusal_fields(&r);
            return Ok(UnregisterResponse {
                status,
                removed: false,
                owner_hint,
                retry_after_ms,
            });
        }
        let host = self
            .hosts
            .read()
            .expect("host interner lock")
            .find(&e.host_id);
        let removed = host.is_some_and(|host| {
            part.table
                .remove_if(&self.hasher, &actor.actor_type, &actor.key, |x| {
                    x.host == host && x.activation == e.activation_id
                })
        });
        Ok(UnregisterResponse {
            status: DirectoryStatus::Ok as i32,
            removed,
            owner_hint: String::new(),
            retry_after_ms: 0,
        })
    }

    /// Host side of `Collect` (Rule 2).
    pub(crate) fn answer_collect(
        &self,
        peer: &str,
        req: &CollectRequest,
    ) -> Result<CollectResponse, ActorError> {
        if req.requester != peer {
            return Err(ActorError::invalid(format!(
                "host {peer:?} sent a Collect on behalf of {:?}",
                req.requester
            )));
        }
        let view = self.views.view();
        let not_converged = CollectResponse {
            status: DirectoryStatus::NotConverged as i32,
            fingerprint: self.fingerprint(&view),
            entries: Vec::new(),
        };
        // A lapsed host must not report activations as live: it has fenced, or is about to.
        if self.views.check_lease().is_err() {
            return Ok(not_converged);
        }
        let faults = &self.config.faults;
        if self.fingerprint(&view) != req.fingerprint && !faults.collect_ignores_fingerprint {
            return Ok(not_converged);
        }
        let mut entries = Vec::new();
        for &p in &req.partitions {
            if p >= PARTITIONS {
                return Err(ActorError::invalid(format!(
                    "partition {p} out of range (0..{PARTITIONS})"
                )));
            }
            let owner_ok = view.owner(p).is_some_and(|o| *o.id == *peer);
            if !owner_ok && !faults.collect_ignores_fingerprint {
                return Ok(not_converged);
            }
        }
        for &p in &req.partitions {
            let mut part = self.part(p);
            part.term += 1;
            for (actor, act) in &part.live {
                entries.push(entry_proto(&actor.actor_type, &actor.key, &self.me, act));
            }
            // Entries held as a former owner, except those naming this host (its live set above
            // is the truth about itself). The requester treats them as hints only: every host
            // that can hold a claim answers for itself in the same round.
            let me = self.host_number(&self.me);
            for x in part.table.iter() {
                if x.host != me {
                    let host = self.host_name(x.host);
                    entries.push(entry_proto(x.actor_type, x.key, &host, x.activation));
                }
            }
            part.table.clear();
            part.state = OwnerState::Idle;
        }
        tracing::debug!(
            requester = %peer,
            partitions = req.partitions.len(),
            entries = entries.len(),
            "answered Collect"
        );
        Ok(CollectResponse {
            status: DirectoryStatus::Ok as i32,
            fingerprint: self.fingerprint(&view),
            entries,
        })
    }

    fn counters(&self) -> DirectoryCounters {
        let view = self.views.view();
        let mut recovering = 0;
        let mut entries = 0;
        for p in 0..PARTITIONS {
            let part = self.part(p);
            let owned = view.owner(p).is_some_and(|o| o.id == self.me);
            if owned && !self.is_ready(&part, &view) {
                recovering += 1;
            }
            entries += part.table.len() as u64;
        }
        let c = &self.counters;
        DirectoryCounters {
            host_sweeps: c.host_sweeps.load(Ordering::Relaxed),
            swept_entries: c.swept_entries.load(Ordering::Relaxed),
            sweeps_skipped_graceful: c.sweeps_skipped_graceful.load(Ordering::Relaxed),
            partitions_recovering: recovering,
            collections_run: c.collections_run.load(Ordering::Relaxed),
            collection_time_ms: c.collection_time_ms.load(Ordering::Relaxed),
            collections_restarted: c.collections_restarted.load(Ordering::Relaxed),
            conflicting_reports: c.conflicting_reports.load(Ordering::Relaxed),
            lazy_evictions: c.lazy_evictions.load(Ordering::Relaxed),
            entries,
        }
    }
}

impl Directory {
    /// Starts the directory of this host: spawns the collector (Rule 2) and the view watcher
    /// (Rule 3 sweeps). The tasks stop when the last clone of the `Directory` is dropped.
    pub fn start(
        views: Arc<dyn ViewSource>,
        mesh: Arc<MeshClient>,
        config: DirectoryConfig,
    ) -> Self {
        let inner = Arc::new(Inner {
            me: views.self_id().into(),
            views,
            mesh,
            parts: (0..PARTITIONS)
                .map(|_| Mutex::new(Partition::new()))
                .collect(),
            hasher: RandomState::new(),
            hosts: RwLock::new(HostInterner::default()),
            counters: Counters::default(),
            rounds: Default::default(),
            rpcs: Default::default(),
            config,
            kick: Notify::new(),
        });
        let tasks = collect::Tasks::spawn(inner.clone());
        Directory {
            inner,
            _tasks: Arc::new(tasks),
        }
    }

    /// This host's id.
    pub fn self_id(&self) -> &str {
        &self.inner.me
    }

    /// The counters, with the number of partitions recovering right now.
    pub fn counters(&self) -> DirectoryCounters {
        self.inner.counters()
    }

    /// How long this host's directory RPCs to remote owners took, by RPC and outcome.
    pub fn rpc_histogram(&self) -> crate::metrics::RpcHistogram {
        self.inner.rpcs.clone()
    }

    /// How long this host's collection rounds took, by outcome (`/metrics`).
    pub fn collection_histogram(&self) -> crate::metrics::OutcomeHistogram {
        self.inner.rounds.clone()
    }

    /// True when this host owns partition `p` in its current view and it is ready.
    pub fn is_ready(&self, p: u32) -> bool {
        let view = self.inner.views.view();
        let part = self.inner.part(p);
        view.owner(p).is_some_and(|o| o.id == self.inner.me) && self.inner.is_ready(&part, &view)
    }

    /// The activation gate of Rule 1 for the runtime.
    pub fn gate(&self) -> DirectoryGate {
        DirectoryGate::new(self.clone())
    }

    /// Owner-side `Register` without the mesh (benchmarks and in-process callers).
    pub fn register_local(
        &self,
        peer: &str,
        req: &RegisterRequest,
    ) -> Result<RegisterResponse, ActorError> {
        self.inner.owner_register(peer, req)
    }

    /// Heap bytes held by the owner tables (approximate: allocator rounding excluded).
    pub fn table_heap_bytes(&self) -> usize {
        (0..PARTITIONS)
            .map(|p| self.inner.part(p).table.heap_bytes())
            .sum()
    }
}

impl DirectoryHandler for Directory {
    fn lookup(&self, _peer: &str, req: LookupRequest) -> Result<LookupResponse, ActorError> {
        self.inner.owner_lookup(&req)
    }
    fn register(&self, peer: &str, req: RegisterRequest) -> Result<RegisterResponse, ActorError> {
        self.inner.owner_register(peer, &req)
    }
    fn unregister(
        &self,
        peer: &str,
        req: UnregisterRequest,
    ) -> Result<UnregisterResponse, ActorError> {
        self.inner.owner_unregister(peer, &req)
    }
    fn collect(&self, peer: &str, req: CollectRequest) -> Result<CollectResponse, ActorError> {
        self.inner.answer_collect(peer, &req)
    }
    fn list_entries(
        &self,
        _peer: &str,
        req: ListEntriesRequest,
    ) -> Result<ListEntriesResponse, ActorError> {
        self.inner.owner_list(&req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{MeshAuth, MeshClientConfig, TcpConnector};
    use crate::runtime::ActivationGate;

    fn peer(id: &str, status: PeerStatus) -> PeerInfo {
        // Port 9 (discard) on a test-net address: never answers, so collection from it fails.
        PeerInfo::new(id, "192.0.2.1:9", status, true)
    }

    fn start(me: &str, hosts: Vec<PeerInfo>) -> (Directory, Arc<ViewCell>) {
        let cell = Arc::new(ViewCell::new(me, DirView::new(1, hosts), || Ok(())));
        let mesh = Arc::new(MeshClient::new(
            me,
            MeshAuth::Insecure,
            crate::clock::system(),
            Arc::new(TcpConnector),
            MeshClientConfig {
                connect_timeout: Duration::from_millis(50),
                ..Default::default()
            },
        ));
        let config = DirectoryConfig {
            rpc_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        (Directory::start(cell.clone(), mesh, config), cell)
    }

    fn entry(ty: &str, key: &str, host: &str, act: &str) -> DirectoryEntry {
        entry_proto(ty, key, host, act)
    }

    fn reg(d: &Directory, host: &str, key: &str, act: &str) -> RegisterResponse {
        d.register(
            host,
            RegisterRequest {
                entry: Some(entry("T", key, host, act)),
            },
        )
        .unwrap()
    }

    /// A key of type "T" whose partition is owned by `owner` in `view`.
    fn key_owned_by(view: &DirView, owner: &str) -> String {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| {
                view.owner(partition("T", k))
                    .is_some_and(|o| &*o.id == owner)
            })
            .unwrap()
    }

    async fn until_ready(d: &Directory) {
        for _ in 0..200 {
            if d.counters().partitions_recovering == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("partitions never became ready: {:?}", d.counters());
    }

    #[tokio::test]
    async fn single_owner_grants_once_and_unregisters_conditionally() {
        let (d, cell) = start("a", vec![peer("a", PeerStatus::Active)]);
        until_ready(&d).await;
        let r = reg(&d, "a", "x", "act-1");
        assert_eq!(r.status, DirectoryStatus::Ok as i32);
        assert_eq!(r.winner.as_ref().unwrap().activation_id, "act-1");
        // Idempotent for the same activation, first-wins for another.
        assert_eq!(
            reg(&d, "a", "x", "act-1").winner.unwrap().activation_id,
            "act-1"
        );
        assert_eq!(
            reg(&d, "a", "x", "act-2").winner.unwrap().activation_id,
            "act-1"
        );
        // A host may only register itself.
        let err = d
            .register(
                "a",
                RegisterRequest {
                    entry: Some(entry("T", "y", "b", "act")),
                },
            )
            .unwrap_err();
        assert_eq!(err.kind, sigx_proto::ErrorKind::Invalid);
        // Conditional unregister.
        let un = |act: &str| {
            d.unregister(
                "a",
                UnregisterRequest {
                    entry: Some(entry("T", "x", "a", act)),
                },
            )
            .unwrap()
            .removed
        };
        assert!(!un("act-2"));
        assert!(un("act-1"));
        let l = DirectoryHandler::lookup(
            &d,
            "a",
            LookupRequest {
                actor: Some(ActorRef {
                    actor_type: "T".into(),
                    key: "x".into(),
                }),
            },
        )
        .unwrap();
        assert_eq!(l.status, DirectoryStatus::Ok as i32);
        assert!(l.entry.is_none());
        drop(cell);
    }

    #[tokio::test]
    async fn not_owner_recovering_and_not_converged() {
        // "b" is in the view but never answers Collect: partitions "a" owns stay recovering.
        let hosts = vec![peer("a", PeerStatus::Active), peer("b", PeerStatus::Active)];
        let view = DirView::new(1, hosts.clone());
        let (d, cell) = start("a", hosts);
        let mine = key_owned_by(&view, "a");
        let theirs = key_owned_by(&view, "b");
        let r = reg(&d, "a", &theirs, "1");
        assert_eq!(r.status, DirectoryStatus::NotOwner as i32);
        assert_eq!(r.owner_hint, "b");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = reg(&d, "a", &mine, "1");
        assert_eq!(r.status, DirectoryStatus::Recovering as i32);
        assert!(r.retry_after_ms > 0);
        assert!(d.counters().partitions_recovering > 0);
        // Once "b" leaves the view, "a" owns everything and nobody else can hold claims.
        cell.publish(DirView::new(2, vec![peer("a", PeerStatus::Active)]));
        until_ready(&d).await;
        assert_eq!(reg(&d, "a", &mine, "1").status, DirectoryStatus::Ok as i32);
        // A Register from a host this owner does not see as active: not converged.
        let r = reg(&d, "c", &mine, "2");
        assert_eq!(r.status, DirectoryStatus::NotConverged as i32);
    }

    #[tokio::test]
    async fn departed_hosts_are_evicted_lazily_and_swept() {
        let hosts = vec![peer("a", PeerStatus::Active), peer("b", PeerStatus::Active)];
        let (d, cell) = start("a", vec![peer("a", PeerStatus::Active)]);
        until_ready(&d).await;
        // "b" appears (as an active stateful host) and registers through "a".
        let view = DirView::new(2, hosts.clone());
        cell.publish(DirView::new(2, hosts));
        // "a" now has to collect from "b", which cannot answer; force the test's hand by making
        // "b" a worker-only host instead (it holds no claims, so nothing to collect).
        let _ = view;
        cell.publish(DirView::new(
            3,
            vec![
                peer("a", PeerStatus::Active),
                PeerInfo::new("b", "192.0.2.1:9", PeerStatus::Active, false),
            ],
        ));
        until_ready(&d).await;
        // Worker-only hosts cannot register.
        assert_eq!(
            reg(&d, "b", "x", "1").status,
            DirectoryStatus::NotConverged as i32
        );
        // Entries of "a" itself for many keys, then of a host "c" via a view where it is active
        // and stateful but owns nothing we look at... simpler: register as "a", then check sweeps
        // of "a"'s entries cannot happen (self never departs). Use the table directly for "c".
        {
            let p = partition("T", "gone");
            let mut part = d.inner.part(p);
            let c = d.inner.host_number(&Arc::from("c"));
            part.table.insert(&d.inner.hasher, "T", "gone", c, "act-c");
        }
        let lookup = |key: &str| {
            DirectoryHandler::lookup(
                &d,
                "a",
                LookupRequest {
                    actor: Some(ActorRef {
                        actor_type: "T".into(),
                        key: key.into(),
                    }),
                },
            )
            .unwrap()
        };
        // "c" is not in the view: the entry is evicted on lookup.
        assert!(lookup("gone").entry.is_none());
        assert_eq!(d.counters().lazy_evictions, 1);

        // Sweeps: "c" joins as active stateful host... it would have to answer collects. Instead
        // sweep a leaving/expired host from the view transition directly.
        let before = DirView::new(
            10,
            vec![
                peer("a", PeerStatus::Active),
                PeerInfo::new("c", "x:1", PeerStatus::Active, true),
                PeerInfo::new("g", "x:1", PeerStatus::Leaving, true),
            ],
        );
        let after = DirView::new(11, vec![peer("a", PeerStatus::Active)]);
        for (k, h) in [("k1", "c"), ("k2", "c"), ("k3", "g"), ("k4", "a")] {
            let p = partition("T", k);
            let h = d.inner.host_number(&Arc::from(h));
            d.inner
                .part(p)
                .table
                .insert(&d.inner.hasher, "T", k, h, "1");
        }
        collect::on_view_change_for_test(&d.inner, &before, &after);
        let c = d.counters();
        assert_eq!(c.host_sweeps, 1);
        assert_eq!(c.swept_entries, 2);
        assert_eq!(c.sweeps_skipped_graceful, 1);
        // The graceful leaver's straggler is left for lazy eviction; "a"'s entry is untouched.
        assert_eq!(lookup("k4").entry.unwrap().host_id, "a");
        assert!(lookup("k3").entry.is_none());
    }

    #[tokio::test]
    async fn entries_naming_a_host_that_cannot_hold_them_stop_winning() {
        let (d, cell) = start("a", vec![peer("a", PeerStatus::Active)]);
        until_ready(&d).await;
        // b has no app (joining) and c registers only "Other": neither can run a "T" actor.
        // Neither is collected from (b holds no claims; c's partitions stay ready because this
        // host stayed eligible), so a's partitions stay ready.
        let view = DirView::new(
            2,
            vec![
                peer("a", PeerStatus::Active),
                peer("b", PeerStatus::Joining),
                peer("c", PeerStatus::Leaving).with_stateful_types(&["Other"]),
            ],
        );
        let keys: Vec<String> = (0..)
            .map(|i| format!("k{i}"))
            .filter(|k| view.owner(partition("T", k)).is_some_and(|o| &*o.id == "a"))
            .take(3)
            .collect();
        cell.publish(view);
        until_ready(&d).await;
        for (key, holder) in keys.iter().zip(["b", "c"]) {
            let p = partition("T", key);
            let h = d.inner.host_number(&Arc::from(holder));
            d.inner
                .part(p)
                .table
                .insert(&d.inner.hasher, "T", key, h, "stale");
            let r = reg(&d, "a", key, "fresh");
            assert_eq!(r.status, DirectoryStatus::Ok as i32);
            let w = r.winner.unwrap();
            assert_eq!(
                (w.host_id.as_str(), w.activation_id.as_str()),
                ("a", "fresh"),
                "an entry naming {holder}, which cannot run a T actor, must not win"
            );
        }
        // And a lookup evicts such an entry instead of routing calls to a host that refuses them.
        let key = &keys[2];
        let b = d.inner.host_number(&Arc::from("b"));
        d.inner
            .part(partition("T", key))
            .table
            .insert(&d.inner.hasher, "T", key, b, "stale");
        let l = DirectoryHandler::lookup(
            &d,
            "a",
            LookupRequest {
                actor: Some(ActorRef {
                    actor_type: "T".into(),
                    key: key.clone(),
                }),
            },
        )
        .unwrap();
        assert_eq!(l.status, DirectoryStatus::Ok as i32);
        assert!(l.entry.is_none(), "{l:?}");
    }

    #[tokio::test]
    async fn collect_answers_only_under_the_same_fingerprint_and_bumps_the_term() {
        let hosts = vec![peer("a", PeerStatus::Active), peer("b", PeerStatus::Active)];
        let view = DirView::new(1, hosts.clone());
        let (d, _cell) = start("a", hosts);
        let key = key_owned_by(&view, "b");
        let p = partition("T", &key);
        d.inner
            .part(p)
            .live
            .insert(ActorId::new("T", key.as_str()), Arc::from("act-a"));
        let req = |fp: u64, requester: &str, parts: Vec<u32>| CollectRequest {
            requester: requester.into(),
            fingerprint: fp,
            partitions: parts,
        };
        // Wrong fingerprint: refused, term unchanged.
        let r = d
            .collect("b", req(view.fingerprint() ^ 1, "b", vec![p]))
            .unwrap();
        assert_eq!(r.status, DirectoryStatus::NotConverged as i32);
        assert_eq!(r.fingerprint, view.fingerprint());
        assert_eq!(d.inner.part(p).term, 0);
        // Requester is not the owner of the partition in our view: refused.
        let mine = partition("T", &key_owned_by(&view, "a"));
        let r = d
            .collect("b", req(view.fingerprint(), "b", vec![mine]))
            .unwrap();
        assert_eq!(r.status, DirectoryStatus::NotConverged as i32);
        // Requester must be the authenticated peer.
        assert!(
            d.collect("c", req(view.fingerprint(), "b", vec![p]))
                .is_err()
        );
        // Right: the live activation is reported and the term moves.
        let r = d
            .collect("b", req(view.fingerprint(), "b", vec![p]))
            .unwrap();
        assert_eq!(r.status, DirectoryStatus::Ok as i32);
        assert_eq!(r.entries.len(), 1);
        assert_eq!(r.entries[0].host_id, "a");
        assert_eq!(r.entries[0].activation_id, "act-a");
        assert_eq!(d.inner.part(p).term, 1);
    }

    #[tokio::test]
    async fn a_fenced_host_answers_nothing() {
        let fenced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = fenced.clone();
        let hosts = vec![peer("a", PeerStatus::Active)];
        let view = DirView::new(1, hosts.clone());
        let cell = Arc::new(ViewCell::new("a", DirView::new(1, hosts), move || {
            if f.load(Ordering::SeqCst) {
                Err(ActorError::fenced("lease lapsed"))
            } else {
                Ok(())
            }
        }));
        let mesh = Arc::new(MeshClient::new(
            "a",
            MeshAuth::Insecure,
            crate::clock::system(),
            Arc::new(TcpConnector),
            MeshClientConfig::default(),
        ));
        let d = Directory::start(cell, mesh, DirectoryConfig::default());
        until_ready(&d).await;
        assert_eq!(reg(&d, "a", "x", "1").status, DirectoryStatus::Ok as i32);
        fenced.store(true, Ordering::SeqCst);
        assert_eq!(
            reg(&d, "a", "y", "1").status,
            DirectoryStatus::NotConverged as i32
        );
        let r = d
            .collect(
                "b",
                CollectRequest {
                    requester: "b".into(),
                    fingerprint: view.fingerprint(),
                    partitions: vec![0],
                },
            )
            .unwrap();
        assert_eq!(r.status, DirectoryStatus::NotConverged as i32);
        assert!(d.gate().check_serving().is_err());
    }
}
