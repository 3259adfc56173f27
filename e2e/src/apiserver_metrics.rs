//! What a real API server says it served, read from its own `/metrics` (Prometheus text): the
//! membership's cost on the server is measured there, not counted by the client.

use std::collections::BTreeMap;

/// The counters the tests read from the API server's `/metrics`, summed over their other labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerCounters {
    /// `apiserver_request_total` for `leases`, by verb (`PUT`, `LIST`, `WATCH`, …).
    pub lease_requests: BTreeMap<String, f64>,
    /// `apiserver_watch_events_total` for Leases: events the server sent to watchers.
    pub lease_watch_events: f64,
    /// `apiserver_longrunning_requests` for Lease WATCHes: the watches open now (a gauge).
    pub open_lease_watches: f64,
    /// `process_cpu_seconds_total` of the control-plane process (etcd, API server and controller
    /// manager run in one process).
    pub cpu_seconds: f64,
}

impl ServerCounters {
    pub fn verb(&self, verb: &str) -> f64 {
        self.lease_requests.get(verb).copied().unwrap_or(0.0)
    }

    pub fn since(&self, before: &ServerCounters) -> ServerCounters {
        let mut lease_requests = self.lease_requests.clone();
        for (verb, n) in lease_requests.iter_mut() {
            *n -= before.verb(verb);
        }
        ServerCounters {
            lease_requests,
            lease_watch_events: self.lease_watch_events - before.lease_watch_events,
            open_lease_watches: self.open_lease_watches,
            cpu_seconds: self.cpu_seconds - before.cpu_seconds,
        }
    }
}

/// Parses the Prometheus text the API server serves. Label order and the label that names the
/// resource changed across releases (`kind` → `resource`), so a sample is matched by the label
/// values it carries, not by position.
pub fn parse_counters(text: &str) -> ServerCounters {
    let mut out = ServerCounters::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let label = |key: &str| {
            labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.trim_matches(|c| c == '"' || c == '}'))
        };
        match name {
            "apiserver_request_total"
                if label("resource") == Some("leases")
                    && label("subresource").is_none_or(str::is_empty) =>
            {
                if let Some(verb) = label("verb") {
                    *out.lease_requests.entry(verb.to_string()).or_default() += value;
                }
            }
            "apiserver_watch_events_total"
                if label("resource") == Some("leases") || label("kind") == Some("Lease") =>
            {
                out.lease_watch_events += value
            }
            "apiserver_longrunning_requests"
                if label("resource") == Some("leases") && label("verb") == Some("WATCH") =>
            {
                out.open_lease_watches += value
            }
            "process_cpu_seconds_total" => out.cpu_seconds = value,
            _ => {}
        }
    }
    out
}

pub async fn server_counters(client: &kube::Client) -> ServerCounters {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a GET request");
    let text = client
        .request_text(request)
        .await
        .expect("GET /metrics from the API server");
    parse_counters(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_label_value_not_position() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 12
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PUT",version="v1"} 99
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_watch_events_total{group="coordination.k8s.io",resource="leases",version="v1"} 40
apiserver_watch_events_total{group="",resource="pods",version="v1"} 7
apiserver_longrunning_requests{component="apiserver",group="coordination.k8s.io",resource="leases",scope="cluster",subresource="",verb="WATCH",version="v1"} 1
apiserver_longrunning_requests{component="apiserver",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="WATCH",version="v1"} 6
process_cpu_seconds_total 1.5
"#;
        let c = parse_counters(text);
        assert_eq!(c.verb("PUT"), 15.0);
        assert_eq!(c.verb("LIST"), 2.0);
        assert_eq!(c.lease_watch_events, 40.0);
        assert_eq!(c.open_lease_watches, 7.0);
        assert_eq!(c.cpu_seconds, 1.5);
    }
}
