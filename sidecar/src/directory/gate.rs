//! The directory's client side: Rule 1 (register before activate) as the runtime's
//! [`ActivationGate`], and `lookup` for the routing loop. Both retry the internal answers
//! `not-owner`, `recovering` and `not-converged` inside their deadline.

use super::{Directory, Inner, PARTITIONS, partition};
use crate::mesh::{MeshCallError, PeerAddr};
use crate::runtime::{ActivationGate, ActorId};
use async_trait::async_trait;
use sigx_proto::v1::{
    ActorRef, DirectoryEntry, DirectoryStatus, LookupRequest, LookupResponse, RegisterRequest,
    RegisterResponse, UnregisterRequest, UnregisterResponse,
};
use sigx_proto::{ActorError, ErrorKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// Where the directory says an actor lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The host holding the activation.
    pub host: String,
    /// The activation's id.
    pub activation_id: String,
}

/// Pause before retrying an internal answer: the `retry_after` if given, else a backoff that
/// doubles from 5 ms to 200 ms; never past the deadline.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            next: Duration::from_millis(5),
        }
    }
    async fn wait(&mut self, hint_ms: u64, deadline: Instant) {
        let d = if hint_ms > 0 {
            Duration::from_millis(hint_ms)
        } else {
            let d = self.next;
            self.next = (self.next * 2).min(Duration::from_millis(200));
            d
        };
        let until = (Instant::now() + d).min(deadline);
        tokio::time::sleep_until(until).await;
    }
}

/// The directory status fields every owner answer carries.
trait OwnerAnswer {
    /// (status, retry_after_ms, owner_hint).
    fn answer(&self) -> (i32, u64, &str);
}

impl OwnerAnswer for RegisterResponse {
    fn answer(&self) -> (i32, u64, &str) {
        (self.status, self.retry_after_ms, &self.owner_hint)
    }
}

impl OwnerAnswer for UnregisterResponse {
    fn answer(&self) -> (i32, u64, &str) {
        (self.status, self.retry_after_ms, &self.owner_hint)
    }
}

impl OwnerAnswer for LookupResponse {
    fn answer(&self) -> (i32, u64, &str) {
        (self.status, self.retry_after_ms, &self.owner_hint)
    }
}

/// One step of an owner call: an OK answer, or why to retry.
enum Step<T> {
    Done(T),
    Retry {
        hint_ms: u64,
        refresh: bool,
        why: String,
    },
}

fn classify_status(status: i32, hint_ms: u64, owner_hint: &str) -> Option<(u64, bool, String)> {
    match DirectoryStatus::try_from(status) {
        Ok(DirectoryStatus::Ok) => None,
        Ok(DirectoryStatus::Recovering) => Some((hint_ms, false, "partition recovering".into())),
        Ok(DirectoryStatus::NotOwner) => Some((
            hint_ms,
            true,
            format!("not owner (owner hint {owner_hint:?})"),
        )),
        _ => Some((hint_ms, true, "views not converged".into())),
    }
}

fn mesh_error_step<T>(e: MeshCallError) -> Result<Step<T>, ActorError> {
    match e {
        MeshCallError::Answered(err)
            if matches!(err.kind, ErrorKind::Invalid | ErrorKind::Unauthenticated) =>
        {
            Err(err)
        }
        other => Ok(Step::Retry {
            hint_ms: 0,
            refresh: matches!(other, MeshCallError::Unreachable { .. }),
            why: other.to_string(),
        }),
    }
}

impl Inner {
    fn me_entry(&self, actor: &ActorId, activation_id: &str) -> DirectoryEntry {
        DirectoryEntry {
            actor: Some(actor.to_proto()),
            host_id: self.me.to_string(),
            activation_id: activation_id.to_owned(),
        }
    }

