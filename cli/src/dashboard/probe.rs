//! Asking one sidecar about itself: `Status` over its app socket (when the dashboard has it) and,
//! when its health address is known, its `/metrics` (call-latency histogram, live activations,
//! counters, ready/fenced gauges: [`Scrape`]).

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use sigx_sdk::Client;
use sigx_sdk::proto::StatusResponse;
use std::path::PathBuf;
use std::time::Duration;

pub use super::scrape::Scrape;

/// One sidecar the dashboard asks: its app socket and/or its health/metrics address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// How the user named it (`host-2` of a dev directory, a socket path), or, for a host found
    /// in a membership view or a Lease, its health address as its descriptor publishes it.
    pub label: String,
    /// `None`: no socket for it (a host of another pod), so only its `/metrics` is asked.
    pub socket: Option<PathBuf>,
    /// `HOST:PORT` of its health listener (an IP or a name, resolved when asked).
    pub health: Option<String>,
    /// The host id, when known before asking (from a view or a Lease).
    pub host_id: Option<String>,
}

impl Target {
    /// A host known from a view or a Lease, asked only for its `/metrics` at `health` (its
    /// descriptor's `meta.health`, `None` when it publishes none or an unreadable one).
    pub fn metrics_only(host_id: &str, health: Option<&str>) -> Target {
        let usable = health.filter(|h| is_host_port(h)).map(String::from);
        Target {
            label: match (&usable, health) {
                (Some(addr), _) => format!("http://{addr}/metrics"),
                (None, Some(raw)) => format!("{host_id} (meta.health {raw:?} is not HOST:PORT)"),
                (None, None) => format!("{host_id} (publishes no meta.health)"),
            },
            socket: None,
            health: usable,
            host_id: Some(host_id.to_string()),
        }
    }
}

/// `HOST:PORT` (`10.0.0.7:9090`, `[fd00::7]:9090`, `pod-a.sigx:9090`).
pub fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
    })
}

/// Why a probe got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}")]
    Connect(String),
    #[error("Status failed: {0}")]
    Status(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("GET http://{addr}/metrics: {what}")]
    Metrics { addr: String, what: String },
    #[error(
        "not reachable: the dashboard has no socket for it and its descriptor publishes no \
         usable health address (meta.health = HOST:PORT; older sidecars publish none)"
    )]
    NoAddress,
}

/// What one target answered.
#[derive(Debug)]
pub struct Probe {
    pub target: Target,
    /// `None` when the target has no socket (only its `/metrics` is asked).
    pub status: Option<Result<StatusResponse, ProbeError>>,
    /// `None` when the target has no known health address.
    pub metrics: Option<Result<Scrape, ProbeError>>,
}

/// Asks `target` for its status and its metrics, each under `timeout`.
pub async fn probe(target: Target, timeout: Duration) -> Probe {
    let status = async |socket: &PathBuf| {
        let client = Client::connect(socket)
            .await
            .map_err(|e| ProbeError::Connect(e.to_string()))?;
        client
            .with_timeout(timeout)
            .status()
            .await
            .map_err(|e| ProbeError::Status(crate::call::render_error(&e)))
    };
    let status = async {
        match &target.socket {
            None => None,
            Some(socket) => Some(
                tokio::time::timeout(timeout, status(socket))
                    .await
                    .unwrap_or(Err(ProbeError::Timeout(timeout))),
            ),
        }
    };
    let metrics = async {
        match &target.health {
            None => None,
            Some(addr) => Some(
                match tokio::time::timeout(timeout, get_metrics(addr)).await {
                    Ok(Ok(text)) => Ok(Scrape::parse(&text)),
                    Ok(Err(what)) => Err(ProbeError::Metrics {
                        addr: addr.clone(),
                        what,
                    }),
                    Err(_) => Err(ProbeError::Timeout(timeout)),
                },
            ),
        }
    };
    let (status, metrics) = futures::join!(status, metrics);
    Probe {
        target,
        status,
        metrics,
    }
}

