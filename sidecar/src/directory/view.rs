//! What the directory needs to know about membership, and nothing more: a snapshot of the hosts
//! with their status and whether they hold claims ([`DirView`]), and a source of snapshots with
//! a synchronous lease check ([`ViewSource`]).
//!
//! The directory depends on this narrow seam rather than on the membership module, so the
//! simulator can drive it with hand-built views and the host can adapt any membership provider
//! (see [`ViewCell`]). A `DirView` precomputes the owner of all 4096 partitions once per view
//! change; every directory operation then finds its owner by indexing.

use super::hash::{self, PARTITIONS};
use sigx_proto::ActorError;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Where a host stands in its lifecycle (mirrors `HostStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerStatus {
    /// Published, not serving: owns nothing, holds no claims.
    Joining,
    /// Serving.
    Active,
    /// Stopping: still holds activations until it has unregistered them.
    Leaving,
}

/// One host as the directory sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Host id (unique per incarnation; never returns once gone).
    pub id: Arc<str>,
    /// Mesh address `host:port`.
    pub advertise: Arc<str>,
    /// Lifecycle status.
    pub status: PeerStatus,
    /// Registers at least one stateful type (or publishes no type list: "registers
    /// everything"). Only such hosts own partitions and hold claims.
    pub stateful: bool,
    /// The stateful types it registers, sorted; `None` when it did not say (it may hold claims
    /// of any type).
    pub stateful_types: Option<Arc<[Arc<str>]>>,
    /// How many times the host became active again under this id (the descriptor's
    /// `active_epoch`): part of the fingerprint, and of what a ready partition was made ready
    /// under.
    pub epoch: u64,
}

impl PeerInfo {
    /// A peer record.
    pub fn new(
        id: impl Into<Arc<str>>,
        advertise: impl Into<Arc<str>>,
        status: PeerStatus,
        stateful: bool,
    ) -> Self {
        PeerInfo {
            id: id.into(),
            advertise: advertise.into(),
            status,
            stateful,
            stateful_types: None,
            epoch: 0,
        }
    }

    /// The same peer, registering exactly these stateful types.
    pub fn with_stateful_types<S: AsRef<str>>(mut self, types: &[S]) -> Self {
        let mut types: Vec<Arc<str>> = types.iter().map(|t| Arc::from(t.as_ref())).collect();
        types.sort();
        self.stateful_types = Some(types.into());
        self
    }

    /// The same peer with active epoch `epoch`.
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// Active and stateful: eligible to own partitions.
    pub fn is_directory_eligible(&self) -> bool {
        self.status == PeerStatus::Active && self.stateful
    }

    /// A host that may hold live activations: stateful and active or leaving.
    pub fn may_hold_claims(&self) -> bool {
        self.stateful && matches!(self.status, PeerStatus::Active | PeerStatus::Leaving)
    }

    /// Whether this host can hold a live activation of `actor_type`: it may hold claims, and
    /// registers the type (or did not say which types it registers). A directory entry naming a
    /// host that cannot is stale: that host has no app (it went back to `joining`) or no longer
    /// registers the type, so it runs no such actor.
    pub fn may_hold_claim_of(&self, actor_type: &str) -> bool {
        self.may_hold_claims()
            && self
                .stateful_types
                .as_ref()
                .is_none_or(|types| types.binary_search_by(|t| (**t).cmp(actor_type)).is_ok())
    }
}

/// An immutable membership snapshot with the partition owners precomputed.
#[derive(Debug)]
pub struct DirView {
    version: u64,
    hosts: Vec<PeerInfo>,
    fingerprint: u64,
    /// The fingerprint without the active epochs (the deliberately broken variant).
    fingerprint_ids_only: u64,
    /// Index into `hosts` of each partition's owner; `u32::MAX` when no host is eligible.
    owners: Box<[u32]>,
}

const NO_OWNER: u32 = u32::MAX;

impl DirView {
    /// A view from its hosts (any order; duplicates by id keep the last).
    pub fn new(version: u64, mut hosts: Vec<PeerInfo>) -> Self {
        hosts.sort_by(|a, b| a.id.cmp(&b.id));
        hosts.dedup_by(|later, earlier| {
            if later.id == earlier.id {
                *earlier = later.clone();
                true
            } else {
                false
            }
        });
        let eligible: Vec<(u32, &str)> = hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.is_directory_eligible())
            .map(|(i, h)| (i as u32, &*h.id))
            .collect();
        let fingerprint_ids_only = hash::fingerprint(eligible.iter().map(|(_, id)| *id));
        let fingerprint = hash::fingerprint_with_epochs(
            eligible
                .iter()
                .map(|&(i, id)| (id, hosts[i as usize].epoch)),
        );
        let owners = (0..PARTITIONS)
            .map(|p| {
                let mut best: Option<(u64, u32, &str)> = None;
                for &(i, id) in &eligible {
                    let w = hash::weight(p, id);
                    best = match best {
                        Some((bw, bi, bid)) if bw > w || (bw == w && bid <= id) => {
                            Some((bw, bi, bid))
                        }
                        _ => Some((w, i, id)),
                    };
                }
                best.map(|(_, i, _)| i).unwrap_or(NO_OWNER)
            })
            .collect();
        DirView {
            version,
            hosts,
            fingerprint,
            fingerprint_ids_only,
            owners,
        }
    }

    /// An empty view (nothing known yet).
    pub fn empty() -> Self {
        DirView::new(0, Vec::new())
    }

    /// The membership version this snapshot was built from (comparable only within a process).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The hosts, sorted by id.
    pub fn hosts(&self) -> &[PeerInfo] {
        &self.hosts
    }

    /// A host by id.
    pub fn get(&self, id: &str) -> Option<&PeerInfo> {
        self.hosts
            .binary_search_by(|h| (*h.id).cmp(id))
            .ok()
            .map(|i| &self.hosts[i])
    }

    /// The hash of the sorted ids of the active stateful hosts, each with its active epoch:
    /// equal fingerprints agree on every partition's owner *and* on which activation of each
    /// owner they mean. Without the epochs, a peer whose feed still shows a host's earlier
    /// `active` record (it missed the `joining` in between) would answer that host's `Collect`
    /// as if nothing had happened, later see the old `joining` record and own every partition
    /// with an empty wait set (DESIGN.md §4, the A-B-A counterexample).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The fingerprint over the ids alone: the deliberately broken variant
    /// (`ProtocolFaults::fingerprint_without_epochs`), and what hosts before active epochs
    /// computed.
    pub fn fingerprint_ids_only(&self) -> u64 {
        self.fingerprint_ids_only
    }

    /// The owner of partition `p` in this view.
    pub fn owner(&self, p: u32) -> Option<&PeerInfo> {
        match self.owners.get(p as usize) {
            Some(&i) if i != NO_OWNER => Some(&self.hosts[i as usize]),
            _ => None,
        }
    }

    /// The hosts a new owner must collect from: stateful, active or leaving, other than `me`.
    pub fn claim_holders_except<'a>(&'a self, me: &'a str) -> impl Iterator<Item = &'a PeerInfo> {
        self.hosts
            .iter()
            .filter(move |h| h.may_hold_claims() && &*h.id != me)
    }
}

/// Where the directory gets membership from.
pub trait ViewSource: Send + Sync + 'static {
    /// This host's id.
    fn self_id(&self) -> &str;
    /// The current view.
    fn view(&self) -> Arc<DirView>;
    /// A receiver that sees every new view (intermediate ones may be skipped).
    fn subscribe(&self) -> watch::Receiver<Arc<DirView>>;
    /// Synchronous: is this host's lease valid right now on both clocks? `Err(fenced)` if not.
    fn check_lease(&self) -> Result<(), ActorError>;
    /// Asks membership to re-read the store soon (a peer said our view lags). Coalesced by the
    /// provider; the default does nothing.
    fn request_refresh(&self) {}
    /// This host's own record as it last wrote it (status, active epoch), which its view may
    /// not show yet: a host whose feed lags still sees its earlier `active` record after its
    /// app detached, or after it became active again under a new epoch. `None`: the source
    /// cannot say, and the view alone decides.
    fn own_record(&self) -> Option<(PeerStatus, u64)> {
        None
    }
}

type LeaseCheck = dyn Fn() -> Result<(), ActorError> + Send + Sync;
type RefreshHook = dyn Fn() + Send + Sync;
type OwnRecord = dyn Fn() -> (PeerStatus, u64) + Send + Sync;

/// A [`ViewSource`] fed by whoever observes membership: the host's adapter publishes a
/// [`DirView`] for each membership change, the simulator publishes hand-built ones.
pub struct ViewCell {
    self_id: Arc<str>,
    tx: watch::Sender<Arc<DirView>>,
    lease: Box<LeaseCheck>,
    refresh: Mutex<Option<Box<RefreshHook>>>,
    own: Option<Box<OwnRecord>>,
}

impl std::fmt::Debug for ViewCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewCell")
            .field("self_id", &self.self_id)
            .field("version", &self.tx.borrow().version())
            .finish_non_exhaustive()
    }
}

impl ViewCell {
    /// A cell for host `self_id`, starting with `initial`, asking `lease` for the lease check.
    pub fn new(
        self_id: impl Into<Arc<str>>,
        initial: DirView,
        lease: impl Fn() -> Result<(), ActorError> + Send + Sync + 'static,
    ) -> Self {
        let (tx, _rx) = watch::channel(Arc::new(initial));
        ViewCell {
            self_id: self_id.into(),
            tx,
            lease: Box::new(lease),
            refresh: Mutex::new(None),
            own: None,
        }
    }

    /// The same cell, answering [`ViewSource::own_record`] from `own` (the host's membership:
    /// the record it last wrote).
    pub fn with_own_record(
        mut self,
        own: impl Fn() -> (PeerStatus, u64) + Send + Sync + 'static,
    ) -> Self {
        self.own = Some(Box::new(own));
        self
    }

    /// Publishes a new view.
    pub fn publish(&self, view: DirView) {
        self.tx.send_replace(Arc::new(view));
    }

    /// Installs the hook [`ViewSource::request_refresh`] calls.
    pub fn on_refresh_request(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.refresh.lock().expect("refresh hook lock") = Some(Box::new(hook));
    }
}

impl ViewSource for ViewCell {
    fn self_id(&self) -> &str {
        &self.self_id
    }
    fn view(&self) -> Arc<DirView> {
        self.tx.borrow().clone()
    }
    fn subscribe(&self) -> watch::Receiver<Arc<DirView>> {
        self.tx.subscribe()
    }
    fn check_lease(&self) -> Result<(), ActorError> {
        (self.lease)()
    }
    fn request_refresh(&self) {
        if let Some(hook) = &*self.refresh.lock().expect("refresh hook lock") {
            hook();
        }
    }
    fn own_record(&self) -> Option<(PeerStatus, u64)> {
        self.own.as_ref().map(|own| own())
    }
}

/// The mesh's peer check answered from a [`ViewSource`]: a peer is known when it is in the
/// current view, whatever its status.
pub struct KnownFromViews(pub Arc<dyn ViewSource>);

impl crate::mesh::KnownPeers for KnownFromViews {
    fn is_known(&self, peer: &str) -> bool {
        self.0.view().get(peer).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: &str, status: PeerStatus, stateful: bool) -> PeerInfo {
        PeerInfo::new(id, format!("{id}:1"), status, stateful)
    }

    #[test]
    fn owners_are_rendezvous_over_active_stateful_hosts_only() {
        let v = DirView::new(
            1,
            vec![
                peer("c", PeerStatus::Active, true),
                peer("a", PeerStatus::Active, true),
                peer("w", PeerStatus::Active, false),
                peer("j", PeerStatus::Joining, true),
                peer("l", PeerStatus::Leaving, true),
                peer("b", PeerStatus::Active, true),
            ],
        );
        assert_eq!(v.hosts()[0].id.as_ref(), "a");
        assert_eq!(v.fingerprint(), hash::fingerprint(["a", "b", "c"]));
        for p in 0..PARTITIONS {
            assert_eq!(v.owner(p).map(|h| &*h.id), hash::owner(p, ["a", "b", "c"]));
        }
        let holders: Vec<_> = v.claim_holders_except("a").map(|h| &*h.id).collect();
        assert_eq!(holders, ["b", "c", "l"]);
        assert!(DirView::empty().owner(0).is_none());
    }
}
