//! Locality: a caller's preference to have a new activation placed near the host its call
//! entered (the same node, or the same zone), from `CallRequest.locality`.
//!
//! A preference narrows the eligible hosts before the type's policy picks among them, so
//! `least-loaded` still balances within the zone. It never makes a call fail: when no eligible
//! host shares the caller's node it falls back to its zone, and then to every eligible host, as
//! it does when the calling host publishes no node or zone. It only places: an actor already
//! active elsewhere is called where it is (moving it would break nothing, but it would be a
//! rebalancing decision, not a caller's).

use crate::membership::HostDescriptor;
use sigx_proto::ActorError;
use sigx_proto::v1;

/// Where a caller would like a new activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Locality {
    /// No preference.
    #[default]
    Any,
    /// A host on the caller's node, else its zone, else any.
    SameNode,
    /// A host in the caller's zone, else any.
    SameZone,
}

impl Locality {
    /// From the wire; an unknown value is the caller's mistake, named.
    pub fn from_proto(value: i32) -> Result<Self, ActorError> {
        match v1::Locality::try_from(value) {
            Ok(v1::Locality::Any) => Ok(Locality::Any),
            Ok(v1::Locality::SameNode) => Ok(Locality::SameNode),
            Ok(v1::Locality::SameZone) => Ok(Locality::SameZone),
            Err(_) => Err(ActorError::invalid(format!(
                "locality {value} is not one of LOCALITY_ANY (0), LOCALITY_SAME_NODE (1) or \
                 LOCALITY_SAME_ZONE (2): regenerate your client from proto/ or leave it unset"
            ))),
        }
    }

    /// The candidates this preference keeps, relative to the calling host `me` (its
    /// descriptor in the view; `None` before it has joined): the first non-empty of the same
    /// node, the same zone, and all of them.
    pub fn narrow<'v>(
        self,
        candidates: Vec<&'v HostDescriptor>,
        me: Option<&HostDescriptor>,
    ) -> Vec<&'v HostDescriptor> {
        let Some(me) = me else {
            return candidates;
        };
        let same = |key: fn(&HostDescriptor) -> Option<&str>| -> Vec<&'v HostDescriptor> {
            match key(me) {
                Some(mine) => candidates
                    .iter()
                    .copied()
                    .filter(|h| key(h) == Some(mine))
                    .collect(),
                None => Vec::new(),
            }
        };
        let tiers: &[fn(&HostDescriptor) -> Option<&str>] = match self {
            Locality::Any => &[],
            Locality::SameNode => &[HostDescriptor::node, HostDescriptor::zone],
            Locality::SameZone => &[HostDescriptor::zone],
        };
        for key in tiers {
            let near = same(*key);
            if !near.is_empty() {
                return near;
            }
        }
        candidates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: &str, node: &str, zone: &str) -> HostDescriptor {
        let mut d = HostDescriptor::new(id, format!("{id}:1"), None, None);
        if !node.is_empty() {
            d.meta.insert("node".into(), node.into());
        }
        if !zone.is_empty() {
            d.meta.insert("zone".into(), zone.into());
        }
        d
    }

    fn ids(v: Vec<&HostDescriptor>) -> Vec<&str> {
        v.into_iter().map(|h| h.id.as_str()).collect()
    }

    fn fleet() -> Vec<HostDescriptor> {
        vec![
            host("a1", "n1", "za"),
            host("a2", "n2", "za"),
            host("b1", "n3", "zb"),
            host("b2", "n4", "zb"),
        ]
    }

    #[test]
    fn same_zone_keeps_the_callers_zone() {
        let f = fleet();
        let me = host("b2", "n4", "zb");
        let got = Locality::SameZone.narrow(f.iter().collect(), Some(&me));
        assert_eq!(ids(got), ["b1", "b2"]);
    }

    #[test]
    fn same_node_keeps_the_callers_node_then_falls_back_to_its_zone_then_to_all() {
        let f = fleet();
        let on_n1 = host("x", "n1", "za");
        assert_eq!(
            ids(Locality::SameNode.narrow(f.iter().collect(), Some(&on_n1))),
            ["a1"]
        );
        // No eligible host on n9: the zone.
        let on_n9 = host("x", "n9", "za");
        assert_eq!(
            ids(Locality::SameNode.narrow(f.iter().collect(), Some(&on_n9))),
            ["a1", "a2"]
        );
        // Nothing in zc either: every candidate, never a failure.
        let in_zc = host("x", "n9", "zc");
        assert_eq!(
            ids(Locality::SameNode.narrow(f.iter().collect(), Some(&in_zc))),
            ["a1", "a2", "b1", "b2"]
        );
    }

    #[test]
    fn a_caller_that_publishes_no_zone_or_is_not_in_the_view_has_no_preference() {
        let f = fleet();
        let silent = host("x", "", "");
        assert_eq!(
            Locality::SameZone
                .narrow(f.iter().collect(), Some(&silent))
                .len(),
            4
        );
        assert_eq!(Locality::SameNode.narrow(f.iter().collect(), None).len(), 4);
        // A host without a zone never matches a caller's zone.
        let mixed = [host("a", "n1", ""), host("b", "n2", "za")];
        let me = host("x", "n9", "za");
        assert_eq!(
            ids(Locality::SameZone.narrow(mixed.iter().collect(), Some(&me))),
            ["b"]
        );
    }

    #[test]
    fn any_keeps_everything_and_unknown_wire_values_are_named() {
        let f = fleet();
        let me = host("a1", "n1", "za");
        assert_eq!(Locality::Any.narrow(f.iter().collect(), Some(&me)).len(), 4);
        assert_eq!(Locality::from_proto(2).unwrap(), Locality::SameZone);
        let err = Locality::from_proto(7).unwrap_err();
        assert!(err.message.contains("locality 7"), "{}", err.message);
    }
}
