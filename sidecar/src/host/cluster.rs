//! Bringing a host into the cluster once its app has registered, and taking it out again.

use super::late::{LateDispatcher, LateGate};
use super::{HostOptions, wait_down};
use crate::config::{Config, MembershipKind};
use crate::directory::{
    DirView, Directory, DirectoryConfig, KnownFromViews, PeerInfo, PeerStatus, ViewCell, ViewSource,
};
use crate::health::HostState;
use crate::membership::held_identity::HeldIdentity;
use crate::membership::{
    FenceReason, HostDescriptor, HostStatus, MembershipConfig, MembershipError, MembershipHandle,
    MembershipProvider, MembershipView, ProviderError, Subscription,
};
use crate::mesh::{
    MeshAuth, MeshClient, MeshClientConfig, MeshServerConfig, MeshService, TcpMeshListener,
    Verifier,
};
use crate::placement::{Inbound, Locator, Router, RouterConfig};
use crate::runtime::{ActorId, AppState, Runtime};
use async_trait::async_trait;
use sigx_proto::ActorError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The clustered pieces of a running host.
pub struct ClusterParts {
    /// This host's membership.
    pub membership: MembershipHandle,
    /// This host's side of the directory.
    pub directory: Directory,
    /// The routing loop.
    pub router: Arc<Router>,
    _view_feed: Subscription,
}

impl ClusterParts {
    /// Publishes `leaving`: no new activations here; callers re-place.
    pub(crate) async fn leaving(&self) {
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            self.membership.set_status(HostStatus::Leaving),
        )
        .await;
        if !matches!(r, Ok(Ok(()))) {
            tracing::warn!(?r, "could not publish leaving; continuing the stop");
        }
    }

    /// Lets the new owners of this host's former partitions collect from it: waits (bounded)
    /// until its own view shows it leaving and one beat has passed, so peers have observed it.
    pub(crate) async fn hand_over(&self, deadline: Instant) {
        let me = self.membership.self_id().to_string();
        let mut rx = self.membership.subscribe();
        let _ = tokio::time::timeout_at(
            deadline,
            rx.wait_for(|v| v.get(&me).is_some_and(|d| d.status == HostStatus::Leaving)),
        )
        .await;
    }

    /// Withdraws the membership record.
    pub async fn withdraw(&self) {
        match tokio::time::timeout(Duration::from_secs(5), self.membership.leave()).await {
            Ok(Ok(())) => {}
            other => tracing::warn!(
                ?other,
                "could not withdraw the membership record; peers will expire it"
            ),
        }
    }
}

impl Router {
    /// Counters for `/metrics`.
    pub fn status_counters(&self) -> Vec<(String, u64)> {
        use crate::app::Dispatcher;
        self.status().counters.into_iter().collect()
    }
}

fn peer_status(status: HostStatus) -> PeerStatus {
    match status {
        HostStatus::Joining => PeerStatus::Joining,
        HostStatus::Active => PeerStatus::Active,
        HostStatus::Leaving => PeerStatus::Leaving,
    }
}

/// The directory's view of a membership view.
pub fn dir_view(view: &MembershipView) -> DirView {
    DirView::new(
        view.version,
        view.hosts()
            .iter()
            .map(|h| {
                let peer = PeerInfo::new(
                    h.id.as_str(),
                    h.advertise.as_str(),
                    peer_status(h.status),
                    h.is_stateful(),
                )
                .with_epoch(h.active_epoch);
                match (&h.types, &h.stateful_types) {
                    (Some(_), Some(stateful)) => peer.with_stateful_types(stateful),
                    _ => peer,
                }
            })
            .collect(),
    )
}

/// The directory's view source fed by a host's membership: every membership view, in order,
/// becomes a directory view; the lease check asks the membership synchronously; a peer's "your
/// view lags" asks the membership to re-read. Keep the returned subscription alive.
pub fn directory_views(membership: &MembershipHandle) -> (Arc<ViewCell>, Subscription) {
    let lease_handle = membership.clone();
    let me = membership.self_id().to_string();
    let own_handle = membership.clone();
    let views = Arc::new(
        ViewCell::new(
            membership.self_id().to_string(),
            dir_view(&membership.view()),
            move || {
                lease_handle
                    .check_lease()
                    .map_err(|reason| super::turns::lease_fenced(&me, reason))
            },
        )
        .with_own_record(move || {
            let (status, epoch) = own_handle.own_record();
            (peer_status(status), epoch)
        }),
    );
    let feed = {
        let views = views.clone();
        membership.on_change(move |v| views.publish(dir_view(v)))
    };
    views.publish(dir_view(&membership.view()));
    let m = membership.clone();
    views.on_refresh_request(move || {
        let m = m.clone();
        tokio::spawn(async move {
            let _ = m.refresh().await;
        });
    });
    (views, feed)
}

