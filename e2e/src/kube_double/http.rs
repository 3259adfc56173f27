//! The HTTP face of the double: routes Kubernetes REST paths to the store, streams watches,
//! and applies the outage switch.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::Mode;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{
    ApiError, DeleteOptions, PatchKind, ResourceRef, Store, Subresource, WatchFrom, WatchLine,
    Watcher,
};

pub(crate) type Body = UnsyncBoxBody<Bytes, io::Error>;

/// The outage switch: one mode for everyone, and overrides for named clients (a partition
/// that cuts off one client while others still reach the server).
#[derive(Debug, Clone, Default)]
pub(crate) struct Modes {
    pub global: Mode,
    pub clients: BTreeMap<String, Mode>,
    /// Clients whose watches deliver nothing (events wait in the stream) while their other
    /// requests are served: a lagging watch (see `KubeDouble::stall_watches`).
    pub stalled_watches: std::collections::BTreeSet<String>,
}

impl Modes {
    /// The mode a client sees: its own override, else the global mode. A global outage wins
    /// over a healthy override.
    pub fn for_client(&self, client: Option<&str>) -> Mode {
        let own = client.and_then(|c| self.clients.get(c)).copied();
        match (self.global, own) {
            (Mode::Serving, Some(m)) => m,
            (g, _) => g,
        }
    }
}

/// The header naming a client of the double (see `KubeDouble::client_named`).
pub(crate) const CLIENT_HEADER: &str = "x-kube-double-client";

/// Counters kept outside the store lock.
#[derive(Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub watch_events_sent: AtomicU64,
    pub bookmarks_sent: AtomicU64,
    pub watches_started: AtomicU64,
    pub by_verb: Mutex<BTreeMap<&'static str, u64>>,
    pub by_client: Mutex<BTreeMap<String, u64>>,
}

pub(crate) struct Shared {
    pub store: Mutex<Store>,
    pub mode: watch::Sender<Modes>,
    pub counters: Counters,
    pub bookmark_interval: Mutex<Duration>,
}

impl Shared {
    pub fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count_verb(&self, verb: &'static str) {
        *self
            .counters
            .by_verb
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(verb)
            .or_default() += 1;
    }
}

fn full(status: StatusCode, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).expect("JSON values serialize");
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(
            Full::new(Bytes::from(bytes))
                .map_err(|e| match e {})
                .boxed_unsync(),
        )
        .expect("static response parts are valid")
}

fn error_response(e: &ApiError) -> Response<Body> {
    let status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    full(status, &e.to_status())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
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

fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

struct Target {
    res: ResourceRef,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let res = |plural: &str| ResourceRef {
        group: group.to_owned(),
        version: version.to_owned(),
        plural: plural.to_owned(),
    };
    let t = |plural: &str, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| Target {
        res: res(plural),
        namespace: ns.map(str::to_owned),
        name: name.map(str::to_owned),
        sub: sub.map(str::to_owned),
    };
    Some(match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            match tail {
                [] => t(plural, Some(ns), None, None),
                [name] => t(plural, Some(ns), Some(name), None),
                [name, sub] => t(plural, Some(ns), Some(name), Some(sub)),
                _ => return None,
            }
        }
        [plural] => t(plural, None, None, None),
        [plural, name] => t(plural, None, Some(name), None),
        [plural, name, sub] => t(plural, None, Some(name), Some(sub)),
        _ => return None,
    })
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the double accepts JSON bodies only (YAML apply bodies must be JSON, as kube sends them): {e}"
        ))
    })
}

