//! A host whose Lease watch comes back after etcd compacted past it re-lists (the server answers
//! 410 Gone) and converges on the membership it missed, on the real API server
//! (`sigx_e2e::controlplane`); the test double's version of this is in `membership_kubernetes`.
//!
//! The API server is configured so that the gap is certain to be compacted: no watch cache for
//! Leases (a watch resumes from etcd, which answers "compacted" for an old revision; with the
//! cache, the cache's window decides) and etcd compaction every second. One host reaches the
//! server through a proxy that the test cuts: its watch breaks, and while it is away a peer
//! leaves. The server's own count of Lease LISTs proves the re-list: without the compaction
//! the watch resumes where it broke and the server serves no LIST.
//!
//! Needs `make controlplane` (`make test` builds it).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sigx_e2e::apiserver_metrics::server_counters;
use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::lease_fleet::lease_host;
use sigx_sidecar::membership::{MembershipConfig, MembershipHandle};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const NS: &str = "apps";

/// A TCP proxy on 127.0.0.1 in front of the API server that can cut every connection through
/// it and refuse new ones until healed: one host's network partition, the rest untouched.
struct CutProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl CutProxy {
    async fn start(upstream: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let (cut, conns) = (cut.clone(), conns.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        continue; // dropped: the client sees its connection reset
                    }
                    let conn = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    conns.lock().unwrap().push(conn);
                }
            }
        });
        CutProxy {
            addr,
            cut,
            conns,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Drops every open connection and refuses new ones.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for conn in self.conns.lock().unwrap().drain(..) {
            conn.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn host(client: kube::Client, id: &str, cfg: &MembershipConfig) -> MembershipHandle {
    lease_host(client, NS, id, cfg, Duration::from_millis(200)).await
}

fn ids(h: &MembershipHandle) -> Vec<String> {
    let mut ids: Vec<String> = h.view().hosts().iter().map(|m| m.id.clone()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_back_after_compaction_relists_and_converges() {
    let cp = ControlPlane::start_with_apiserver_flags(&[
        "--watch-cache-sizes=leases.coordination.k8s.io#0",
        "--etcd-compaction-interval=1s",
    ]);
    let admin = cp.client(NS).await;
    controlplane::create_namespace(&admin, NS).await;
    let upstream: SocketAddr = cp
        .server_url()
        .trim_start_matches("https://")
        .parse()
        .expect("the API server listens on an IP address");
    let proxy = CutProxy::start(upstream).await;
    // A TTL well past the cut, so nobody fences or expires anyone for it.
    let cfg = MembershipConfig::with_timing(Duration::from_millis(300), Duration::from_secs(6));
    let h0 = host(cp.client_at(NS, &proxy.url()).await, "h0", &cfg).await;
    let h1 = host(cp.client(NS).await, "h1", &cfg).await;
    let h2 = host(cp.client(NS).await, "h2", &cfg).await;
    for h in [&h0, &h1, &h2] {
        h.wait_for_view(Duration::from_secs(20), |v| v.len() == 3)
            .await
            .unwrap_or_else(|_| panic!("{} sees {:?}", h.self_id(), ids(h)));
    }

    // From here on only h0 has a reason to LIST: the others' watches never break.
    let before = server_counters(&admin).await;
    proxy.cut();
    // While h0 is away: h1 leaves (its Lease is deleted), and h2's renewals move etcd's
    // revision on while compaction runs every second behind them.
    h1.leave().await.expect("h1 leaves");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    proxy.heal();

    // h0 learns of the departure. It came by a re-list, not by the deletion event, so h0 keeps
    // h1 until a TTL and the margin after its read (DESIGN §3), and then drops it.
    if h0
        .wait_for_view(Duration::from_secs(20), |v| {
            v.len() == 2 && v.get("h2").is_some() && v.get("h1").is_none()
        })
        .await
        .is_err()
    {
        panic!(
            "h0 sees {:?} after the cut healed (h1 left); the control plane's log:\n{}",
            ids(&h0),
            cp.log_tail(30)
        );
    }
    assert_eq!(
        h0.fence_state(),
        None,
        "a cut shorter than the TTL fences nobody"
    );
    assert_eq!(h2.fence_state(), None);
    let d = server_counters(&admin).await.since(&before);
    assert!(
        d.verb("LIST") >= 1.0,
        "the server served no Lease LIST after h0's watch came back past the compaction: \
         it resumed instead of re-listing ({:?})",
        d.lease_requests
    );
    h0.abort();
    h2.abort();
}