/// The routing loop's lookups, answered by the directory.
pub struct DirectoryLocator(pub Directory);

#[async_trait]
impl Locator for DirectoryLocator {
    async fn locate(
        &self,
        actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<String>, ActorError> {
        Ok(self.0.lookup(actor, deadline).await?.map(|l| l.host))
    }
    async fn where_is(
        &self,
        actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<crate::directory::Located>, ActorError> {
        self.0.lookup(actor, deadline).await
    }
    async fn list(
        &self,
        actor_type: &str,
        page_size: usize,
        after: Option<sigx_proto::v1::ListCursor>,
        deadline: Instant,
    ) -> Result<crate::directory::ListPage, ActorError> {
        self.0
            .list_page(actor_type, page_size, after, deadline)
            .await
    }
    fn counters(&self) -> Vec<(String, u64)> {
        let c = self.0.counters();
        vec![
            ("hostSweeps".into(), c.host_sweeps),
            ("sweptEntries".into(), c.swept_entries),
            ("sweepsSkippedGraceful".into(), c.sweeps_skipped_graceful),
            ("partitionsRecovering".into(), c.partitions_recovering),
            ("collectionsRun".into(), c.collections_run),
            ("collectionTimeMs".into(), c.collection_time_ms),
            ("collectionsRestarted".into(), c.collections_restarted),
            ("conflictingReports".into(), c.conflicting_reports),
            ("lazyEvictions".into(), c.lazy_evictions),
            ("directoryEntries".into(), c.entries),
        ]
    }
}

pub(crate) struct BringUp {
    pub cfg: Config,
    pub opts: HostOptions,
    pub state: Arc<HostState>,
    pub runtime: Runtime,
    pub late_gate: Arc<LateGate>,
    pub late_dispatcher: Arc<LateDispatcher>,
    pub listener: TcpMeshListener,
    pub provider: Arc<dyn MembershipProvider>,
    pub mtls: Option<Arc<crate::mesh::MeshTls>>,
    pub cell: Arc<tokio::sync::OnceCell<ClusterParts>>,
    pub down: watch::Receiver<bool>,
}

/// Builds the membership store the configuration names (or takes the injected one). Called
/// before anything binds, so a bad path or missing pod identity is reported first.
pub(crate) async fn build_provider(
    cfg: &Config,
    opts: &HostOptions,
) -> Result<Arc<dyn MembershipProvider>, String> {
    if let Some(p) = &opts.provider {
        return Ok(p.clone());
    }
    match cfg.membership {
        MembershipKind::Sqlite => {
            let o = crate::membership::sqlite::SqliteOptions::new(&cfg.sqlite_path);
            crate::membership::sqlite::SqliteProvider::open_as(
                &o,
                cfg.host_id.clone(),
                &cfg.incarnation,
            )
            .map(|p| p as Arc<dyn MembershipProvider>)
            .map_err(|e| e.to_string())
        }
        MembershipKind::Kubernetes => {
            let o = crate::membership::kubernetes::KubernetesOptions {
                namespace: cfg.namespace.clone().unwrap_or_default(),
                cluster: cfg.cluster.clone(),
                role: cfg.role.clone(),
                pod_name: cfg.pod_name.clone().unwrap_or_default(),
                pod_uid: cfg.pod_uid.clone(),
                watch_backoff_max: Duration::from_secs(2),
            };
            o.validate().map_err(|e| e.to_string())?;
            let client = kube::Client::try_default().await.map_err(|e| {
                format!("cannot reach the Kubernetes API (in-cluster config or KUBECONFIG): {e}")
            })?;
            crate::membership::kubernetes::KubernetesProvider::new_as(
                client,
                o,
                cfg.host_id.clone(),
                &cfg.incarnation,
                opts.clock.clone(),
            )
            .map(|p| p as Arc<dyn MembershipProvider>)
            .map_err(|e| e.to_string())
        }
        MembershipKind::Postgres => {
            let mut o = crate::membership::postgres::PostgresOptions::new(
                cfg.membership_dsn.clone().unwrap_or_default(),
            );
            // A writer suspended inside a transaction stalls the others' renewals for at most
            // this long: a third of the TTL, so the others still renew in time, and long
            // enough that a busy host's own slow transaction is not cut off.
            o.hold_timeout =
                (cfg.ttl / 3).clamp(Duration::from_millis(200), Duration::from_secs(5));
            crate::membership::postgres::PostgresProvider::open_as(
                &o,
                cfg.host_id.clone(),
                &cfg.incarnation,
            )
            .await
            .map(|p| p as Arc<dyn MembershipProvider>)
            .map_err(|e| e.to_string())
        }
        MembershipKind::None => Err("no membership provider for --membership none".into()),
    }
}

/// Joins the cluster once the app has registered; then keeps readiness and fencing in step.
pub(crate) async fn bring_up(b: BringUp) {
    let BringUp {
        cfg,
        opts,
        state,
        runtime,
        late_gate,
        late_dispatcher,
        listener,
        provider,
        mtls,
        cell,
        down,
    } = b;
    // 1. The app registers first: the host publishes the types it registers.
    let mut app_rx = runtime.watch_app();
    let session = loop {
        if let AppState::Attached(s) = &*app_rx.borrow_and_update() {
            break s.clone();
        }
        if app_rx.changed().await.is_err() {
            return;
        }
    };
    let mut descriptor = HostDescriptor::new(
        cfg.host_id.clone(),
        cfg.advertise.clone(),
        Some(session.registry.all_types()),
        Some(session.registry.stateful_types()),
    );
    if let Some(node) = &cfg.node {
        descriptor.meta.insert("node".into(), node.clone());
    }
    if let Some(zone) = cfg.zone.as_ref().filter(|z| !z.is_empty()) {
        descriptor.meta.insert("zone".into(), zone.clone());
    }
    descriptor.meta.insert("role".into(), cfg.role.clone());
    descriptor.meta.insert(
        crate::health::META_KEY.into(),
        crate::health::published_addr(&cfg.advertise, cfg.health_addr),
    );
    descriptor.started_at_unix_ms = opts.clock.wall_unix_ms();

    // 2. Join as joining.
    let mut mcfg = MembershipConfig::with_timing(cfg.beat, cfg.ttl);
    // The drift margin covers clock *rate* differences between machines, which scale with the
    // interval measured: a tenth of the TTL, at most the default second.
    mcfg.drift_margin = (cfg.ttl / 10).min(mcfg.drift_margin);
    mcfg.coalesce = cfg.membership_coalesce;
    let membership = {
        let mut backoff = Duration::from_millis(100);
        loop {
            match crate::membership::start(
                provider.clone(),
                descriptor.clone(),
                mcfg.clone(),
                opts.clock.clone(),
            )
            .await
            {
                Ok(m) => break m,
                Err(MembershipError::Provider(ProviderError::Conflict { holder, .. })) => {
                    // Our explicit id is held by another incarnation: a live process (stop
                    // loudly) or a dead one whose record has not lapsed (expire it, join).
                    let judged = crate::membership::held_identity::judge_held_record(
                        provider.as_ref(),
                        &cfg.host_id,
                        mcfg.drift_margin,
                        &opts.clock,
                    )
                    .await;
                    match judged {
                        Ok(HeldIdentity::Free) => continue,
                        Ok(HeldIdentity::Live { holder: live }) => {
                            let reason = format!(
                                "host id {:?} is in use: its membership record is held and renewed \
                                 by another live process ({live}); give every process its own \
                                 --host-id, or leave it unset for the pod name plus an \
                                 incarnation suffix",
                                cfg.host_id
                            );
                            tracing::error!(first_holder = %holder, "{reason}");
                            state.set_unusable(reason);
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot judge the record holding our host id; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(5));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "join failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    };

    // Our load rides on our renewals (membership/load.rs), for peers' `least-loaded` placement.
    {
        let runtime = runtime.clone();
        membership.set_load_source(Arc::new(move || crate::membership::LoadSample {
            activations: runtime.activation_count() as u64,
            turns_total: runtime
                .counters()
                .turns
                .load(std::sync::atomic::Ordering::Relaxed),
        }));
    }

    // 3. The directory, fed by the membership views in order.
    let (views, feed) = directory_views(&membership);
    let auth = match &cfg.secret {
        Some(secret) => match crate::mesh::MeshSecret::new(secret.expose()).and_then(|s| match &cfg
            .secret_accepted
        {
            Some(accepted) => {
                tracing::info!(
                    "mesh secret rotation in progress: signing with SIGX_SECRET_FILE, also \
                         accepting SIGX_SECRET_ACCEPT_FILE"
                );
                s.accepting(accepted.expose())
            }
            None => Ok(s),
        }) {
            Ok(s) if cfg.accept_unsigned => {
                tracing::warn!(
                    "mesh requests without a MAC are ACCEPTED (--accept-unsigned): signing every \
                     request with the secret, but any process that can reach the mesh port can \
                     act as a host; only for switching a running cluster between --insecure and \
                     a secret"
                );
                MeshAuth::Secret(s.accepting_unsigned())
            }
            Ok(s) => MeshAuth::Secret(s),
            Err(e) => {
                state.set_fenced(format!("mesh secret refused: {e}"));
                return;
            }
        },
        None if mtls.is_some() => {
            // Only with the written --insecure (config.rs refuses mTLS alone).
            tracing::info!(
                "mesh peers are authenticated by mutual TLS only (no HMAC secret, --insecure)"
            );
            MeshAuth::Insecure
        }
        None => MeshAuth::from_config(None, true).expect("insecure is explicit"),
    };
    // An edited secret file is used without a restart (mesh/secret_reload.rs).
    if let (MeshAuth::Secret(secret), Some(files), Some(every), Some(sign)) =
        (&auth, &cfg.secret_files, cfg.secret_reload, &cfg.secret)
    {
        use crate::mesh::secret_reload::{KEEP_PREVIOUS, digest, watch};
        let started = (
            digest(sign.expose()),
            cfg.secret_accepted.as_ref().map(|a| digest(a.expose())),
        );
        let watcher = watch(secret.clone(), files.clone(), started, every, KEEP_PREVIOUS);
        let down = down.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = watcher => {}
                () = wait_down(down) => {}
            }
        });
    }
    let connector: Arc<dyn crate::mesh::Connector> = match &mtls {
        // The server dialled must be the host it is dialled as.
        Some(tls) => Arc::new(
            crate::mesh::TlsConnector::new(opts.connector.clone(), tls.clone())
                .with_peer_identity(cfg.cluster.clone()),
        ),
        None => opts.connector.clone(),
    };
    let mesh = Arc::new(MeshClient::new(
        cfg.host_id.clone(),
        auth.clone(),
        opts.clock.clone(),
        connector,
        MeshClientConfig {
            max_message_bytes: cfg.max_payload_bytes + 64 * 1024,
            ..MeshClientConfig::default()
        },
    ));
    let directory = Directory::start(
        views.clone() as Arc<dyn ViewSource>,
        mesh.clone(),
        DirectoryConfig::default(),
    );
    let router = Arc::new(Router::new(
        RouterConfig {
            retries: cfg.retries,
            policy: cfg.placement.into(),
            type_policies: cfg
                .placement_types
                .iter()
                .map(|(ty, p)| (ty.clone(), (*p).into()))
                .collect(),
            ..RouterConfig::default()
        },
        membership.clone(),
        runtime.clone(),
        mesh.clone(),
        Arc::new(DirectoryLocator(directory.clone())),
        state.clone(),
    ));
    // Rebalancing, and its redirect of moved actors in front of the directory's claim.
    let rebalancer = Arc::new(crate::placement::rebalance::Rebalancer::new(
        cfg.rebalance,
        membership.clone(),
        runtime.clone(),
    ));
    late_gate.set(super::turns::bound_by_lease(
        &runtime,
        &membership,
        Arc::new(crate::placement::rebalance::RebalanceGate::new(
            Arc::new(directory.gate()),
            rebalancer.clone(),
        )),
    ));
    // Ends on its own once the host fences or leaves.
    drop(rebalancer.spawn());
    late_dispatcher.set(router.clone());

    // 4. The mesh server (the listener was bound before the join).
    let server_cfg = MeshServerConfig {
        max_message_bytes: cfg.max_payload_bytes + 64 * 1024,
        ..MeshServerConfig::default()
    };
    let verifier = Verifier::new(
        auth,
        opts.clock.clone(),
        Duration::from_secs(60),
        Arc::new(KnownFromViews(views.clone() as Arc<dyn ViewSource>)),
    );
    // With mTLS a peer's claimed host id must be the one its certificate names.
    let verifier = Arc::new(match &mtls {
        Some(_) => verifier.with_cert_identity(cfg.cluster.clone()),
        None => verifier,
    });
    let service = MeshService::new(
        Arc::new(Inbound::new(router.clone())),
        Arc::new(directory.clone()),
        &server_cfg,
    );
    tokio::spawn(async move {
        let served = match mtls {
            Some(tls) => {
                let listener = crate::mesh::TlsListener::new(listener, tls, Duration::from_secs(5));
                crate::mesh::serve(listener, verifier, service, server_cfg, wait_down(down)).await
            }
            None => {
                crate::mesh::serve(listener, verifier, service, server_cfg, wait_down(down)).await
            }
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "mesh server failed");
        }
    });

    let _ = cell.set(ClusterParts {
        membership: membership.clone(),
        directory,
        router,
        _view_feed: feed,
    });

    // 5. Active, then ready once our own view shows our own active record. The status follows
    //    the app: active while it is registered, leaving while it drains, joining while none is.
    //    Becoming active again (an app re-attached) is a new active epoch (`set_status`): the
    //    directory forgets every partition made ready before and collects anew, and peers that
    //    still show the earlier active record refuse the collection until they see this one.
    let me = cfg.host_id.clone();
    let mut view_rx = membership.subscribe();
    let mut fence_rx = membership.fenced_signal();
    let mut draining: Option<u64> = None;
    loop {
        if let Some(reason) = fence_rx.borrow_and_update().clone()
            && reason != FenceReason::Left
        {
            on_fence(&state, &runtime, &reason, cfg.exit_on_fence);
            return;
        }
        let session = match &*app_rx.borrow_and_update() {
            AppState::Attached(s) => Some(s.clone()),
            AppState::Detached => None,
        };
        if let Some(s) = &session
            && s.drain_requested()
            && draining != Some(s.id)
        {
            draining = Some(s.id);
            let (runtime, s, deadline) = (
                runtime.clone(),
                s.clone(),
                Instant::now() + cfg.drain_timeout,
            );
            let membership = membership.clone();
            tokio::spawn(async move {
                if let Err(e) = membership.set_status(HostStatus::Leaving).await {
                    tracing::warn!(error = %e, "could not publish leaving for the app's drain");
                }
                drain_app(&runtime, &s, deadline).await;
            });
        }
        let self_status = view_rx.borrow_and_update().get(&me).map(|d| d.status);
        let wanted = match &session {
            Some(s) if draining == Some(s.id) => HostStatus::Leaving,
            Some(_) => HostStatus::Active,
            None => HostStatus::Joining,
        };
        if !state.leaving() {
            state
                .set_ready(wanted == HostStatus::Active && self_status == Some(HostStatus::Active));
            if self_status.is_some()
                && self_status != Some(wanted)
                && wanted != HostStatus::Leaving
                && let Err(e) = membership.set_status(wanted).await
            {
                tracing::warn!(error = %e, status = wanted.as_str(), "could not publish status");
            }
        }
        let drain_signal = async {
            match &session {
                Some(s) if draining != Some(s.id) => s.drain_wanted().await,
                _ => futures::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            r = app_rx.changed() => if r.is_err() { return },
            r = view_rx.changed() => if r.is_err() { return },
            r = fence_rx.changed() => if r.is_err() { return },
            _ = drain_signal => {}
        }
    }
}

/// Drains the app that asked for it: in-flight turns finish, every activation gets its
/// Deactivate turn and is unregistered, then the stream ends so the app can exit.
pub(crate) async fn drain_app(
    runtime: &Runtime,
    session: &Arc<crate::runtime::AppSession>,
    deadline: Instant,
) {
    let t = Instant::now();
    let drained = runtime.drain(deadline).await;
    runtime.deactivate_all(deadline).await;
    tracing::info!(
        drained,
        ms = t.elapsed().as_millis() as u64,
        "app drained: ending its stream"
    );
    session.end_stream();
}

fn on_fence(state: &HostState, runtime: &Runtime, reason: &FenceReason, exit: bool) {
    tracing::error!(%reason, "FENCED: this host can no longer prove its membership; every \
        activation is dropped and new ones are refused until the orchestrator restarts it");
    state.set_fenced(reason.to_string());
    // The app drops its activations and cancels its turns; the record is withdrawn only once
    // they are over (the membership's withdrawal is held by `turns::bound_by_lease`).
    runtime.fence(&reason.to_string());
    if exit {
        tracing::error!("exiting on fence (SIGX_EXIT_ON_FENCE)");
        std::process::exit(70);
    }
}
