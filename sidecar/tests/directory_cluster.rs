//! Several hosts' directories in one process, each behind its own authenticated mesh server on
//! loopback TCP, driven by hand-built views: the single-activation guarantee under concurrent
//! claims, ownership moving by collection, departures, and a deliberately broken variant that
//! the same checks catch. At the end, on paused time and with every dial hanging, how a
//! collection round ends when the view changes under it.

use async_trait::async_trait;
mod support;
use bytes::Bytes;
use futures::future::join_all;
use sigx_proto::v1::DeliverRequest;
use sigx_proto::{ActorError, ErrorKind};
use sigx_sidecar::clock::system;
use sigx_sidecar::directory::{
    DirView, Directory, DirectoryConfig, DirectoryGate, KnownFromViews, PeerInfo, PeerStatus,
    ProtocolFaults, ViewCell, partition,
};
use sigx_sidecar::mesh::{
    BoxedIo, Connector, DeliverHandler, MeshAuth, MeshClient, MeshClientConfig, MeshServerConfig,
    MeshService, TcpConnector, TcpMeshListener, Verifier, serve,
};
use sigx_sidecar::runtime::{ActivationGate, ActorId};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use support::relay::HoldAnswers;
use tokio::sync::oneshot;
use tokio::time::Instant;

const SECRET: &str = "directory-test-secret";

struct NoDeliver;

#[async_trait]
impl DeliverHandler for NoDeliver {
    async fn deliver(&self, _: &str, _: DeliverRequest, _: Instant) -> Result<Bytes, ActorError> {
        Err(ActorError::invalid("not used by directory tests"))
    }
}

struct Host {
    id: String,
    addr: String,
    cell: Arc<ViewCell>,
    dir: Directory,
    gate: DirectoryGate,
    stop: Option<oneshot::Sender<()>>,
}