/// Serves one request: counts it, applies the outage switch, then routes it.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
    let client = req
        .headers()
        .get(CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    *shared
        .counters
        .by_client
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(client.clone().unwrap_or_default())
        .or_default() += 1;
    let mut mode = shared.mode.subscribe();
    loop {
        let current = mode.borrow_and_update().for_client(client.as_deref());
        match current {
            Mode::Serving => break,
            Mode::Failing => {
                return Ok(error_response(&ApiError::new(
                    503,
                    "ServiceUnavailable",
                    "the server is currently unable to handle the request (injected outage)",
                )));
            }
            Mode::Stalling => {
                if mode.changed().await.is_err() {
                    return Ok(error_response(&ApiError::new(
                        503,
                        "ServiceUnavailable",
                        "shut down",
                    )));
                }
            }
        }
    }
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(error_response(&ApiError::bad_request(format!(
                "could not read the request body: {e}"
            ))));
        }
    };
    Ok(route(&shared, parts, body, client).unwrap_or_else(|e| error_response(&e)))
}

fn route(
    shared: &Arc<Shared>,
    parts: http::request::Parts,
    body: Bytes,
    client: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let path = parts.uri.path();
    if path == "/version" {
        return Ok(full(
            StatusCode::OK,
            &json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0-sigx-double", "platform": "linux/amd64"}),
        ));
    }
    let query = parse_query(parts.uri.query().unwrap_or_default());
    let target = parse_path(path).ok_or_else(|| {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    })?;
    let manager = query.get("fieldManager").cloned().unwrap_or_else(|| {
        parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .unwrap_or("unknown")
            .to_owned()
    });
    let ns = target.namespace.as_deref();
    let res = &target.res;
    let sub = match target.sub.as_deref() {
        None => None,
        Some("status") => Some(Subresource::Status),
        Some("scale") => None,
        Some(other) => {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("subresource {other:?} is not served by the double"),
            ));
        }
    };
    let is_scale = target.sub.as_deref() == Some("scale");
    let labels = LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;

    let Some(name) = target.name.as_deref() else {
        // Collection.
        return match parts.method {
            Method::GET if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) => {
                shared.count_verb("watch");
                start_watch(shared, res, ns, labels, fields, &query, client)
            }
            Method::GET => {
                shared.count_verb("list");
                let limit = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .filter(|l| *l > 0);
                let list = shared.store().list(
                    res,
                    ns,
                    &labels,
                    &fields,
                    limit,
                    query.get("continue").map(String::as_str),
                )?;
                Ok(full(StatusCode::OK, &list))
            }
            Method::POST => {
                shared.count_verb("create");
                let obj = shared
                    .store()
                    .create(res, ns, parse_json(&body)?, &manager)?;
                Ok(full(StatusCode::CREATED, &obj))
            }
            Method::DELETE => {
                shared.count_verb("deletecollection");
                let mut store = shared.store();
                let list = store.list(res, ns, &labels, &fields, None, None)?;
                let mut deleted = Vec::new();
                for item in list["items"].as_array().into_iter().flatten() {
                    let item_ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
                    let item_name = item
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    deleted.push(store.delete(
                        res,
                        item_ns,
                        item_name,
                        &DeleteOptions::default(),
                    )?);
                }
                let mut out = list;
                out["items"] = Value::Array(deleted);
                Ok(full(StatusCode::OK, &out))
            }
            _ => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "method not allowed on a collection",
            )),
        };
    };

    match parts.method {
        Method::GET => {
            shared.count_verb("get");
            let store = shared.store();
            let obj = if is_scale {
                store.get_scale(res, ns, name)?
            } else {
                store.get(res, ns, name)?
            };
            Ok(full(StatusCode::OK, &obj))
        }
        Method::PUT => {
            shared.count_verb("update");
            let body = parse_json(&body)?;
            let mut store = shared.store();
            let (obj, created) = if is_scale {
                (store.set_scale(res, ns, name, &body, &manager)?, false)
            } else {
                store.replace(
                    res,
                    ns,
                    name,
                    sub.unwrap_or(Subresource::Main),
                    body,
                    &manager,
                )?
            };
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(full(code, &obj))
        }
        Method::PATCH => {
            shared.count_verb("patch");
            let content_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let kind = match content_type.split(';').next().unwrap_or_default().trim() {
                "application/merge-patch+json" => PatchKind::Merge,
                "application/strategic-merge-patch+json" => PatchKind::Strategic,
                "application/json-patch+json" => PatchKind::Json,
                "application/apply-patch+yaml" | "application/apply-patch+json" => {
                    if query.get("fieldManager").is_none_or(|m| m.is_empty()) {
                        return Err(ApiError::bad_request(
                            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                        ));
                    }
                    PatchKind::Apply {
                        force: query.get("force").is_some_and(|f| f == "true"),
                    }
                }
                other => {
                    return Err(ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!("the body of the request was in an unknown format ({other:?})"),
                    ));
                }
            };
            let patch = parse_json(&body)?;
            let mut store = shared.store();
            if is_scale {
                let mut scale = store.get_scale(res, ns, name)?;
                match kind {
                    PatchKind::Json => super::patch::json_patch(&mut scale, &patch)
                        .map_err(|e| ApiError::invalid(e.to_string()))?,
                    _ => super::patch::merge_patch(&mut scale, &patch),
                }
                let obj = store.set_scale(res, ns, name, &scale, &manager)?;
                return Ok(full(StatusCode::OK, &obj));
            }
            let (obj, created) = store.patch(
                res,
                ns,
                name,
                sub.unwrap_or(Subresource::Main),
                kind,
                patch,
                &manager,
            )?;
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(full(status, &obj))
        }
        Method::DELETE => {
            shared.count_verb("delete");
            let body = parse_json(&body)?;
            let opts = DeleteOptions {
                resource_version: body
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                uid: body
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                orphan: body.get("propagationPolicy").and_then(Value::as_str) == Some("Orphan")
                    || body.get("orphanDependents").and_then(Value::as_bool) == Some(true)
                    || query
                        .get("propagationPolicy")
                        .is_some_and(|p| p == "Orphan"),
            };
            let obj = shared.store().delete(res, ns, name, &opts)?;
            Ok(full(StatusCode::OK, &obj))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "method not allowed on an object",
        )),
    }
}