/// `GET /metrics` over HTTP/1.1 with hyper's client connection.
async fn get_metrics(addr: &str) -> Result<String, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::get("/metrics")
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("answered {}", resp.status()));
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    String::from_utf8(body.to_vec()).map_err(|_| "the body is not UTF-8".to_string())
}

/// The `sigx_call_duration_seconds` histogram of `/metrics`, summed over result kinds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallLatency {
    pub count: u64,
    pub sum_seconds: f64,
    /// Cumulative counts by upper bound (`le`), sorted; `+Inf` is `f64::INFINITY`.
    pub buckets: Vec<(f64, u64)>,
    /// Calls by result kind (`ok`, `timeout`, ...).
    pub by_kind: Vec<(String, u64)>,
}

const CALL_HISTOGRAM: &str = "sigx_call_duration_seconds";

/// One sample line of a scrape: its metric name, its labels, its value.
pub(super) type Sample<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);

/// `name{a="x",b="y"} value` → (name, labels, value).
pub(super) fn sample(line: &str) -> Option<Sample<'_>> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        None => (head, Vec::new()),
        Some((name, rest)) => {
            let rest = rest.strip_suffix('}')?;
            let labels = rest
                .split(',')
                .filter(|l| !l.is_empty())
                .filter_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    Some((k, v.trim_matches('"')))
                })
                .collect();
            (name, labels)
        }
    };
    Some((name, labels, value))
}

