//! Mutual TLS for the mesh (DESIGN.md §7's alternative to, or companion of, the HMAC): rustls
//! with the `ring` provider, this host's certificate and key, and a CA bundle that every peer's
//! certificate — client and server side — must chain to.
//!
//! TLS wraps the injectable sockets rather than replacing them: [`TlsConnector`] wraps any
//! [`Connector`], [`TlsListener`] any [`Listener`]. Handshakes on the listening side run in their
//! own tasks with a timeout, so a peer that opens a socket and stalls cannot hold up accepts.

use super::transport::{Accepted, BoxedIo, Connector, Listener};
use async_trait::async_trait;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

/// Where the mesh's TLS material lives.
#[derive(Debug, Clone)]
pub struct MeshTlsConfig {
    /// PEM certificate chain of this host (leaf first).
    pub cert: PathBuf,
    /// PEM private key of this host (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM bundle of the CA(s) peers' certificates must chain to.
    pub ca: PathBuf,
    /// The name checked against a peer's server certificate. Default: the host part of the
    /// peer's advertised address (an IP SAN or DNS SAN). Pods whose IPs are not in their
    /// certificates use a shared name, e.g. `sigx-mesh.<namespace>`.
    pub server_name: Option<String>,
}

/// Why the TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {what} from {path}: {source}")]
    Read {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A file held nothing usable.
    #[error("{path} holds no {what} in PEM form")]
    Empty {
        /// What was expected.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the material.
    #[error("TLS setup failed: {0}")]
    Rustls(#[from] rustls::Error),
    /// The CA bundle could not build a client verifier.
    #[error("the CA bundle cannot verify client certificates: {0}")]
    Verifier(String),
    /// The configured server name is not a DNS name or IP address.
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    /// This host's own certificate does not name it, so every peer would refuse it.
    #[error(
        "{path} does not name this host: it needs a URI SAN {expected} (the certificate names \
         {found:?}); issue the host a certificate for its own identity"
    )]
    NotOurIdentity {
        /// The certificate file.
        path: PathBuf,
        /// The URI SAN expected.
        expected: String,
        /// The URI SANs it has.
        found: Vec<String>,
    },
}

/// The URI SAN naming host `name` of `cluster` in a mesh certificate, in SPIFFE form:
/// `spiffe://<cluster>/host/<name>`. The cluster is the trust domain, so a certificate issued for
/// one cluster cannot claim a host of another even under a shared CA.
pub fn host_identity(cluster: &str, name: &str) -> String {
    format!("spiffe://{cluster}/host/{name}")
}

/// Whether the URI SANs `uris` bind the host id `host_id` of `cluster`: one of them is
/// [`host_identity`] of the host id itself, or of the host id without its incarnation suffix
/// (`-` and 8 lowercase hex digits, which the sidecar appends to a default host id, so a
/// certificate issued for pod `web-0` binds `web-0-1a2b3c4d`). Do not give a host an explicit id
/// that is another's certificate name plus such a suffix.
pub fn binds_host(uris: &[String], cluster: &str, host_id: &str) -> bool {
    let base = host_id
        .rsplit_once('-')
        .filter(|(_, s)| s.len() == 8 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .map(|(b, _)| b);
    uris.iter().any(|u| {
        u.strip_prefix("spiffe://")
            .and_then(|r| r.strip_prefix(cluster))
            .and_then(|r| r.strip_prefix("/host/"))
            .is_some_and(|n| n == host_id || Some(n) == base)
    })
}

/// The URI SANs of a DER certificate (empty when it has none or does not parse).
pub fn uri_sans(cert: &CertificateDer<'_>) -> Vec<String> {
    match webpki::EndEntityCert::try_from(cert) {
        Ok(ee) => ee.valid_uri_names().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Read {
            what,
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("the private key", path)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|source| TlsError::Read {
            what: "the private key",
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsError::Empty {
            what: "private key",
            path: path.to_owned(),
        })
}

/// Loaded TLS configuration for both directions.
#[derive(Clone)]
pub struct MeshTls {
    own_uris: Vec<String>,
    own_cert: PathBuf,
    client: Arc<rustls::ClientConfig>,
    server: Arc<rustls::ServerConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for MeshTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl MeshTls {
    /// Loads certificate, key and CA bundle; fails naming the file that is wrong.
    pub fn load(cfg: &MeshTlsConfig) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certs("the certificate chain", &cfg.cert)?;
        let own_uris = uri_sans(&chain[0]);
        let key = key(&cfg.key)?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in certs("CA certificates", &cfg.ca)? {
            roots.add(ca)?;
        }
        let roots = Arc::new(roots);
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        client.alpn_protocols = vec![b"h2".to_vec()];
        let server_name = cfg
            .server_name
            .as_ref()
            .map(|n| ServerName::try_from(n.clone()).map_err(|_| TlsError::ServerName(n.clone())))
            .transpose()?;
        Ok(MeshTls {
            own_uris,
            own_cert: cfg.cert.clone(),
            client: Arc::new(client),
            server: Arc::new(server),
            server_name,
        })
    }

    /// Checks that this host's own certificate binds `host_id` of `cluster` (see
    /// [`binds_host`]): a host started with another's certificate fails at once, naming the
    /// identity it needs, instead of having every mesh request refused.
    pub fn check_own_identity(&self, cluster: &str, host_id: &str) -> Result<(), TlsError> {
        if binds_host(&self.own_uris, cluster, host_id) {
            return Ok(());
        }
        Err(TlsError::NotOurIdentity {
            path: self.own_cert.clone(),
            expected: host_identity(cluster, host_id),
            found: self.own_uris.clone(),
        })
    }

    fn name_for(&self, addr: &str) -> io::Result<ServerName<'static>> {
        if let Some(n) = &self.server_name {
            return Ok(n.clone());
        }
        let host = match addr.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
            None => addr,
        };
        ServerName::try_from(host.to_owned()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a TLS server name; set the mesh TLS server name"),
            )
        })
    }
}

