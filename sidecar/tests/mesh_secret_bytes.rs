//! Secrets are bytes end to end: two hosts whose secret files hold different binary bytes — 32
//! bytes of 0xff and 32 of 0xfe, which a lossy UTF-8 decode turns into the same text — must not
//! authenticate each other, and hosts whose files hold the same bytes must. Each side's secret
//! goes the way the sidecar's does: `--secret-file` through the configuration, then into the HMAC
//! key of a real mesh server or client on loopback TCP.

#[path = "support/mesh_server.rs"]
mod mesh_server;

use async_trait::async_trait;
use bytes::Bytes;
use clap::Parser;
use mesh_server::{CLIENT_ID, MeshServer, call};
use sigx_proto::v1::DeliverRequest;
use sigx_proto::{ActorError, ErrorKind};
use sigx_sidecar::clock::system;
use sigx_sidecar::config::Args;
use sigx_sidecar::mesh::{
    MeshAuth, MeshCallError, MeshClient, MeshClientConfig, MeshSecret, MeshServerConfig,
    TcpConnector,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

struct Echo;

#[async_trait]
impl sigx_sidecar::mesh::DeliverHandler for Echo {
    async fn deliver(&self, _: &str, req: DeliverRequest, _: Instant) -> Result<Bytes, ActorError> {
        Ok(req.payload)
    }
}

/// The mesh auth a sidecar started with `--secret-file <dir>/<name>` holding `bytes` uses.
fn auth_from_file(dir: &Path, name: &str, bytes: &[u8]) -> MeshAuth {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let cfg = Args::try_parse_from([
        "sigx-sidecar",
        "--membership",
        "none",
        "--secret-file",
        path.to_str().unwrap(),
    ])
    .unwrap()
    .validate()
    .unwrap();
    let secret = cfg.secret.expect("a secret file gives a secret");
    MeshAuth::Secret(MeshSecret::new(secret.expose()).unwrap())
}

async fn echo(server: &MeshServer<Echo>, auth: MeshAuth) -> Result<Bytes, MeshCallError> {
    let client = MeshClient::new(
        CLIENT_ID,
        auth,
        system(),
        Arc::new(TcpConnector),
        MeshClientConfig::default(),
    );
    client
        .deliver(
            server.peer(),
            call("echo", "hi"),
            Instant::now() + Duration::from_secs(5),
        )
        .await
}

#[tokio::test]
async fn binary_secrets_that_differ_are_refused_and_equal_ones_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = MeshServer::tcp(
        auth_from_file(d, "ff", &[0xff; 32]),
        Echo,
        MeshServerConfig::default(),
    )
    .await;

    match echo(&server, auth_from_file(d, "fe", &[0xfe; 32])).await {
        Err(MeshCallError::Answered(e)) => {
            assert_eq!(e.kind, ErrorKind::Unauthenticated, "{e:?}");
            assert!(e.message.contains("wrong MAC"), "{}", e.message);
        }
        other => panic!("a 0xfe secret must not authenticate to a 0xff one: {other:?}"),
    }
    // Invalid UTF-8 of another shape, same length once decoded lossily: refused too.
    let mut mixed = vec![0xff; 31];
    mixed.push(0x80);
    let r = echo(&server, auth_from_file(d, "mixed", &mixed)).await;
    assert!(
        matches!(&r, Err(MeshCallError::Answered(e)) if e.kind == ErrorKind::Unauthenticated),
        "{r:?}"
    );

    // The same bytes authenticate, and one trailing newline (the documented rule) is not part
    // of the key.
    let same = echo(&server, auth_from_file(d, "ff-again", &[0xff; 32])).await;
    assert_eq!(same.unwrap(), "hi");
    let mut with_newline = vec![0xff; 32];
    with_newline.push(b'\n');
    let nl = echo(&server, auth_from_file(d, "ff-newline", &with_newline)).await;
    assert_eq!(nl.unwrap(), "hi");
    server.stop().await;
}
