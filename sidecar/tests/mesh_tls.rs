//! Mutual TLS on the mesh over loopback TCP, with certificates made by the `openssl` CLI for
//! each run: peers with certificates from the cluster CA talk; a peer with a certificate from
//! another CA, or with no TLS at all, is refused (the call never ran) and the server lives on.

#[path = "support/mesh_server.rs"]
mod mesh_server;

use async_trait::async_trait;
use bytes::Bytes;
use mesh_server::{CLIENT_ID, MeshServer, tcp_listener};
use sigx_proto::ActorError;
use sigx_proto::v1::DeliverRequest;
use sigx_sidecar::clock::system;
use sigx_sidecar::mesh::{
    Connector, DeliverHandler, MeshAuth, MeshCallError, MeshClient, MeshClientConfig,
    MeshServerConfig, MeshTls, MeshTlsConfig, TcpConnector, TlsConnector, TlsListener,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI is needed to make test certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and one leaf (`name`) signed by it, valid for DNS `sigx-mesh` and IP 127.0.0.1.
fn make_ca(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

fn make_leaf(dir: &Path, ca: &str, name: &str) -> MeshTlsConfig {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:sigx-mesh,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n\
         basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    MeshTlsConfig {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
        ca: dir.join(format!("{ca}.pem")),
        server_name: None,
    }
}

struct Echo;

#[async_trait]
impl DeliverHandler for Echo {
    async fn deliver(&self, _: &str, req: DeliverRequest, _: Instant) -> Result<Bytes, ActorError> {
        Ok(req.payload)
    }
}

fn auth() -> MeshAuth {
    MeshAuth::from_config(Some("tls and hmac together"), false).unwrap()
}

async fn tls_server(cfg: &MeshTlsConfig) -> MeshServer<Echo> {
    let (tcp, addr) = tcp_listener().await;
    let tls = Arc::new(MeshTls::load(cfg).unwrap());
    let listener = TlsListener::new(tcp, tls, Duration::from_secs(2));
    MeshServer::start(listener, addr, auth(), Echo, MeshServerConfig::default()).await
}

async fn echo(
    connector: Arc<dyn Connector>,
    server: &MeshServer<Echo>,
) -> Result<Bytes, MeshCallError> {
    let c = MeshClient::new(
        CLIENT_ID,
        auth(),
        system(),
        connector,
        MeshClientConfig {
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        },
    );
    c.deliver(
        server.peer(),
        DeliverRequest {
            actor: None,
            method: "echo".into(),
            payload: Bytes::from_static(b"over tls"),
            timeout_ms: 0,
            targeted: false,
        },
        Instant::now() + Duration::from_secs(5),
    )
    .await
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[tokio::test]
async fn peers_of_one_ca_talk_and_strangers_are_refused() {
    let dir = tmp();
    let d = dir.path();
    make_ca(d, "ca");
    let server_cfg = make_leaf(d, "ca", "server");
    let client_cfg = make_leaf(d, "ca", "client");
    make_ca(d, "evil");
    let evil_cfg = make_leaf(d, "evil", "intruder");
    // The intruder trusts the real CA (it can verify the server) but its own certificate is
    // from another CA.
    let intruder = MeshTlsConfig {
        ca: client_cfg.ca.clone(),
        ..evil_cfg
    };

    let server = tls_server(&server_cfg).await;
    let good = Arc::new(TlsConnector::new(
        TcpConnector,
        Arc::new(MeshTls::load(&client_cfg).unwrap()),
    ));
    assert_eq!(echo(good.clone(), &server).await.unwrap(), "over tls");

    let bad = Arc::new(TlsConnector::new(
        TcpConnector,
        Arc::new(MeshTls::load(&intruder).unwrap()),
    ));
    let r = echo(bad, &server).await;
    eprintln!("intruder: {r:?}");
    assert!(
        r.is_err(),
        "a certificate from another CA must be refused: {r:?}"
    );
    assert!(!matches!(r, Err(MeshCallError::Answered(_))), "{r:?}");

    // Plain TCP against a TLS port: refused, never answered.
    let r = echo(Arc::new(TcpConnector), &server).await;
    assert!(r.is_err(), "{r:?}");
    assert!(!matches!(r, Err(MeshCallError::Answered(_))), "{r:?}");

    // The server is still up and serving good peers.
    assert!(server.is_running());
    assert_eq!(echo(good, &server).await.unwrap(), "over tls");
}

#[test]
fn load_errors_name_the_file() {
    let cfg = MeshTlsConfig {
        cert: PathBuf::from("/nonexistent/mesh.pem"),
        key: PathBuf::from("/nonexistent/mesh.key"),
        ca: PathBuf::from("/nonexistent/ca.pem"),
        server_name: None,
    };
    let e = MeshTls::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/mesh.pem"), "{e}");
    let dir = tmp();
    std::fs::write(dir.path().join("empty.pem"), "not pem").unwrap();
    let cfg = MeshTlsConfig {
        cert: dir.path().join("empty.pem"),
        ..cfg
    };
    let e = MeshTls::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("empty.pem") && e.contains("no"), "{e}");
}
