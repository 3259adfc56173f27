//! One sidecar host in this process, without membership, on a state store the caller holds:
//! the fixture of tests and benchmarks that drive an SDK app against the real runtime and then
//! look into the store directly.

use sigx_sidecar::host::{Host, HostOptions};
use sigx_sidecar::state::SharedStateStore;
use std::path::Path;

/// Starts host `host_id` serving its app socket at `socket`, keeping state in `store`.
pub async fn start(socket: &Path, host_id: &str, store: SharedStateStore) -> Host {
    let args = [
        "sigx-sidecar",
        "--membership",
        "none",
        "--socket",
        socket.to_str().expect("a UTF-8 socket path"),
        "--health-addr",
        "127.0.0.1:0",
        "--host-id",
        host_id,
    ];
    let cfg = <sigx_sidecar::config::Args as clap::Parser>::try_parse_from(args)
        .expect("the fixture's flags parse")
        .validate()
        .expect("the fixture's flags are valid");
    Host::start_with(
        cfg,
        HostOptions {
            state: Some(store),
            ..HostOptions::default()
        },
    )
    .await
    .expect("the single host starts")
}
