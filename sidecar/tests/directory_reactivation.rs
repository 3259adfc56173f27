//! A host that drops out of directory eligibility and comes back under the same id (its app
//! detached and re-attached: `active → joining → active`) collects anew before it serves a
//! partition again, and a peer whose view missed the `joining` does not answer that collection
//! as if nothing had happened (DESIGN.md §4 Rule 2, issue 12 hole B and the model's A-B-A
//! counterexample). Two directories behind real mesh servers on loopback TCP, driven by
//! hand-built views; each broken variant is caught by the same check.

use async_trait::async_trait;
use bytes::Bytes;
use sigx_proto::v1::DeliverRequest;
use sigx_proto::{ActorError, ErrorKind};
use sigx_sidecar::clock::system;
use sigx_sidecar::directory::{
    DirView, Directory, DirectoryConfig, KnownFromViews, PeerInfo, PeerStatus, ProtocolFaults,
    ViewCell, partition,
};
use sigx_sidecar::mesh::{
    DeliverHandler, MeshAuth, MeshClient, MeshClientConfig, MeshServerConfig, MeshService,
    TcpConnector, TcpMeshListener, Verifier, serve,
};
use sigx_sidecar::runtime::{ActivationGate, ActorId};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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
}

fn auth() -> MeshAuth {
    MeshAuth::from_config(Some("reactivation-test-secret"), false).unwrap()
}