    /// One owner call: answered in process when this host is the owner, over the mesh
    /// otherwise (bounded by the RPC timeout inside `deadline`), and classified into an OK
    /// answer or a reason to retry.
    async fn call_owner<Req, Resp: OwnerAnswer>(
        &self,
        rpc: &str,
        owner: &super::PeerInfo,
        req: Req,
        deadline: Instant,
        local: impl FnOnce(&Self, &Req) -> Result<Resp, ActorError>,
        remote: impl AsyncFnOnce(PeerAddr<'_>, Req, Instant) -> Result<Resp, MeshCallError>,
    ) -> Result<Step<Resp>, ActorError> {
        let mut started = None;
        let resp = if owner.id == self.me {
            local(self, &req)?
        } else {
            let addr = PeerAddr {
                id: &owner.id,
                advertise: &owner.advertise,
            };
            let now = Instant::now();
            started = Some(now);
            let d = deadline.min(now + self.config.rpc_timeout);
            match remote(addr, req, d).await {
                Ok(r) => r,
                Err(e) => {
                    self.rpcs.observe(rpc, "failed", now.elapsed());
                    return mesh_error_step(e);
                }
            }
        };
        let (status, retry_after_ms, owner_hint) = resp.answer();
        let step = match classify_status(status, retry_after_ms, owner_hint) {
            None => Step::Done(resp),
            Some((hint_ms, refresh, why)) => Step::Retry {
                hint_ms,
                refresh,
                why,
            },
        };
        if let Some(t0) = started {
            let kind = if matches!(step, Step::Done(_)) {
                "ok"
            } else {
                "retry"
            };
            self.rpcs.observe(rpc, kind, t0.elapsed());
        }
        Ok(step)
    }

    async fn call_register(
        &self,
        owner: &super::PeerInfo,
        req: RegisterRequest,
        deadline: Instant,
    ) -> Result<Step<RegisterResponse>, ActorError> {
        self.call_owner(
            "register",
            owner,
            req,
            deadline,
            |me: &Self, req| me.owner_register(&me.me, req),
            async |addr: PeerAddr<'_>, req, d| self.mesh.register(addr, req, d).await,
        )
        .await
    }

    async fn call_unregister(
        &self,
        owner: &super::PeerInfo,
        req: UnregisterRequest,
        deadline: Instant,
    ) -> Result<Step<UnregisterResponse>, ActorError> {
        self.call_owner(
            "unregister",
            owner,
            req,
            deadline,
            |me: &Self, req| me.owner_unregister(&me.me, req),
            async |addr: PeerAddr<'_>, req, d| self.mesh.unregister(addr, req, d).await,
        )
        .await
    }

    async fn call_lookup(
        &self,
        owner: &super::PeerInfo,
        req: LookupRequest,
        deadline: Instant,
    ) -> Result<Step<LookupResponse>, ActorError> {
        self.call_owner(
            "lookup",
            owner,
            req,
            deadline,
            |me: &Self, req| me.owner_lookup(req),
            async |addr: PeerAddr<'_>, req, d| self.mesh.lookup(addr, req, d).await,
        )
        .await
    }

    /// Unregisters `entry` at the partition's owner, retrying until `deadline`. True once the
    /// owner answered (removed or not).
    async fn unregister_until(
        &self,
        actor: &ActorId,
        entry: DirectoryEntry,
        deadline: Instant,
    ) -> bool {
        let p = partition(&actor.actor_type, &actor.key);
        let mut backoff = Backoff::new();
        while Instant::now() < deadline {
            let view = self.views.view();
            let Some(owner) = view.owner(p).cloned() else {
                backoff.wait(0, deadline).await;
                continue;
            };
            let req = UnregisterRequest {
                entry: Some(entry.clone()),
            };
            match self.call_unregister(&owner, req, deadline).await {
                Ok(Step::Done(_)) => return true,
                Ok(Step::Retry {
                    hint_ms, refresh, ..
                }) => {
                    if refresh {
                        self.views.request_refresh();
                    }
                    backoff.wait(hint_ms, deadline).await;
                }
                Err(_) => return false,
            }
        }
        false
    }
}

/// How long a call waits before asking again for an actor whose previous activation on this
/// host is still ending (its Deactivate turn running, its claim not yet released).
const ENDING_RETRY_AFTER: Duration = Duration::from_millis(20);

/// The answer to a claim that meets the claim of an earlier activation of the same actor on
/// this host. The runtime starts a new activation only when the table holds none that takes
/// turns, so the earlier one is ending (idle deactivation, a late lifecycle answer) and will
/// release its claim shortly: a handoff, answered with a retry-after so the routing loop waits
/// within the call's deadline instead of spending its retries (DESIGN.md §8).
fn still_ending_here(actor: &ActorId, other: &str, me: &str) -> ActorError {
    ActorError::wrong_host(format!(
        "actor {actor} is still ending on this host as activation {other}: the call never ran; \
         retry shortly"
    ))
    .with_owner_hint(me.to_string())
    .with_retry_after(ENDING_RETRY_AFTER)
}

/// Rule 1 for the runtime: an activation may start only after its registration won and was
/// re-checked under the partition lock.
#[derive(Clone, Debug)]
pub struct DirectoryGate {
    dir: Directory,
}

impl DirectoryGate {
    pub(crate) fn new(dir: Directory) -> Self {
        DirectoryGate { dir }
    }

