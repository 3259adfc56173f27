//! The directory's background work: collection (Rule 2) and departure sweeps (Rule 3).
//!
//! **Collection.** When this host's view makes it owner of partitions that are not ready, it
//! runs a *round*: one `Collect` per stateful host that is active or leaving in the view (all
//! partitions of the round batched into one request per host), each answered only by a host
//! whose view has the same fingerprint. When every host answered under fingerprint `F` and this
//! host's view still has fingerprint `F` (and its lease is valid), each partition's entries are
//! rebuilt from the hosts' reports of their own live activations and it becomes ready. Any
//! refusal or timeout fails the round; it is retried after a pause or as soon as the view
//! changes. A view change during a round abandons it (its in-flight `Collect`s are cancelled) and
//! starts the next at once (`collectionsRestarted`). A host that stays in the view but never answers keeps the partitions
//! recovering: consistency over availability.
//!
//! Reports name their own host. An entry that names another host is what the responder held as
//! a former owner: every host that can hold a claim answers for itself in the same round, so
//! such entries are hints, logged and dropped, never resurrected. Two hosts reporting the same
//! actor live is a bug signal: the partition stays recovering, it is logged at error level and
//! counted (`conflictingReports`).
//!
//! **Sweeps.** When a stateful host leaves the view without having announced `leaving`, it has
//! expired (and fenced): entries naming it are removed from every partition this host holds
//! (`hostSweeps`, `sweptEntries`). A host seen `leaving` unregistered its actors while it
//! drained; it is not swept (`sweepsSkippedGraceful`) and any straggler is evicted lazily.

use super::view::{DirView, PeerStatus};
use super::{Inner, OwnerState, PARTITIONS};
use crate::mesh::PeerAddr;
use sigx_proto::v1::{CollectRequest, DirectoryStatus};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Partitions per `Collect` request.
const COLLECT_BATCH: usize = 128;

/// The directory's tasks; aborted on drop.
pub(crate) struct Tasks {
    handles: Vec<JoinHandle<()>>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for h in &self.handles {
            h.abort();
        }
    }
}

impl Tasks {
    pub(crate) fn spawn(inner: Arc<Inner>) -> Self {
        let collector = tokio::spawn(collector(inner.clone()));
        let watcher = tokio::spawn(watcher(inner));
        Tasks {
            handles: vec![collector, watcher],
        }
    }
}

/// Partitions this host owns in `view` and that are not ready; marks them recovering.
fn pending_partitions(inner: &Inner, view: &DirView) -> Vec<u32> {
    let mut pending = Vec::new();
    for p in 0..PARTITIONS {
        if view.owner(p).is_none_or(|o| o.id != inner.me) {
            continue;
        }
        let mut part = inner.part(p);
        if !inner.is_ready(&part, view) {
            part.state = OwnerState::Recovering;
            pending.push(p);
        }
    }
    pending
}

