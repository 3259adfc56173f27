//! `--membership-coalesce-ms` (the seed's `coalesceMs`) reaches the membership refresh
//! coalescer of a host that joined its cluster, and the default stays 0 (leading edge only).

mod support;

use sigx_proto::v1;
use sigx_sidecar::host::{Host, StopKind};
use std::collections::HashMap;
use std::time::Duration;
use support::*;

/// Starts a host of a SQLite cluster in `dir` with `extra` flags, registers an app (a host
/// joins once its app registered), waits until ready, and returns its coalescing window.
async fn joined_window(dir: &std::path::Path, id: &str, extra: &[&str]) -> Duration {
    let host = Host::start(cluster_host_config(dir, id, extra))
        .await
        .unwrap();
    let _app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Counter", false, 0)],
            workers: vec![],
            app_name: id.into(),
        },
        HashMap::new(),
    )
    .await
    .unwrap();
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    let window = host
        .cluster
        .get()
        .expect("a ready clustered host has joined")
        .membership
        .coalesce_window();
    host.stop(StopKind::Fast).await;
    window
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coalescing_window_flag_reaches_the_coalescer() {
    let dir = tempdir();
    assert_eq!(
        joined_window(dir.path(), "set", &["--membership-coalesce-ms", "40"]).await,
        Duration::from_millis(40)
    );
    let other = tempdir();
    assert_eq!(
        joined_window(other.path(), "default", &[]).await,
        Duration::ZERO
    );
}
