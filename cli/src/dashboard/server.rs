//! The dashboard's HTTP server (hyper, HTTP/1.1): the page, `/api/fleet` (the live snapshot)
//! and the actor search (`/api/actors/where`, `/api/actors/list`: the app API's `Locate` and
//! `ListActors` through the first sidecar that answers).

use super::kube::KubeSource;
use super::probe::{Probe, Target, probe};
use super::{Sources, page, snapshot};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use sigx_sdk::{Client, Host};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// Actors a list answers at most (the page shows a search result, not an export).
const LIST_LIMIT: usize = 1000;

/// What every request shares.
pub struct State {
    sources: Sources,
    /// `--kubernetes`: the hosts come from the cluster's Leases, not from `sources`.
    kube: Option<KubeSource>,
    interval: Duration,
    timeout: Duration,
    /// The descriptor each source last answered with, so a sidecar that stops answering keeps
    /// its name (and node) on the page.
    last_seen: Mutex<BTreeMap<String, Host>>,
    /// The last snapshot and when it was made: polls that arrive within half an interval of it
    /// (several open pages) share it, so the sidecars are asked about once per interval however
    /// many pages poll. Held across a probe round, so concurrent polls wait for one round.
    recent: tokio::sync::Mutex<Option<(tokio::time::Instant, Value)>>,
}

impl State {
    pub fn new(
        sources: Sources,
        kube: Option<KubeSource>,
        interval: Duration,
        timeout: Duration,
    ) -> Arc<State> {
        Arc::new(State {
            sources,
            kube,
            interval,
            timeout,
            last_seen: Mutex::new(BTreeMap::new()),
            recent: tokio::sync::Mutex::new(None),
        })
    }

    async fn fleet(&self) -> Value {
        let mut recent = self.recent.lock().await;
        if let Some((at, v)) = recent.as_ref()
            && at.elapsed() < self.interval / 2
        {
            return v.clone();
        }
        let v = self.probe_all().await;
        *recent = Some((tokio::time::Instant::now(), v.clone()));
        v
    }

    async fn probe_all(&self) -> Value {
        let (targets, leases, mut known, kube_info) = match &self.kube {
            Some(k) => {
                let r = k.read().await;
                (r.targets, Some(r.leases), r.known, Some(r.info))
            }
            None => (self.sources.targets(), None, BTreeMap::new(), None),
        };
        let mut probes = self.probe(targets).await;
        let last_seen = {
            let mut seen = self.last_seen.lock().expect("last seen lock");
            for p in &probes {
                if let Some(Ok(s)) = &p.status
                    && let Some(h) = s.host.clone()
                {
                    seen.insert(p.target.label.clone(), Host::from_proto(h));
                }
            }
            seen.clone()
        };
        // The hosts of the answering views that no socket was given for: their /metrics, at the
        // address their descriptors publish (so one socket, e.g. in one pod, shows every host).
        let mut covered: std::collections::BTreeSet<String> = probes
            .iter()
            .filter_map(|p| match &p.status {
                Some(Ok(s)) => s.host.as_ref().map(|h| h.id.clone()),
                Some(Err(_)) => last_seen.get(&p.target.label).map(|h| h.id.clone()),
                None => p.target.host_id.clone(),
            })
            .collect();
        let mut more = Vec::new();
        for p in &probes {
            let Some(Ok(s)) = &p.status else { continue };
            for h in s.view.iter().flat_map(|v| &v.hosts) {
                if covered.insert(h.id.clone()) {
                    let health = h.meta.get(crate::kubernetes::HEALTH_META);
                    more.push(Target::metrics_only(&h.id, health.map(String::as_str)));
                }
            }
        }
        probes.extend(self.probe(more).await);
        known.extend(last_seen);
        let snap = snapshot::build(
            &probes,
            &known,
            leases.as_deref(),
            crate::status::now_unix_ms(),
        );
        let mut v = serde_json::to_value(&snap).unwrap_or_else(|e| json!({"error": e.to_string()}));
        v["pollMs"] = json!(self.interval.as_millis() as u64);
        if let Some(info) = kube_info {
            v["kubernetes"] = info;
        }
        v
    }

    async fn probe(&self, targets: Vec<Target>) -> Vec<Probe> {
        futures::future::join_all(targets.into_iter().map(|t| probe(t, self.timeout))).await
    }

    /// The first target whose socket connects, with its label.
    async fn any_client(&self) -> Result<(Client, String), String> {
        if self.kube.is_some() {
            return Err(
                "with --kubernetes the dashboard has no sidecar socket to search \
                        through: run one in a pod (kubectl exec POD -c sigx-sidecar -- sigx \
                        dashboard --socket /var/run/sigx/sidecar.sock) and port-forward it"
                    .to_string(),
            );
        }
        let targets: Vec<Target> = self.sources.targets();
        let mut tried = Vec::new();
        for t in targets {
            let Some(socket) = &t.socket else { continue };
            match tokio::time::timeout(self.timeout, Client::connect(socket)).await {
                Ok(Ok(c)) => return Ok((c.with_timeout(self.timeout * 5), t.label)),
                Ok(Err(e)) => tried.push(format!("{}: {e}", t.label)),
                Err(_) => tried.push(format!("{}: no answer within {:?}", t.label, self.timeout)),
            }
        }
        Err(format!(
            "no sidecar answered, so nothing can be searched: {}",
            if tried.is_empty() {
                "no sidecar is known".to_string()
            } else {
                tried.join("; ")
            }
        ))
    }

