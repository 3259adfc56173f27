//! The peer of the mesh tests: a real mesh server (auth layer, tonic, the Deliver dispatch and
//! the directory service) on any listener, known to the view as `server` and accepting calls
//! from `client`. What differs per test is a parameter: the listener (loopback TCP, TLS, an
//! in-memory network), the handler, the shared secret and the server config.
//!
//! Included with `#[path = "support/mesh_server.rs"] mod mesh_server;`, apart from
//! `support/mod.rs`, so the mesh tests do not compile the in-process host helpers.
// Each test crate uses its own part of these helpers.
#![allow(dead_code)]

use sigx_sidecar::clock::system;
use sigx_sidecar::directory::{
    DirView, Directory, DirectoryConfig, KnownFromViews, PeerInfo, PeerStatus, ViewCell,
};
use sigx_sidecar::mesh::{
    DeliverHandler, Listener, MeshAuth, MeshClient, MeshClientConfig, MeshServerConfig,
    MeshService, PeerAddr, TcpConnector, TcpMeshListener, Verifier, serve,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

/// The peer id the server has in the view (and in [`MeshServer::peer`]).
pub const SERVER_ID: &str = "server";
/// The one other peer in the view: the id test clients call from.
pub const CLIENT_ID: &str = "client";

/// A running mesh server. Dropping it shuts the server down (the stop signal's sender goes).
pub struct MeshServer<H> {
    /// The address the server is advertised at in the view.
    pub addr: String,
    /// The handler calls are delivered to, for its test hooks.
    pub handler: Arc<H>,
    stop: Option<oneshot::Sender<()>>,
    done: JoinHandle<Result<(), tonic::transport::Error>>,
    _dir: Directory,
}

impl<H: DeliverHandler> MeshServer<H> {
    /// Serves `listener`, advertised as `server` at `addr`, with `handler` behind it; calls
    /// must be signed with `auth` by `client` (both peers are active in the server's view).
    pub async fn start(
        listener: impl Listener,
        addr: String,
        auth: MeshAuth,
        handler: H,
        config: MeshServerConfig,
    ) -> Self {
        Self::start_checking_certs(listener, addr, auth, handler, config, None).await
    }

    /// [`MeshServer::start`], and with `cert_cluster` every request's claimed peer must be
    /// bound by its connection's certificate (a URI SAN `spiffe://<cluster>/host/<peer>`).
    pub async fn start_checking_certs(
        listener: impl Listener,
        addr: String,
        auth: MeshAuth,
        handler: H,
        config: MeshServerConfig,
        cert_cluster: Option<&str>,
    ) -> Self {
        let view = DirView::new(
            1,
            vec![
                PeerInfo::new(SERVER_ID, addr.as_str(), PeerStatus::Active, true),
                PeerInfo::new(CLIENT_ID, "127.0.0.1:1", PeerStatus::Active, false),
            ],
        );
        let cell = Arc::new(ViewCell::new(SERVER_ID, view, || Ok(())));
        let mesh = Arc::new(MeshClient::new(
            SERVER_ID,
            auth.clone(),
            system(),
            Arc::new(TcpConnector),
            MeshClientConfig::default(),
        ));
        let dir = Directory::start(cell.clone(), mesh, DirectoryConfig::default());
        let verifier = Verifier::new(
            auth,
            system(),
            Duration::from_secs(60),
            Arc::new(KnownFromViews(cell)),
        );
        let verifier = Arc::new(match cert_cluster {
            Some(cluster) => verifier.with_cert_identity(cluster),
            None => verifier,
        });
        let handler = Arc::new(handler);
        let service = MeshService::new(handler.clone(), Arc::new(dir.clone()), &config);
        let (stop, rx) = oneshot::channel();
        let done = tokio::spawn(serve(listener, verifier, service, config, async {
            let _ = rx.await;
        }));
        MeshServer {
            addr,
            handler,
            stop: Some(stop),
            done,
            _dir: dir,
        }
    }

    /// [`MeshServer::start`] on a fresh loopback TCP port.
    pub async fn tcp(auth: MeshAuth, handler: H, config: MeshServerConfig) -> Self {
        let (listener, addr) = tcp_listener().await;
        Self::start(listener, addr, auth, handler, config).await
    }
}

impl<H> MeshServer<H> {
    /// The server as a peer to call.
    pub fn peer(&self) -> PeerAddr<'_> {
        PeerAddr {
            id: SERVER_ID,
            advertise: &self.addr,
        }
    }

    /// Whether the serve task is still running (it ends early only by failing).
    pub fn is_running(&self) -> bool {
        !self.done.is_finished()
    }

    /// Asserts the server is alive, then shuts it down and asserts it stopped cleanly.
    pub async fn stop(mut self) {
        assert!(self.is_running(), "the mesh server died");
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), self.done)
            .await
            .expect("server stops")
            .unwrap()
            .unwrap();
    }
}

/// A listener on a fresh loopback TCP port, and its address.
pub async fn tcp_listener() -> (TcpMeshListener, String) {
    let listener = TcpMeshListener::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// Dials TCP through an in-process relay the test can cut (`cut.notify_one()`), to kill a
/// connection mid-call as a peer whose machine vanished would; counts its dials.
#[derive(Default)]
pub struct Cuttable {
    pub cut: Arc<Notify>,
    pub dials: AtomicUsize,
}

#[async_trait::async_trait]
impl sigx_sidecar::mesh::Connector for Cuttable {
    async fn connect(&self, addr: &str) -> std::io::Result<sigx_sidecar::mesh::BoxedIo> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        let mut upstream = tokio::net::TcpStream::connect(addr).await?;
        upstream.set_nodelay(true)?;
        let (mine, mut theirs) = tokio::io::duplex(64 * 1024);
        let cut = self.cut.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut theirs, &mut upstream) => {}
                _ = cut.notified() => {}
            }
        });
        Ok(Box::new(mine))
    }
}

/// A call to `Echo/k`'s `method` carrying `payload`, as the mesh tests send it.
pub fn call(method: &str, payload: impl Into<bytes::Bytes>) -> sigx_proto::v1::DeliverRequest {
    sigx_proto::v1::DeliverRequest {
        actor: Some(sigx_proto::v1::ActorRef {
            actor_type: "Echo".into(),
            key: "k".into(),
        }),
        method: method.into(),
        payload: payload.into(),
        timeout_ms: 0,
        targeted: false,
        trace: None,
    }
}
