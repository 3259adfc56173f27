//! A Kubernetes API server test double that the real `kube` client talks HTTP/1.1 to.
//!
//! Test-only (this crate never ships). It holds objects of any group/version/kind as JSON
//! and implements what membership and the operator lean on: one global resourceVersion,
//! create with `generateName` and 409 AlreadyExists, GET, PUT with 409 Conflict on a stale
//! resourceVersion, DELETE with preconditions, finalizers and ownerReference cascade, lists
//! with label and field selectors (and `limit`/`continue`), watches (ADDED/MODIFIED/DELETED,
//! resume from a resourceVersion, 410 Gone after compaction, bookmarks, streaming lists),
//! `/status` and `/scale` subresources, merge, strategic (as merge), JSON and server-side
//! apply patches (with field-ownership conflicts), and `meta/v1` Status error bodies.
//!
//! An outage switch ([`Mode`]) makes every request fail with 503 (and cuts open watches) or
//! hang until switched back — for everyone ([`KubeDouble::fail`], [`KubeDouble::stall`]) or for
//! one named client only ([`KubeDouble::client_named`] + [`KubeDouble::partition`]: a host or
//! operator cut off while the rest of the world keeps writing). [`KubeDouble::stats`] counts
//! requests by verb and by client, and watch events sent (the fan-out, summed over watchers),
//! which is how the Lease provider's fan-out and the operator's API load are measured.
//!
//! Lease PUTs behave as genericregistry's `Store.Update` does for a kind with
//! `AllowCreateOnUpdate`: a PUT on a deleted Lease creates it again (ignoring the body's
//! resourceVersion), unless the body carries a `metadata.uid`, the one update precondition the
//! server honours: then it is a 409 "Precondition failed: UID in precondition: …" (also against
//! a Lease re-created under another uid). Other kinds answer a PUT on a missing object with 404.
//!
//! Write semantics follow the API server where clients can tell: a write that changes
//! nothing consumes no resourceVersion and sends no event (controllers rely on this not to
//! loop); `metadata.generation` moves only with changes outside metadata and status; writes to
//! the main resource keep `status`, writes to `/status` change only `status`; a watch sees an
//! object leaving its label selection as DELETED and entering it as ADDED; a watch from a
//! compacted resourceVersion gets 200 with an ERROR event of code 410 (which kube-runtime's
//! watcher answers with a re-list).
//!
//! ```no_run
//! # async fn demo() {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! let double = sigx_e2e::kube_double::KubeDouble::start().await;
//! let cms: kube::Api<ConfigMap> = kube::Api::namespaced(double.client(), "default");
//! # }
//! ```
//!
//! Known simplifications: strategic merge patches replace lists instead of merging them by
//! key; server-side apply tracks ownership per leaf with lists atomic; the garbage collector
//! runs synchronously inside the DELETE (and, with [`KubeDouble::collect_orphans`], at
//! create time for dependents of owners that are already gone); a watch from a future
//! resourceVersion does not wait; there is no discovery beyond `/version`, no RBAC, no
//! built-in admission (install one per group with [`KubeDouble::admit_with`]; OpenAPI schemas
//! are not checked) and no `dryRun`.

mod http;
pub mod patch;
pub mod selector;
pub mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use self::http::{CLIENT_HEADER, Counters, Modes, Shared};
pub use self::store::ResourceRef;
use self::store::Store;

/// How the double answers requests: the outage switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Normal operation.
    #[default]
    Serving,
    /// Every request gets 503 ServiceUnavailable and open watch streams break.
    Failing,
    /// Every request hangs (and open watches deliver nothing) until the mode changes.
    Stalling,
}

/// Counters for assertions and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// HTTP requests received, including ones refused by an outage.
    pub requests: u64,
    /// Requests that reached routing, by Kubernetes verb (`get`, `list`, `watch`, `create`,
    /// `update`, `patch`, `delete`, `deletecollection`).
    pub by_verb: BTreeMap<&'static str, u64>,
    /// Requests received per client name (see [`KubeDouble::client_named`]; "" for unnamed
    /// clients), including ones refused by an outage.
    pub by_client: BTreeMap<String, u64>,
    /// ADDED/MODIFIED/DELETED/ERROR lines written to watch streams, summed over all watchers:
    /// the fan-out.
    pub watch_events_sent: u64,
    /// BOOKMARK lines written.
    pub bookmarks_sent: u64,
    /// Watch streams opened.
    pub watches_started: u64,
    /// Watch streams open now.
    pub active_watches: usize,
    /// Writes that changed something (each one consumed a resourceVersion).
    pub mutations: u64,
    /// The current global resourceVersion.
    pub resource_version: u64,
}

