//! Rebalancing on in-process hosts with the real mesh, directory, runtime and raw-protocol apps:
//! a fleet scaled from 3 to 6 hosts under load spreads its existing activations to within
//! ±20 % of the mean, with no failed call and no two activations of one actor at once (judged
//! on what the apps executed); with rebalancing off, the new hosts stay empty.

mod support;

use sigx_sidecar::membership::{MemberFilter, MemoryHub};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use support::*;

const ACTORS: usize = 240;

struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

use std::sync::Mutex;

/// Four callers, each calling random actors through a random host's socket, ~250 calls/s in
/// all: every actor is called about once a second, and idle in between.
fn start_load(sockets: Arc<RwLock<Vec<PathBuf>>>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let tasks = (0..4u64)
        .map(|seed| {
            let (stop, ok, failed, sockets) =
                (stop.clone(), ok.clone(), failed.clone(), sockets.clone());
            tokio::spawn(async move {
                let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut clients = HashMap::new();
                while !stop.load(Ordering::SeqCst) {
                    let socket = {
                        let s = sockets.read().unwrap();
                        s[next() as usize % s.len()].clone()
                    };
                    if !clients.contains_key(&socket) {
                        clients.insert(socket.clone(), client(&socket).await);
                    }
                    let c = clients.get_mut(&socket).unwrap();
                    let key = format!("k{}", next() as usize % ACTORS);
                    match call(c, "Counter", &key, "work", b"x", 10_000).await {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => failed.lock().unwrap().push(format!("{key}: {e}")),
                    }
                    tokio::time::sleep(Duration::from_millis(12)).await;
                }
            })
        })
        .collect();
    Load {
        stop,
        ok,
        failed,
        tasks,
    }
}

fn within(counts: &[usize], percent: f64) -> bool {
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    mean > 0.0
        && counts
            .iter()
            .all(|&c| (c as f64 - mean).abs() <= mean * percent / 100.0)
}

async fn scale_up(rebalance: &str, wait: Duration) -> (Vec<usize>, Option<Duration>, Vec<Node>) {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let flags = ["--rebalance", rebalance];
    let node = |id: String| {
        let (dir, hub) = (dir.path().to_path_buf(), hub.clone());
        async move {
            cluster_node_with(&dir, &hub, &id, &["Counter"], &[], HashMap::new(), &flags).await
        }
    };
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(node(format!("h{i}")).await);
    }
    let sockets = Arc::new(RwLock::new(
        nodes
            .iter()
            .map(|n| n.host.socket.clone())
            .collect::<Vec<_>>(),
    ));
    // Every actor exists before the scale-up.
    {
        let mut c = client(&nodes[0].host.socket).await;
        for k in 0..ACTORS {
            call(&mut c, "Counter", &format!("k{k}"), "work", b"x", 10_000)
                .await
                .unwrap();
        }
    }
    let load = start_load(sockets.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 3..6 {
        let n = node(format!("h{i}")).await;
        sockets.write().unwrap().push(n.host.socket.clone());
        nodes.push(n);
    }
    for n in &nodes {
        n.host
            .cluster
            .get()
            .unwrap()
            .membership
            .wait_for_view(Duration::from_secs(10), |v| {
                v.members(&MemberFilter::active()).len() == 6
            })
            .await
            .expect("six active hosts");
    }
    let t0 = tokio::time::Instant::now();
    let counts = || -> Vec<usize> {
        nodes
            .iter()
            .map(|n| n.host.runtime.activation_count())
            .collect()
    };
    let mut balanced = None;
    while t0.elapsed() < wait {
        if within(&counts(), 20.0) {
            balanced = Some(t0.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Keep the load on a little longer: the calls after the moves must succeed too.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let final_counts = counts();
    load.stop.store(true, Ordering::SeqCst);
    for t in load.tasks {
        t.await.unwrap();
    }
    let failed = load.failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:?}",
        failed.len(),
        failed.len() as u64 + load.ok.load(Ordering::SeqCst),
        &failed[..failed.len().min(5)]
    );
    let ok = load.ok.load(Ordering::SeqCst);
    eprintln!("{ok} calls ok");
    assert!(ok > 300, "the load ran: {ok} calls");
    let apps: Vec<(&str, &TestApp)> = nodes.iter().map(|n| (n.host.id(), &n.app)).collect();
    let overlaps = overlapping_activations(&apps);
    assert!(overlaps.is_empty(), "two activations at once: {overlaps:?}");
    std::mem::forget(dir);
    (final_counts, balanced, nodes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_3_to_6_under_load_spreads_activations_within_20_percent_with_no_failed_call() {
    let (counts, balanced, nodes) = scale_up("true", Duration::from_secs(30)).await;
    let took =
        balanced.unwrap_or_else(|| panic!("not within ±20 % of the mean in 30 s: {counts:?}"));
    eprintln!("rebalanced 3 -> 6 hosts in {took:?}: {counts:?}");
    let moves: u64 = nodes
        .iter()
        .map(|n| n.host.runtime.counters().snapshot()["rebalanceMoves"])
        .sum();
    assert!(moves > 0);
    assert!(
        moves <= ACTORS as u64,
        "{moves} moves for {ACTORS} actors: rebalancing churned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_rebalancing_off_the_new_hosts_stay_empty() {
    let (counts, balanced, _nodes) = scale_up("false", Duration::from_secs(5)).await;
    assert_eq!(balanced, None, "{counts:?}");
    assert!(counts[3..].iter().all(|&c| c == 0), "{counts:?}");
}
