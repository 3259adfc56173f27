//! `Locate` and `ListActors` (issue 16): where an actor is, and the live activations of a type.
//! What the answers mean is decided by the [`Dispatcher`](super::Dispatcher) (the directory in a
//! cluster, the runtime on a single host); this module checks the requests and shapes the
//! answers.

use crate::directory::ListPage;
use crate::directory::listing::{DEFAULT_PAGE, MAX_PAGE, decode_token, encode_token};
use crate::runtime::{ActorId, Runtime};
use sigx_proto::ActorError;
use sigx_proto::v1;

/// `Locate` names stateful actors only: a worker has no identity and no location.
/// `registers` is what this host's app registers the type as (`Some(false)`: a worker).
pub fn refuse_worker(registers: Option<bool>, actor: &ActorId) -> Result<(), ActorError> {
    if registers == Some(false) {
        return Err(ActorError::invalid(format!(
            "{:?} is a worker type: workers have no identity and no location, so there is \
             nothing to locate for {actor}; Locate names stateful actors",
            actor.actor_type
        )));
    }
    Ok(())
}

/// The epoch of `actor`'s activation `activation_id` on this host (0: not live here, or still
/// starting).
pub fn local_epoch(runtime: &Runtime, actor: &ActorId, activation_id: &str) -> u64 {
    runtime
        .activation_of(actor)
        .filter(|(id, _)| **id == *activation_id)
        .map(|(_, epoch)| epoch)
        .unwrap_or(0)
}

/// A checked `ListActors` request: the type, the page size, and where the page starts.
pub fn list_request(
    req: &v1::ListActorsRequest,
) -> Result<(String, usize, Option<v1::ListCursor>), ActorError> {
    if req.actor_type.is_empty() {
        return Err(ActorError::invalid(
            "actor_type is empty: name the stateful actor type to list, e.g. \"Counter\"",
        ));
    }
    if req.actor_type.len() > crate::directory::MAX_TYPE_LEN {
        return Err(ActorError::invalid(format!(
            "actor_type is {} bytes: type names are at most {} bytes",
            req.actor_type.len(),
            crate::directory::MAX_TYPE_LEN
        )));
    }
    let page_size = match req.page_size as usize {
        0 => DEFAULT_PAGE,
        n if n > MAX_PAGE => {
            return Err(ActorError::invalid(format!(
                "page_size {n} is above the limit of {MAX_PAGE}: ask for at most {MAX_PAGE} \
                 actors per page and follow next_page_token"
            )));
        }
        n => n,
    };
    Ok((
        req.actor_type.clone(),
        page_size,
        decode_token(&req.page_token)?,
    ))
}

/// The `ListActors` answer for a page.
pub fn list_response(page: ListPage) -> v1::ListActorsResponse {
    let skipped: Vec<v1::SkippedPartitions> = page
        .skipped
        .into_iter()
        .map(|s| v1::SkippedPartitions {
            owner: s.owner,
            reason: s.reason,
            partitions: s.partitions,
        })
        .collect();
    v1::ListActorsResponse {
        actors: page
            .entries
            .into_iter()
            .map(|(_, e)| v1::ActorLocation {
                actor: e.actor,
                host_id: e.host_id,
                activation_id: e.activation_id,
                reminders: Vec::new(),
            })
            .collect(),
        next_page_token: page.next.as_ref().map(encode_token).unwrap_or_default(),
        incomplete: !skipped.is_empty(),
        skipped,
    }
}