async fn collector(inner: Arc<Inner>) {
    let mut rx = inner.views.subscribe();
    loop {
        let view = inner.views.view();
        let me_active = view
            .get(&inner.me)
            .is_some_and(|h| h.is_directory_eligible());
        let pending = if me_active && inner.views.check_lease().is_ok() {
            pending_partitions(&inner, &view)
        } else {
            Vec::new()
        };
        if pending.is_empty() {
            // Idle: wake on a view change, on a request that met a recovering partition (e.g.
            // after the lease came back), or now and then to re-check.
            tokio::select! {
                biased;
                r = rx.changed() => { if r.is_err() { return; } }
                _ = inner.kick.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        }
        let started = Instant::now();
        // DESIGN §4: a round under a view that is no longer current cannot commit, so a view
        // change (a host leaving mid-round, a newcomer) restarts it at once instead of waiting
        // out the RPCs still in flight to a host that is gone.
        let fingerprint = inner.fingerprint(&view);
        let round = run_round(&inner, &view, &pending);
        tokio::pin!(round);
        let result = loop {
            tokio::select! {
                biased;
                // A departure can end the round first: the watcher's pool trim fails the
                // Collect to the departed host. Which task sees the view change first is up to
                // the scheduler, so a failed round under a changed view counts as restarted too.
                r = &mut round => {
                    break r.map_err(|e| (e, inner.fingerprint(&inner.views.view()) != fingerprint));
                }
                r = rx.changed() => {
                    if r.is_err() {
                        return;
                    }
                    if inner.fingerprint(&inner.views.view()) != fingerprint {
                        break Err(("the view changed during the round".to_string(), true));
                    }
                }
            }
        };
        match result {
            Err((reason, true)) => {
                inner.rounds.observe("restarted", started.elapsed());
                inner
                    .counters
                    .collections_restarted
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(host = %inner.me, %reason, "collection round restarted");
            }
            Ok(()) => {
                inner.rounds.observe("complete", started.elapsed());
                let ms = started.elapsed().as_millis() as u64;
                inner
                    .counters
                    .collections_run
                    .fetch_add(1, Ordering::Relaxed);
                inner
                    .counters
                    .collection_time_ms
                    .fetch_add(ms, Ordering::Relaxed);
                tracing::debug!(
                    host = %inner.me,
                    partitions = pending.len(),
                    elapsed_ms = ms,
                    "collection round complete"
                );
            }
            Err((reason, _)) => {
                inner.rounds.observe("failed", started.elapsed());
                tracing::debug!(host = %inner.me, %reason, "collection round failed; retrying");
                inner.views.request_refresh();
                // Failed rounds are paced (requests hitting recovering partitions do not
                // hurry them): retry after the pause, or at once when the view changes.
                tokio::select! {
                    biased;
                    r = rx.changed() => { if r.is_err() { return; } }
                    _ = tokio::time::sleep(inner.config.collect_retry) => {}
                }
            }
        }
    }
}

/// One collection round under `view`'s fingerprint.
async fn run_round(inner: &Arc<Inner>, view: &DirView, pending: &[u32]) -> Result<(), String> {
    let fingerprint = inner.fingerprint(view);
    let holders: Vec<_> = view.claim_holders_except(&inner.me).cloned().collect();
    // One batch of partitions per request keeps every answer well under the mesh's message
    // limit even for hosts with millions of activations; batches to one host go one at a time.
    // Each request has its own RPC timeout: a round's time scales with the number of batches
    // (and so with the tables), where one deadline for the whole round would cut every round
    // short once the tables (or a loaded peer) need more than one RPC timeout in all, and keep
    // the partitions recovering for good.
    let calls = holders.iter().map(|h| async move {
        let addr = PeerAddr {
            id: &h.id,
            advertise: &h.advertise,
        };
        let mut entries = Vec::new();
        for batch in pending.chunks(COLLECT_BATCH) {
            let req = CollectRequest {
                requester: inner.me.to_string(),
                fingerprint,
                partitions: batch.to_vec(),
            };
            let deadline = Instant::now() + inner.config.rpc_timeout;
            match inner.mesh.collect(addr, req, deadline).await {
                Ok(resp) if resp.status == DirectoryStatus::Ok as i32 => {
                    let agreed = resp.fingerprint == fingerprint
                        || inner.config.faults.collect_ignores_fingerprint;
                    if !agreed {
                        return (
                            h,
                            Err(format!(
                                "host {} answered under fingerprint {:x}, ours {fingerprint:x}",
                                h.id, resp.fingerprint
                            )),
                        );
                    }
                    entries.extend(resp.entries);
                }
                Ok(resp) => {
                    return (
                        h,
                        Err(format!(
                            "host {} has not converged (fingerprint {:x}, ours {fingerprint:x})",
                            h.id, resp.fingerprint
                        )),
                    );
                }
                Err(e) => return (h, Err(format!("Collect at {}: {e}", h.id))),
            }
        }
        (h, Ok(entries))
    });
    let answers = futures::future::join_all(calls).await;
    // actor (type, key) -> (host, activation), per partition.
    type Reports = HashMap<(String, String), Vec<(Arc<str>, String)>>;
    let mut by_partition: HashMap<u32, Reports> = HashMap::new();
    let mut hints = 0usize;
    for (host, answer) in answers {
        let entries = answer?;
        for e in entries {
            let Some(actor) = e.actor else { continue };
            if e.host_id != *host.id {
                hints += 1;
                continue;
            }
            let p = super::partition(&actor.actor_type, &actor.key);
            by_partition
                .entry(p)
                .or_default()
                .entry((actor.actor_type, actor.key))
                .or_default()
                .push((host.id.clone(), e.activation_id));
        }
    }
    if hints > 0 {
        tracing::debug!(host = %inner.me, hints, "dropped former-owner entries superseded by live reports");
    }
    // Commit, only if nothing moved while the answers were in flight.
    let now_view = inner.views.view();
    if inner.fingerprint(&now_view) != fingerprint {
        return Err("view changed during the round".into());
    }
    if inner.views.check_lease().is_err() {
        return Err("lease not valid at commit".into());
    }
    let Some(epoch) = inner.own_epoch(&now_view) else {
        return Err("this host is not directory-eligible in its own view at commit".into());
    };
    let mut conflicts = 0u64;
    for &p in pending {
        if now_view.owner(p).is_none_or(|o| o.id != inner.me) {
            continue;
        }
        let mut part = inner.part(p);
        if part.state != OwnerState::Recovering {
            continue;
        }
        let mut reports = by_partition.remove(&p).unwrap_or_default();
        for (actor, act) in &part.live {
            reports
                .entry((actor.actor_type.to_string(), actor.key.to_string()))
                .or_default()
                .push((inner.me.clone(), act.to_string()));
        }
        let mut conflicted = false;
        for ((ty, key), holders) in &reports {
            if holders.len() > 1 {
                conflicted = true;
                conflicts += 1;
                tracing::error!(
                    host = %inner.me,
                    partition = p,
                    actor = %format!("{ty}/{key}"),
                    holders = ?holders,
                    "CONFLICT: one actor reported live on several hosts; partition stays recovering"
                );
            }
        }
        if conflicted {
            continue;
        }
        part.table.clear();
        for ((ty, key), holders) in reports {
            let (host, act) = &holders[0];
            let host = inner.host_number(host);
            // Every reporter is in the agreed view by construction (it answered under the same
            // fingerprint), so nothing here names a host absent from it.
            part.table.insert(&inner.hasher, &ty, &key, host, act);
        }
        part.state = OwnerState::Ready {
            term: part.term,
            epoch,
        };
    }
    if conflicts > 0 {
        inner
            .counters
            .conflicting_reports
            .fetch_add(conflicts, Ordering::Relaxed);
        return Err(format!("{conflicts} conflicting reports"));
    }
    Ok(())
}

/// Watches views for departures (Rule 3) and trims the mesh pool.
async fn watcher(inner: Arc<Inner>) {
    let mut rx = inner.views.subscribe();
    let mut last = rx.borrow_and_update().clone();
    while rx.changed().await.is_ok() {
        let view = rx.borrow_and_update().clone();
        on_view_change(&inner, &last, &view);
        last = view;
        inner.kick.notify_one();
    }
}

#[cfg(test)]
pub(crate) fn on_view_change_for_test(inner: &Inner, before: &DirView, after: &DirView) {
    on_view_change(inner, before, after)
}

fn on_view_change(inner: &Inner, before: &DirView, after: &DirView) {
    let departed: Vec<_> = before
        .hosts()
        .iter()
        .filter(|h| after.get(&h.id).is_none())
        .collect();
    if departed.is_empty() {
        return;
    }
    inner.mesh.retain_peers(|id| after.get(id).is_some());
    let i_hold_partitions = after
        .get(&inner.me)
        .is_some_and(|h| h.is_directory_eligible());
    for host in departed {
        if !host.stateful {
            continue;
        }
        if host.status == PeerStatus::Leaving {
            inner
                .counters
                .sweeps_skipped_graceful
                .fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if !i_hold_partitions {
            continue;
        }
        let Some(number) = inner
            .hosts
            .read()
            .expect("host interner lock")
            .find(&host.id)
        else {
            // No entry ever named it here.
            inner.counters.host_sweeps.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let mut swept = 0u64;
        for p in 0..PARTITIONS {
            let mut part = inner.part(p);
            if part.table.is_empty() {
                continue;
            }
            swept += part.table.retain(|e| e.host != number) as u64;
        }
        inner.counters.host_sweeps.fetch_add(1, Ordering::Relaxed);
        inner
            .counters
            .swept_entries
            .fetch_add(swept, Ordering::Relaxed);
        tracing::info!(host = %inner.me, departed = %host.id, swept, "swept departed host");
    }
}
