//! Immutable membership snapshots and the cheap ways to read them on a hot path.
//!
//! A provider publishes a new `Arc<MembershipView>` for every change it observes (an expiry it
//! judged locally included) and hands back the same `Arc` until the next one, so `Arc::ptr_eq`
//! is the cache key that is always right. `version` only orders views of one process.

use super::descriptor::{HostDescriptor, HostStatus};
use sigx_proto::v1;
use std::sync::{Arc, Mutex};

/// One observed state of the membership: the hosts, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipView {
    /// Strictly increasing per process on every observed change; comparable only with earlier
    /// values from the same process.
    pub version: u64,
    hosts: Vec<HostDescriptor>,
}

/// Which members to list: `active` only by default, and optionally only those registering a
/// type (a descriptor without types matches every `registers` filter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MemberFilter {
    /// List hosts in every status, not just `active`.
    pub any_status: bool,
    /// Only hosts registering this type.
    pub registers: Option<String>,
}

impl MemberFilter {
    /// Active hosts, any types.
    pub fn active() -> Self {
        MemberFilter::default()
    }
    /// Hosts in every status.
    pub fn any() -> Self {
        MemberFilter {
            any_status: true,
            registers: None,
        }
    }
    /// Active hosts registering `ty`.
    pub fn registering(ty: impl Into<String>) -> Self {
        MemberFilter {
            any_status: false,
            registers: Some(ty.into()),
        }
    }
    /// Whether `host` passes the filter.
    pub fn matches(&self, host: &HostDescriptor) -> bool {
        (self.any_status || host.status == HostStatus::Active)
            && self
                .registers
                .as_deref()
                .is_none_or(|ty| host.registers(ty))
    }
}

impl MembershipView {
    /// A view of `hosts` (sorted here by id; a duplicate id keeps the last entry).
    pub fn new(version: u64, mut hosts: Vec<HostDescriptor>) -> Self {
        hosts.sort_by(|a, b| a.id.cmp(&b.id));
        hosts.dedup_by(|later, earlier| {
            if later.id == earlier.id {
                std::mem::swap(later, earlier);
                true
            } else {
                false
            }
        });
        MembershipView { version, hosts }
    }

    /// The view before anything was read: version 0, no hosts.
    pub fn empty() -> Self {
        MembershipView {
            version: 0,
            hosts: Vec::new(),
        }
    }

    /// Every host in the view, any status, sorted by id.
    pub fn hosts(&self) -> &[HostDescriptor] {
        &self.hosts
    }

    /// The host with this id.
    pub fn get(&self, id: &str) -> Option<&HostDescriptor> {
        self.hosts
            .binary_search_by(|h| h.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.hosts[i])
    }

    /// The number of hosts, any status.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the view holds no host.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The hosts passing `filter`, sorted by id. A synchronous read with no I/O.
    pub fn members(&self, filter: &MemberFilter) -> Vec<&HostDescriptor> {
        self.hosts.iter().filter(|h| filter.matches(h)).collect()
    }

    /// The ids of the active hosts that register a stateful type, sorted: the hosts that own
    /// directory partitions.
    pub fn active_stateful_ids(&self) -> Vec<&str> {
        self.hosts
            .iter()
            .filter(|h| h.status == HostStatus::Active && h.is_stateful())
            .map(|h| h.id.as_str())
            .collect()
    }

    /// A hash of [`MembershipView::active_stateful_ids`], equal on every host whose views agree on
    /// who owns partitions (unlike `version`, which is per process).
    ///
    /// The hash is FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) over
    /// each id's UTF-8 bytes followed by one `0x00` byte, in sorted order. It is fixed so hosts
    /// of different builds agree on it.
    pub fn fingerprint(&self) -> u64 {
        fingerprint_ids(self.active_stateful_ids())
    }