/// Dials through `inner`, then runs a TLS client handshake presenting this host's certificate.
/// A failed handshake is a failed dial: nothing was sent.
pub struct TlsConnector<C> {
    inner: C,
    tls: Arc<MeshTls>,
    /// With it, the server's certificate must bind the host id dialled (see [`binds_host`]).
    peer_cluster: Option<String>,
}

impl<C> TlsConnector<C> {
    /// Wraps `inner`.
    pub fn new(inner: C, tls: Arc<MeshTls>) -> Self {
        TlsConnector {
            inner,
            tls,
            peer_cluster: None,
        }
    }

    /// Also requires that the certificate of the server dialled as host `peer` (through
    /// [`Connector::connect_to`]) names it in `cluster`: a CA-signed host answering at another
    /// host's address is then a failed dial (the call never ran), not a peer.
    pub fn with_peer_identity(mut self, cluster: impl Into<String>) -> Self {
        self.peer_cluster = Some(cluster.into());
        self
    }
}

impl<C: Connector> TlsConnector<C> {
    async fn dial(&self, peer: Option<&str>, addr: &str) -> io::Result<BoxedIo> {
        let io = self.inner.connect(addr).await?;
        let name = self.tls.name_for(addr)?;
        let mut stream = tokio_rustls::TlsConnector::from(self.tls.client.clone())
            .connect(name, io)
            .await?;
        if let (Some(cluster), Some(peer)) = (&self.peer_cluster, peer) {
            let uris: Vec<String> = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(uri_sans)
                .unwrap_or_default();
            if !binds_host(&uris, cluster, peer) {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{addr} answered as host {peer:?} with a certificate that does not name \
                         it: expected a URI SAN {} (it names {uris:?})",
                        host_identity(cluster, peer)
                    ),
                ));
            }
        }
        // In TLS 1.3 the client finishes its handshake before the server has judged the client
        // certificate; a refusal arrives as an alert on the first read. Wait for the server's
        // first bytes (an HTTP/2 server sends SETTINGS at once) so that a refused certificate
        // is a failed dial — the call never ran — rather than a connection dying in flight.
        let mut first = vec![0u8; 1024];
        let n = stream.read(&mut first).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "{addr} closed the TLS connection right after the handshake (certificate refused?)"
                ),
            ));
        }
        first.truncate(n);
        Ok(Box::new(Prefixed {
            prefix: first,
            pos: 0,
            io: stream,
        }))
    }
}

#[async_trait]
impl<C: Connector> Connector for TlsConnector<C> {
    async fn connect(&self, addr: &str) -> io::Result<BoxedIo> {
        self.dial(None, addr).await
    }

    async fn connect_to(&self, peer: &str, addr: &str) -> io::Result<BoxedIo> {
        self.dial(Some(peer), addr).await
    }
}

/// A stream with bytes already read from it put back in front.
struct Prefixed<T> {
    prefix: Vec<u8>,
    pos: usize,
    io: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Accepts through `inner` and hands out connections whose TLS handshake (with a verified
/// client certificate) completed.
pub struct TlsListener {
    rx: mpsc::Receiver<Accepted>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsListener {
    /// Wraps `inner`; handshakes that take longer than `handshake_timeout` are dropped.
    pub fn new<L: Listener>(mut inner: L, tls: Arc<MeshTls>, handshake_timeout: Duration) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
        // Handshakes in progress at most: unauthenticated sockets cost CPU until proven.
        let handshakes = Arc::new(tokio::sync::Semaphore::new(256));
        let task = tokio::spawn(async move {
            loop {
                let Ok(permit) = handshakes.clone().acquire_owned().await else {
                    return;
                };
                let (io, remote) = match inner.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "mesh accept failed; retrying");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(handshake_timeout, acceptor.accept(io)).await {
                        Ok(Ok(stream)) => {
                            // The client certificate was verified against the CA in the
                            // handshake; its URI SANs travel with the connection.
                            let uris: Vec<String> = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(uri_sans)
                                .unwrap_or_default();
                            let _ = tx
                                .send(Accepted {
                                    io: Box::new(stream),
                                    remote,
                                    cert_uris: Some(uris.into()),
                                })
                                .await;
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(?remote, error = %e, "mesh TLS handshake refused")
                        }
                        Err(_) => tracing::warn!(?remote, "mesh TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { rx, task }
    }
}

#[async_trait]
impl Listener for TlsListener {
    async fn accept(&mut self) -> io::Result<(BoxedIo, Option<SocketAddr>)> {
        let a = self.accept_conn().await?;
        Ok((a.io, a.remote))
    }

    async fn accept_conn(&mut self) -> io::Result<Accepted> {
        self.rx
            .recv()
            .await
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "TLS acceptor stopped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_bound_by_its_own_name_or_its_name_before_the_incarnation_suffix() {
        let uris = vec![host_identity("prod", "web-0")];
        assert!(binds_host(&uris, "prod", "web-0"));
        assert!(binds_host(&uris, "prod", "web-0-1a2b3c4d"));
        assert!(!binds_host(&uris, "prod", "web-1"));
        assert!(!binds_host(&uris, "prod", "web-0-1A2B3C4D"));
        assert!(!binds_host(&uris, "prod", "web-0-extra"));
        assert!(!binds_host(&uris, "staging", "web-0"));
        assert!(!binds_host(&uris, "pro", "web-0"));
        assert!(!binds_host(&[], "prod", "web-0"));
        assert!(!binds_host(
            &["https://prod/host/web-0".into()],
            "prod",
            "web-0"
        ));
    }
}
