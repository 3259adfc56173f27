//! Wires the pieces of one host together and runs its lifecycle (DESIGN.md §8): bind every
//! listener first, wait for the app's registration, then serve; on stop, fail readiness, drain,
//! deactivate, and close the listeners last.

use crate::app::{AppService, Dispatcher};
use crate::config::Config;
use crate::health::{self, HostState};
use crate::runtime::{ActorId, OpenGate, Runtime, RuntimeConfig};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use sigx_proto::ActorError;
use sigx_proto::v1;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::time::Instant;

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "a live process is listening on socket {0:?}: refusing to steal it; stop the other \
         sidecar or pick another SIGX_SOCKET"
    )]
    SocketInUse(PathBuf),
    #[error(
        "{0:?} exists and is not a socket: refusing to replace it; remove it or pick another SIGX_SOCKET"
    )]
    NotASocket(PathBuf),
    #[error("cannot bind socket {path:?}: {source}")]
    BindSocket { path: PathBuf, source: io::Error },
    #[error("cannot bind {what} on {addr}: {source}")]
    BindTcp {
        what: &'static str,
        addr: SocketAddr,
        source: io::Error,
    },
    #[error("{0}")]
    Other(String),
}

/// Binds the app socket at `path`: a stale file left by a dead process is replaced, a live
/// listener is never stolen. The socket is made mode 0660 (the pod's shared volume).
pub fn bind_socket(path: &Path) -> Result<UnixListener, HostError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(HostError::NotASocket(path.to_path_buf()));
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(HostError::SocketInUse(path.to_path_buf())),
            Err(_) => {
                tracing::info!(socket = ?path, "replacing a stale socket left by a dead process");
                let _ = std::fs::remove_file(path);
            }
        }
    }
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|source| HostError::BindSocket {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let listener = UnixListener::bind(path).map_err(|source| HostError::BindSocket {
        path: path.to_path_buf(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(|source| {
        HostError::BindSocket {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok(listener)
}

/// The dispatcher of a single host with no cluster: every call runs here.
pub struct LocalDispatcher {
    runtime: Runtime,
    state: Arc<HostState>,
    started_at_unix_ms: i64,
    node: Option<String>,
}

impl LocalDispatcher {
    fn descriptor(&self) -> v1::HostDescriptor {
        let (types, stateful) = match self.runtime.app() {
            Some(app) => (app.registry.all_types(), app.registry.stateful_types()),
            None => (Vec::new(), Vec::new()),
        };
        v1::HostDescriptor {
            id: self.runtime.config().host_id.clone(),
            advertise: String::new(),
            types: Some(v1::TypeList { names: types }),
            meta: self
                .node
                .iter()
                .map(|n| ("node".to_string(), n.clone()))
                .collect(),
            status: if self.state.leaving() {
                v1::HostStatus::Leaving
            } else if self.state.ready() {
                v1::HostStatus::Active
            } else {
                v1::HostStatus::Joining
            } as i32,
            started_at_unix_ms: self.started_at_unix_ms,
            stateful_types: Some(v1::TypeList { names: stateful }),
        }
    }

    fn view(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        let d = self.descriptor();
        let status_ok = req.status == v1::MemberStatusFilter::Any as i32
            || d.status == v1::HostStatus::Active as i32;
        let type_ok = req.registers.is_empty()
            || d.types
                .as_ref()
                .is_none_or(|t| t.names.contains(&req.registers));
        v1::MembersResponse {
            version: 1,
            hosts: if status_ok && type_ok {
                vec![d]
            } else {
                vec![]
            },
        }
    }
}

#[async_trait]
impl Dispatcher for LocalDispatcher {
    async fn call(
        &self,
        actor: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        self.runtime
            .invoke(&actor, &method, payload, deadline)
            .await
    }

    async fn dispatch_on(
        &self,
        host_id: String,
        worker: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        if host_id != self.runtime.config().host_id {
            return Err(ActorError::unreachable(format!(
                "host {host_id:?} is not in this host's view (a single host with no cluster)"
            )));
        }
        if self.runtime.registers(&worker.actor_type) == Some(true) {
            return Err(ActorError::invalid(format!(
                "{:?} is a stateful actor type: DispatchOn targets workers only (placement decides \
                 where an actor lives); use Call",
                worker.actor_type
            )));
        }
        self.runtime
            .invoke(&worker, &method, payload, deadline)
            .await
    }

    fn members(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        self.view(req)
    }

    fn watch_members(&self, req: v1::MembersRequest) -> BoxStream<'static, v1::MembersResponse> {
        let first = self.view(&req);
        Box::pin(futures::stream::once(async move { first }).chain(futures::stream::pending()))
    }

    fn status(&self) -> v1::StatusResponse {
        let d = self.descriptor();
        let mut counters = self.runtime.counters().snapshot();
        counters.insert(
            "localDispatches".into(),
            counters.get("turns").copied().unwrap_or(0),
        );
        v1::StatusResponse {
            host: Some(d.clone()),
            state: self.state.state_name().to_string(),
            fence_reason: self.state.fence_reason().unwrap_or_default(),
            app_connected: self.runtime.app().is_some(),
            activations: self
                .runtime
                .activation_counts()
                .into_iter()
                .map(|(actor_type, activations)| v1::TypeActivations {
                    actor_type,
                    activations,
                })
                .collect(),
            counters: counters.into_iter().collect(),
            view: Some(v1::MembersResponse {
                version: 1,
                hosts: vec![d],
            }),
        }
    }
}

use futures::StreamExt;

/// How a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// First SIGTERM/SIGINT: the full graceful sequence.
    Graceful,
    /// A second signal: skip to a fast exit.
    Fast,
}

/// A running host.
pub struct Host {
    /// The host's probe state.
    pub state: Arc<HostState>,
    /// The local runtime.
    pub runtime: Runtime,
    /// Where the health endpoint listens.
    pub health_addr: SocketAddr,
    /// The app socket.
    pub socket: PathBuf,
    cfg: Config,
    listeners_down: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Host {
    /// Binds every listener, then starts serving. Returns once the host is listening; readiness
    /// follows the app's registration.
    pub async fn start(cfg: Config) -> Result<Host, HostError> {
        let socket = bind_socket(&cfg.socket)?;
        let health_listener =
            TcpListener::bind(cfg.health_addr)
                .await
                .map_err(|source| HostError::BindTcp {
                    what: "the health endpoint",
                    addr: cfg.health_addr,
                    source,
                })?;
        let health_addr = health_listener
            .local_addr()
            .map_err(|e| HostError::Other(e.to_string()))?;
        let state = Arc::new(HostState::default());
        let runtime = Runtime::new(
            RuntimeConfig {
                host_id: cfg.host_id.clone(),
                max_payload_bytes: cfg.max_payload_bytes,
                slow_turn: cfg.slow_turn,
                lifecycle_turn_timeout: cfg.call_timeout,
            },
            Arc::new(OpenGate),
        );
        let dispatcher: Arc<dyn Dispatcher> = Arc::new(LocalDispatcher {
            runtime: runtime.clone(),
            state: state.clone(),
            started_at_unix_ms: crate::clock::system().wall_unix_ms(),
            node: cfg.node.clone(),
        });
        let (down_tx, down_rx) = watch::channel(false);
        let mut tasks = Vec::new();

        let app = AppService::new(runtime.clone(), dispatcher.clone(), cfg.call_timeout);
        tasks.push(tokio::spawn(serve_socket(
            socket,
            app,
            cfg.max_payload_bytes,
            runtime.clone(),
            wait_down(down_rx.clone()),
        )));
        tasks.push(tokio::spawn(health::serve(
            health_listener,
            state.clone(),
            wait_down(down_rx.clone()),
        )));
        {
            let runtime = runtime.clone();
            let state2 = state.clone();
            state.set_metrics(Arc::new(move || render_metrics(&runtime, &state2)));
        }
        // Ready while an app is registered.
        {
            let mut app_rx = runtime.watch_app();
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let attached = matches!(
                        &*app_rx.borrow_and_update(),
                        crate::runtime::AppState::Attached(_)
                    );
                    state.set_ready(attached);
                    if app_rx.changed().await.is_err() {
                        return;
                    }
                }
            }));
        }
        state.set_started();
        tracing::info!(host = %cfg.host_id, socket = ?cfg.socket, health = %health_addr,
            "listening; waiting for the app to register");
        Ok(Host {
            state,
            runtime,
            health_addr,
            socket: cfg.socket.clone(),
            cfg,
            listeners_down: down_tx,
            tasks,
        })
    }

    /// The graceful stop sequence (DESIGN.md §8), each step logged with its duration.
    pub async fn stop(self, kind: StopKind) {
        let t0 = Instant::now();
        self.state.set_leaving();
        tracing::info!(step = "readiness-false", "stopping");
        if kind == StopKind::Graceful {
            let drain_deadline = Instant::now() + self.cfg.drain_timeout;
            let t = Instant::now();
            let drained = self.runtime.drain(drain_deadline).await;
            tracing::info!(
                step = "drain",
                drained,
                ms = t.elapsed().as_millis() as u64,
                "in-flight turns"
            );
            let t = Instant::now();
            self.runtime.deactivate_all(drain_deadline).await;
            tracing::info!(
                step = "deactivate",
                ms = t.elapsed().as_millis() as u64,
                "activations deactivated"
            );
        }
        let _ = self.listeners_down.send(true);
        for t in self.tasks {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
        tracing::info!(
            step = "listeners-closed",
            total_ms = t0.elapsed().as_millis() as u64,
            "stopped"
        );
    }
}

async fn wait_down(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

async fn serve_socket(
    listener: UnixListener,
    app: AppService,
    max_payload: usize,
    _runtime: Runtime,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<v1::actor_host_server::ActorHostServer<AppService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sigx_proto::FILE_DESCRIPTOR_SET)
        .build_v1();
    let svc = v1::actor_host_server::ActorHostServer::new(app)
        .max_decoding_message_size(max_payload + 64 * 1024)
        .max_encoding_message_size(max_payload + 64 * 1024);
    let mut builder = tonic::transport::Server::builder();
    let mut router = builder.add_service(svc).add_service(health_service);
    if let Ok(reflection) = reflection {
        router = router.add_service(reflection);
    }
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    if let Err(e) = router
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
    {
        tracing::error!(error = %e, "app socket server failed");
    }
}

fn render_metrics(runtime: &Runtime, state: &HostState) -> String {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;
    let mut registry = Registry::with_prefix("sigx");
    for (name, value) in runtime.counters().snapshot() {
        let g: Gauge<u64, std::sync::atomic::AtomicU64> = Gauge::default();
        g.set(value);
        registry.register(snake(&name), format!("runtime counter {name}"), g);
    }
    let ready: Gauge = Gauge::default();
    ready.set(state.ready() as i64);
    registry.register("ready", "1 while the host is ready", ready);
    let fenced: Gauge = Gauge::default();
    fenced.set(state.fence_reason().is_some() as i64);
    registry.register("fenced", "1 once the host has fenced", fenced);
    let mut out = String::new();
    let _ = encode(&mut out, &registry);
    out
}

fn snake(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// Waits for SIGTERM or SIGINT; the first resolves `Graceful`.
pub async fn first_signal() -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
