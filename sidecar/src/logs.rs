//! The sidecar's log lines on stderr: human text (the default) or one JSON object per line
//! (`--log-format json`, `SIGX_LOG_FORMAT=json`) for log pipelines. A JSON line written while a
//! traced call is ambient carries that call's W3C `trace_id` and `span_id` (the sidecar's span
//! when it exports spans, else the caller's), so logs and traces join on the trace id.

use std::fmt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, format};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line, with `trace_id` / `span_id` inside traced calls.
    Json,
}

/// Installs the process's log subscriber: `SIGX_LOG` filters (default `info`), stderr.
pub fn init(log_format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SIGX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .event_format(WithTraceIds(format().json()))
            .init(),
    }
}

/// A JSON event format that adds the ambient trace's ids as the line's first fields.
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = crate::trace::current_ids() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::context::FutureExt as _;
    use std::sync::{Arc, Mutex};

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_carry_the_ambient_trace_ids_and_stay_json_without_one() {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .event_format(WithTraceIds(format().json()))
            .with_writer(move || out.clone())
            .finish();
        let tc = sigx_proto::v1::TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: String::new(),
        };
        let cx = crate::trace::extract(&tc).unwrap();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("outside");
            futures::executor::block_on(
                async { tracing::info!(n = 1, "inside \"quoted\"") }.with_context(cx),
            );
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);
        assert_eq!(lines[1]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(lines[1]["span_id"], "00f067aa0ba902b7");
        assert_eq!(lines[1]["fields"]["message"], "inside \"quoted\"");
    }
}
