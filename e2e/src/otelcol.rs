//! A real OpenTelemetry Collector for the tracing tests: the `sigx-otelcol` program
//! (e2e/otelcol, Go: the upstream collector service, its OTLP receiver and the contrib file
//! exporter) as a child process on 127.0.0.1, writing every span it receives as OTLP JSON lines.
//!
//! Why a real collector: a receiver written here would agree with the sidecar's exporter by
//! construction; the collector is what users run, and decoding by its OTLP receiver is the test
//! that the sidecar speaks OTLP/gRPC.
//!
//! The binary is built by `scripts/build-otelcol.sh` (`make otelcol`, which `make test` runs)
//! into `.tools/bin/sigx-otelcol`; `SIGX_OTELCOL` overrides the path. A missing binary fails the
//! test with the command to build it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where the binary is: `$SIGX_OTELCOL`, else the clone's `.tools/bin/sigx-otelcol`.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("SIGX_OTELCOL") {
        return PathBuf::from(p);
    }
    crate::controlplane::repo_root().join(".tools/bin/sigx-otelcol")
}

/// One running collector; dropping it kills it.
pub struct Collector {
    child: Child,
    /// The OTLP/gRPC endpoint, `http://127.0.0.1:PORT` (what `--otlp-endpoint` takes).
    pub endpoint: String,
    /// The file the spans are written to.
    pub output: PathBuf,
    log: PathBuf,
}

/// One span as the collector wrote it, with the `sigx.host` of the process that made it.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub host: String,
    /// The resource's `service.name`.
    pub service: String,
    pub attributes: serde_json::Value,
}

impl Collector {
    /// Starts a collector listening on `port` that writes into `dir`; waits until its OTLP port
    /// accepts connections. Panics with the collector's log when it cannot start.
    pub fn start(dir: &Path, port: u16) -> Collector {
        let bin = binary();
        assert!(
            bin.is_file(),
            "{} is missing: build the test collector first with `make otelcol` \
             (scripts/build-otelcol.sh; needs Go), or point SIGX_OTELCOL at it",
            bin.display()
        );
        let output = dir.join("traces.jsonl");
        let config = dir.join("otelcol.yaml");
        // No telemetry of its own (no metrics port to collide with), a fast file flush.
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n\
                 \x20 pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n",
                output.display()
            ),
        )
        .expect("write the collector config");
        let log = dir.join("otelcol.log");
        let log_file = std::fs::File::create(&log).expect("collector log file");
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
        let mut c = Collector {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            output,
            log,
        };
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return c;
            }
            if let Ok(Some(status)) = c.child.try_wait() {
                panic!(
                    "the collector exited ({status}); its log:\n{}",
                    c.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the collector did not listen within 30s; its log:\n{}",
            c.log_text()
        );
    }

    /// The collector's own log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every span written so far (the file holds one `ExportTraceServiceRequest` per line, in
    /// OTLP's JSON encoding: hex trace and span ids).
    pub fn spans(&self) -> Vec<Span> {
        let text = std::fs::read_to_string(&self.output).unwrap_or_default();
        let mut spans = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(doc) = serde_json::from_str::<serde_json::Value>(line) else {
                continue; // a line still being written
            };
            for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
                let host = attribute(&rs["resource"]["attributes"], "sigx.host");
                let service = attribute(&rs["resource"]["attributes"], "service.name");
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for s in ss["spans"].as_array().into_iter().flatten() {
                        let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
                        spans.push(Span {
                            name: text("name"),
                            trace_id: text("traceId"),
                            span_id: text("spanId"),
                            parent_span_id: text("parentSpanId"),
                            host: host.clone(),
                            service: service.clone(),
                            attributes: s["attributes"].clone(),
                        });
                    }
                }
            }
        }
        spans
    }

    /// Waits (bounded by `within`) until `done` holds for the spans written so far.
    pub fn wait_for(&self, within: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let step = Duration::from_millis(100);
        let mut waited = Duration::ZERO;
        loop {
            let spans = self.spans();
            if done(&spans) || waited >= within {
                return spans;
            }
            std::thread::sleep(step);
            waited += step;
        }
    }
}

/// The value of attribute `key` in an OTLP JSON attribute list, as a string (integers in
/// decimal, booleans as `true`/`false`); empty when absent.
pub fn attribute(attrs: &serde_json::Value, key: &str) -> String {
    attrs
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["key"] == key)
        .map(|a| {
            // OTLP/JSON: strings as `stringValue`, 64-bit integers as a decimal string in
            // `intValue`, booleans as `boolValue`.
            let v = &a["value"];
            match (&v["stringValue"], &v["intValue"], &v["boolValue"]) {
                (serde_json::Value::String(s), _, _) | (_, serde_json::Value::String(s), _) => {
                    s.clone()
                }
                (_, serde_json::Value::Number(n), _) => n.to_string(),
                (_, _, serde_json::Value::Bool(b)) => b.to_string(),
                _ => String::new(),
            }
        })
        .unwrap_or_default()
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
