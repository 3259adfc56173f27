//! Wires the pieces of one host together and runs its lifecycle (DESIGN.md §8).
//!
//! Start: bind every listener (socket, health, mesh) first; wait for the app's registration
//! (the host publishes the types it registers); join membership as `joining`; start the
//! directory and the mesh server; become `active`; report ready once the host's own view shows
//! its own active record. No window where the host is routable but nothing listens.
//!
//! Stop: readiness fails; status `leaving`; in-flight turns drain; activations get `Deactivate`
//! turns and are unregistered; the app's Serve stream ends with OK; the membership record is
//! withdrawn; listeners close last. In a pod the first half runs earlier, on the app's preStop
//! hook (`/drain`, see [`drain`]), while the app is still there to answer its turns.

mod cluster;
mod drain;
pub mod late;
pub mod local;
mod reminders;
pub mod turns;

use crate::app::{AppService, CallsInFlight, Dispatcher};
use crate::clock::SharedClock;
use crate::config::{Config, MembershipKind};
use crate::health::{self, HostState};
use crate::membership::MembershipProvider;
use crate::mesh::{Connector, TcpConnector, TcpMeshListener};
use crate::runtime::{ActivationGate, OpenGate, Runtime, RuntimeConfig};
use late::{LateDispatcher, LateGate};
use local::LocalDispatcher;
use sigx_proto::v1;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::time::Instant;

pub use cluster::{ClusterParts, DirectoryLocator, dir_view, directory_views};

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "a live process is listening on socket {0:?}: refusing to steal it; stop the other \
         sidecar or pick another SIGX_SOCKET"
    )]
    SocketInUse(PathBuf),
    #[error(
        "{0:?} exists and is not a socket: refusing to replace it; remove it or pick another \
         SIGX_SOCKET"
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
    #[error("membership: {0}")]
    Membership(String),
    #[error("mesh mTLS (SIGX_MTLS_DIR): {0}")]
    Tls(String),
    #[error("state store: {0}")]
    State(String),
    #[error("{0}")]
    Other(String),
}

impl HostError {
    /// Whether the error is the operator's configuration (exit code 64) rather than the
    /// environment.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            HostError::Membership(_)
                | HostError::NotASocket(_)
                | HostError::Tls(_)
                | HostError::State(_)
        )
    }
}

/// What a host is built from besides its configuration: the seams tests and the simulator
/// replace (clock, membership store, mesh connector).
#[derive(Clone)]
pub struct HostOptions {
    /// Monotonic and wall clocks.
    pub clock: SharedClock,
    /// The membership store; `None` builds the one the configuration names.
    pub provider: Option<Arc<dyn MembershipProvider>>,
    /// How the mesh dials peers.
    pub connector: Arc<dyn Connector>,
    /// The state store; `None` builds the one the configuration names.
    pub state: Option<crate::state::SharedStateStore>,
    /// How the reminder owner polls and retries; `None` = the defaults (with the configured
    /// call timeout).
    pub reminders: Option<crate::reminders::SchedulerConfig>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            clock: crate::clock::system(),
            provider: None,
            connector: Arc::new(TcpConnector),
            state: None,
            reminders: None,
        }
    }
}

/// Binds the app socket at `path`: a stale file left by a dead process is replaced, a live
/// listener is never stolen. The socket is given `mode` (`SIGX_SOCKET_MODE`, 0660 by default).
pub fn bind_socket(path: &Path, mode: u32) -> Result<UnixListener, HostError> {
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
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        HostError::BindSocket {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok(listener)
}

/// How long a stop waits for the app to close its side of `Serve` after the sidecar ended its
/// own, so the app reads the clean end before the GOAWAY. An app that keeps its side open only
/// delays the stop by this much.
pub const APP_STREAM_END_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// How a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// First SIGTERM/SIGINT: the full graceful sequence.
    Graceful,
    /// A second signal: skip to a fast exit (withdrawing the record only if nothing is live).
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
    /// Where the mesh listens (clustered hosts).
    pub mesh_addr: Option<SocketAddr>,
    /// The app socket.
    pub socket: PathBuf,
    /// The cluster, once joined.
    pub cluster: Arc<tokio::sync::OnceCell<ClusterParts>>,
    cfg: Config,
    late_gate: Arc<LateGate>,
    reminders: crate::reminders::scheduler::Scheduler,
    listeners_down: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The app socket's calls in flight (a graceful stop lets them finish).
    app_calls: Arc<CallsInFlight>,
}