impl CallLatency {
    /// Reads the call histogram out of a Prometheus/OpenMetrics text scrape.
    pub fn parse(text: &str) -> CallLatency {
        let mut out = CallLatency::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, labels, value)) = sample(line) else {
                continue;
            };
            let Some(part) = name.strip_prefix(CALL_HISTOGRAM) else {
                continue;
            };
            let label = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
            match part {
                "_count" => {
                    out.count += value as u64;
                    out.by_kind
                        .push((label("kind").unwrap_or("").to_string(), value as u64));
                }
                "_sum" => out.sum_seconds += value,
                "_bucket" => {
                    let le = match label("le") {
                        Some("+Inf") => f64::INFINITY,
                        Some(le) => match le.parse() {
                            Ok(le) => le,
                            Err(_) => continue,
                        },
                        None => continue,
                    };
                    out.add_bucket(le, value as u64);
                }
                _ => {}
            }
        }
        out.by_kind.sort();
        out
    }

    fn add_bucket(&mut self, le: f64, n: u64) {
        match self.buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += n,
            None => {
                self.buckets.push((le, n));
                self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }

    /// Adds another host's histogram (the same bucket bounds: every sidecar uses one layout).
    pub fn merge(&mut self, other: &CallLatency) {
        self.count += other.count;
        self.sum_seconds += other.sum_seconds;
        for &(le, n) in &other.buckets {
            self.add_bucket(le, n);
        }
        for (kind, n) in &other.by_kind {
            match self.by_kind.iter_mut().find(|(k, _)| k == kind) {
                Some((_, c)) => *c += n,
                None => self.by_kind.push((kind.clone(), *n)),
            }
        }
        self.by_kind.sort();
    }

    /// The mean call, in milliseconds.
    pub fn mean_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_seconds * 1000.0 / self.count as f64)
    }

    /// An upper bound of the `q` quantile, in milliseconds: the bound of the first bucket that
    /// holds it (a histogram knows no more). `None` without calls or beyond the last finite
    /// bucket.
    pub fn quantile_at_most_ms(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        self.buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= rank)
            .map(|(le, _)| *le)
            .filter(|le| le.is_finite())
            .map(|le| le * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = r#"# HELP sigx_call_duration_seconds app API calls from request to answer, by result kind.
# TYPE sigx_call_duration_seconds histogram
# UNIT sigx_call_duration_seconds seconds
sigx_call_duration_seconds_sum{kind="ok"} 0.012
sigx_call_duration_seconds_count{kind="ok"} 3
sigx_call_duration_seconds_bucket{le="0.0005",kind="ok"} 0
sigx_call_duration_seconds_bucket{le="0.001",kind="ok"} 1
sigx_call_duration_seconds_bucket{le="0.002",kind="ok"} 1
sigx_call_duration_seconds_bucket{le="0.004",kind="ok"} 2
sigx_call_duration_seconds_bucket{le="0.008",kind="ok"} 3
sigx_call_duration_seconds_bucket{le="+Inf",kind="ok"} 3
sigx_call_duration_seconds_sum{kind="timeout"} 2.0
sigx_call_duration_seconds_count{kind="timeout"} 1
sigx_call_duration_seconds_bucket{le="0.0005",kind="timeout"} 0
sigx_call_duration_seconds_bucket{le="0.001",kind="timeout"} 0
sigx_call_duration_seconds_bucket{le="0.002",kind="timeout"} 0
sigx_call_duration_seconds_bucket{le="0.004",kind="timeout"} 0
sigx_call_duration_seconds_bucket{le="0.008",kind="timeout"} 0
sigx_call_duration_seconds_bucket{le="+Inf",kind="timeout"} 1
sigx_turn_duration_seconds_count{actor_type="Counter"} 99
sigx_turns_total 7
"#;

    #[test]
    fn the_call_histogram_is_summed_over_kinds() {
        let l = CallLatency::parse(SCRAPE);
        assert_eq!(l.count, 4);
        assert!((l.sum_seconds - 2.012).abs() < 1e-9);
        assert_eq!(
            l.by_kind,
            vec![("ok".to_string(), 3), ("timeout".to_string(), 1)]
        );
        assert_eq!(l.buckets.first(), Some(&(0.0005, 0)));
        assert_eq!(l.buckets.last(), Some(&(f64::INFINITY, 4)));
        assert_eq!(l.quantile_at_most_ms(0.5), Some(4.0));
        assert_eq!(l.quantile_at_most_ms(0.25), Some(1.0));
        // The timeout lies beyond every finite bucket: no bound to give.
        assert_eq!(l.quantile_at_most_ms(0.99), None);
        assert!((l.mean_ms().unwrap() - 503.0).abs() < 1e-6);
    }

    #[test]
    fn merging_adds_counts_bucket_by_bucket() {
        let mut a = CallLatency::parse(SCRAPE);
        a.merge(&CallLatency::parse(SCRAPE));
        assert_eq!(a.count, 8);
        assert_eq!(a.buckets.last(), Some(&(f64::INFINITY, 8)));
        assert_eq!(a.by_kind[0], ("ok".to_string(), 6));
        assert_eq!(CallLatency::parse("").mean_ms(), None);
    }

    #[tokio::test]
    async fn a_socket_nobody_listens_on_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target {
            label: "gone".into(),
            socket: Some(dir.path().join("nothing.sock")),
            health: Some("127.0.0.1:1".into()),
            host_id: None,
        };
        let p = probe(target, Duration::from_secs(2)).await;
        assert!(matches!(p.status, Some(Err(_))), "{:?}", p.status);
        assert!(matches!(p.metrics, Some(Err(_))), "{:?}", p.metrics);
        let p = probe(Target::metrics_only("h9", None), Duration::from_secs(2)).await;
        assert!(p.status.is_none() && p.metrics.is_none(), "{p:?}");
        assert_eq!(p.target.label, "h9 (publishes no meta.health)");
        assert!(is_host_port("pod-a.sigx:9090") && is_host_port("[fd00::7]:9090"));
        assert!(!is_host_port("9090") && !is_host_port(":9090") && !is_host_port("a:b"));
    }

    #[tokio::test]
    async fn a_health_address_may_be_a_name() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let body = "sigx_ready 1\nsigx_live_activations{actor_type=\"Counter\"} 4\n";
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(body.as_bytes()).await.unwrap();
        });
        let t = Target::metrics_only("h1", Some(&format!("localhost:{port}")));
        let p = probe(t, Duration::from_secs(5)).await;
        let m = p.metrics.unwrap().expect("scraped through the name");
        assert_eq!(
            (m.ready, m.activations.get("Counter")),
            (Some(true), Some(&4))
        );
    }
}
