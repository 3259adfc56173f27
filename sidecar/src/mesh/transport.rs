//! Injectable sockets for the mesh. Production dials and listens on TCP; the deterministic
//! simulator (turmoil) implements the same two traits over its simulated network, so the very
//! same client, server, auth and directory code runs under simulated faults.

use async_trait::async_trait;
use futures::Stream;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A byte stream to or from a peer.
pub trait MeshIo: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> MeshIo for T {}

/// A boxed [`MeshIo`].
pub type BoxedIo = Box<dyn MeshIo>;

/// Dials peers. `addr` is a peer's advertised `host:port`.
#[async_trait]
pub trait Connector: Send + Sync + 'static {
    /// Opens a connection. An error means nothing was sent: the call never ran.
    async fn connect(&self, addr: &str) -> io::Result<BoxedIo>;

    /// Opens a connection to host `peer` at `addr`. Plain transports cannot tell who answers;
    /// the mTLS connector also checks that the server's certificate names `peer`.
    async fn connect_to(&self, peer: &str, addr: &str) -> io::Result<BoxedIo> {
        let _ = peer;
        self.connect(addr).await
    }
}

/// A shared connector is a connector (so wrappers such as TLS can take an injected one).
#[async_trait]
impl Connector for std::sync::Arc<dyn Connector> {
    async fn connect(&self, addr: &str) -> io::Result<BoxedIo> {
        (**self).connect(addr).await
    }
    async fn connect_to(&self, peer: &str, addr: &str) -> io::Result<BoxedIo> {
        (**self).connect_to(peer, addr).await
    }
}

/// Dials over TCP with `TCP_NODELAY` (small RPCs must not wait for Nagle).
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

#[async_trait]
impl Connector for TcpConnector {
    async fn connect(&self, addr: &str) -> io::Result<BoxedIo> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Box::new(stream))
    }
}

/// Accepts inbound peer connections.
#[async_trait]
pub trait Listener: Send + 'static {
    /// The next connection and, when known, the remote address.
    async fn accept(&mut self) -> io::Result<(BoxedIo, Option<SocketAddr>)>;

    /// The next connection with what the transport proved about its peer. Plain transports
    /// prove nothing; the mTLS listener passes on the URI SANs of the verified client
    /// certificate, which the auth layer binds to the claimed host id on every request.
    async fn accept_conn(&mut self) -> io::Result<Accepted> {
        let (io, remote) = self.accept().await?;
        Ok(Accepted {
            io,
            remote,
            cert_uris: None,
        })
    }
}

/// One accepted connection (see [`Listener::accept_conn`]).
pub struct Accepted {
    /// The byte stream.
    pub io: BoxedIo,
    /// The remote address, when known.
    pub remote: Option<SocketAddr>,
    /// The URI SANs of the peer's verified certificate; `None` when the transport has none.
    pub cert_uris: Option<Arc<[String]>>,
}

/// A TCP listener.
#[derive(Debug)]
pub struct TcpMeshListener {
    inner: tokio::net::TcpListener,
}

impl TcpMeshListener {
    /// Binds `addr` (bind before joining membership: DESIGN.md §8).
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        Ok(TcpMeshListener {
            inner: tokio::net::TcpListener::bind(addr).await?,
        })
    }

    /// Wraps an already bound listener.
    pub fn from_listener(inner: tokio::net::TcpListener) -> Self {
        TcpMeshListener { inner }
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

#[async_trait]
impl Listener for TcpMeshListener {
    async fn accept(&mut self) -> io::Result<(BoxedIo, Option<SocketAddr>)> {
        let (stream, remote) = self.inner.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok((Box::new(stream), Some(remote)))
    }
}

/// Limits on inbound mesh connections, so that unauthenticated sockets cannot exhaust the
/// host: the MAC is checked per request, but a TCP connection costs a file descriptor and a
/// task before any request arrives.
#[derive(Debug, Clone, Copy)]
pub struct AcceptLimits {
    /// Open inbound connections at most; beyond it, accepting waits (new dials queue in the
    /// kernel backlog and time out as `unreachable`: they never ran).
    pub max_connections: usize,
    /// A connection that sends no byte within this time after being accepted is closed.
    pub first_byte_timeout: Duration,
}

impl Default for AcceptLimits {
    fn default() -> Self {
        AcceptLimits {
            max_connections: 4096,
            first_byte_timeout: Duration::from_secs(10),
        }
    }
}

/// An accepted connection, as the gRPC server sees it.
pub struct Incoming {
    io: BoxedIo,
    remote: Option<SocketAddr>,
    cert_uris: Option<Arc<[String]>>,
    /// Closes the connection if the peer stays silent; `None` once it spoke.
    first_byte: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Connection info, put by tonic into the extensions of every request of the connection.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    /// The remote address, when known.
    pub remote: Option<SocketAddr>,
    /// The URI SANs of the peer's verified TLS certificate; `None` without TLS.
    pub cert_uris: Option<Arc<[String]>>,
}

impl tonic::transport::server::Connected for Incoming {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            remote: self.remote,
            cert_uris: self.cert_uris.clone(),
        }
    }
}

impl AsyncRead for Incoming {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Some(timer) = this.first_byte.as_mut() {
            match &r {
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.first_byte = None,
                Poll::Ready(_) => {}
                Poll::Pending => {
                    if timer.as_mut().poll(cx).is_ready() {
                        tracing::debug!(remote = ?this.remote, "mesh connection sent nothing; closing");
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "mesh peer sent nothing after connecting",
                        )));
                    }
                }
            }
        }
        r
    }
}

impl AsyncWrite for Incoming {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Turns a [`Listener`] into the stream of connections `serve_with_incoming_shutdown` takes,
/// under `limits`.
///
/// Accept errors never end the stream: a transient `EMFILE` or a connection reset during the
/// handshake must not take the mesh down. They are logged and the loop backs off briefly.
pub fn incoming<L: Listener>(
    listener: L,
    limits: AcceptLimits,
) -> impl Stream<Item = io::Result<Incoming>> + Send {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    futures::stream::unfold(
        (listener, permits),
        move |(mut listener, permits)| async move {
            let permit = permits.clone().acquire_owned().await.ok()?;
            loop {
                match listener.accept_conn().await {
                    Ok(Accepted {
                        io,
                        remote,
                        cert_uris,
                    }) => {
                        let conn = Incoming {
                            io,
                            remote,
                            cert_uris,
                            first_byte: Some(Box::pin(tokio::time::sleep(
                                limits.first_byte_timeout,
                            ))),
                            _permit: permit,
                        };
                        return Some((Ok(conn), (listener, permits)));
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "mesh accept failed; retrying");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        },
    )
}
