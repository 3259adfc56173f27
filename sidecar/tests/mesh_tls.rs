//! Mutual TLS on the mesh over loopback TCP, with certificates made by the `openssl` CLI for
//! each run: peers with certificates from the cluster CA talk; a peer with a certificate from
//! another CA, or with no TLS at all, is refused (the call never ran) and the server lives on;
//! a peer whose certificate names another host (URI SAN `spiffe://<cluster>/host/<id>`) than
//! the one it claims is refused on every request, HMAC or not.

#[path = "support/mesh_server.rs"]
mod mesh_server;

use async_trait::async_trait;
use bytes::Bytes;
use mesh_server::{CLIENT_ID, MeshServer, tcp_listener};
use sigx_proto::v1::DeliverRequest;
use sigx_proto::{ActorError, ErrorKind};
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

/// A self-signed CA `ca`.
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

/// A leaf `name` signed by `ca`, valid for DNS `sigx-mesh`, IP 127.0.0.1 and the URI SAN
/// naming host `name` of cluster `test`.
fn make_leaf(dir: &Path, ca: &str, name: &str) -> MeshTlsConfig {
    make_leaf_with(dir, ca, name, &format!(",URI:spiffe://test/host/{name}"))
}

/// A leaf `name` signed by `ca`, valid for DNS `sigx-mesh` and IP 127.0.0.1 plus `more_sans`.
fn make_leaf_with(dir: &Path, ca: &str, name: &str, more_sans: &str) -> MeshTlsConfig {
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName=DNS:sigx-mesh,IP:127.0.0.1{more_sans}\n\
             extendedKeyUsage=serverAuth,clientAuth\n\
             basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        ),
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
    echo_as(connector, server, auth()).await
}

async fn echo_as(
    connector: Arc<dyn Connector>,
    server: &MeshServer<Echo>,
    auth: MeshAuth,
) -> Result<Bytes, MeshCallError> {
    let c = MeshClient::new(
        CLIENT_ID,
        auth,
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
            trace: None,
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

fn connector(cfg: &MeshTlsConfig) -> Arc<dyn Connector> {
    Arc::new(TlsConnector::new(
        TcpConnector,
        Arc::new(MeshTls::load(cfg).unwrap()),
    ))
}

#[tokio::test]
async fn a_peer_presenting_another_hosts_certificate_is_refused() {
    let dir = tmp();
    let d = dir.path();
    make_ca(d, "ca");
    let server_cfg = make_leaf(d, "ca", "server");
    let own = make_leaf(d, "ca", CLIENT_ID);
    let other = make_leaf(d, "ca", "other-host");
    let no_uri = make_leaf_with(d, "ca", "no-uri", "");
    let other_cluster = make_leaf_with(
        d,
        "ca",
        "other-cluster",
        &format!(",URI:spiffe://elsewhere/host/{CLIENT_ID}"),
    );
    let (tcp, addr) = tcp_listener().await;
    let listener = TlsListener::new(
        tcp,
        Arc::new(MeshTls::load(&server_cfg).unwrap()),
        Duration::from_secs(2),
    );
    let server = MeshServer::start_checking_certs(
        listener,
        addr,
        auth(),
        Echo,
        MeshServerConfig::default(),
        Some("test"),
    )
    .await;

    // Its own certificate, with the HMAC: accepted.
    assert_eq!(echo(connector(&own), &server).await.unwrap(), "over tls");

    // Every CA-signed certificate that does not name the claimed host id is refused, the
    // answer naming the identity expected; the HMAC (right secret) does not make up for it.
    for (what, cfg) in [
        ("another host's", &other),
        ("a URI-less", &no_uri),
        ("another cluster's", &other_cluster),
    ] {
        match echo(connector(cfg), &server).await {
            Err(MeshCallError::Answered(e)) => {
                assert_eq!(e.kind, ErrorKind::Unauthenticated, "{what}: {e:?}");
                assert!(
                    e.message.contains("spiffe://test/host/client"),
                    "{what}: {}",
                    e.message
                );
            }
            r => panic!("{what} certificate claiming {CLIENT_ID:?} must be refused: {r:?}"),
        }
    }
    assert!(server.is_running());
    assert_eq!(echo(connector(&own), &server).await.unwrap(), "over tls");
}

#[tokio::test]
async fn mtls_alone_binds_identity_too() {
    let dir = tmp();
    let d = dir.path();
    make_ca(d, "ca");
    let server_cfg = make_leaf(d, "ca", "server");
    let own = make_leaf(d, "ca", CLIENT_ID);
    let other = make_leaf(d, "ca", "other-host");
    let (tcp, addr) = tcp_listener().await;
    let listener = TlsListener::new(
        tcp,
        Arc::new(MeshTls::load(&server_cfg).unwrap()),
        Duration::from_secs(2),
    );
    let server = MeshServer::start_checking_certs(
        listener,
        addr,
        MeshAuth::Insecure,
        Echo,
        MeshServerConfig::default(),
        Some("test"),
    )
    .await;
    let ok = echo_as(connector(&own), &server, MeshAuth::Insecure).await;
    assert_eq!(ok.unwrap(), "over tls");
    let r = echo_as(connector(&other), &server, MeshAuth::Insecure).await;
    assert!(
        matches!(&r, Err(MeshCallError::Answered(e)) if e.kind == ErrorKind::Unauthenticated
            && e.message.contains("spiffe://test/host/client")),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_server_answering_with_another_hosts_certificate_is_a_failed_dial() {
    let dir = tmp();
    let d = dir.path();
    make_ca(d, "ca");
    let own = make_leaf(d, "ca", CLIENT_ID);
    let checking = || -> Arc<dyn Connector> {
        Arc::new(
            TlsConnector::new(TcpConnector, Arc::new(MeshTls::load(&own).unwrap()))
                .with_peer_identity("test"),
        )
    };
    // A CA-signed host answering at the address of host `server` with its own certificate.
    let impostor = tls_server(&make_leaf(d, "ca", "impostor")).await;
    match echo(checking(), &impostor).await {
        Err(MeshCallError::Unreachable { reason, .. }) => {
            assert!(reason.contains("spiffe://test/host/server"), "{reason}")
        }
        r => panic!("a server not named by its certificate must be a failed dial: {r:?}"),
    }
    // The real `server`: accepted.
    let real = tls_server(&make_leaf(d, "ca", "server")).await;
    assert_eq!(echo(checking(), &real).await.unwrap(), "over tls");
}

#[test]
fn a_host_refuses_to_start_with_a_certificate_that_does_not_name_it() {
    let dir = tmp();
    make_ca(dir.path(), "ca");
    let tls = MeshTls::load(&make_leaf(dir.path(), "ca", "web-0")).unwrap();
    tls.check_own_identity("test", "web-0").unwrap();
    tls.check_own_identity("test", "web-0-0123abcd").unwrap();
    let e = tls
        .check_own_identity("test", "web-1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("spiffe://test/host/web-1"), "{e}");
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