impl Host {
    fn kill(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

struct Cluster {
    hosts: Vec<Host>,
    /// How long a claim in these tests may try (the deadline of the call asking for it).
    claim_within: Duration,
}

fn auth() -> MeshAuth {
    MeshAuth::from_config(Some(SECRET), false).unwrap()
}

impl Cluster {
    /// Starts `n` hosts named `h0..`, all seeing `initial(addrs)`.
    async fn start(n: usize, faults: ProtocolFaults, claim_timeout: Duration) -> Cluster {
        Cluster::start_custom(n, faults, claim_timeout, |_, _| {
            (Arc::new(TcpConnector), Duration::from_millis(500))
        })
        .await
    }

    /// Like `start`, with each host's connector and directory RPC timeout chosen by `custom`
    /// (given the host's index and every host's address).
    async fn start_custom(
        n: usize,
        faults: ProtocolFaults,
        claim_timeout: Duration,
        custom: impl Fn(usize, &[String]) -> (Arc<dyn Connector>, Duration),
    ) -> Cluster {
        let mut listeners = Vec::new();
        for _ in 0..n {
            let l = TcpMeshListener::bind("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            listeners.push(l);
        }
        let addrs: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        let mut hosts = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = format!("h{i}");
            let (connector, rpc_timeout) = custom(i, &addrs);
            let cell = Arc::new(ViewCell::new(id.as_str(), DirView::empty(), || Ok(())));
            let mesh = Arc::new(MeshClient::new(
                id.as_str(),
                auth(),
                system(),
                connector,
                MeshClientConfig {
                    connect_timeout: Duration::from_millis(300),
                    ..Default::default()
                },
            ));
            let dir = Directory::start(
                cell.clone(),
                mesh,
                DirectoryConfig {
                    rpc_timeout,
                    collect_retry: Duration::from_millis(20),
                    release_timeout: Duration::from_secs(2),
                    faults: faults.clone(),
                    ..Default::default()
                },
            );
            let verifier = Arc::new(Verifier::new(
                auth(),
                system(),
                Duration::from_secs(60),
                Arc::new(KnownFromViews(cell.clone())),
            ));
            let config = MeshServerConfig::default();
            let service = MeshService::new(Arc::new(NoDeliver), Arc::new(dir.clone()), &config);
            let (stop, rx) = oneshot::channel::<()>();
            tokio::spawn(serve(listener, verifier, service, config, async {
                let _ = rx.await;
            }));
            hosts.push(Host {
                id,
                addr: addrs[i].clone(),
                gate: dir.gate(),
                dir,
                cell,
                stop: Some(stop),
            });
        }
        Cluster {
            hosts,
            claim_within: claim_timeout,
        }
    }

    /// The deadline of a claim starting now.
    fn by(&self) -> Instant {
        Instant::now() + self.claim_within
    }

    /// A view of the given hosts with the given statuses.
    fn view(&self, version: u64, members: &[(usize, PeerStatus)]) -> DirView {
        DirView::new(
            version,
            members
                .iter()
                .map(|&(i, st)| {
                    PeerInfo::new(
                        self.hosts[i].id.as_str(),
                        self.hosts[i].addr.as_str(),
                        st,
                        true,
                    )
                })
                .collect(),
        )
    }

    fn publish(&self, version: u64, members: &[(usize, PeerStatus)], to: &[usize]) {
        for &i in to {
            self.hosts[i].cell.publish(self.view(version, members));
        }
    }

    fn all_active(&self, idx: &[usize]) -> Vec<(usize, PeerStatus)> {
        idx.iter().map(|&i| (i, PeerStatus::Active)).collect()
    }

    async fn until_ready(&self, idx: &[usize]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if idx
                .iter()
                .all(|&i| self.hosts[i].dir.counters().partitions_recovering == 0)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for &i in idx {
            eprintln!("{}: {:?}", self.hosts[i].id, self.hosts[i].dir.counters());
        }
        panic!("partitions never became ready");
    }
}

fn actor(i: usize) -> ActorId {
    ActorId::new("Counter", format!("c-{i}"))
}

/// Claims every actor from every listed host at once; returns actor index -> winning host index,
/// asserting exactly one winner per actor and that every loser was told who won.
async fn claim_everywhere(
    c: &Cluster,
    hosts: &[usize],
    actors: std::ops::Range<usize>,
) -> HashMap<usize, usize> {
    let mut calls = Vec::new();
    for a in actors.clone() {
        for &h in hosts {
            let gate = c.hosts[h].gate.clone();
            let by = c.by();
            calls.push(async move {
                let id = actor(a);
                let r = gate.claim(&id, &format!("act-{a}-{h}"), by).await;
                (a, h, r)
            });
        }
    }
    let mut winners: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut losers = Vec::new();
    for (a, h, r) in join_all(calls).await {
        match r {
            Ok(()) => winners.entry(a).or_default().push(h),
            Err(e) => losers.push((a, h, e)),
        }
    }
    let mut out = HashMap::new();
    for a in actors {
        let w = winners.get(&a).cloned().unwrap_or_default();
        assert_eq!(w.len(), 1, "actor {a}: winners {w:?}");
        out.insert(a, w[0]);
    }
    for (a, h, e) in losers {
        assert_eq!(e.kind, ErrorKind::WrongHost, "host {h} actor {a}: {e}");
        assert_eq!(
            e.owner_hint.as_deref(),
            Some(c.hosts[out[&a]].id.as_str()),
            "the loser is told who won"
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_from_every_host_have_exactly_one_winner() {
    let c = Cluster::start(3, ProtocolFaults::default(), Duration::from_secs(5)).await;
    c.publish(1, &c.all_active(&[0, 1, 2]), &[0, 1, 2]);
    c.until_ready(&[0, 1, 2]).await;
    let winners = claim_everywhere(&c, &[0, 1, 2], 0..60).await;
    // Every host's lookup agrees with the winner.
    for a in 0..60 {
        for h in &c.hosts {
            let found = h
                .dir
                .lookup(&actor(a), Instant::now() + Duration::from_secs(2))
                .await
                .unwrap()
                .expect("registered");
            assert_eq!(found.host, c.hosts[winners[&a]].id);
        }
    }
    // After the winner releases, another host can claim.
    let w = winners[&0];
    c.hosts[w]
        .gate
        .release(&actor(0), &format!("act-0-{w}"))
        .await;
    let other = (w + 1) % 3;
    c.hosts[other]
        .gate
        .claim(&actor(0), "fresh", c.by())
        .await
        .unwrap();
    let found = c.hosts[w]
        .dir
        .lookup(&actor(0), Instant::now() + Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.host.as_str(), found.activation_id.as_str()),
        (c.hosts[other].id.as_str(), "fresh")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_moves_by_collection_without_losing_a_claim() {
    let c = Cluster::start(4, ProtocolFaults::default(), Duration::from_secs(5)).await;
    // h3 is joining: in the view, owns nothing.
    let mut v1 = c.all_active(&[0, 1, 2]);
    v1.push((3, PeerStatus::Joining));
    c.publish(1, &v1, &[0, 1, 2, 3]);
    c.until_ready(&[0, 1, 2]).await;
    let winners = claim_everywhere(&c, &[0, 1, 2], 0..200).await;
    let before: Vec<_> = (0..4)
        .map(|i| c.hosts[i].dir.counters().collections_run)
        .collect();
    // h3 becomes active: about a quarter of the partitions move to it, by collection.
    c.publish(2, &c.all_active(&[0, 1, 2, 3]), &[0, 1, 2, 3]);
    c.until_ready(&[0, 1, 2, 3]).await;
    let counters = c.hosts[3].dir.counters();
    assert!(counters.collections_run > before[3], "{counters:?}");
    assert!(counters.entries > 0, "h3 collected entries: {counters:?}");
    assert_eq!(counters.conflicting_reports, 0);
    // Nothing was lost: every actor is still found on its host, from every host, and claims
    // from the others still lose to it.
    for a in 0..200 {
        let found = c.hosts[3]
            .dir
            .lookup(&actor(a), Instant::now() + Duration::from_secs(2))
            .await
            .unwrap()
            .expect("still registered after the move");
        assert_eq!(found.host, c.hosts[winners[&a]].id);
    }
    let moved: Vec<usize> = (0..200)
        .filter(|&a| {
            c.hosts[3]
                .dir
                .is_ready(partition("Counter", &format!("c-{a}")))
        })
        .collect();
    assert!(!moved.is_empty(), "some actors' partitions moved to h3");
    for &a in &moved {
        let h = (winners[&a] + 1) % 3;
        let e = c.hosts[h]
            .gate
            .claim(&actor(a), "intruder", c.by())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::WrongHost);
        let e = c.hosts[3]
            .gate
            .claim(&actor(a), "intruder-3", c.by())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::WrongHost);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_host_is_swept_and_a_graceful_leaver_is_not() {
    let mut c = Cluster::start(4, ProtocolFaults::default(), Duration::from_secs(5)).await;
    c.publish(1, &c.all_active(&[0, 1, 2, 3]), &[0, 1, 2, 3]);
    c.until_ready(&[0, 1, 2, 3]).await;
    // h2 holds actors 0..50, h3 holds 50..100.
    for a in 0..50 {
        c.hosts[2]
            .gate
            .claim(&actor(a), &format!("a{a}"), c.by())
            .await
            .unwrap();
    }
    for a in 50..100 {
        c.hosts[3]
            .gate
            .claim(&actor(a), &format!("a{a}"), c.by())
            .await
            .unwrap();
    }
    // h3 leaves gracefully: announced leaving, releases, then departs.
    let mut v = c.all_active(&[0, 1, 2]);
    v.push((3, PeerStatus::Leaving));
    c.publish(2, &v, &[0, 1, 2, 3]);
    c.until_ready(&[0, 1, 2]).await;
    // While h3 drains, its actors are "moving": a claim elsewhere is told to retry shortly.
    let e = c.hosts[0]
        .gate
        .claim(&actor(50), "too-early", c.by())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongHost);
    assert_eq!(e.owner_hint.as_deref(), Some("h3"));
    assert!(e.retry_after.is_some(), "{e}");
    for a in 50..100 {
        c.hosts[3].gate.release(&actor(a), &format!("a{a}")).await;
    }
    c.hosts[3].kill();
    // h2 crashes (expiry: never announced anything).
    c.hosts[2].kill();
    c.publish(3, &c.all_active(&[0, 1]), &[0, 1]);
    c.until_ready(&[0, 1]).await;
    let (c0, c1) = (c.hosts[0].dir.counters(), c.hosts[1].dir.counters());
    assert_eq!(
        c0.sweeps_skipped_graceful + c1.sweeps_skipped_graceful,
        2,
        "{c0:?} {c1:?}"
    );
    // The expired host's actors are gone from the directory and claimable by the survivors.
    for a in 0..100 {
        let found = c.hosts[0]
            .dir
            .lookup(&actor(a), Instant::now() + Duration::from_secs(2))
            .await
            .unwrap();
        assert!(found.is_none(), "actor {a} still names {found:?}");
    }
    let winners = claim_everywhere(&c, &[0, 1], 0..100).await;
    assert_eq!(winners.len(), 100);
}

/// The scenario that Rule 2's view check exists for: h2 became active in its own view (V2)
/// while h0 and h1 still see V1. If h0 and h1 answered h2's Collect anyway, h2 would be ready
/// for partitions h1 also owns (and is ready for) under V1: two owners, two winners.
async fn split_view_winners(faults: ProtocolFaults) -> usize {
    let c = Cluster::start(3, faults, Duration::from_millis(800)).await;
    let mut v1 = c.all_active(&[0, 1]);
    v1.push((2, PeerStatus::Joining));
    let v2 = c.all_active(&[0, 1, 2]);
    // An actor owned by h1 in V1 and by h2 in V2.
    let (view1, view2) = (c.view(1, &v1), c.view(2, &v2));
    let key = (0..)
        .map(|i| format!("split-{i}"))
        .find(|k| {
            let p = partition("Counter", k);
            view1.owner(p).is_some_and(|o| &*o.id == "h1")
                && view2.owner(p).is_some_and(|o| &*o.id == "h2")
        })
        .unwrap();
    let p = partition("Counter", &key);
    c.publish(1, &v1, &[0, 1, 2]);
    c.until_ready(&[0, 1]).await;
    c.publish(2, &v2, &[2]);
    // Give h2's collector time to try (and, when broken, h1 time to re-collect under V1).
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        if c.hosts[2].dir.is_ready(p) && c.hosts[1].dir.is_ready(p) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let id = ActorId::new("Counter", key.as_str());
    let (r1, r2) = tokio::join!(
        c.hosts[1].gate.claim(&id, "on-h1", c.by()),
        c.hosts[2].gate.claim(&id, "on-h2", c.by())
    );
    [r1.is_ok(), r2.is_ok()].iter().filter(|ok| **ok).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_views_cannot_produce_two_owners() {
    assert_eq!(split_view_winners(ProtocolFaults::default()).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_collect_answered_across_fingerprints() {
    let broken = ProtocolFaults {
        collect_ignores_fingerprint: true,
        ..Default::default()
    };
    assert_eq!(
        split_view_winners(broken).await,
        2,
        "answering Collect under a different view must let two hosts win one actor"
    );
}

/// Rule 1's term re-check, end to end. Host a's `Register` of X is granted by the owner o, but
/// the grant is held on the wire. Meanwhile n becomes active and owns X's partition, collects
/// it (a does not report X: its claim has not finished), and b claims X at n. Then n expires,
/// o owns the partition again and re-collects it (b reports X). Only now does o's old grant
/// reach a. The owner is the same as when a sent its Register — only a's term for the
/// partition shows that someone collected it in between.
async fn held_grant_winners(faults: ProtocolFaults) -> (usize, u64) {
    let (a, o, n, b, m) = (0, 1, 2, 3, 4);
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(true);
    let mut c = Cluster::start_custom(5, faults, Duration::from_secs(20), |i, addrs| {
        if i == a {
            let c: Arc<dyn Connector> = Arc::new(HoldAnswers {
                held: Some(addrs[o].clone()),
                open: gate_rx.clone(),
            });
            // Long enough that a waits for the held grant instead of asking again.
            (c, Duration::from_secs(30))
        } else {
            (Arc::new(TcpConnector), Duration::from_millis(500))
        }
    })
    .await;
    let f1 = vec![
        (a, PeerStatus::Active),
        (o, PeerStatus::Active),
        (b, PeerStatus::Active),
        (n, PeerStatus::Joining),
        (m, PeerStatus::Joining),
    ];
    let mut f2 = c.all_active(&[a, o, b, n]);
    f2.push((m, PeerStatus::Joining));
    let mut f3 = c.all_active(&[a, o, b]);
    f3.push((m, PeerStatus::Joining));
    let f4 = c.all_active(&[a, o, b, m]);
    let (v1, v2, v4) = (c.view(1, &f1), c.view(2, &f2), c.view(4, &f4));
    let key = (0..)
        .map(|i| format!("held-{i}"))
        .find(|k| {
            let p = partition("Counter", k);
            v1.owner(p).is_some_and(|h| *h.id == *c.hosts[o].id)
                && v2.owner(p).is_some_and(|h| *h.id == *c.hosts[n].id)
                && v4.owner(p).is_some_and(|h| *h.id == *c.hosts[m].id)
        })
        .unwrap();
    let p = partition("Counter", &key);
    let x = ActorId::new("Counter", key.as_str());
    c.publish(1, &f1, &[a, o, b, n, m]);
    c.until_ready(&[a, o, b]).await;

    // 1. a claims X; o grants; the grant is held.
    gate_tx.send_replace(false);
    let claim_a = {
        let gate = c.hosts[a].gate.clone();
        let x = x.clone();
        let by = c.by();
        tokio::spawn(async move { gate.claim(&x, "on-a", by).await })
    };
    let o_dir = c.hosts[o].dir.clone();
    let granted = async {
        loop {
            let at_o = o_dir
                .lookup(&x, Instant::now() + Duration::from_secs(1))
                .await;
            if matches!(at_o, Ok(Some(ref l)) if l.activation_id == "on-a") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), granted)
        .await
        .expect("o granted X to a");

    // 2. n becomes active and collects X's partition; b claims X at n.
    c.publish(2, &f2, &[a, o, b, n, m]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.hosts[n].dir.is_ready(p) {
        assert!(Instant::now() < deadline, "n never became ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.hosts[b]
        .gate
        .claim(&x, "on-b", c.by())
        .await
        .expect("b wins X at n");

    // 3. n expires; o owns the partition again and re-collects it.
    c.hosts[n].kill();
    c.publish(3, &f3, &[a, o, b, m]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.hosts[o].dir.is_ready(p) {
        assert!(Instant::now() < deadline, "o never became ready again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // 4. The old grant finally reaches a.
    gate_tx.send_replace(true);
    let a_won = tokio::time::timeout(Duration::from_secs(20), claim_a)
        .await
        .expect("a's claim ends")
        .unwrap();
    if let Err(e) = &a_won {
        assert_eq!(e.kind, ErrorKind::WrongHost, "{e}");
        assert_eq!(e.owner_hint.as_deref(), Some(c.hosts[b].id.as_str()));
    }
    // 5. m becomes active and owns X's partition: its collection hears every live activation
    //    of X. Two of them is the bug signal: counted, and the partition stays recovering.
    c.publish(4, &f4, &[a, o, b, m]);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline
        && !c.hosts[m].dir.is_ready(p)
        && c.hosts[m].dir.counters().conflicting_reports == 0
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let m_counters = c.hosts[m].dir.counters();
    assert_eq!(
        c.hosts[m].dir.is_ready(p),
        m_counters.conflicting_reports == 0,
        "a partition with conflicting reports must not become ready: {m_counters:?}"
    );
    let winners = 1 + usize::from(a_won.is_ok());
    (winners, m_counters.conflicting_reports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_overtaken_by_a_collection_is_not_used() {
    let (winners, conflicts) = held_grant_winners(ProtocolFaults::default()).await;
    assert_eq!(winners, 1);
    assert_eq!(conflicts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_a_skipped_term_recheck() {
    let broken = ProtocolFaults {
        skip_term_recheck: true,
        ..Default::default()
    };
    let (winners, conflicts) = held_grant_winners(broken).await;
    assert_eq!(
        winners, 2,
        "without the term re-check the held grant must activate X a second time"
    );
    assert!(
        conflicts > 0,
        "the next collection must report the conflict"
    );
}

/// Hole H: Rule 1's re-check under the partition lock also asks "still accepting?". Host a's
/// Register of X is granted by the owner o, but the grant is held on the wire while a starts
/// leaving (its own view shows it `leaving`). When the grant arrives, owner and term are
/// unchanged, yet a must not activate X: it answers `wrong-host` (the call never ran) and
/// withdraws the unused grant, so o names nobody for X.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_starts_leaving_while_its_register_is_in_flight_aborts_the_claim() {
    let (a, o) = (0, 1);
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(true);
    let c = Cluster::start_custom(
        2,
        ProtocolFaults::default(),
        Duration::from_secs(10),
        |i, addrs| {
            if i == a {
                let c: Arc<dyn Connector> = Arc::new(HoldAnswers {
                    held: Some(addrs[o].clone()),
                    open: gate_rx.clone(),
                });
                (c, Duration::from_secs(30))
            } else {
                (Arc::new(TcpConnector), Duration::from_millis(500))
            }
        },
    )
    .await;
    let both = c.all_active(&[a, o]);
    let v1 = c.view(1, &both);
    let key = (0..)
        .map(|i| format!("leaving-{i}"))
        .find(|k| {
            v1.owner(partition("Counter", k))
                .is_some_and(|h| *h.id == *c.hosts[o].id)
        })
        .unwrap();
    let x = ActorId::new("Counter", key.as_str());
    c.publish(1, &both, &[a, o]);
    c.until_ready(&[a, o]).await;

    gate_tx.send_replace(false);
    let claim_a = {
        let gate = c.hosts[a].gate.clone();
        let x = x.clone();
        let by = c.by();
        tokio::spawn(async move { gate.claim(&x, "on-a", by).await })
    };
    let o_dir = c.hosts[o].dir.clone();
    let lookup_at_o = || {
        let (o_dir, x) = (o_dir.clone(), x.clone());
        async move {
            o_dir
                .lookup(&x, Instant::now() + Duration::from_secs(1))
                .await
                .expect("o answers")
        }
    };
    let granted = async {
        while !matches!(lookup_at_o().await, Some(ref l) if l.activation_id == "on-a") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), granted)
        .await
        .expect("o granted X to a");

    // a starts leaving while the grant is on the wire; then the grant arrives.
    c.publish(
        2,
        &[(a, PeerStatus::Leaving), (o, PeerStatus::Active)],
        &[a],
    );
    gate_tx.send_replace(true);
    let won = tokio::time::timeout(Duration::from_secs(5), claim_a)
        .await
        .expect("a's claim ends")
        .unwrap();
    let e = won.expect_err("a leaving host must not activate X");
    assert_eq!(e.kind, ErrorKind::WrongHost, "{e}");
    assert_eq!(
        lookup_at_o().await,
        None,
        "the unused grant is withdrawn, so X can be placed elsewhere at once"
    );
}

/// Dials `delayed` through a relay that holds every chunk of the answers (server to client
/// bytes) for `by`: a slow or loaded peer.
struct DelayAnswers {
    delayed: String,
    by: Duration,
}

#[async_trait]
impl Connector for DelayAnswers {
    async fn connect(&self, addr: &str) -> std::io::Result<BoxedIo> {
        let upstream = tokio::net::TcpStream::connect(addr).await?;
        upstream.set_nodelay(true)?;
        if addr != self.delayed {
            return Ok(Box::new(upstream));
        }
        let (mine, theirs) = tokio::io::duplex(256 * 1024);
        let (mut up_r, mut up_w) = upstream.into_split();
        let (mut th_r, mut th_w) = tokio::io::split(theirs);
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut th_r, &mut up_w).await;
        });
        let by = self.by;
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match up_r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                tokio::time::sleep(by).await;
                if th_w.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        Ok(Box::new(mine))
    }
}

/// A collection round sends one `Collect` per batch of 128 partitions, one batch after the
/// other to each host. Two hosts own about 2048 partitions each, so a round is 16 requests to
/// the peer, each answered 100 ms late, against an RPC timeout of 500 ms: every request is well
/// within its own timeout, the round as a whole is not. One deadline for the whole round would
/// fail every round and keep the partitions recovering for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_many_batches_gets_a_timeout_per_request_not_one_for_all() {
    let c = Cluster::start_custom(
        2,
        ProtocolFaults::default(),
        Duration::from_secs(5),
        |i, addrs| {
            let c: Arc<dyn Connector> = Arc::new(DelayAnswers {
                delayed: addrs[1 - i].clone(),
                by: Duration::from_millis(100),
            });
            (c, Duration::from_millis(500))
        },
    )
    .await;
    c.publish(1, &c.all_active(&[0, 1]), &[0, 1]);
    c.until_ready(&[0, 1]).await;
    let winners = claim_everywhere(&c, &[0, 1], 0..20).await;
    assert_eq!(winners.len(), 20);
}

/// Dials that never complete (hosts whose machines vanished), counted.
#[derive(Default)]
struct HangingDials {
    dials: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Connector for HangingDials {
    async fn connect(&self, _addr: &str) -> std::io::Result<BoxedIo> {
        self.dials.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::pending().await
    }
}

/// The directory of host `a` alone, with every peer's dial hanging; its Collect RPCs wait up
/// to 30 s, dials up to 60 s.
fn lone_directory(first: DirView) -> (Directory, Arc<ViewCell>, Arc<HangingDials>) {
    let cell = Arc::new(ViewCell::new("a", first, || Ok(())));
    let dials = Arc::new(HangingDials::default());
    let mesh = Arc::new(MeshClient::new(
        "a",
        auth(),
        system(),
        dials.clone(),
        MeshClientConfig {
            connect_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    ));
    let dir = Directory::start(
        cell.clone(),
        mesh,
        DirectoryConfig {
            rpc_timeout: RPC_TIMEOUT,
            ..Default::default()
        },
    );
    (dir, cell, dials)
}

const RPC_TIMEOUT: Duration = Duration::from_secs(30);

fn peer(id: &str, n: u8, status: PeerStatus) -> PeerInfo {
    PeerInfo::new(id, format!("10.0.0.{n}:7000"), status, true)
}

/// Waits (paused clock) until `dir` has no partition recovering; returns how long it took.
async fn ready_within(dir: &Directory, limit: Duration) -> Duration {
    let t0 = Instant::now();
    while dir.counters().partitions_recovering > 0 {
        assert!(
            t0.elapsed() < limit,
            "not ready within {limit:?}: {:?}",
            dir.counters()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    t0.elapsed()
}

/// Host b, which may hold claims, vanishes with a's Collect to it in flight (its dial hangs),
/// then leaves a's view. The round is abandoned and the next one, under the new view, makes
/// every partition ready at once — not after the 30 s RPC timeout. Which of the collector
/// (seeing the view change) and the view watcher (trimming the mesh pool, which fails the
/// Collect to b) runs first is drawn by tokio; twenty repetitions cover both orders, and
/// either way the round counts as restarted.
#[tokio::test(start_paused = true)]
async fn a_host_leaving_mid_round_restarts_it_and_partitions_are_ready_at_once() {
    for _ in 0..20 {
        let a = peer("a", 1, PeerStatus::Active);
        let b = peer("b", 2, PeerStatus::Active);
        let (dir, cell, dials) = lone_directory(DirView::new(1, vec![a.clone(), b]));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = dir.counters();
        assert!(before.partitions_recovering > 0, "{before:?}");
        assert_eq!(before.collections_run, 0);
        assert_eq!(dials.dials.load(std::sync::atomic::Ordering::SeqCst), 1);

        cell.publish(DirView::new(2, vec![a]));
        let took = ready_within(&dir, RPC_TIMEOUT / 30).await;
        assert!(took < Duration::from_millis(100), "{took:?}");
        let after = dir.counters();
        assert_eq!(after.collections_restarted, 1, "{after:?}");
        assert_eq!(after.collections_run, 1, "{after:?}");
    }
}

/// Only a change of the fingerprint (the active stateful hosts) restarts a round: a newcomer
/// that is still joining does not, one that becomes active does, at once, although no host
/// left (nothing else could end the round: the Collect to b is still waiting for its dial).
/// The new round asks the newcomer too.
#[tokio::test(start_paused = true)]
async fn a_round_restarts_when_the_fingerprint_changes_and_only_then() {
    let a = peer("a", 1, PeerStatus::Active);
    let b = peer("b", 2, PeerStatus::Active);
    let (dir, cell, dials) = lone_directory(DirView::new(1, vec![a.clone(), b.clone()]));
    let dials = || dials.dials.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(dials(), 1, "the round is waiting for b");

    cell.publish(DirView::new(
        2,
        vec![a.clone(), b.clone(), peer("c", 3, PeerStatus::Joining)],
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(dir.counters().collections_restarted, 0, "same fingerprint");
    assert_eq!(dials(), 1);

    let t0 = Instant::now();
    cell.publish(DirView::new(
        3,
        vec![a, b, peer("c", 3, PeerStatus::Active)],
    ));
    while dir.counters().collections_restarted == 0 {
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "{:?}",
            dir.counters()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        dials(),
        2,
        "the new round dials the newcomer (b's dial is still pending)"
    );
    let c = dir.counters();
    assert_eq!(c.collections_restarted, 1, "{c:?}");
    assert_eq!(c.collections_run, 0);
    assert!(c.partitions_recovering > 0, "b and c never answer: {c:?}");
}

/// Host b announced leaving (so a owns its partitions and must collect them from it), then
/// vanished mid-drain with a's Collect to it in flight, and left the view. b was not active, so
/// the fingerprint did not change and the round is not restarted by the view change: it is the
/// mesh pool trim of the departure that ends the Collect to b at once, and the next round makes
/// the partitions ready — not after the 30 s RPC timeout.
#[tokio::test(start_paused = true)]
async fn a_leaving_host_vanishing_mid_round_does_not_hold_the_partitions_back() {
    let a = peer("a", 1, PeerStatus::Active);
    let b = peer("b", 2, PeerStatus::Leaving);
    let (dir, cell, dials) = lone_directory(DirView::new(1, vec![a.clone(), b]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(dir.counters().partitions_recovering, 4096);
    assert_eq!(dials.dials.load(std::sync::atomic::Ordering::SeqCst), 1);
    cell.publish(DirView::new(2, vec![a]));
    let took = ready_within(&dir, RPC_TIMEOUT / 30).await;
    assert!(took < Duration::from_millis(100), "{took:?}");
    assert_eq!(dir.counters().collections_run, 1);
}

/// A claim tries for as long as the call that asked for the activation waits, no longer. Host
/// a owns partitions that stay recovering for good (b is in the view and never answers its
/// Collect); a call with a 300 ms deadline asks a's runtime for an actor there. The caller is
/// answered `timeout` at its deadline, and the activation's claim gives up with it, instead of
/// trying to register for a fixed 10 s with nobody waiting (and activating then for nobody).
#[tokio::test(start_paused = true)]
async fn a_claim_gives_up_at_the_deadline_of_the_call_that_asked_for_it() {
    use sigx_proto::v1;
    use sigx_sidecar::runtime::{Registry, Runtime, RuntimeConfig};
    let view = DirView::new(
        1,
        vec![
            peer("a", 1, PeerStatus::Active),
            peer("b", 2, PeerStatus::Active),
        ],
    );
    let key = (0..)
        .map(|i| format!("stuck-{i}"))
        .find(|k| {
            view.owner(partition("Counter", k))
                .is_some_and(|o| &*o.id == "a")
        })
        .unwrap();
    let (dir, _cell, _dials) = lone_directory(view);
    let runtime = Runtime::new(
        RuntimeConfig {
            host_id: "a".into(),
            ..RuntimeConfig::default()
        },
        Arc::new(dir.gate()),
    );
    let registry = Registry::from_proto(&v1::Register {
        actors: vec![v1::ActorTypeSpec {
            name: "Counter".into(),
            reentrant: false,
            idle_timeout_ms: 0,
            methods: vec![],
        }],
        workers: vec![],
        app_name: "claims".into(),
    })
    .unwrap();
    let (tx, _turns) = tokio::sync::mpsc::unbounded_channel();
    runtime.attach(registry, tx).unwrap();

    let x = ActorId::new("Counter", key.as_str());
    let t0 = Instant::now();
    let e = runtime
        .invoke(&x, "m", Bytes::new(), t0 + Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    while runtime.lifecycles() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "the claim went on trying after the call that asked for it gave up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!runtime.is_active(&x));
}
