//! What a host publishes about itself: the [`HostDescriptor`] (DESIGN.md §3).

use serde::{Deserialize, Serialize};
use sigx_proto::v1;
use std::collections::BTreeMap;
use std::fmt;

/// Where a host stands in its membership lifecycle: `joining → active → leaving`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostStatus {
    /// Published, not yet serving: owns no partitions, receives no placements.
    Joining,
    /// Serving: eligible for placement and, with a stateful type, directory ownership.
    Active,
    /// Stopping: takes no new activations, still holds the ones it is draining.
    Leaving,
}

impl HostStatus {
    /// The status as it appears in JSON, tables and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            HostStatus::Joining => "joining",
            HostStatus::Active => "active",
            HostStatus::Leaving => "leaving",
        }
    }

    /// The protobuf enum value.
    pub fn to_proto(self) -> v1::HostStatus {
        match self {
            HostStatus::Joining => v1::HostStatus::Joining,
            HostStatus::Active => v1::HostStatus::Active,
            HostStatus::Leaving => v1::HostStatus::Leaving,
        }
    }

    /// From the protobuf enum value; `UNSPECIFIED` and unknown numbers are errors.
    pub fn from_proto(raw: i32) -> Result<Self, DescriptorError> {
        match v1::HostStatus::try_from(raw) {
            Ok(v1::HostStatus::Joining) => Ok(HostStatus::Joining),
            Ok(v1::HostStatus::Active) => Ok(HostStatus::Active),
            Ok(v1::HostStatus::Leaving) => Ok(HostStatus::Leaving),
            _ => Err(DescriptorError::UnknownStatus(raw)),
        }
    }
}

impl fmt::Display for HostStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A descriptor that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    /// The id is empty: every host needs one (pod name plus an incarnation suffix).
    #[error(
        "host descriptor has an empty id; set the pod name (POD_NAME) so the host can be named"
    )]
    EmptyId,
    /// The status is not one of joining, active, leaving.
    #[error("host descriptor has status {0}, which is not joining, active or leaving")]
    UnknownStatus(i32),
    /// The JSON form (a Lease annotation or a SQLite row) did not parse.
    #[error("host descriptor JSON does not parse: {0}")]
    Json(String),
}

/// What a host publishes: identity, mesh address, the types it registers, free-form `meta`
/// (`node` = the machine it runs on), status and start time.
///
/// `types` absent means "registers everything" (an older host during a mixed-version rollout):
/// absent-means-ineligible would empty every view mid-deploy. The JSON form (camelCase) is what
/// the SQLite and Kubernetes providers store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostDescriptor {
    /// Unique per incarnation: pod name plus an incarnation suffix.
    pub id: String,
    /// The mesh address peers dial, `host:port`.
    pub advertise: String,
    /// Sorted stateful and worker type names; `None` = registers everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,
    /// Sorted stateful type names (a subset of `types`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful_types: Option<Vec<String>>,
    /// Free-form metadata; `node` is the machine the host runs on.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
    /// Lifecycle status.
    pub status: HostStatus,
    /// When the host started (informational: never compared across hosts).
    pub started_at_unix_ms: i64,
    /// How many times this host became `active` again after having been active (0 for the
    /// first time, and absent from the JSON then, so older hosts read it unchanged). A stateful
    /// host whose app detaches goes `active → joining → active` under the same id; the
    /// directory's fingerprint covers this number, so a peer whose view still shows the earlier
    /// `active` record never answers a `Collect` for the new one as if nothing had happened
    /// (DESIGN.md §4, Rule 2: the A-B-A case).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active_epoch: u64,
    /// How busy the host is, for the `least-loaded` placement policy; absent until its first
    /// renewal after the join, and on older hosts. Not part of membership: observers keep it
    /// beside the view ([`super::load::LoadBoard`]), so a load change rebuilds no view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<HostLoad>,
}