/// A running double. Dropping it stops the server and every connection.
pub struct KubeDouble {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl KubeDouble {
    /// Binds 127.0.0.1 on an ephemeral port and starts serving.
    ///
    /// # Panics
    /// If no local port can be bound (a broken test environment).
    pub async fn start() -> KubeDouble {
        Self::try_start()
            .await
            .expect("bind 127.0.0.1:0 for the Kubernetes API double")
    }

    /// Like [`KubeDouble::start`], returning the bind error.
    pub async fn try_start() -> std::io::Result<KubeDouble> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Modes::default());
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            mode,
            counters: Counters::default(),
            bookmark_interval: Mutex::new(Duration::from_secs(1)),
        });
        let accept_shared = shared.clone();
        let server = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let shared = accept_shared.clone();
                        connections.spawn(async move {
                            let service = service_fn(move |req| self::http::handle(shared.clone(), req));
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(KubeDouble {
            addr,
            shared,
            server,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address the double listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client configuration for the double: namespace `default`, and kube's built-in retry
    /// of 503s turned off, so an injected outage surfaces as errors rather than being hidden
    /// by up to 15 retries with exponential backoff.
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("a valid URL"));
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(2));
        config
    }

    /// A real `kube::Client` for the double (see [`KubeDouble::config`]).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("a client for a plain-HTTP config")
    }

    /// A client whose requests carry `name`, so [`KubeDouble::partition`] can cut off just this
    /// client (say, the operator) while tests keep writing through another.
    pub fn client_named(&self, name: &str) -> kube::Client {
        let mut config = self.config();
        config.headers.push((
            ::http::HeaderName::from_static(CLIENT_HEADER),
            ::http::HeaderValue::from_str(name).expect("a client name is a valid header value"),
        ));
        kube::Client::try_from(config).expect("a client for a plain-HTTP config")
    }

    /// Puts one named client (see [`KubeDouble::client_named`]) in `mode`: `Failing` or
    /// `Stalling` partitions it from the server, `Serving` heals it. A global outage still
    /// applies to everyone.
    pub fn partition(&self, client: &str, mode: Mode) {
        self.shared.mode.send_modify(|m| {
            if mode == Mode::Serving {
                m.clients.remove(client);
            } else {
                m.clients.insert(client.to_owned(), mode);
            }
        });
    }

    /// Stalls (or resumes) the watches of one named client (see [`KubeDouble::client_named`]):
    /// they deliver nothing, and keep what happens for later, while the client's other requests
    /// (GET, PUT, DELETE, lists) are served as usual: a watch that lags while reads and writes
    /// work.
    pub fn stall_watches(&self, client: &str, stalled: bool) {
        self.shared.mode.send_modify(|m| {
            if stalled {
                m.stalled_watches.insert(client.to_owned());
            } else {
                m.stalled_watches.remove(client);
            }
        });
    }

    /// A client with kube's default retry policy on, as a production binary would have.
    pub fn client_with_retries(&self) -> kube::Client {
        let mut config = self.config();
        config.default_retry = true;
        kube::Client::try_from(config).expect("a client for a plain-HTTP config")
    }

    /// Flips the outage switch.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.send_modify(|m| m.global = mode);
    }

    /// Every request fails with 503 and watches break, until [`KubeDouble::recover`].
    pub fn fail(&self) {
        self.set_mode(Mode::Failing);
    }

    /// Every request hangs, until [`KubeDouble::recover`].
    pub fn stall(&self) {
        self.set_mode(Mode::Stalling);
    }

    /// Back to normal; stalled requests proceed.
    pub fn recover(&self) {
        self.set_mode(Mode::Serving);
    }

    /// The global mode.
    pub fn mode(&self) -> Mode {
        self.shared.mode.borrow().global
    }

    /// How often watches that allow bookmarks get one (default 1 s). Applies to watches
    /// started afterwards.
    pub fn set_bookmark_interval(&self, every: Duration) {
        *self
            .shared
            .bookmark_interval
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = every;
    }

    /// Drops all change history: a watch resuming from an earlier resourceVersion gets 410.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Keeps only the last `limit` changes (None: all), like etcd's compaction.
    pub fn set_history_limit(&self, limit: Option<usize>) {
        self.shared.store().set_history_limit(limit);
    }

    /// Makes the garbage collector also delete objects *created* with owner references that
    /// all point at objects that do not exist (as a real cluster's collector does, shortly
    /// after). Off by default, so tests may use made-up owner uids (a Lease owned by a Pod the
    /// double never saw); turn it on to test controllers racing a deletion.
    pub fn collect_orphans(&self, on: bool) {
        self.shared.store().collect_orphans = on;
    }

    /// Installs an admission check for every object of an API group (see [`store::Admission`]),
    /// e.g. the sigx CRDs' CEL rules, so an invalid spec is refused with 422 like a real API
    /// server would.
    pub fn admit_with(
        &self,
        group: &str,
        check: impl Fn(&Value, Option<&Value>) -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.shared
            .store()
            .admission
            .insert(group.to_owned(), std::sync::Arc::new(check));
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        let store = self.shared.store();
        Stats {
            requests: c.requests.load(Ordering::Relaxed),
            by_verb: c.by_verb.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            by_client: c
                .by_client
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            watch_events_sent: c.watch_events_sent.load(Ordering::Relaxed),
            bookmarks_sent: c.bookmarks_sent.load(Ordering::Relaxed),
            watches_started: c.watches_started.load(Ordering::Relaxed),
            active_watches: store.active_watches(),
            mutations: store.mutations,
            resource_version: store.resource_version(),
        }
    }

    /// Zeroes the request and event counters (not the store).
    pub fn reset_stats(&self) {
        let c = &self.shared.counters;
        c.requests.store(0, Ordering::Relaxed);
        c.watch_events_sent.store(0, Ordering::Relaxed);
        c.bookmarks_sent.store(0, Ordering::Relaxed);
        c.watches_started.store(0, Ordering::Relaxed);
        c.by_verb.lock().unwrap_or_else(|p| p.into_inner()).clear();
        c.by_client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.shared.store().mutations = 0;
    }

    /// Reads an object directly (no HTTP, not counted), e.g.
    /// `get_json(&ResourceRef::new("apps", "v1", "deployments"), Some("ns"), "web")`.
    pub fn get_json(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.shared.store().get(res, namespace, name).ok()
    }

    /// Lists objects directly (no HTTP, not counted); all namespaces when `namespace` is None.
    pub fn list_json(&self, res: &ResourceRef, namespace: Option<&str>) -> Vec<Value> {
        let list = self
            .shared
            .store()
            .list(
                res,
                namespace,
                &Default::default(),
                &Default::default(),
                None,
                None,
            )
            .expect("an unpaginated list cannot fail");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// The field managers that own fields of an object (server-side apply bookkeeping).
    pub fn field_managers(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Vec<String>> {
        self.shared
            .store()
            .managers(res, namespace, name)
            .map(|m| m.into_iter().map(|(name, _)| name).collect())
    }
}

impl ResourceRef {
    /// Names a resource: group (empty for core), version, plural.
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
        }
    }
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection.
        self.server.abort();
        // Wake stalled requests so their tasks end too.
        self.shared.mode.send_modify(|m| m.global = Mode::Failing);
    }
}

/// Writes a kube config into `dir` whose current context points at the double's `url` with
/// `namespace`, for processes (the operator, the sidecar, the CLI) that read `KUBECONFIG`.
pub fn write_kubeconfig(dir: &std::path::Path, url: &str, namespace: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {url}\n\
             contexts:\n- name: double\n  context:\n    cluster: double\n    user: nobody\n    namespace: {namespace}\n\
             current-context: double\nusers:\n- name: nobody\n  user: {{}}\n"
        ),
    )
    .expect("write the kube config");
    path
}
