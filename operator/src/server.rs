//! `/metrics`, `/healthz` and `/readyz` over plain HTTP/1.1.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;

type Body = Full<hyper::body::Bytes>;

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .expect("static response parts are valid")
}

fn route(
    req: &Request<Incoming>,
    metrics: &Metrics,
    leading: &watch::Receiver<bool>,
) -> Response<Body> {
    match req.uri().path() {
        "/metrics" => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        // The process is alive and serving; a standby replica is healthy too.
        "/healthz" | "/livez" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let role = if *leading.borrow() {
                "leader"
            } else {
                "standby"
            };
            respond(StatusCode::OK, "text/plain", format!("ok ({role})\n"))
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves the endpoints on an already bound listener (bound before anything else starts, so a
/// port conflict is reported at once) until the future is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, leading: watch::Receiver<bool>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let metrics = metrics.clone();
                let leading = leading.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| {
                        let response = route(&req, &metrics, &leading);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
