//! Actor enumeration (issue 16): the live activations of one type, fleet-wide, from the
//! directory owners.
//!
//! The owner side answers `ListEntries` from the partitions it owns and is ready for, read-only.
//! The asking side ([`Directory::list_page`]) walks the 4096 partitions in ascending order from a
//! cursor, asks each partition once, of its owner in this host's view, and merges the answers in
//! (partition, key) order. The order depends only on the hash, never on placement, so a cursor
//! stays meaningful when owners change between pages. A partition nobody answered for is
//! reported as skipped, never dropped silently.

use super::{Directory, Inner, MAX_TYPE_LEN, PARTITIONS, PeerInfo, entry_proto};
use crate::mesh::PeerAddr;
use sigx_proto::ActorError;
use sigx_proto::v1::{
    DirectoryEntry, DirectoryStatus, ListCursor, ListEntriesRequest, ListEntriesResponse,
    ListedEntry, UnlistedPartition,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The largest page (and `ListEntries` limit) accepted.
pub const MAX_PAGE: usize = 1000;
/// The page size when the caller names none.
pub const DEFAULT_PAGE: usize = 100;
/// How many times a page asks again for partitions whose owner did not answer, within its
/// deadline, before it reports them as skipped.
const ATTEMPTS: u32 = 4;

/// Partitions a page could not list, grouped by the owner asked and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The owner asked (empty: the view named no owner).
    pub owner: String,
    /// Why it did not answer for them.
    pub reason: String,
    /// The partitions, ascending.
    pub partitions: Vec<u32>,
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The entries, in (partition, key) order.
    pub entries: Vec<(u32, DirectoryEntry)>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<ListCursor>,
    /// The partitions of this page's range nobody answered for.
    pub skipped: Vec<Skipped>,
}

fn key_of(e: &DirectoryEntry) -> &str {
    e.actor.as_ref().map(|a| a.key.as_str()).unwrap_or("")
}

fn after_cursor(p: u32, key: &str, after: Option<&ListCursor>) -> bool {
    match after {
        None => true,
        Some(c) => p > c.partition || (p == c.partition && key > c.key.as_str()),
    }
}

/// The page token of a cursor: opaque to clients, `v1.{partition}.{hex of the key}`.
pub fn encode_token(c: &ListCursor) -> String {
    let hex: String = c.key.bytes().map(|b| format!("{b:02x}")).collect();
    format!("v1.{}.{hex}", c.partition)
}

/// The cursor of a page token (`None` for the empty token: the first page).
pub fn decode_token(token: &str) -> Result<Option<ListCursor>, ActorError> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || {
        ActorError::invalid(format!(
            "page_token {token:?} is not a token from ListActors: pass next_page_token of the \
             previous page unchanged, or an empty token for the first page"
        ))
    };
    let rest = token.strip_prefix("v1.").ok_or_else(bad)?;
    let (p, hex) = rest.split_once('.').ok_or_else(bad)?;
    let partition: u32 = p.parse().map_err(|_| bad())?;
    if partition >= PARTITIONS || !hex.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    let key = String::from_utf8(bytes).map_err(|_| bad())?;
    Ok(Some(ListCursor { partition, key }))
}

/// One page out of entries already in hand (a single host lists its own runtime this way): sorted,
/// cut after the cursor and at `page_size`.
pub fn page_of(
    mut entries: Vec<(u32, DirectoryEntry)>,
    page_size: usize,
    after: Option<&ListCursor>,
) -> ListPage {
    entries.retain(|(p, e)| after_cursor(*p, key_of(e), after));
    entries.sort_by(|(p, a), (q, b)| (p, key_of(a)).cmp(&(q, key_of(b))));
    let more = entries.len() > page_size;
    entries.truncate(page_size);
    let next = more.then(|| {
        let (p, e) = entries.last().expect("a full page is not empty");
        ListCursor {
            partition: *p,
            key: key_of(e).to_owned(),
        }
    });
    ListPage {
        entries,
        next,
        skipped: Vec::new(),
    }
}

fn unlisted_reason(u: &UnlistedPartition) -> String {
    match DirectoryStatus::try_from(u.status) {
        Ok(DirectoryStatus::Recovering) => {
            "recovering: the owner is collecting the partition after a view change; list again \
             shortly"
                .into()
        }
        Ok(DirectoryStatus::NotOwner) if !u.owner_hint.is_empty() => format!(
            "not owner: its view says {} owns the partition (views differ; list again shortly)",
            u.owner_hint
        ),
        Ok(DirectoryStatus::NotOwner) => {
            "not owner: its view names no owner (views differ; list again shortly)".into()
        }
        _ => "not converged: the owner is fenced or its view differs; list again shortly".into(),
    }
}

