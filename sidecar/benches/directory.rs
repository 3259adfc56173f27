//! Directory registrations per second on one owner, in process (the owner-side `Register`
//! path: validation, partition hash, partition lock, table insert), and the memory an entry
//! costs. Targets: ≥ 200k registrations/s; ≤ 120 bytes per entry.
//!
//! Run: `cargo bench -p sigx-sidecar --bench directory`
#![forbid(unsafe_code)]

use sigx_proto::v1::{ActorRef, DirectoryEntry, RegisterRequest};
use sigx_sidecar::clock::system;
use sigx_sidecar::directory::{
    DirView, Directory, DirectoryConfig, PARTITIONS, PeerInfo, PeerStatus, ViewCell,
};
use sigx_sidecar::mesh::{MeshAuth, MeshClient, MeshClientConfig, TcpConnector};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Resident set size in bytes, from /proc/self/statm (Linux).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn request(i: usize) -> RegisterRequest {
    RegisterRequest {
        entry: Some(DirectoryEntry {
            actor: Some(ActorRef {
                actor_type: "Counter".into(),
                key: format!("user-{i:08}"),
            }),
            host_id: "owner".into(),
            activation_id: format!("a{i:011}"),
        }),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let view = DirView::new(
            1,
            vec![PeerInfo::new("owner", "127.0.0.1:1", PeerStatus::Active, true)],
        );
        let cell = Arc::new(ViewCell::new("owner", view, || Ok(())));
        let mesh = Arc::new(MeshClient::new(
            "owner",
            MeshAuth::Insecure,
            system(),
            Arc::new(TcpConnector),
            MeshClientConfig::default(),
        ));
        let dir = Directory::start(cell, mesh, DirectoryConfig::default());
        while (0..PARTITIONS).any(|p| !dir.is_ready(p)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let n = 1_000_000;
        // Requests are built up front: the figure is the directory's cost, not format!'s.
        let reqs: Vec<RegisterRequest> = (0..n).map(request).collect();
        let rss0 = rss_bytes();
        let t = Instant::now();
        for r in &reqs {
            let resp = dir.register_local("owner", r).unwrap();
            debug_assert_eq!(resp.status, 1);
        }
        let elapsed = t.elapsed();
        let rss1 = rss_bytes();
        let per_s = n as f64 / elapsed.as_secs_f64();
        println!(
            "directory register (1 owner, in process)  {:>10.0} registrations/s  ({n} new actors in {:?})",
            per_s, elapsed
        );
        // Re-registering existing actors (the lost-race path): a lookup and a compare.
        let t = Instant::now();
        for r in reqs.iter().take(n / 2) {
            dir.register_local("owner", r).unwrap();
        }
        let again = (n / 2) as f64 / t.elapsed().as_secs_f64();
        println!("directory register (existing entry)       {again:>10.0} registrations/s");
        let table = dir.table_heap_bytes() as f64 / n as f64;
        println!("bytes per entry (table buckets + packed blocks, before allocator rounding) {table:>6.1}");
        if let (Some(a), Some(b)) = (rss0, rss1) {
            let rss = b.saturating_sub(a) as f64 / n as f64;
            println!("bytes per entry (resident set growth while inserting)                  {rss:>6.1}");
            println!(
                "targets: ≥ 200000/s {}; ≤ 120 B/entry {}",
                if per_s >= 200_000.0 { "met" } else { "MISSED" },
                if rss <= 120.0 { "met" } else { "MISSED" }
            );
        }
        drop(reqs);
    });
}