    async fn locate(&self, actor: &str) -> (StatusCode, Value) {
        let (actor_type, key) = match crate::call::parse_target(actor) {
            Ok(t) => t,
            Err(e) => return (StatusCode::BAD_REQUEST, json!({"error": e})),
        };
        let (client, via) = match self.any_client().await {
            Ok(c) => c,
            Err(e) => return (StatusCode::BAD_GATEWAY, json!({"error": e})),
        };
        match client.locate(actor_type, key).await {
            Ok(r) => (
                StatusCode::OK,
                json!({
                    "actor": {"actorType": actor_type, "key": key},
                    "active": r.active,
                    "hostId": r.host_id,
                    "activationId": r.activation_id,
                    "epoch": r.epoch,
                    "askedVia": via,
                }),
            ),
            Err(e) => (
                StatusCode::BAD_GATEWAY,
                json!({"error": crate::call::render_error(&e), "askedVia": via}),
            ),
        }
    }

    async fn list(&self, actor_type: &str) -> (StatusCode, Value) {
        if actor_type.is_empty() {
            return (
                StatusCode::BAD_REQUEST,
                json!({"error": "name a stateful actor type, e.g. Counter"}),
            );
        }
        let (client, via) = match self.any_client().await {
            Ok(c) => c,
            Err(e) => return (StatusCode::BAD_GATEWAY, json!({"error": e})),
        };
        let mut actors = Vec::new();
        let mut skipped = Vec::new();
        let mut token = String::new();
        let truncated = loop {
            let page = match client.list_actors(actor_type, 200, token.as_str()).await {
                Ok(p) => p,
                Err(e) => {
                    return (
                        StatusCode::BAD_GATEWAY,
                        json!({"error": crate::call::render_error(&e), "askedVia": via}),
                    );
                }
            };
            actors.extend(page.actors);
            skipped.extend(page.skipped);
            if page.next_page_token.is_empty() {
                break false;
            }
            if actors.len() >= LIST_LIMIT {
                break true;
            }
            token = page.next_page_token;
        };
        (
            StatusCode::OK,
            json!({
                "actorType": actor_type,
                "actors": actors.iter().map(|a| json!({
                    "key": a.actor.as_ref().map(|r| r.key.as_str()).unwrap_or(""),
                    "hostId": a.host_id,
                    "activationId": a.activation_id,
                })).collect::<Vec<_>>(),
                "truncated": truncated,
                "incomplete": !skipped.is_empty(),
                "skipped": skipped.iter().map(|s| json!({
                    "owner": s.owner, "reason": s.reason, "partitions": s.partitions.len(),
                })).collect::<Vec<_>>(),
                "askedVia": via,
            }),
        )
    }
}

fn respond(code: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

fn json_response(code: StatusCode, v: &Value) -> Response<Full<Bytes>> {
    respond(
        code,
        "application/json",
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
    )
}

/// A query parameter, percent-decoded (`+` is a space, as forms send it).
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(s.get(i + 1..i + 3).unwrap_or(""), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn route(state: &State, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"the dashboard only answers GET\n"),
        );
    }
    let query = req.uri().query();
    match req.uri().path() {
        "/" => respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Bytes::from_static(page::INDEX.as_bytes()),
        ),
        "/dashboard.js" => respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            Bytes::from_static(page::SCRIPT.as_bytes()),
        ),
        "/dashboard.css" => respond(
            StatusCode::OK,
            "text/css; charset=utf-8",
            Bytes::from_static(page::STYLE.as_bytes()),
        ),
        // No icon: an empty answer rather than a 404 in the browser's console.
        "/favicon.ico" => respond(StatusCode::NO_CONTENT, "image/x-icon", Bytes::new()),
        "/api/fleet" => json_response(StatusCode::OK, &state.fleet().await),
        "/api/actors/where" => {
            let actor = query_param(query, "actor").unwrap_or_default();
            let (code, v) = state.locate(actor.trim()).await;
            json_response(code, &v)
        }
        "/api/actors/list" => {
            let t = query_param(query, "type").unwrap_or_default();
            let (code, v) = state.list(t.trim()).await;
            json_response(code, &v)
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(
                b"not found: try / /api/fleet /api/actors/where?actor=T/k /api/actors/list?type=T\n",
            ),
        ),
    }
}

/// Serves until the process stops.
pub async fn serve(listener: TcpListener, state: Arc<State>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "dashboard accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, &req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_percent_decoded() {
        let q = Some("actor=Counter%2Fa%20b&type=Counter+X&bad=%zz&end=%4");
        assert_eq!(query_param(q, "actor").as_deref(), Some("Counter/a b"));
        assert_eq!(query_param(q, "type").as_deref(), Some("Counter X"));
        assert_eq!(query_param(q, "bad").as_deref(), Some("%zz"));
        assert_eq!(query_param(q, "end").as_deref(), Some("%4"));
        assert_eq!(query_param(q, "missing"), None);
        assert_eq!(query_param(None, "actor"), None);
    }
}