/// Hosts `h0`, `h1`, each with a directory behind its own mesh server.
async fn two(faults: ProtocolFaults) -> Vec<Host> {
    let mut hosts = Vec::new();
    for i in 0..2 {
        let listener = TcpMeshListener::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let id = format!("h{i}");
        let cell = Arc::new(ViewCell::new(id.as_str(), DirView::empty(), || Ok(())));
        let mesh = Arc::new(MeshClient::new(
            id.as_str(),
            auth(),
            system(),
            Arc::new(TcpConnector),
            MeshClientConfig::default(),
        ));
        let dir = Directory::start(
            cell.clone(),
            mesh,
            DirectoryConfig {
                rpc_timeout: Duration::from_millis(500),
                collect_retry: Duration::from_millis(20),
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
        tokio::spawn(serve(
            listener,
            verifier,
            service,
            config,
            std::future::pending(),
        ));
        hosts.push(Host {
            id,
            addr,
            cell,
            dir,
        });
    }
    hosts
}

/// A view: each host with its status and active epoch.
fn view(hosts: &[Host], version: u64, members: &[(PeerStatus, u64)]) -> DirView {
    DirView::new(
        version,
        hosts
            .iter()
            .zip(members)
            .map(|(h, &(st, epoch))| {
                PeerInfo::new(h.id.as_str(), h.addr.as_str(), st, true).with_epoch(epoch)
            })
            .collect(),
    )
}

fn publish(hosts: &[Host], to: &[usize], v: u64, members: &[(PeerStatus, u64)]) {
    for &i in to {
        hosts[i].cell.publish(view(hosts, v, members));
    }
}

async fn until_ready(h: &Host) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.dir.counters().partitions_recovering > 0 {
        assert!(
            Instant::now() < deadline,
            "{}: {:?}",
            h.id,
            h.dir.counters()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An actor whose partition h0 owns while both hosts are active.
fn actor_of_h0(hosts: &[Host]) -> ActorId {
    let both = view(
        hosts,
        1,
        &[(PeerStatus::Active, 0), (PeerStatus::Active, 0)],
    );
    (0..)
        .map(|i| ActorId::new("Counter", format!("x{i}")))
        .find(|a| {
            both.owner(partition(&a.actor_type, &a.key))
                .is_some_and(|o| &*o.id == "h0")
        })
        .unwrap()
}

const A: PeerStatus = PeerStatus::Active;
const J: PeerStatus = PeerStatus::Joining;

/// h0 goes joining, h1 takes its partitions over and claims `x`, h0 comes back (epoch 1).
/// Returns how many of the two hosts won `x`.
async fn stale_table_winners(faults: ProtocolFaults) -> usize {
    let hosts = two(faults).await;
    let x = actor_of_h0(&hosts);
    publish(&hosts, &[0, 1], 1, &[(A, 0), (A, 0)]);
    until_ready(&hosts[0]).await;
    until_ready(&hosts[1]).await;
    // h0's app detaches: joining. h1 owns everything, collects from nobody, grants x to itself.
    publish(&hosts, &[0, 1], 2, &[(J, 0), (A, 0)]);
    until_ready(&hosts[1]).await;
    let h1_won = hosts[1]
        .dir
        .gate()
        .claim(&x, "act-h1", Instant::now() + Duration::from_millis(800))
        .await
        .is_ok();
    assert!(h1_won, "h1 owns x's partition while h0 is joining");
    // h0's app re-attaches: active again, a new epoch. Both see it.
    publish(&hosts, &[0, 1], 3, &[(A, 1), (A, 0)]);
    until_ready(&hosts[0]).await;
    let h0 = hosts[0]
        .dir
        .gate()
        .claim(&x, "act-h0", Instant::now() + Duration::from_millis(800))
        .await;
    if let Err(e) = &h0 {
        assert_eq!(e.kind, ErrorKind::WrongHost, "h0 loses to h1: {e}");
    }
    usize::from(h1_won) + usize::from(h0.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_comes_back_active_collects_anew_before_it_grants() {
    assert_eq!(stale_table_winners(ProtocolFaults::default()).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_readiness_kept_across_a_reactivation() {
    let broken = ProtocolFaults {
        keep_readiness_across_reactivation: true,
        ..Default::default()
    };
    assert_eq!(
        stale_table_winners(broken).await,
        2,
        "h0 served its stale table"
    );
}

/// The model's A-B-A trace: h1's feed stalls before h0 goes joining, so h1 still shows h0's
/// earlier `active` record when h0 comes back and collects; later h1's feed delivers h0's
/// `joining` record (and stalls again), and h1 owns every partition with an empty wait set.
/// Returns how many of the two hosts won `x`.
async fn aba_winners(faults: ProtocolFaults) -> usize {
    let hosts = two(faults).await;
    let x = actor_of_h0(&hosts);
    publish(&hosts, &[0, 1], 1, &[(A, 0), (A, 0)]);
    until_ready(&hosts[0]).await;
    until_ready(&hosts[1]).await;
    // h1's feed stalls here. h0 detaches and re-attaches; only h0 sees it.
    publish(&hosts, &[0], 2, &[(J, 0), (A, 0)]);
    publish(&hosts, &[0], 3, &[(A, 1), (A, 0)]);
    // h0 collects from h1 (which still shows h0 active at epoch 0) and claims x.
    let h0_won = hosts[0]
        .dir
        .gate()
        .claim(&x, "act-h0", Instant::now() + Duration::from_millis(800))
        .await
        .is_ok();
    // h1's feed delivers h0's joining record, then stalls again.
    publish(&hosts, &[1], 2, &[(J, 0), (A, 0)]);
    until_ready(&hosts[1]).await;
    let h1_won = hosts[1]
        .dir
        .gate()
        .claim(&x, "act-h1", Instant::now() + Duration::from_millis(800))
        .await
        .is_ok();
    usize::from(h0_won) + usize::from(h1_won)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_missed_the_joining_does_not_answer_the_returning_host() {
    assert_eq!(aba_winners(ProtocolFaults::default()).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_a_fingerprint_without_active_epochs() {
    let broken = ProtocolFaults {
        fingerprint_without_epochs: true,
        ..Default::default()
    };
    assert_eq!(
        aba_winners(broken).await,
        2,
        "h0 and h1 both won x: the A-B-A case"
    );
}