impl Inner {
    /// Owner side of `ListEntries`: entries of the type in the asked partitions this host owns
    /// and is ready for, in (partition, key) order, at most `limit`. Entries naming a host that
    /// cannot hold them (departed, no app, type no longer registered) are left out, as a lookup
    /// would evict them.
    pub(crate) fn owner_list(
        &self,
        req: &ListEntriesRequest,
    ) -> Result<ListEntriesResponse, ActorError> {
        let ty = req.actor_type.as_str();
        if ty.is_empty() || ty.len() > MAX_TYPE_LEN {
            return Err(ActorError::invalid(format!(
                "actor type must be 1..={MAX_TYPE_LEN} bytes, got {}",
                ty.len()
            )));
        }
        if req.limit == 0 || req.limit as usize > MAX_PAGE {
            return Err(ActorError::invalid(format!(
                "ListEntries limit must be 1..={MAX_PAGE}, got {}",
                req.limit
            )));
        }
        let limit = req.limit as usize;
        let after = req.after.as_ref();
        let parts: BTreeSet<u32> = req.partitions.iter().copied().collect();
        if let Some(p) = parts.iter().find(|&&p| p >= PARTITIONS) {
            return Err(ActorError::invalid(format!(
                "partition {p} out of range (0..{PARTITIONS})"
            )));
        }
        let view = self.views.view();
        let mut resp = ListEntriesResponse::default();
        for p in parts {
            if after.is_some_and(|c| p < c.partition) {
                continue;
            }
            let mut found: Vec<(String, u32, String)> = {
                let part = self.part(p);
                if let Err(r) = self.owner_check(&part, p, &view) {
                    let (status, owner_hint, _) = self.refusal_fields(&r);
                    resp.unlisted.push(UnlistedPartition {
                        partition: p,
                        status,
                        owner_hint,
                    });
                    continue;
                }
                part.table
                    .iter()
                    .filter(|e| e.actor_type == ty && after_cursor(p, e.key, after))
                    .map(|e| (e.key.to_owned(), e.host, e.activation.to_owned()))
                    .collect()
            };
            found.sort();
            for (key, host, activation) in found {
                let host = self.host_name(host);
                if view.get(&host).is_none_or(|h| !h.may_hold_claim_of(ty)) {
                    continue;
                }
                if resp.entries.len() == limit {
                    resp.truncated = true;
                    return Ok(resp);
                }
                resp.entries.push(ListedEntry {
                    partition: p,
                    entry: Some(entry_proto(ty, &key, &host, &activation)),
                });
            }
        }
        Ok(resp)
    }

    /// `ListEntries` at `owner`: in process when it is this host, else over the mesh within
    /// the RPC timeout. `Err` is why the owner gave no answer.
    async fn list_at(
        &self,
        owner: &PeerInfo,
        req: ListEntriesRequest,
        deadline: Instant,
    ) -> Result<ListEntriesResponse, String> {
        if owner.id == self.me {
            return self.owner_list(&req).map_err(|e| e.to_string());
        }
        let addr = PeerAddr {
            id: &owner.id,
            advertise: &owner.advertise,
        };
        let d = deadline.min(Instant::now() + self.config.rpc_timeout);
        self.mesh
            .list_entries(addr, req, d)
            .await
            .map_err(|e| e.to_string())
    }
}

