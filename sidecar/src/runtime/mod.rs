//! Local activations: one activation per actor id on this host, turn-based delivery, reentrant
//! types, stateless workers, deadlines and idle deactivation.

pub mod gate;

pub use gate::{ActivationGate, OpenGate};

use std::fmt;
use std::sync::Arc;

/// The identity of one actor: its type and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId {
    /// The registered type name.
    pub actor_type: Arc<str>,
    /// The key within the type.
    pub key: Arc<str>,
}

impl ActorId {
    /// An actor id from its parts.
    pub fn new(actor_type: impl Into<Arc<str>>, key: impl Into<Arc<str>>) -> Self {
        ActorId {
            actor_type: actor_type.into(),
            key: key.into(),
        }
    }

    /// The protobuf form.
    pub fn to_proto(&self) -> sigx_proto::v1::ActorRef {
        sigx_proto::v1::ActorRef {
            actor_type: self.actor_type.to_string(),
            key: self.key.to_string(),
        }
    }

    /// From the protobuf form.
    pub fn from_proto(r: &sigx_proto::v1::ActorRef) -> Self {
        ActorId::new(r.actor_type.as_str(), r.key.as_str())
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.actor_type, self.key)
    }
}