    /// The number of distinct `node` values the hosts report (0 when none reports one).
    pub fn node_count(&self) -> usize {
        let mut nodes: Vec<&str> = self.hosts.iter().filter_map(|h| h.node()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }

    /// The protobuf `Members` answer for `filter`.
    pub fn to_members_response(&self, filter: &MemberFilter) -> v1::MembersResponse {
        v1::MembersResponse {
            version: self.version,
            hosts: self
                .members(filter)
                .into_iter()
                .map(|h| h.to_proto())
                .collect(),
        }
    }
}

/// FNV-1a 64 over each id followed by a zero byte (see [`MembershipView::fingerprint`]).
pub fn fingerprint_ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for id in ids {
        for b in id.as_bytes().iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// Anything that hands out the current view.
pub trait ViewSource {
    /// The current view.
    fn current_view(&self) -> Arc<MembershipView>;
}

impl<F: Fn() -> Arc<MembershipView>> ViewSource for F {
    fn current_view(&self) -> Arc<MembershipView> {
        self()
    }
}

/// The view a memo last saw, and the members it derived from it.
type MemoEntry = (Arc<MembershipView>, Arc<Vec<HostDescriptor>>);

/// `members(filter)` cached on the view's identity: recomputed only when the source hands back a
/// different `Arc`. Create it once and call [`MembersMemo::get`] on the hot path.
pub struct MembersMemo<S> {
    source: S,
    filter: MemberFilter,
    cache: Mutex<Option<MemoEntry>>,
    recomputes: std::sync::atomic::AtomicU64,
}

/// A [`MembersMemo`] over `source` with `filter`.
pub fn members_memo<S: ViewSource>(source: S, filter: MemberFilter) -> MembersMemo<S> {
    MembersMemo {
        source,
        filter,
        cache: Mutex::new(None),
        recomputes: Default::default(),
    }
}

impl<S: ViewSource> MembersMemo<S> {
    /// The members of the current view passing the filter.
    pub fn get(&self) -> Arc<Vec<HostDescriptor>> {
        let view = self.source.current_view();
        let mut cache = self.cache.lock().expect("memo lock");
        if let Some((seen, members)) = cache.as_ref()
            && Arc::ptr_eq(seen, &view)
        {
            return members.clone();
        }
        let members: Arc<Vec<HostDescriptor>> =
            Arc::new(view.members(&self.filter).into_iter().cloned().collect());
        self.recomputes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *cache = Some((view, members.clone()));
        members
    }

    /// How many times the members were recomputed (for tests and metrics).
    pub fn recomputes(&self) -> u64 {
        self.recomputes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(
        id: &str,
        status: HostStatus,
        types: Option<&[&str]>,
        stateful: &[&str],
    ) -> HostDescriptor {
        let mut d = HostDescriptor::new(
            id,
            "a:1",
            types.map(|t| t.iter().map(|s| s.to_string()).collect()),
            types.map(|_| stateful.iter().map(|s| s.to_string()).collect()),
        );
        d.status = status;
        d
    }

    fn sample() -> MembershipView {
        MembershipView::new(
            3,
            vec![
                host("c", HostStatus::Active, Some(&["Relay"]), &[]),
                host(
                    "a",
                    HostStatus::Active,
                    Some(&["Counter", "Relay"]),
                    &["Counter"],
                ),
                host("b", HostStatus::Joining, Some(&["Counter"]), &["Counter"]),
                host("d", HostStatus::Active, None, &[]),
            ],
        )
    }

    #[test]
    fn hosts_are_sorted_and_found_by_id() {
        let v = sample();
        let ids: Vec<_> = v.hosts().iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(v.get("c").unwrap().id, "c");
        assert!(v.get("x").is_none());
    }

    #[test]
    fn members_filters_on_status_and_registration() {
        let v = sample();
        let ids = |f: &MemberFilter| {
            v.members(f)
                .iter()
                .map(|h| h.id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&MemberFilter::active()), ["a", "c", "d"]);
        assert_eq!(ids(&MemberFilter::any()), ["a", "b", "c", "d"]);
        // d has no types: it matches any registers filter.
        assert_eq!(ids(&MemberFilter::registering("Counter")), ["a", "d"]);
        assert_eq!(ids(&MemberFilter::registering("Nope")), ["d"]);
    }

    #[test]
    fn fingerprint_covers_exactly_the_active_stateful_ids() {
        let v = sample();
        assert_eq!(v.active_stateful_ids(), ["a", "d"]);
        assert_eq!(v.fingerprint(), fingerprint_ids(["a", "d"]));
        // Known value: FNV-1a 64 of "a\0d\0".
        let mut h: u64 = 0xcbf29ce484222325;
        for b in b"a\0d\0" {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        assert_eq!(v.fingerprint(), h);
        // A joining or worker-only host does not change it.
        let mut hosts = v.hosts().to_vec();
        hosts.push(host(
            "e",
            HostStatus::Joining,
            Some(&["Counter"]),
            &["Counter"],
        ));
        hosts.push(host("f", HostStatus::Active, Some(&["Relay"]), &[]));
        assert_eq!(MembershipView::new(9, hosts).fingerprint(), v.fingerprint());
        assert_ne!(fingerprint_ids(["ad"]), fingerprint_ids(["a", "d"]));
    }

    #[test]
    fn memo_recomputes_only_on_a_new_arc() {
        let current = Arc::new(Mutex::new(Arc::new(sample())));
        let src = {
            let current = current.clone();
            move || current.lock().unwrap().clone()
        };
        let memo = members_memo(src, MemberFilter::registering("Relay"));
        assert_eq!(memo.get().len(), 3);
        assert_eq!(memo.get().len(), 3);
        assert_eq!(memo.recomputes(), 1);
        // An equal but distinct Arc is a new view: recompute.
        *current.lock().unwrap() = Arc::new(sample());
        memo.get();
        assert_eq!(memo.recomputes(), 2);
    }
}