impl Directory {
    /// One page of the live activations of `actor_type`, after `after`: every partition from
    /// the cursor on is asked once, of its owner in this host's view, all owners at once. A
    /// partition whose owner refused or did not answer is asked again (against a refreshed
    /// view) a few times within `deadline`, then reported in [`ListPage::skipped`].
    pub async fn list_page(
        &self,
        actor_type: &str,
        page_size: usize,
        after: Option<ListCursor>,
        deadline: Instant,
    ) -> Result<ListPage, ActorError> {
        let inner: &Arc<Inner> = &self.inner;
        let page_size = page_size.clamp(1, MAX_PAGE);
        let start = after.as_ref().map(|c| c.partition).unwrap_or(0);
        let mut pending: BTreeSet<u32> = (start..PARTITIONS).collect();
        let mut got: Vec<(u32, DirectoryEntry)> = Vec::new();
        // The smallest point up to which a truncated owner's answer is complete: partitions
        // past it belong to a later page and are not asked again.
        let mut bound: Option<(u32, String)> = None;
        let mut why: BTreeMap<u32, (String, String)> = BTreeMap::new();
        let mut pause = Duration::from_millis(50);
        for attempt in 1..=ATTEMPTS {
            let view = inner.views.view();
            let mut by_owner: BTreeMap<Arc<str>, (PeerInfo, Vec<u32>)> = BTreeMap::new();
            for &p in &pending {
                match view.owner(p) {
                    Some(o) => by_owner
                        .entry(o.id.clone())
                        .or_insert_with(|| (o.clone(), Vec::new()))
                        .1
                        .push(p),
                    None => {
                        why.insert(
                            p,
                            (String::new(), "no owner in this host's view".to_string()),
                        );
                    }
                }
            }
            let asks = by_owner.into_values().map(|(owner, parts)| {
                let req = ListEntriesRequest {
                    actor_type: actor_type.to_owned(),
                    partitions: parts.clone(),
                    after: after.clone(),
                    limit: page_size as u32,
                };
                async move {
                    let answer = inner.list_at(&owner, req, deadline).await;
                    (owner, parts, answer)
                }
            });
            for (owner, parts, answer) in futures::future::join_all(asks).await {
                let resp = match answer {
                    Ok(resp) => resp,
                    Err(e) => {
                        for p in parts {
                            why.insert(p, (owner.id.to_string(), e.clone()));
                        }
                        continue;
                    }
                };
                let unlisted: BTreeSet<u32> = resp.unlisted.iter().map(|u| u.partition).collect();
                for u in &resp.unlisted {
                    why.insert(u.partition, (owner.id.to_string(), unlisted_reason(u)));
                }
                let cut = match resp.entries.last() {
                    Some(last) if resp.truncated => {
                        let key = last.entry.as_ref().map(key_of).unwrap_or_default();
                        Some((last.partition, key.to_owned()))
                    }
                    _ => None,
                };
                for p in parts {
                    let examined = cut.as_ref().is_none_or(|(cp, _)| p <= *cp);
                    if examined && !unlisted.contains(&p) {
                        pending.remove(&p);
                        why.remove(&p);
                    }
                }
                for l in resp.entries {
                    if let Some(e) = l.entry {
                        got.push((l.partition, e));
                    }
                }
                if let Some(c) = cut
                    && bound.as_ref().is_none_or(|b| c < *b)
                {
                    bound = Some(c);
                }
            }
            // Partitions past a truncation point belong to a later page.
            if let Some((bp, _)) = &bound {
                pending.retain(|p| p <= bp);
                why.retain(|p, _| p <= bp);
            }
            if pending.is_empty() || attempt == ATTEMPTS || Instant::now() + pause >= deadline {
                break;
            }
            inner.views.request_refresh();
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        got.sort_by(|(p, a), (q, b)| (p, key_of(a)).cmp(&(q, key_of(b))));
        got.dedup_by(|(p, a), (q, b)| p == q && key_of(a) == key_of(b));
        // No entry past `bound` survives the cut at `page_size`: the truncated owner alone
        // answered `page_size` entries up to it. So the first `page_size` entries are complete.
        let done = bound.is_none() && got.len() <= page_size;
        got.truncate(page_size);
        let next = (!done).then(|| {
            let (p, e) = got.last().expect("an unfinished listing's page is full");
            ListCursor {
                partition: *p,
                key: key_of(e).to_owned(),
            }
        });
        // Skipped partitions past the next cursor are asked again by the next page.
        let mut grouped: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        for (p, (owner, reason)) in why {
            if pending.contains(&p) && next.as_ref().is_none_or(|c| p < c.partition) {
                grouped.entry((owner, reason)).or_default().push(p);
            }
        }
        let skipped = grouped
            .into_iter()
            .map(|((owner, reason), partitions)| Skipped {
                owner,
                reason,
                partitions,
            })
            .collect();
        Ok(ListPage {
            entries: got,
            next,
            skipped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DirView, DirectoryConfig, PeerStatus, ViewCell, partition};
    use super::*;
    use crate::mesh::{DirectoryHandler, MeshAuth, MeshClient, MeshClientConfig, TcpConnector};
    use sigx_proto::v1::{ActorRef, RegisterRequest};

    fn peer(id: &str) -> PeerInfo {
        // Port 9 (discard) on a test-net address: never answers.
        PeerInfo::new(id, "192.0.2.1:9", PeerStatus::Active, true)
    }

    fn start(me: &str, hosts: Vec<PeerInfo>) -> (Directory, Arc<ViewCell>) {
        let cell = Arc::new(ViewCell::new(me, DirView::new(1, hosts), || Ok(())));
        let mesh = Arc::new(MeshClient::new(
            me,
            MeshAuth::Insecure,
            crate::clock::system(),
            Arc::new(TcpConnector),
            MeshClientConfig {
                connect_timeout: Duration::from_millis(50),
                ..Default::default()
            },
        ));
        let config = DirectoryConfig {
            rpc_timeout: Duration::from_millis(100),
            ..Default::default()
        };
        (Directory::start(cell.clone(), mesh, config), cell)
    }

    fn keys(page: &ListPage) -> Vec<&str> {
        page.entries.iter().map(|(_, e)| key_of(e)).collect()
    }

    #[tokio::test]
    async fn pages_of_one_owner_list_each_entry_once_in_partition_order() {
        let (d, _cell) = start("a", vec![peer("a")]);
        while d.counters().partitions_recovering > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let reg = |ty: &str, key: &str| {
            let entry = entry_proto(ty, key, "a", &format!("act-{key}"));
            let r = d
                .register("a", RegisterRequest { entry: Some(entry) })
                .unwrap();
            assert_eq!(r.status, DirectoryStatus::Ok as i32);
        };
        for k in 0..10 {
            reg("T", &format!("k{k}"));
        }
        reg("U", "other-type");
        // An entry naming a host this view does not have is stale: never listed.
        let gone = d.inner.host_number(&Arc::from("gone"));
        let p = partition("T", "stale");
        d.inner
            .part(p)
            .table
            .insert(&d.inner.hasher, "T", "stale", gone, "x");
        let mut want: Vec<(u32, String)> = (0..10)
            .map(|k| format!("k{k}"))
            .map(|k| (partition("T", &k), k))
            .collect();
        want.sort();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = d.list_page("T", 3, after, deadline).await.unwrap();
            assert!(page.skipped.is_empty(), "{:?}", page.skipped);
            assert!(page.entries.len() <= 3);
            pages += 1;
            got.extend(page.entries.iter().map(|(p, e)| (*p, key_of(e).to_owned())));
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        assert_eq!(got, want);
        assert_eq!(pages, 4, "10 entries in pages of 3");
        let one = d.list_page("T", 100, None, deadline).await.unwrap();
        assert_eq!(one.entries.len(), 10);
        assert_eq!(one.next, None);
        assert_eq!(
            keys(&d.list_page("U", 5, None, deadline).await.unwrap()),
            ["other-type"]
        );
    }

    #[tokio::test]
    async fn partitions_nobody_answers_for_are_reported_not_dropped() {
        // "b" never answers: the partitions "a" owns stay recovering (it cannot collect from
        // "b"), and those "b" owns are unreachable.
        let (d, _cell) = start("a", vec![peer("a"), peer("b")]);
        let deadline = Instant::now() + Duration::from_secs(3);
        let page = d.list_page("T", 10, None, deadline).await.unwrap();
        assert!(page.entries.is_empty());
        assert_eq!(page.next, None);
        let mut all: Vec<u32> = page
            .skipped
            .iter()
            .flat_map(|s| s.partitions.clone())
            .collect();
        all.sort();
        assert_eq!(
            all,
            (0..PARTITIONS).collect::<Vec<_>>(),
            "every partition reported"
        );
        assert!(
            page.skipped
                .iter()
                .any(|s| s.owner == "a" && s.reason.starts_with("recovering")),
            "{:?}",
            page.skipped
        );
        assert!(
            page.skipped
                .iter()
                .any(|s| s.owner == "b" && s.reason.contains("unreachable")),
            "{:?}",
            page.skipped
        );
    }

    fn e(key: &str) -> DirectoryEntry {
        DirectoryEntry {
            actor: Some(ActorRef {
                actor_type: "T".into(),
                key: key.into(),
            }),
            host_id: "h".into(),
            activation_id: "a".into(),
        }
    }

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        for key in ["", "alice", "a/b.c", "ключ", "v1.3.ff"] {
            let c = ListCursor {
                partition: 4095,
                key: key.into(),
            };
            assert_eq!(decode_token(&encode_token(&c)).unwrap(), Some(c));
        }
        assert_eq!(decode_token("").unwrap(), None);
        for bad in [
            "x", "v1.", "v1.4096.", "v1.1.f", "v1.1.zz", "v2.1.", "v1.1.ff",
        ] {
            let err = decode_token(bad).unwrap_err();
            assert!(err.message.contains("not a token from ListActors"), "{bad}");
        }
    }

    #[test]
    fn local_pages_are_ordered_and_resume_after_the_cursor() {
        let all = vec![(7, e("b")), (2, e("z")), (7, e("a")), (9, e(""))];
        let first = page_of(all.clone(), 2, None);
        let keys: Vec<_> = first.entries.iter().map(|(p, x)| (*p, key_of(x))).collect();
        assert_eq!(keys, [(2, "z"), (7, "a")]);
        let next = first.next.unwrap();
        let second = page_of(all.clone(), 2, Some(&next));
        let keys: Vec<_> = second
            .entries
            .iter()
            .map(|(p, x)| (*p, key_of(x)))
            .collect();
        assert_eq!(keys, [(7, "b"), (9, "")]);
        assert_eq!(second.next, None, "nothing after the last entry");
    }
}
