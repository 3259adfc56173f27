//! The mesh over turmoil's simulated TCP: the production [`Connector`] and [`Listener`] seams,
//! implemented with `turmoil::net`, so the real tonic client, server, HMAC layer and directory
//! RPCs run over a network the seed controls (latency, holds, crashes).
//!
//! Every stream is wrapped in a [`SimStream`] that the fault schedule can reset: a reset makes
//! every open connection of a host fail its next read or write with `ConnectionReset` — message
//! loss as TCP exposes it (the connection dies; what was in flight is outcome-unknown).

use sigx_sidecar::mesh::transport::{BoxedIo, Connector, Listener};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The mesh port every simulated host listens on.
pub const MESH_PORT: u16 = 7311;

/// Connection resets of one host: bumping the generation kills every stream opened before.
#[derive(Default)]
pub struct Resets {
    generation: AtomicU64,
    next_id: AtomicU64,
    wakers: Mutex<BTreeMap<u64, Waker>>,
}

impl Resets {
    /// Resets every open connection of the host (both directions).
    pub fn reset_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let wakers = std::mem::take(&mut *self.wakers.lock().expect("resets lock"));
        for (_, w) in wakers {
            w.wake();
        }
    }

    fn wrap(self: &Arc<Self>, inner: turmoil::net::TcpStream) -> SimStream {
        SimStream {
            inner,
            resets: self.clone(),
            generation: self.generation.load(Ordering::SeqCst),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// A simulated TCP stream that a fault can reset.
pub struct SimStream {
    inner: turmoil::net::TcpStream,
    resets: Arc<Resets>,
    generation: u64,
    id: u64,
}

impl SimStream {
    fn check(&self, cx: &Context<'_>) -> io::Result<()> {
        if self.resets.generation.load(Ordering::SeqCst) != self.generation {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset (simulated message loss)",
            ));
        }
        self.resets
            .wakers
            .lock()
            .expect("resets lock")
            .insert(self.id, cx.waker().clone());
        Ok(())
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        self.resets
            .wakers
            .lock()
            .expect("resets lock")
            .remove(&self.id);
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Dials peers over turmoil TCP (`advertise` is `"<host name>:7311"`).
pub struct SimConnector {
    pub resets: Arc<Resets>,
}

#[async_trait::async_trait]
impl Connector for SimConnector {
    async fn connect(&self, addr: &str) -> io::Result<BoxedIo> {
        let r = turmoil::net::TcpStream::connect(addr.to_string()).await;
        tracing::debug!(addr, ok = r.is_ok(), "sim: connect");
        let stream = r?;
        Ok(Box::new(self.resets.wrap(stream)))
    }
}

/// Accepts peers over turmoil TCP.
pub struct SimListener {
    pub inner: turmoil::net::TcpListener,
    pub resets: Arc<Resets>,
}

impl SimListener {
    /// Binds the mesh port of the current simulated host.
    pub async fn bind(resets: Arc<Resets>) -> io::Result<Self> {
        let inner = turmoil::net::TcpListener::bind(("0.0.0.0", MESH_PORT)).await?;
        Ok(SimListener { inner, resets })
    }
}

#[async_trait::async_trait]
impl Listener for SimListener {
    async fn accept(&mut self) -> io::Result<(BoxedIo, Option<SocketAddr>)> {
        let (stream, remote) = self.inner.accept().await?;
        Ok((Box::new(self.resets.wrap(stream)), Some(remote)))
    }
}
