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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_and_health() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        metrics
            .reconciles
            .get_or_create(&crate::metrics::KindLabel {
                kind: "ActorCluster",
            })
            .inc();
        let (leading_tx, leading) = watch::channel(false);
        let server = tokio::spawn(serve(listener, metrics, leading));

        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(
            m.contains("sigx_operator_reconciles_total{kind=\"ActorCluster\"} 1"),
            "{m}"
        );
        assert!(m.contains("sigx_operator_leader 0"), "{m}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.contains("standby"));
        leading_tx.send_replace(true);
        assert!(get(addr, "/readyz").await.contains("leader"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        server.abort();
    }
}