    async fn claim_inner(
        &self,
        actor: &ActorId,
        activation_id: &str,
        deadline: Instant,
    ) -> Result<(), ActorError> {
        let inner: &Arc<Inner> = &self.dir.inner;
        let p = partition(&actor.actor_type, &actor.key);
        let started = Instant::now();
        let mut backoff = Backoff::new();
        let mut last = String::from("no directory owner in this host's view");
        while Instant::now() < deadline {
            self.check_serving()?;
            // A host that started leaving while this claim retried takes no new activation:
            // the caller re-places the actor now instead of waiting out its deadline here.
            self.check_accepting()?;
            let view = inner.views.view();
            let Some(owner) = view.owner(p).cloned() else {
                inner.views.request_refresh();
                backoff.wait(0, deadline).await;
                continue;
            };
            // The term before the Register leaves: if a new owner collects this partition from
            // us meanwhile, the term moves and the grant below is worthless.
            let term0 = inner.part(p).term;
            let req = RegisterRequest {
                entry: Some(inner.me_entry(actor, activation_id)),
            };
            let resp = match inner.call_register(&owner, req, deadline).await? {
                Step::Done(resp) => resp,
                Step::Retry {
                    hint_ms,
                    refresh,
                    why,
                } => {
                    if refresh {
                        inner.views.request_refresh();
                    }
                    last = format!("{} at {}", why, owner.id);
                    backoff.wait(hint_ms, deadline).await;
                    continue;
                }
            };
            let Some(winner) = resp.winner else {
                last = format!("{} answered OK without a winner", owner.id);
                backoff.wait(0, deadline).await;
                continue;
            };
            if winner.host_id == *inner.me && winner.activation_id == activation_id {
                // Rule 1's re-check, under the partition lock: same owner, same term, lease
                // valid, and still accepting. A host that started leaving (or went back to
                // joining, or fenced) while its Register was in flight takes no new activation:
                // its drain may already have deactivated everything it held, so an activation
                // starting now would outlive the drain and the withdrawal.
                let refused = {
                    let mut part = inner.part(p);
                    let view_now = inner.views.view();
                    let same_owner = view_now.owner(p).is_some_and(|o| o.id == owner.id);
                    let same_term = part.term == term0 || inner.config.faults.skip_term_recheck;
                    if let Some(other) = part.live.get(actor)
                        && **other != *activation_id
                    {
                        // Another activation of this actor went live here first (the runtime
                        // claims one activation per actor at a time; this is the backstop).
                        return Err(still_ending_here(actor, other, &inner.me));
                    }
                    if !(same_owner && same_term && inner.views.check_lease().is_ok()) {
                        last = format!(
                            "grant from {} overtaken (owner moved: {}, term moved: {})",
                            owner.id, !same_owner, !same_term
                        );
                        continue;
                    }
                    match self.check_accepting() {
                        Ok(()) => {
                            part.live.insert(actor.clone(), activation_id.into());
                            tracing::debug!(owner = %owner.id, "claim won");
                            return Ok(());
                        }
                        Err(e) => e,
                    }
                };
                // Withdraw the grant we will not use, so the actor can be placed elsewhere now.
                let unused = inner.me_entry(actor, activation_id);
                inner.unregister_until(actor, unused, deadline).await;
                return Err(refused);
            }
            if winner.host_id == *inner.me {
                // An entry naming this host under another activation id. If that activation is
                // not live here, it is a leftover (a release whose Unregister was lost): remove
                // it, conditionally, and claim again.
                let live_here = inner
                    .part(p)
                    .live
                    .get(actor)
                    .is_some_and(|a| **a == *winner.activation_id);
                if live_here {
                    return Err(still_ending_here(actor, &winner.activation_id, &inner.me));
                }
                let stale = winner.clone();
                inner.unregister_until(actor, stale, deadline).await;
                last = format!("removed a leftover entry {}", winner.activation_id);
                continue;
            }
            let leaving = view
                .get(&winner.host_id)
                .is_some_and(|h| h.status == super::PeerStatus::Leaving);
            if leaving {
                // The actor is moving: its host is draining and will unregister it. Say so
                // with a retry-after, so the caller waits within its deadline instead of
                // spending its retries (DESIGN.md §8: a handoff delays calls, fails none).
                return Err(ActorError::wrong_host(format!(
                    "actor {actor} is still active on host {}, which is leaving; retry shortly",
                    winner.host_id
                ))
                .with_owner_hint(winner.host_id)
                .with_retry_after(Duration::from_millis(50)));
            }
            return Err(ActorError::wrong_host(format!(
                "actor {actor} is active on host {}",
                winner.host_id
            ))
            .with_owner_hint(winner.host_id));
        }
        Err(ActorError::timeout(format!(
            "could not register actor {actor} in the directory before the call's deadline \
             ({:?}; last: {last}): it never ran",
            started.elapsed()
        )))
    }