/// Removes the watcher from the store when its stream is dropped (client went away).
struct WatchGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.shared.store().unwatch(self.id);
    }
}

struct WatchState {
    rx: mpsc::UnboundedReceiver<WatchLine>,
    mode: watch::Receiver<Modes>,
    client: Option<String>,
    bookmarks: Option<tokio::time::Interval>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    guard: Option<WatchGuard>,
    done: bool,
}

type Chunk = Result<Frame<Bytes>, io::Error>;

async fn next_line(mut st: WatchState) -> Option<(Chunk, WatchState)> {
    if st.done {
        return None;
    }
    loop {
        let current = {
            let modes = st.mode.borrow_and_update();
            match modes.for_client(st.client.as_deref()) {
                Mode::Serving
                    if st
                        .client
                        .as_ref()
                        .is_some_and(|c| modes.stalled_watches.contains(c)) =>
                {
                    Mode::Stalling
                }
                m => m,
            }
        };
        match current {
            Mode::Failing => {
                // An outage cuts open watches the way a dying API server does: the
                // connection breaks mid-stream.
                st.done = true;
                return Some((Err(io::Error::other("injected outage")), st));
            }
            Mode::Stalling => {
                tokio::select! {
                    changed = st.mode.changed() => if changed.is_err() { return None },
                    _ = &mut st.deadline => return None,
                }
                continue;
            }
            Mode::Serving => {}
        }
        let tick = async {
            match st.bookmarks.as_mut() {
                Some(i) => {
                    i.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            changed = st.mode.changed() => {
                if changed.is_err() {
                    return None;
                }
            }
            line = st.rx.recv() => {
                let line = line?;
                let guard = st.guard.as_ref().expect("live watches have a guard");
                let counter = if line.bookmark {
                    &guard.shared.counters.bookmarks_sent
                } else {
                    &guard.shared.counters.watch_events_sent
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Some((Ok(Frame::data(line.bytes)), st));
            }
            _ = tick => {
                if let Some(g) = st.guard.as_ref() {
                    g.shared.store().bookmark(g.id, false);
                }
            }
            _ = &mut st.deadline => return None,
        }
    }
}

fn start_watch(
    shared: &Arc<Shared>,
    res: &ResourceRef,
    ns: Option<&str>,
    labels: LabelSelector,
    fields: FieldSelector,
    query: &HashMap<String, String>,
    client: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let send_initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let from = match query.get("resourceVersion").map(String::as_str) {
        _ if send_initial => WatchFrom::Current,
        None | Some("") | Some("0") => WatchFrom::Current,
        Some(rv) => WatchFrom::After(rv.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion {rv:?} is not a resource version of this server"
            ))
        })?),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (tx, rx) = mpsc::unbounded_channel();
    let watcher = Watcher::new(res, ns.map(str::to_owned), labels, fields, tx);
    let registered = {
        let mut store = shared.store();
        let r = store.watch(watcher, from);
        if let Ok(id) = r
            && send_initial
        {
            store.bookmark(id, true);
        }
        r
    };
    let id = match registered {
        Ok(id) => id,
        Err(e) if e.code == 410 => {
            // A real server answers 200 and sends the 410 as an ERROR event; kube's watcher
            // re-lists on exactly that.
            shared
                .counters
                .watch_events_sent
                .fetch_add(1, Ordering::Relaxed);
            let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": e.to_status()}))
                .expect("JSON values serialize");
            line.push(b'\n');
            return Ok(Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(
                    Full::new(Bytes::from(line))
                        .map_err(|e| match e {})
                        .boxed_unsync(),
                )
                .expect("static response parts are valid"));
        }
        Err(e) => return Err(e),
    };
    shared
        .counters
        .watches_started
        .fetch_add(1, Ordering::Relaxed);
    let allow_bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let bookmarks = allow_bookmarks.then(|| {
        let every = *shared
            .bookmark_interval
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let state = WatchState {
        rx,
        mode: shared.mode.subscribe(),
        client,
        bookmarks,
        deadline: Box::pin(tokio::time::sleep(timeout)),
        guard: Some(WatchGuard {
            shared: shared.clone(),
            id,
        }),
        done: false,
    };
    let stream = futures::stream::unfold(state, next_line).boxed();
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(BodyExt::boxed_unsync(StreamBody::new(stream)))
        .expect("static response parts are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let t = parse_path("/apis/coordination.k8s.io/v1/namespaces/ns/leases/a").unwrap();
        assert_eq!(t.res.group, "coordination.k8s.io");
        assert_eq!(t.namespace.as_deref(), Some("ns"));
        assert_eq!(t.name.as_deref(), Some("a"));
        let t = parse_path("/api/v1/namespaces/ns").unwrap();
        assert_eq!(t.res.plural, "namespaces");
        assert_eq!(t.name.as_deref(), Some("ns"));
        let t = parse_path("/api/v1/namespaces/ns/status").unwrap();
        assert_eq!(t.sub.as_deref(), Some("status"));
        let t = parse_path("/apis/apps/v1/namespaces/ns/deployments/d/scale").unwrap();
        assert_eq!(t.sub.as_deref(), Some("scale"));
        let t = parse_path("/apis/rbac.authorization.k8s.io/v1/clusterroles").unwrap();
        assert!(t.namespace.is_none() && t.name.is_none());
    }

    #[test]
    fn query_decoding() {
        let q = parse_query("labelSelector=a%3Db%2Cc+in+%28x%29&watch=true");
        assert_eq!(q["labelSelector"], "a=b,c in (x)");
        assert_eq!(q["watch"], "true");
    }
}
