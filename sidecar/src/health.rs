//! The HTTP health and metrics endpoint: `/livez`, `/readyz`, `/startupz`, `/metrics`, and
//! `/drain`.
//!
//! * `/startupz` passes once every listener is bound (so a native-sidecar startupProbe holds the
//!   app back until the socket exists).
//! * `/readyz` passes while the host can serve: an app is registered, the host is active, and it
//!   is neither leaving nor fenced.
//! * `/livez` fails once the host has fenced (503): an orchestrator restart is the way back.
//! * `/drain` drains the attached app (as its own `Drain` would) and answers once that is over:
//!   the app container's preStop hook, so a pod's stop holds for any app, whatever its SDK does
//!   on SIGTERM. Off unless a token is configured (`SIGX_DRAIN_TOKEN`), and refused (403)
//!   without that token in [`DRAIN_TOKEN_HEADER`]: the port is reachable from the pod network.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{HeaderMap, Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The header `/drain` reads its token from.
pub const DRAIN_TOKEN_HEADER: &str = "x-sigx-drain-token";

/// What `/drain` runs once its token checked: drains the app and resolves with the answer.
pub type DrainHook =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, (StatusCode, String)> + Send + Sync>;

struct DrainEndpoint {
    token: String,
    run: DrainHook,
}

/// The host's lifecycle, as probes see it.
pub struct HostState {
    started: watch::Sender<bool>,
    ready: watch::Sender<bool>,
    leaving: watch::Sender<bool>,
    fence: watch::Sender<Option<String>>,
    unusable: watch::Sender<Option<String>>,
    metrics: Mutex<Option<Arc<dyn Fn() -> String + Send + Sync>>>,
    drain: Mutex<Option<Arc<DrainEndpoint>>>,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("state", &self.state_name())
            .field("fence", &self.fence_reason())
            .finish()
    }
}

impl Default for HostState {
    fn default() -> Self {
        HostState {
            started: watch::channel(false).0,
            ready: watch::channel(false).0,
            leaving: watch::channel(false).0,
            fence: watch::channel(None).0,
            unusable: watch::channel(None).0,
            metrics: Mutex::new(None),
            drain: Mutex::new(None),
        }
    }
}

impl HostState {
    /// Every listener is bound.
    pub fn set_started(&self) {
        self.started.send_replace(true);
    }
    /// Whether every listener is bound.
    pub fn started(&self) -> bool {
        *self.started.borrow()
    }
    /// Sets readiness (ignored once leaving or fenced).
    pub fn set_ready(&self, ready: bool) {
        let ready = ready && !self.leaving() && self.fence_reason().is_none();
        self.ready.send_replace(ready);
    }
    /// Whether the host is ready.
    pub fn ready(&self) -> bool {
        *self.ready.borrow()
    }
    /// Watches readiness.
    pub fn watch_ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }
    /// The host began its graceful stop: readiness fails from now on.
    pub fn set_leaving(&self) {
        self.leaving.send_replace(true);
        self.ready.send_replace(false);
    }
    /// Whether the host is stopping.
    pub fn leaving(&self) -> bool {
        *self.leaving.borrow()
    }
    /// The host fenced (terminal): liveness and readiness fail from now on.
    pub fn set_fenced(&self, reason: String) {
        self.fence.send_if_modified(|f| {
            if f.is_none() {
                *f = Some(reason);
                true
            } else {
                false
            }
        });
        self.ready.send_replace(false);
    }
    /// Why the host fenced, if it did.
    pub fn fence_reason(&self) -> Option<String> {
        self.fence.borrow().clone()
    }
    /// The host found after start-up that its configuration cannot work (its explicit host id
    /// is held by another live process): the process should exit as for a configuration error
    /// (64) rather than run on unready. The first reason wins.
    pub fn set_unusable(&self, reason: String) {
        self.unusable.send_if_modified(|u| {
            if u.is_some() {
                return false;
            }
            *u = Some(reason);
            true
        });
        self.ready.send_replace(false);
    }
    /// Waits until [`HostState::set_unusable`] is called; returns its reason.
    pub async fn unusable(&self) -> String {
        let mut rx = self.unusable.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                return futures::future::pending().await;
            }
        }
    }
    /// Watches the fence.
    pub fn watch_fence(&self) -> watch::Receiver<Option<String>> {
        self.fence.subscribe()
    }
    /// Installs the function that renders `/metrics`.
    pub fn set_metrics(&self, render: Arc<dyn Fn() -> String + Send + Sync>) {
        *self.metrics.lock().expect("metrics lock") = Some(render);
    }
    /// Turns `/drain` on: requests carrying `token` in [`DRAIN_TOKEN_HEADER`] run `run`.
    pub fn set_drain(&self, token: String, run: DrainHook) {
        *self.drain.lock().expect("drain lock") = Some(Arc::new(DrainEndpoint { token, run }));
    }
    /// The state's name for `Status`.
    pub fn state_name(&self) -> &'static str {
        if self.fence_reason().is_some() {
            "fenced"
        } else if self.leaving() {
            "leaving"
        } else if self.ready() {
            "ready"
        } else if self.started() {
            "waiting-for-app"
        } else {
            "starting"
        }
    }
}

