//! The authenticated host-to-host mesh (DESIGN.md §2, §5, §7): tonic over HTTP/2 on injectable
//! sockets.
//!
//! * [`auth`]: the per-request HMAC, and the tower layer that checks it before any work.
//! * [`secret`]: the cluster secret as HMAC keys; [`secret_reload`] re-reads its files.
//! * [`transport`]: the [`Connector`] / [`Listener`] seams (TCP in production, simulated networks
//!   in the simulator).
//! * [`server`]: the `Mesh` service, dispatching `Deliver` to a [`DeliverHandler`] and the
//!   directory RPCs to a [`DirectoryHandler`].
//! * [`client`]: pooled channels per peer, signed calls with deadlines, and [`MeshCallError`],
//!   which says whether a failed call ran.
//! * [`tls`]: mutual TLS (rustls) as wrappers around any connector and listener.

pub mod auth;
pub mod client;
pub mod secret;
pub mod secret_reload;
pub mod server;
pub mod tls;
pub mod transport;

pub use auth::{
    KnownPeers, MeshAuth, MeshAuthLayer, MeshSecret, SecretError, VerifiedPeer, Verifier,
};
pub use client::{MeshCallError, MeshClient, MeshClientConfig, PeerAddr};
pub use server::{DeliverHandler, DirectoryHandler, MeshServerConfig, MeshService, serve};
pub use tls::{
    MeshTls, MeshTlsConfig, TlsConnector, TlsError, TlsListener, binds_host, host_identity,
};
pub use transport::{
    AcceptLimits, Accepted, BoxedIo, ConnInfo, Connector, Listener, TcpConnector, TcpMeshListener,
};
