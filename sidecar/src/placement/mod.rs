//! Placement (DESIGN.md §5): which host a new activation goes to, chosen only among the active
//! hosts that register the actor's type — at every decision point: the policy's input, cached
//! routes, and directory answers are all filtered by the same [`eligible`] rule.
//!
//! * [`policy`]: `random` (default), `prefer-local` and `least-loaded` (per cluster, and per
//!   type with [`RouterConfig::type_policies`]).
//! * [`locality`]: a caller's same-node / same-zone preference narrows the eligible hosts.
//! * [`rebalance`]: a host far above its peers' mean hands idle activations away.
//! * [`routes`]: the route cache, keyed on the view `Arc` (always right: a new view is a new
//!   cache).
//! * [`router`]: the routing loop that retries exactly `unreachable`, `wrong-host` and
//!   `unplaceable` — the three answers that prove a call never ran — and the inbound side.

pub mod inbound;
pub mod locality;
pub mod locator;
pub mod policy;
pub mod rebalance;
pub mod router;
pub mod routes;

pub use inbound::Inbound;
pub use locality::Locality;
pub use policy::{PlacementRng, Policy};
pub use router::{Locator, Router, RouterConfig};
pub use routes::RouteCache;

use crate::membership::{HostDescriptor, HostStatus, MembershipView};
use sigx_proto::ActorError;

/// Whether `host` may receive a new activation of `actor_type`: active, and registering it
/// (a descriptor without types registers everything).
pub fn is_eligible(host: &HostDescriptor, actor_type: &str) -> bool {
    host.status == HostStatus::Active && host.registers(actor_type)
}

/// The hosts of `view` eligible for `actor_type`, sorted by id.
pub fn eligible<'v>(view: &'v MembershipView, actor_type: &str) -> Vec<&'v HostDescriptor> {
    view.hosts()
        .iter()
        .filter(|h| is_eligible(h, actor_type))
        .collect()
}

/// The seed's `unplaceable` answer: names the type and the view, and says what to do.
pub fn unplaceable(view: &MembershipView, actor_type: &str) -> ActorError {
    let hosts = view.hosts().len();
    let active = view
        .hosts()
        .iter()
        .filter(|h| h.status == HostStatus::Active)
        .count();
    ActorError::unplaceable(format!(
        "actor type \"{actor_type}\" is registered by no ACTIVE host (view: {hosts} hosts, \
         {active} active).\nAdd \"{actor_type}\" to some host's registered types (the app's \
         Register message), or check that the pods registering it are up."
    ))
}

/// Chooses a host for a new activation of `actor_type`, or answers `unplaceable`.
pub fn choose<'v>(
    policy: Policy,
    view: &'v MembershipView,
    actor_type: &str,
    self_id: &str,
) -> Result<&'v HostDescriptor, ActorError> {
    choose_with(policy, view, actor_type, self_id, None, None, Locality::Any)
}

/// [`choose`] drawing the policy's randomness from `rng` when given, loads from `loads`, and
/// among the eligible hosts the caller's `locality` keeps (relative to `self_id`'s descriptor).
pub fn choose_with<'v>(
    policy: Policy,
    view: &'v MembershipView,
    actor_type: &str,
    self_id: &str,
    rng: Option<&PlacementRng>,
    loads: Option<&crate::membership::LoadBoard>,
    locality: Locality,
) -> Result<&'v HostDescriptor, ActorError> {
    let candidates = locality.narrow(eligible(view, actor_type), view.get(self_id));
    policy
        .pick_with(&candidates, self_id, rng, loads)
        .ok_or_else(|| unplaceable(view, actor_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn host(id: &str, status: HostStatus, types: Option<&[&str]>) -> HostDescriptor {
        let mut d = HostDescriptor::new(
            id,
            format!("{id}:7311"),
            types.map(|t| t.iter().map(|s| s.to_string()).collect()),
            types.map(|t| t.iter().map(|s| s.to_string()).collect()),
        );
        d.status = status;
        d
    }

    #[test]
    fn only_active_hosts_registering_the_type_are_eligible() {
        let view = MembershipView::new(
            1,
            vec![
                host("a", HostStatus::Active, Some(&["Counter"])),
                host("b", HostStatus::Active, Some(&["Echo"])),
                host("c", HostStatus::Joining, Some(&["Counter"])),
                host("d", HostStatus::Leaving, Some(&["Counter"])),
                host("e", HostStatus::Active, None),
            ],
        );
        let ids: Vec<&str> = eligible(&view, "Counter")
            .iter()
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(
            ids,
            vec!["a", "e"],
            "a descriptor without types registers everything"
        );
        for _ in 0..50 {
            let chosen = choose(Policy::Random, &view, "Counter", "b").unwrap();
            assert!(chosen.id == "a" || chosen.id == "e");
        }
    }

    #[test]
    fn unplaceable_names_the_type_and_the_view() {
        let view = MembershipView::new(
            1,
            vec![
                host("a", HostStatus::Active, Some(&["Counter"])),
                host("b", HostStatus::Active, Some(&["Counter"])),
                host("c", HostStatus::Active, Some(&["Counter"])),
            ],
        );
        let err = choose(Policy::Random, &view, "Report", "a").unwrap_err();
        assert_eq!(err.kind, sigx_proto::ErrorKind::Unplaceable);
        assert!(
            err.message.starts_with(
                "actor type \"Report\" is registered by no ACTIVE host (view: 3 hosts, 3 active)."
            ),
            "{}",
            err.message
        );
    }

    #[test]
    fn prefer_local_picks_self_when_eligible() {
        let view = MembershipView::new(
            1,
            vec![
                host("a", HostStatus::Active, Some(&["Counter"])),
                host("b", HostStatus::Active, Some(&["Counter"])),
            ],
        );
        for _ in 0..20 {
            assert_eq!(
                choose(Policy::PreferLocal, &view, "Counter", "b")
                    .unwrap()
                    .id,
                "b"
            );
        }
        // Not eligible itself: falls back to another host.
        assert_eq!(
            choose(Policy::PreferLocal, &view, "Counter", "z")
                .unwrap()
                .status,
            HostStatus::Active
        );
    }
}