impl Host {
    /// Starts a host with the process clocks and the configured stores.
    pub async fn start(cfg: Config) -> Result<Host, HostError> {
        Host::start_with(cfg, HostOptions::default()).await
    }

    /// Binds every listener, then starts serving. Returns once the host is listening; joining
    /// the cluster and readiness follow the app's registration.
    pub async fn start_with(mut cfg: Config, opts: HostOptions) -> Result<Host, HostError> {
        let clustered = cfg.membership != MembershipKind::None;
        // The membership store first: a bad path or missing pod identity is named before
        // anything binds.
        let provider = if clustered {
            Some(
                cluster::build_provider(&cfg, &opts)
                    .await
                    .map_err(HostError::Membership)?,
            )
        } else {
            None
        };
        let mtls = match &cfg.mtls {
            Some(t) if clustered => {
                let tls =
                    crate::mesh::MeshTls::load(t).map_err(|e| HostError::Tls(e.to_string()))?;
                // Peers bind every request to the certificate's identity: a certificate that
                // does not name this host is a configuration error now, not refusals later.
                tls.check_own_identity(&cfg.cluster, &cfg.host_id)
                    .map_err(|e| HostError::Tls(e.to_string()))?;
                Some(Arc::new(tls))
            }
            _ => None,
        };
        // The state store is opened (and its schema created or migrated) before anything binds:
        // a store that cannot be used is a configuration error (exit 64), not a host that
        // accepts activations it cannot give epochs.
        let state_store = match &opts.state {
            Some(store) => store.clone(),
            None => crate::state::open(&cfg)
                .await
                .map_err(|e| HostError::State(e.to_string()))?,
        };
        let socket = bind_socket(&cfg.socket, cfg.socket_mode)?;
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
        // An ephemeral health port is published (descriptor meta.health) as actually bound.
        cfg.health_addr = health_addr;
        let mesh_listener = if clustered {
            let l = TcpMeshListener::bind(cfg.mesh_addr)
                .await
                .map_err(|source| HostError::BindTcp {
                    what: "the mesh",
                    addr: cfg.mesh_addr,
                    source,
                })?;
            let addr = l
                .local_addr()
                .map_err(|e| HostError::Other(e.to_string()))?;
            // An ephemeral mesh port (tests, `sigx dev up`) is advertised as actually bound.
            if cfg.mesh_addr.port() == 0 && cfg.advertise.ends_with(":0") {
                let host = cfg.advertise.trim_end_matches(":0").to_string();
                cfg.advertise = format!("{host}:{}", addr.port());
            }
            Some((l, addr))
        } else {
            None
        };
        let mesh_addr = mesh_listener.as_ref().map(|(_, a)| *a);

        let state = Arc::new(HostState::default());
        let late_gate = Arc::new(LateGate::new(cfg.host_id.clone()));
        let gate: Arc<dyn ActivationGate> = if clustered {
            late_gate.clone()
        } else {
            Arc::new(OpenGate)
        };
        let runtime = Runtime::new(
            RuntimeConfig {
                host_id: cfg.host_id.clone(),
                incarnation: cfg.incarnation.clone(),
                max_payload_bytes: cfg.max_payload_bytes,
                slow_turn: cfg.slow_turn,
                lifecycle_turn_timeout: cfg.call_timeout,
                declared_types: cfg.declared_types.clone(),
                // A clustered host publishes its first app's types at the join.
                pin_first_registration: clustered,
                clock: opts.clock.clone(),
                state: state_store,
                call_timeout: cfg.call_timeout,
            },
            gate,
        );
        let started_at_unix_ms = opts.clock.wall_unix_ms();
        let local: Arc<dyn Dispatcher> = Arc::new(LocalDispatcher {
            runtime: runtime.clone(),
            state: state.clone(),
            started_at_unix_ms,
            node: cfg.node.clone(),
            zone: cfg.zone.clone(),
        });
        let late_dispatcher = Arc::new(LateDispatcher::new(cfg.host_id.clone(), local.clone()));
        let dispatcher: Arc<dyn Dispatcher> = if clustered {
            late_dispatcher.clone()
        } else {
            local
        };
        let (down_tx, down_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let cluster_cell: Arc<tokio::sync::OnceCell<ClusterParts>> = Arc::default();
        let reminders = reminders::start(
            &cfg,
            &opts,
            &runtime,
            dispatcher.clone(),
            state.clone(),
            clustered.then(|| cluster_cell.clone()),
            started_at_unix_ms,
        );

        let app_calls = CallsInFlight::new();
        let app = AppService::new(
            runtime.clone(),
            dispatcher,
            cfg.call_timeout,
            app_calls.clone(),
        );
        tasks.push(tokio::spawn(serve_socket(
            socket,
            app,
            cfg.max_payload_bytes,
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
            let cell = cluster_cell.clone();
            state.set_metrics(Arc::new(move || {
                let status = cell.get().map(|c| c.router.status_counters());
                let histograms = cell.get().map(|c| crate::metrics::ClusterHistograms {
                    renewals: c.membership.renewal_histogram(),
                    collection_rounds: c.directory.collection_histogram(),
                    directory_rpcs: c.directory.rpc_histogram(),
                });
                render_metrics(&runtime, &state2, status, histograms.as_ref())
            }));
        }
        if let Some(token) = &cfg.drain_token {
            state.set_drain(
                token.clone(),
                drain::hook(runtime.clone(), Arc::downgrade(&state), cfg.drain_timeout),
            );
        }
        state.set_started();
        tracing::info!(host = %cfg.host_id, socket = ?cfg.socket, health = %health_addr,
            mesh = ?mesh_addr, advertise = %cfg.advertise, "listening; waiting for the app to register");

        if let Some((listener, _)) = mesh_listener {
            tasks.push(tokio::spawn(cluster::bring_up(cluster::BringUp {
                cfg: cfg.clone(),
                opts,
                state: state.clone(),
                runtime: runtime.clone(),
                late_gate: late_gate.clone(),
                late_dispatcher,
                listener,
                provider: provider.expect("clustered hosts have a provider"),
                mtls,
                cell: cluster_cell.clone(),
                down: down_rx.clone(),
            })));
        } else {
            // A single host is ready while an app is registered and not draining.
            let mut app_rx = runtime.watch_app();
            let state = state.clone();
            let runtime = runtime.clone();
            let drain_timeout = cfg.drain_timeout;
            tasks.push(tokio::spawn(async move {
                loop {
                    let session = match &*app_rx.borrow_and_update() {
                        crate::runtime::AppState::Attached(s) => Some(s.clone()),
                        crate::runtime::AppState::Detached => None,
                    };
                    state.set_ready(session.as_ref().is_some_and(|s| !s.drain_requested()));
                    let drain = async {
                        match &session {
                            Some(s) if !s.drain_requested() => s.drain_wanted().await,
                            _ => futures::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        r = app_rx.changed() => if r.is_err() { return },
                        _ = drain => {
                            let s = session.clone().expect("draining session");
                            state.set_ready(false);
                            let (runtime, deadline) = (runtime.clone(), Instant::now() + drain_timeout);
                            tokio::spawn(async move { cluster::drain_app(&runtime, &s, deadline).await });
                        }
                    }
                }
            }));
        }
        Ok(Host {
            state,
            runtime,
            health_addr,
            mesh_addr,
            socket: cfg.socket.clone(),
            cluster: cluster_cell,
            cfg,
            late_gate,
            reminders,
            listeners_down: down_tx,
            tasks,
            app_calls,
        })
    }

    /// The host's id.
    pub fn id(&self) -> &str {
        &self.cfg.host_id
    }

    /// The graceful stop sequence (DESIGN.md §8), each step logged with its duration.
    ///
    /// The record is withdrawn only once nothing handed to the app is unanswered: every turn in
    /// flight answered and every activation deactivated and released. A withdrawal tells peers
    /// that this host unregistered its actors, so they re-activate them at once; if a turn or a
    /// Deactivate turn is still running in the app (the drain or the deactivation timed out, or
    /// a fast stop skipped them), that would be two activations running app code together.
    /// Such a host instead fences itself and lets its record lapse: it stops renewing and
    /// withdraws nothing, so peers treat it as crashed and wait TTL + margin since they last
    /// saw it renew before they sweep its claims. This is the safer of the two ways out. Waiting
    /// for the app's answers instead would hold the stop for as long as the app takes, possibly
    /// forever, and the orchestrator's SIGKILL at the end of the grace period lands in the very
    /// same lapse anyway; the lapse does not depend on this process living on or on the app
    /// ever answering, it is the crash path every peer already handles, and a turn handed out
    /// is bounded by the lease (its not-after), so it is over before any peer can expire us.
    ///
    /// A host that has fenced stops fast whatever the signal: fencing already dropped its app's
    /// activations and cancelled their turns, it holds no claim a hand-over could pass on, and
    /// it can no longer publish `leaving`, so the graceful sequence would only wait out the
    /// drain timeout for a `leaving` record that never appears. The orchestrator restarts a
    /// fenced sidecar (its `/livez` fails) and that restart is the way back, so it must not be
    /// held for the drain timeout (20 s by default).
    pub async fn stop(self, kind: StopKind) {
        let t0 = Instant::now();
        let kind = match self.state.fence_reason() {
            Some(reason) if kind == StopKind::Graceful => {
                tracing::info!(%reason, "fenced: nothing to drain or hand over; stopping fast");
                StopKind::Fast
            }
            _ => kind,
        };
        self.state.set_leaving();
        // The calls made through the app socket so far: a graceful stop lets them finish.
        let calls_mark = self.app_calls.mark();
        tracing::info!(step = "readiness-false", "stopping");
        let cluster = self.cluster.get();
        if let Some(c) = cluster {
            let t = Instant::now();
            c.leaving().await;
            tracing::info!(
                step = "status-leaving",
                ms = t.elapsed().as_millis() as u64,
                "published leaving"
            );
        }
        // The reminder owner claims nothing more; what it claimed and has not started goes
        // back to the shard's next owner, what it started settles (within the drain).
        let reminders_deadline = match kind {
            StopKind::Graceful => Instant::now() + self.cfg.drain_timeout,
            StopKind::Fast => Instant::now(),
        };
        self.reminders.stop(reminders_deadline).await;
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
            let deactivated = self.runtime.deactivate_all(drain_deadline).await;
            tracing::info!(
                step = "deactivate",
                deactivated,
                ms = t.elapsed().as_millis() as u64,
                "activations deactivated and unregistered"
            );
            if let Some(c) = cluster {
                let t = Instant::now();
                c.hand_over(drain_deadline).await;
                tracing::info!(
                    step = "handoff",
                    ms = t.elapsed().as_millis() as u64,
                    "partitions handed over"
                );
            }
            // Calls made through the socket before the stop (routed to other hosts, or
            // re-routed from the actors deactivated above) finish while this host is still a
            // member its peers answer: cut off at the socket's close, a call is
            // outcome-unknown to its caller although it may have run.
            let t = Instant::now();
            let open = self
                .app_calls
                .settled_before(calls_mark, drain_deadline)
                .await;
            tracing::info!(
                step = "calls",
                still_open = open,
                ms = t.elapsed().as_millis() as u64,
                "calls made through the app socket before the stop"
            );
        }
        // Whether everything handed to the app was answered is judged *before* its stream ends:
        // an app whose stream ended drops what it still runs, which would make the host look
        // quiet and withdraw while that app code may still be running.
        let quiet = self.runtime.is_quiet();
        // The app's Serve stream ends cleanly (OK) once its actors are drained and deactivated,
        // before any GOAWAY: the app tells a stopping sidecar from a crashed one (UNAVAILABLE),
        // exactly as when it asked to be drained itself. A host that lapses instead tells its
        // app it is fenced (below), never "stopped cleanly".
        if (quiet || cluster.is_none())
            && let Some(session) = self.runtime.app()
        {
            let t = Instant::now();
            session.end_stream();
            let seen = tokio::time::timeout(APP_STREAM_END_WAIT, session.closed())
                .await
                .is_ok();
            tracing::info!(
                step = "app-stream-ended",
                app_closed = seen,
                ms = t.elapsed().as_millis() as u64,
                "the app's Serve stream ended with OK"
            );
        }
        if let Some(c) = cluster {
            let t = Instant::now();
            if quiet {
                c.withdraw().await;
                tracing::info!(
                    step = "withdraw",
                    ms = t.elapsed().as_millis() as u64,
                    "membership record withdrawn"
                );
            } else {
                let reason = format!(
                    "stopped with {} turn(s) still unanswered by the app and {} activation(s) \
                     still holding their claims",
                    self.runtime.in_flight(),
                    self.runtime.lifecycles()
                );
                tracing::error!(step = "lapse", %reason,
                    "not withdrawing the membership record: it is left to lapse (peers take \
                     over after TTL + margin); raise SIGX_DRAIN_TIMEOUT_MS or make the app \
                     answer its turns sooner");
                self.late_gate.fence(reason.clone());
                self.state.set_fenced(reason.clone());
                c.membership.abort();
                // The app drops every activation and cancels its turns (the fence notice).
                self.runtime.fence(&reason);
            }
        }
        let _ = self.listeners_down.send(true);
        // Give the servers a moment to send GOAWAY and finish answered streams.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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

pub(crate) async fn wait_down(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

async fn serve_socket(
    listener: UnixListener,
    app: AppService,
    max_payload: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<v1::actor_host_server::ActorHostServer<AppService>>()
        .await;
    // Advertise exactly what this socket serves (the mesh service shares the descriptor set but
    // is served on the mesh port only), in both protocol versions: Python's reflection client and
    // older grpcurl speak v1alpha only.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(sigx_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("sigx.actors.v1.ActorHost")
            .with_service_name("grpc.health.v1.Health")
    };
    let reflection_v1 = reflection().build_v1();
    let reflection_v1alpha = reflection().build_v1alpha();
    let svc = v1::actor_host_server::ActorHostServer::new(app)
        .max_decoding_message_size(max_payload + 64 * 1024)
        .max_encoding_message_size(max_payload + 64 * 1024);
    let mut builder = tonic::transport::Server::builder();
    let mut router = builder.add_service(svc).add_service(health_service);
    match (reflection_v1, reflection_v1alpha) {
        (Ok(v1), Ok(v1alpha)) => router = router.add_service(v1).add_service(v1alpha),
        (Err(e), _) | (_, Err(e)) => tracing::warn!(error = %e, "gRPC reflection unavailable"),
    }
    // Any `:authority` is accepted: on a Unix socket it names nothing (app/authority.rs).
    let incoming = futures::TryStreamExt::map_ok(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        crate::app::authority::AnyAuthority::new,
    );
    if let Err(e) = router
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
    {
        tracing::error!(error = %e, "app socket server failed");
    }
}

fn render_metrics(
    runtime: &Runtime,
    state: &HostState,
    cluster: Option<Vec<(String, u64)>>,
    cluster_histograms: Option<&crate::metrics::ClusterHistograms>,
) -> String {
    let mut all = runtime.counters().snapshot();
    all.extend(cluster.unwrap_or_default());
    crate::metrics::render(
        all,
        &runtime.activation_counts(),
        state.ready(),
        state.fence_reason().is_some(),
        &runtime.counters().histograms,
        &runtime.counters().reminders.lateness,
        cluster_histograms,
    )
}

/// Waits for SIGTERM or SIGINT.
pub async fn first_signal() -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        biased;
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