fn respond(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r
}

fn route(state: &HostState, path: &str) -> Response<Full<Bytes>> {
    match path {
        "/livez" => match state.fence_reason() {
            Some(reason) => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("fenced: {reason}\n"),
            ),
            None => respond(StatusCode::OK, "ok\n".into()),
        },
        "/readyz" => {
            if state.ready() {
                respond(StatusCode::OK, "ready\n".into())
            } else {
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {}\n", state.state_name()),
                )
            }
        }
        "/startupz" => {
            if state.started() {
                respond(StatusCode::OK, "started\n".into())
            } else {
                respond(StatusCode::SERVICE_UNAVAILABLE, "starting\n".into())
            }
        }
        "/metrics" => {
            let render = state.metrics.lock().expect("metrics lock").clone();
            let body = render.map(|f| f()).unwrap_or_default();
            let mut r = respond(StatusCode::OK, body);
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            "not found: try /livez /readyz /startupz /metrics /drain\n".into(),
        ),
    }
}

/// `/drain`: off (404) without a configured token, refused (403) without the right one, else
/// the hook's answer (it resolves once the app is drained).
async fn drain_route(state: &HostState, headers: &HeaderMap) -> Response<Full<Bytes>> {
    let endpoint = state.drain.lock().expect("drain lock").clone();
    let Some(endpoint) = endpoint else {
        return respond(
            StatusCode::NOT_FOUND,
            "/drain is off: the sidecar was started without SIGX_DRAIN_TOKEN\n".into(),
        );
    };
    let given = headers.get(DRAIN_TOKEN_HEADER).map(|v| v.as_bytes());
    if !given.is_some_and(|g| same_bytes(g, endpoint.token.as_bytes())) {
        return respond(
            StatusCode::FORBIDDEN,
            format!("drain refused: the {DRAIN_TOKEN_HEADER} header is missing or wrong\n"),
        );
    }
    let (code, body) = (endpoint.run)().await;
    respond(code, body)
}

/// Compares in time independent of where the inputs differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves the health endpoint on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: Arc<HostState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut shutdown = Box::pin(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            // A stop wins over a flood of connections.
            biased;
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "health accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let state = state.clone();
                async move {
                    if req.uri().path() == "/drain" {
                        return Ok::<_, Infallible>(drain_route(&state, req.headers()).await);
                    }
                    Ok(route(&state, req.uri().path()))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// The descriptor meta key under which a host publishes its health/metrics address.
pub const META_KEY: &str = "health";

/// The health address a host publishes in its descriptor (`meta.health`), so a dashboard or a
/// scraper that reads the membership store finds every host's `/metrics`: the bound address,
/// except that a wildcard bind (`0.0.0.0:9090`, `[::]:9090`) is published as the advertise host
/// (the pod IP, by default) with the bound port.
pub fn published_addr(advertise: &str, bound: std::net::SocketAddr) -> String {
    if !bound.ip().is_unspecified() {
        return bound.to_string();
    }
    let host = advertise
        .rsplit_once(':')
        .map_or(advertise, |(host, _port)| host);
    format!("{host}:{}", bound.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_health_bind_is_published_under_the_advertise_host() {
        let any: std::net::SocketAddr = "0.0.0.0:9090".parse().unwrap();
        assert_eq!(published_addr("10.1.2.3:7311", any), "10.1.2.3:9090");
        assert_eq!(
            published_addr("[fd00::7]:7311", "[::]:9091".parse().unwrap()),
            "[fd00::7]:9091"
        );
        assert_eq!(published_addr("pod-a.sigx:7311", any), "pod-a.sigx:9090");
        let bound: std::net::SocketAddr = "127.0.0.1:4242".parse().unwrap();
        assert_eq!(published_addr("10.1.2.3:7311", bound), "127.0.0.1:4242");
    }

    #[test]
    fn probes_follow_the_lifecycle() {
        let s = HostState::default();
        assert_eq!(
            route(&s, "/startupz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.set_started();
        assert_eq!(route(&s, "/startupz").status(), StatusCode::OK);
        assert_eq!(
            route(&s, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.set_ready(true);
        assert_eq!(route(&s, "/readyz").status(), StatusCode::OK);
        assert_eq!(route(&s, "/livez").status(), StatusCode::OK);
        s.set_fenced("lease lost".into());
        assert_eq!(
            route(&s, "/livez").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            route(&s, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.set_ready(true);
        assert!(!s.ready(), "a fenced host never becomes ready again");
        assert_eq!(s.state_name(), "fenced");
    }
}
