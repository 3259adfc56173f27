//! Membership as the app sees it: the hosts of the fleet, from the sidecar's view.

use sigx_proto::v1;
use std::collections::BTreeMap;

/// Which members to list: `active` hosts by default, optionally only those registering a type.
///
/// A host that publishes no type list (an older host during a mixed-version rollout) registers
/// everything, so it matches any `registers` filter: the same rule placement applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberFilter {
    /// Every status (`joining`, `active`, `leaving`) instead of only `active`.
    pub any_status: bool,
    /// Only hosts registering this type.
    pub registers: Option<String>,
}

impl MemberFilter {
    /// Active hosts (the default).
    pub fn active() -> Self {
        Self::default()
    }

    /// Hosts of every status.
    pub fn any() -> Self {
        MemberFilter {
            any_status: true,
            registers: None,
        }
    }

    /// Narrows to hosts registering `actor_type`.
    pub fn registers(mut self, actor_type: impl Into<String>) -> Self {
        self.registers = Some(actor_type.into());
        self
    }

    pub(crate) fn to_proto(&self) -> v1::MembersRequest {
        v1::MembersRequest {
            status: if self.any_status {
                v1::MemberStatusFilter::Any as i32
            } else {
                v1::MemberStatusFilter::Active as i32
            },
            registers: self.registers.clone().unwrap_or_default(),
        }
    }
}

/// Where a host stands in its membership lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostStatus {
    /// Published, not yet serving.
    Joining,
    /// Serving.
    Active,
    /// Stopping: takes no new activations.
    Leaving,
    /// A status this SDK does not know (a newer sidecar).
    Unknown,
}

impl HostStatus {
    /// From the protobuf enum value.
    pub fn from_proto(value: i32) -> Self {
        match v1::HostStatus::try_from(value) {
            Ok(v1::HostStatus::Joining) => HostStatus::Joining,
            Ok(v1::HostStatus::Active) => HostStatus::Active,
            Ok(v1::HostStatus::Leaving) => HostStatus::Leaving,
            _ => HostStatus::Unknown,
        }
    }

    /// The lower-case name (`joining`, `active`, `leaving`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            HostStatus::Joining => "joining",
            HostStatus::Active => "active",
            HostStatus::Leaving => "leaving",
            HostStatus::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for HostStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One host of the fleet, as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Unique per incarnation; use it with [`Client::worker_on`](crate::Client::worker_on).
    pub id: String,
    /// Its mesh address.
    pub advertise: String,
    /// The types it registers; `None` = registers everything (an older host).
    pub types: Option<Vec<String>>,
    /// The stateful subset of `types`; `None` when `types` is `None`.
    pub stateful_types: Option<Vec<String>>,
    /// Free-form metadata; `node` names the machine it runs on.
    pub meta: BTreeMap<String, String>,
    /// Its lifecycle status.
    pub status: HostStatus,
    /// When it started, in Unix milliseconds (informational: never compared across hosts).
    pub started_at_unix_ms: i64,
}

impl Host {
    /// From the protobuf descriptor.
    pub fn from_proto(d: v1::HostDescriptor) -> Self {
        Host {
            id: d.id,
            advertise: d.advertise,
            types: d.types.map(|t| t.names),
            stateful_types: d.stateful_types.map(|t| t.names),
            meta: d.meta.into_iter().collect(),
            status: HostStatus::from_proto(d.status),
            started_at_unix_ms: d.started_at_unix_ms,
        }
    }

    /// The machine the host says it runs on (`meta.node`), when it says so.
    pub fn node(&self) -> Option<&str> {
        self.meta
            .get("node")
            .map(String::as_str)
            .filter(|n| !n.trim().is_empty())
    }

    /// Whether the host registers `actor_type` (a host without a type list registers all).
    pub fn registers(&self, actor_type: &str) -> bool {
        match &self.types {
            None => true,
            Some(types) => types.iter().any(|t| t == actor_type),
        }
    }
}

/// A filtered membership view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// The sidecar's change token: strictly increases on each change it observes. Comparable
    /// only with earlier values from the same sidecar.
    pub version: u64,
    /// The matching hosts, sorted by id.
    pub hosts: Vec<Host>,
}

impl Members {
    /// From the protobuf response.
    pub fn from_proto(r: v1::MembersResponse) -> Self {
        Members {
            version: r.version,
            hosts: r.hosts.into_iter().map(Host::from_proto).collect(),
        }
    }

    /// The number of distinct nodes the hosts report; `None` when no host reports one (the
    /// fleet said nothing about where it runs, which is different from "one node").
    pub fn node_count(&self) -> Option<usize> {
        let nodes: std::collections::BTreeSet<&str> =
            self.hosts.iter().filter_map(Host::node).collect();
        (!nodes.is_empty()).then_some(nodes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: &str, types: Option<&[&str]>, node: Option<&str>) -> Host {
        Host {
            id: id.into(),
            advertise: String::new(),
            types: types.map(|t| t.iter().map(|s| s.to_string()).collect()),
            stateful_types: None,
            meta: node
                .map(|n| BTreeMap::from([("node".to_string(), n.to_string())]))
                .unwrap_or_default(),
            status: HostStatus::Active,
            started_at_unix_ms: 0,
        }
    }

    #[test]
    fn a_host_without_a_type_list_registers_everything() {
        assert!(host("a", None, None).registers("Counter"));
        assert!(!host("a", Some(&[]), None).registers("Counter"));
        assert!(host("a", Some(&["Counter"]), None).registers("Counter"));
    }

    #[test]
    fn node_count_distinguishes_silence_from_one_node() {
        let silent = Members {
            version: 1,
            hosts: vec![host("a", None, None), host("b", None, Some("  "))],
        };
        assert_eq!(silent.node_count(), None);
        let one = Members {
            version: 1,
            hosts: vec![host("a", None, Some("n1")), host("b", None, Some("n1"))],
        };
        assert_eq!(one.node_count(), Some(1));
    }

    #[test]
    fn the_filter_maps_onto_the_wire() {
        let f = MemberFilter::any().registers("Echo").to_proto();
        assert_eq!(f.status, v1::MemberStatusFilter::Any as i32);
        assert_eq!(f.registers, "Echo");
        let f = MemberFilter::active().to_proto();
        assert_eq!(f.status, v1::MemberStatusFilter::Active as i32);
        assert!(f.registers.is_empty());
    }
}