/// What a host publishes about its load (JSON `{"activations":…,"turnsPerSec":…}`).
///
/// Published on the renewals the host writes anyway, and changed only when it moved materially
/// ([`super::load::LoadPublisher`]): never an extra store write, rarely a new record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostLoad {
    /// Activations live on the host.
    pub activations: u64,
    /// Turns per second over the last sampling interval.
    #[serde(default)]
    pub turns_per_sec: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl HostDescriptor {
    /// A `joining` descriptor that registers the given types (sorted and deduplicated here).
    pub fn new(
        id: impl Into<String>,
        advertise: impl Into<String>,
        types: Option<Vec<String>>,
        stateful_types: Option<Vec<String>>,
    ) -> Self {
        HostDescriptor {
            id: id.into(),
            advertise: advertise.into(),
            types,
            stateful_types,
            meta: BTreeMap::new(),
            status: HostStatus::Joining,
            started_at_unix_ms: 0,
            active_epoch: 0,
            load: None,
        }
        .normalized()
    }

    /// Sorts and deduplicates the type lists, so equal registrations compare equal.
    pub fn normalized(mut self) -> Self {
        for list in [&mut self.types, &mut self.stateful_types]
            .into_iter()
            .flatten()
        {
            list.sort();
            list.dedup();
        }
        self
    }

    /// Whether the host registers `ty`. A descriptor without types registers everything.
    pub fn registers(&self, ty: &str) -> bool {
        match &self.types {
            None => true,
            Some(types) => types.iter().any(|t| t == ty),
        }
    }

    /// Whether the host registers any stateful type, and so holds directory claims and fences on
    /// lease loss. A descriptor without types counts as stateful, and so does one that lists
    /// types but says nothing about which are stateful: both are the safe direction, since a
    /// stateful host that did not fence could double-activate.
    pub fn is_stateful(&self) -> bool {
        match (&self.types, &self.stateful_types) {
            (None, _) => true,
            (Some(_), Some(stateful)) => !stateful.is_empty(),
            (Some(_), None) => true,
        }
    }

    /// Equal in everything membership cares about: all but [`HostDescriptor::load`]. A record
    /// whose only change is its load is a renewal, not a membership change.
    pub fn same_membership(&self, other: &HostDescriptor) -> bool {
        let HostDescriptor {
            id,
            advertise,
            types,
            stateful_types,
            meta,
            status,
            started_at_unix_ms,
            active_epoch,
            load: _,
        } = self;
        *id == other.id
            && *advertise == other.advertise
            && *types == other.types
            && *stateful_types == other.stateful_types
            && *meta == other.meta
            && *status == other.status
            && *started_at_unix_ms == other.started_at_unix_ms
            && *active_epoch == other.active_epoch
    }

    /// The `node` meta entry, if the host reported one.
    pub fn node(&self) -> Option<&str> {
        self.meta
            .get("node")
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    /// The `zone` meta entry, if the host reported one.
    pub fn zone(&self) -> Option<&str> {
        self.meta
            .get("zone")
            .map(String::as_str)
            .filter(|z| !z.is_empty())
    }

    /// The protobuf form.
    pub fn to_proto(&self) -> v1::HostDescriptor {
        v1::HostDescriptor {
            id: self.id.clone(),
            advertise: self.advertise.clone(),
            types: self.types.as_ref().map(|names| v1::TypeList {
                names: names.clone(),
            }),
            meta: self.meta.clone().into_iter().collect(),
            status: self.status.to_proto() as i32,
            started_at_unix_ms: self.started_at_unix_ms,
            stateful_types: self.stateful_types.as_ref().map(|names| v1::TypeList {
                names: names.clone(),
            }),
        }
    }

    /// From the protobuf form.
    pub fn from_proto(p: &v1::HostDescriptor) -> Result<Self, DescriptorError> {
        if p.id.is_empty() {
            return Err(DescriptorError::EmptyId);
        }
        Ok(HostDescriptor {
            id: p.id.clone(),
            advertise: p.advertise.clone(),
            types: p.types.as_ref().map(|t| t.names.clone()),
            stateful_types: p.stateful_types.as_ref().map(|t| t.names.clone()),
            meta: p.meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            status: HostStatus::from_proto(p.status)?,
            started_at_unix_ms: p.started_at_unix_ms,
            // Not in the protobuf form (status displays only): membership reads the JSON form.
            active_epoch: 0,
            load: None,
        }
        .normalized())
    }

    /// The JSON form stored by the SQLite and Kubernetes providers.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a descriptor always serializes")
    }

    /// From the JSON form.
    pub fn from_json(s: &str) -> Result<Self, DescriptorError> {
        let d: HostDescriptor =
            serde_json::from_str(s).map_err(|e| DescriptorError::Json(e.to_string()))?;
        if d.id.is_empty() {
            return Err(DescriptorError::EmptyId);
        }
        Ok(d.normalized())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(types: Option<&[&str]>, stateful: Option<&[&str]>) -> HostDescriptor {
        HostDescriptor::new(
            "h1",
            "127.0.0.1:7000",
            types.map(|t| t.iter().map(|s| s.to_string()).collect()),
            stateful.map(|t| t.iter().map(|s| s.to_string()).collect()),
        )
    }

    #[test]
    fn absent_types_register_everything_and_count_as_stateful() {
        let d = desc(None, None);
        assert!(d.registers("Anything"));
        assert!(d.is_stateful());
    }

    #[test]
    fn listed_types_register_only_themselves() {
        let d = desc(Some(&["Relay", "Counter"]), Some(&["Counter"]));
        assert_eq!(d.types.as_deref().unwrap(), ["Counter", "Relay"]);
        assert!(d.registers("Relay"));
        assert!(!d.registers("Report"));
        assert!(d.is_stateful());
        assert!(!desc(Some(&["Relay"]), Some(&[])).is_stateful());
    }

    #[test]
    fn proto_and_json_round_trip() {
        let mut d = desc(Some(&["B", "A"]), Some(&["A"]));
        d.meta.insert("node".into(), "n1".into());
        d.status = HostStatus::Active;
        d.started_at_unix_ms = 42;
        assert_eq!(HostDescriptor::from_proto(&d.to_proto()).unwrap(), d);
        assert_eq!(HostDescriptor::from_json(&d.to_json()).unwrap(), d);
        let none = desc(None, None);
        assert_eq!(
            HostDescriptor::from_proto(&none.to_proto()).unwrap().types,
            None
        );
    }

    #[test]
    fn load_round_trips_in_json_and_is_not_membership() {
        let mut d = desc(Some(&["A"]), Some(&["A"]));
        let plain = d.to_json();
        assert!(!plain.contains("load"), "absent load stays absent: {plain}");
        d.load = Some(HostLoad {
            activations: 12,
            turns_per_sec: 40,
        });
        let json = d.to_json();
        assert!(
            json.contains(r#""load":{"activations":12,"turnsPerSec":40}"#),
            "{json}"
        );
        assert_eq!(HostDescriptor::from_json(&json).unwrap(), d);
        let mut other = d.clone();
        other.load = None;
        assert!(d.same_membership(&other), "only the load differs");
        other.status = HostStatus::Leaving;
        assert!(!d.same_membership(&other));
    }

    #[test]
    fn unknown_status_and_empty_id_are_named_errors() {
        let mut p = desc(None, None).to_proto();
        p.status = 0;
        assert_eq!(
            HostDescriptor::from_proto(&p),
            Err(DescriptorError::UnknownStatus(0))
        );
        p.id.clear();
        assert_eq!(
            HostDescriptor::from_proto(&p),
            Err(DescriptorError::EmptyId)
        );
    }
}
