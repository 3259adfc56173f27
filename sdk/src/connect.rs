//! Where the sidecar's socket is, and how a gRPC channel is opened over it.
//!
//! The app container talks only to its own sidecar, over a Unix domain socket in a volume both
//! containers share (DESIGN.md §1). gRPC needs an HTTP/2 connection, so tonic is given a
//! connector that dials the socket instead of TCP; the URI it is handed is a placeholder.

use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// The socket path the sidecar listens on when nothing else is configured.
pub const DEFAULT_SOCKET: &str = "/var/run/sigx/sidecar.sock";

/// The environment variable naming the sidecar's socket (the same one the sidecar reads).
pub const SOCKET_ENV: &str = "SIGX_SOCKET";

/// How long dialing the socket may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The socket path from `SIGX_SOCKET`, or [`DEFAULT_SOCKET`] when it is unset or empty.
pub fn socket_from_env() -> PathBuf {
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// Could not open a connection to the sidecar.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot connect to the sigx sidecar at {path}: {source} (is the sidecar running, and does \
     {env} or --socket name its socket?)",
    path = path.display(),
    env = SOCKET_ENV
)]
pub struct ConnectError {
    /// The socket that was dialed.
    pub path: PathBuf,
    /// Why it failed.
    #[source]
    pub source: tonic::transport::Error,
}

fn endpoint() -> Endpoint {
    // The authority is never resolved: the connector below ignores the URI.
    Endpoint::from_static("http://sigx-sidecar.local").connect_timeout(CONNECT_TIMEOUT)
}

fn connector(
    path: PathBuf,
) -> impl tower::Service<Uri, Response = TokioIo<UnixStream>, Error = std::io::Error, Future = impl Send>
+ Send
+ Clone
+ 'static {
    tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    })
}

/// A channel that dials `path` on first use and again after every failure.
pub(crate) fn lazy_channel(path: &Path) -> Channel {
    endpoint().connect_with_connector_lazy(connector(path.to_path_buf()))
}

/// A channel whose first connection is made now: fails at once when nothing listens.
pub(crate) async fn eager_channel(path: &Path) -> Result<Channel, ConnectError> {
    endpoint()
        .connect_with_connector(connector(path.to_path_buf()))
        .await
        .map_err(|source| ConnectError {
            path: path.to_path_buf(),
            source,
        })
}
