//! `mesh_messages`: what a host decodes from its peers (`proto/sigx/actors/v1/mesh.proto`,
//! `sidecar/src/directory/`, `proto/src/error.rs`).
//!
//! Byte 0 mod 8 picks the message the rest is. Every message must round-trip through prost; a
//! directory entry [`validate_entry`] accepts must name the requesting peer and keep to the
//! limits; an error detail a peer sends must survive the trip back to an app
//! ([`ActorError::to_status`] then [`ActorError::from_status`]) unchanged.

use crate::support::decode;
use sigx_proto::{ActorError, v1};
use sigx_sidecar::directory::{
    MAX_ACTIVATION_LEN, MAX_KEY_LEN, MAX_TYPE_LEN, PARTITIONS, partition, validate_actor,
    validate_entry,
};

/// The peer every fuzzed request comes from.
pub const PEER: &str = "host-a";

/// The fuzz target.
pub fn mesh_messages(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 8 {
        0 => {
            if let Some(d) = decode::<v1::DeliverRequest>(rest) {
                actor(d.actor.as_ref());
                if let Some(tc) = &d.trace {
                    let _ = sigx_sidecar::trace::extract(tc);
                }
            }
        }
        1 => {
            if let Some(f) = decode::<v1::DeliverFrame>(rest) {
                let _ = f.request.map(|d| actor(d.actor.as_ref()));
            }
        }
        2 => {
            if let Some(a) = decode::<v1::DeliverAnswer>(rest)
                && let Some(v1::deliver_response::Outcome::Error(e)) =
                    a.response.and_then(|r| r.outcome)
            {
                error(&e);
            }
        }
        3 => {
            if let Some(l) = decode::<v1::LookupRequest>(rest) {
                actor(l.actor.as_ref());
            }
            decode::<v1::LookupResponse>(rest);
        }
        4 => {
            if let Some(r) = decode::<v1::RegisterRequest>(rest) {
                entry(r.entry.as_ref());
            }
            decode::<v1::RegisterResponse>(rest);
        }
        5 => {
            if let Some(r) = decode::<v1::UnregisterRequest>(rest) {
                entry(r.entry.as_ref());
            }
            decode::<v1::UnregisterResponse>(rest);
        }
        6 => {
            decode::<v1::CollectRequest>(rest);
            decode::<v1::CollectResponse>(rest);
        }
        _ => {
            decode::<v1::ListEntriesRequest>(rest);
            decode::<v1::ListEntriesResponse>(rest);
            if let Some(e) = decode::<v1::ErrorDetail>(rest) {
                error(&e);
            }
        }
    }
}

fn actor(a: Option<&v1::ActorRef>) {
    if let Ok(a) = validate_actor(a) {
        assert!(!a.actor_type.is_empty() && a.actor_type.len() <= MAX_TYPE_LEN);
        assert!(a.key.len() <= MAX_KEY_LEN);
        assert!(partition(&a.actor_type, &a.key) < PARTITIONS);
    }
}

fn entry(e: Option<&v1::DirectoryEntry>) {
    if let Ok((a, e)) = validate_entry(e, PEER) {
        actor(Some(a));
        assert_eq!(
            e.host_id, PEER,
            "a peer registered an entry of another host"
        );
        assert!(!e.activation_id.is_empty() && e.activation_id.len() <= MAX_ACTIVATION_LEN);
    }
}

fn error(detail: &v1::ErrorDetail) {
    let e = ActorError::from_detail(detail);
    let back = ActorError::from_status(&e.to_status());
    assert!(
        back == e,
        "an error changed on its way to the app: {e:?} vs {back:?}"
    );
}