    /// Where the directory says `actor` lives (`None`: nowhere, place it), retrying the
    /// internal answers until `deadline`.
    pub async fn lookup(
        &self,
        actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<Located>, ActorError> {
        self.dir.lookup(actor, deadline).await
    }
}

impl Directory {
    /// Where the directory says `actor` lives (`None`: registered nowhere), asking the
    /// partition's owner in this host's view and retrying `not-owner`, `recovering` and
    /// `not-converged` until `deadline` (then `timeout`).
    pub async fn lookup(
        &self,
        actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<Located>, ActorError> {
        let inner = &self.inner;
        let p = partition(&actor.actor_type, &actor.key);
        debug_assert!(p < PARTITIONS);
        let mut backoff = Backoff::new();
        let mut last = String::from("no directory owner in this host's view");
        while Instant::now() < deadline {
            let view = inner.views.view();
            let Some(owner) = view.owner(p).cloned() else {
                inner.views.request_refresh();
                backoff.wait(0, deadline).await;
                continue;
            };
            let req = LookupRequest {
                actor: Some(ActorRef {
                    actor_type: actor.actor_type.to_string(),
                    key: actor.key.to_string(),
                }),
            };
            match inner.call_lookup(&owner, req, deadline).await? {
                Step::Done(resp) => {
                    return Ok(resp.entry.map(|e| Located {
                        host: e.host_id,
                        activation_id: e.activation_id,
                    }));
                }
                Step::Retry {
                    hint_ms,
                    refresh,
                    why,
                } => {
                    if refresh {
                        inner.views.request_refresh();
                    }
                    last = format!("{} at {}", why, owner.id);
                    backoff.wait(hint_ms, deadline).await;
                }
            }
        }
        Err(ActorError::timeout(format!(
            "directory lookup of {actor} did not complete before the deadline (last: {last})"
        )))
    }
}

#[async_trait]
impl ActivationGate for DirectoryGate {
    fn check_serving(&self) -> Result<(), ActorError> {
        self.dir.inner.views.check_lease()
    }

    fn check_accepting(&self) -> Result<(), ActorError> {
        let inner = &self.dir.inner;
        let view = inner.views.view();
        match view.get(&inner.me).map(|h| h.status) {
            Some(super::PeerStatus::Active) => Ok(()),
            Some(super::PeerStatus::Leaving) => Err(ActorError::wrong_host(format!(
                "host {} is leaving and takes no new activations; place the actor elsewhere",
                inner.me
            ))),
            _ => Err(ActorError::wrong_host(format!(
                "host {} is not active in its own view yet; place the actor elsewhere",
                inner.me
            ))),
        }
    }

    async fn claim(
        &self,
        actor: &ActorId,
        activation_id: &str,
        deadline: Instant,
    ) -> Result<(), ActorError> {
        self.check_serving()?;
        self.check_accepting()?;
        let span =
            tracing::debug_span!("directory.claim", host = %self.dir.inner.me, actor = %actor);
        // Under the activation's span when its call is traced: the claim (Rule 1's register).
        let cx = crate::trace::step(
            "sigx.directory.register",
            opentelemetry::trace::SpanKind::Internal,
            || {
                let mut attrs = crate::trace::actor_only_attrs(actor);
                attrs.push(opentelemetry::KeyValue::new(
                    "sigx.host",
                    self.dir.inner.me.to_string(),
                ));
                attrs
            },
        );
        crate::trace::traced(
            cx,
            self.claim_inner(actor, activation_id, deadline)
                .instrument(span),
        )
        .await
    }

    async fn release(&self, actor: &ActorId, activation_id: &str) {
        let inner = &self.dir.inner;
        let p = partition(&actor.actor_type, &actor.key);
        {
            let mut part = inner.part(p);
            if part.live.get(actor).is_some_and(|a| **a == *activation_id) {
                part.live.remove(actor);
            }
        }
        let deadline = Instant::now() + inner.config.release_timeout;
        let entry = inner.me_entry(actor, activation_id);
        if !inner.unregister_until(actor, entry, deadline).await {
            // Not a safety problem: the activation is gone and no longer reported live, so the
            // next collection drops the entry, and a claim that meets it removes it.
            tracing::warn!(host = %inner.me, %actor, "could not unregister a released activation; it will be cleaned up lazily");
        }
    }
}
