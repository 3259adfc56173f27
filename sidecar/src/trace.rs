//! Distributed tracing: the W3C trace context of a call travels from the app's `Call` (its
//! `traceparent` / `tracestate` metadata, or `CallRequest.trace`) through the mesh
//! (`DeliverRequest.trace`) to the app on the `Turn` (`Turn.trace`), and the sidecar's own spans
//! (call, mesh hop, activation, turn) are exported over OTLP/gRPC when configured.
//!
//! The context is carried as the ambient OpenTelemetry [`Context`] of the call's future
//! ([`FutureExt::with_context`]): every turn of sigx runs in its caller's task (runtime/turn.rs),
//! so no signature on the call path needs a trace parameter.
//!
//! Cost: with export off and an untraced call, one metadata look-up and one branch per call
//! ([`enabled`] is a `OnceLock` read). With export off and a traced call the context passes
//! through unchanged (no spans are made): the app still receives the caller's `traceparent`.

use opentelemetry::context::FutureExt;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    SpanKind, Status as SpanStatus, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};
use sigx_proto::{ActorError, v1};
use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The exporting tracer, set once by [`init`] (in the sidecar binary only). Unset = export off.
static TRACER: OnceLock<Tracer> = OnceLock::new();

/// Tracing flags of the sidecar (flattened into `config::Args`). Each reads OpenTelemetry's
/// standard variable where one exists, so the usual `OTEL_*` environment configures export.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// Export the sidecar's spans over OTLP/gRPC to this collector, e.g. `http://otel:4317`.
    /// Off when unset (the W3C trace context still passes through to the app).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// The traces-only endpoint; wins over `--otlp-endpoint` (OpenTelemetry's precedence).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,

    /// The fraction of new traces (calls that arrive without a sampled parent) to record, 0..=1.
    /// Parent-based: a call whose `traceparent` says sampled is always recorded, one that says
    /// not sampled never is. Unset: `OTEL_TRACES_SAMPLER_ARG` for a ratio sampler, else 1.
    #[arg(long, env = "SIGX_TRACE_SAMPLE_RATIO")]
    pub trace_sample_ratio: Option<f64>,

    /// The sampler by OpenTelemetry's names: `parentbased_traceidratio` (the default),
    /// `parentbased_always_on`, `parentbased_always_off`, `traceidratio`, `always_on`,
    /// `always_off`.
    #[arg(long, env = "OTEL_TRACES_SAMPLER")]
    pub trace_sampler: Option<String>,

    /// The ratio of a `*traceidratio` sampler (OpenTelemetry's `OTEL_TRACES_SAMPLER_ARG`).
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG")]
    pub trace_sampler_arg: Option<String>,

    /// The `service.name` of the exported spans.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "sigx-sidecar")]
    pub otel_service_name: String,
}

impl Default for TraceArgs {
    /// Export off, the default sampler and service name.
    fn default() -> Self {
        TraceArgs {
            otlp_endpoint: None,
            otlp_traces_endpoint: None,
            trace_sample_ratio: None,
            trace_sampler: None,
            trace_sampler_arg: None,
            otel_service_name: "sigx-sidecar".into(),
        }
    }
}

impl TraceArgs {
    /// The endpoint export goes to, if any (the traces-only one first; empty = unset).
    pub fn endpoint(&self) -> Option<&str> {
        [&self.otlp_traces_endpoint, &self.otlp_endpoint]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .find(|e| !e.is_empty())
    }

    /// The sampler the flags name, with the reason when they name none.
    pub fn sampler(&self) -> Result<Sampler, TraceError> {
        let name = self
            .trace_sampler
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("parentbased_traceidratio");
        let arg = match self.trace_sampler_arg.as_deref().filter(|a| !a.is_empty()) {
            None => None,
            Some(a) => Some(
                a.trim()
                    .parse::<f64>()
                    .map_err(|_| TraceError::SamplerArg(a.to_string()))?,
            ),
        };
        let ratio = self.trace_sample_ratio.or(arg).unwrap_or(1.0);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(TraceError::Ratio(ratio));
        }
        let parent = |root| Sampler::ParentBased(Box::new(root));
        Ok(match name {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatioBased(ratio),
            "parentbased_always_on" => parent(Sampler::AlwaysOn),
            "parentbased_always_off" => parent(Sampler::AlwaysOff),
            "parentbased_traceidratio" => parent(Sampler::TraceIdRatioBased(ratio)),
            other => return Err(TraceError::Sampler(other.to_string())),
        })
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The ratio is outside 0..=1.
    #[error(
        "trace sample ratio {0} is outside 0..=1 (--trace-sample-ratio / \
         OTEL_TRACES_SAMPLER_ARG): give a fraction such as 0.1"
    )]
    Ratio(f64),
    /// `OTEL_TRACES_SAMPLER_ARG` is no number.
    #[error("OTEL_TRACES_SAMPLER_ARG={0:?} is not a number: give a fraction such as 0.1")]
    SamplerArg(String),
    /// `OTEL_TRACES_SAMPLER` names no sampler sigx has.
    #[error(
        "OTEL_TRACES_SAMPLER={0:?} is not a sampler sigx knows: use parentbased_traceidratio, \
         parentbased_always_on, parentbased_always_off, traceidratio, always_on or always_off"
    )]
    Sampler(String),
    /// The OTLP exporter refused its configuration (e.g. a malformed endpoint).
    #[error("cannot build the OTLP exporter for {endpoint:?}: {reason}; check --otlp-endpoint")]
    Exporter { endpoint: String, reason: String },
}

/// The running exporter; [`Tracing::shutdown`] flushes what is queued.
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
}

impl Tracing {
    /// Exports the spans still queued and stops the exporter (clean shutdown). Bounded by the
    /// SDK's export timeout; a collector that is down costs that long once, then is logged.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            tracing::warn!("trace export did not flush at shutdown: {e}");
        }
    }
}

/// Turns export on when `args` names an endpoint. Call inside the tokio runtime (the gRPC
/// channel lives there) and once per process.
pub fn init(args: &TraceArgs, host_id: &str) -> Result<Tracing, TraceError> {
    // Checked with export off too: a bad value is a configuration error either way.
    let sampler = args.sampler()?;
    let Some(endpoint) = args.endpoint().map(str::to_string) else {
        return Ok(Tracing { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| TraceError::Exporter {
            endpoint: endpoint.clone(),
            reason: e.to_string(),
        })?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(args.otel_service_name.clone())
        .with_attribute(KeyValue::new("sigx.host", host_id.to_string()))
        .build();
    let sampler_name = format!("{sampler:?}");
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(LoggedExporter::new(exporter, endpoint.clone()))
        .with_sampler(sampler)
        .with_resource(resource)
        .build();
    let _ = TRACER.set(provider.tracer("sigx-sidecar"));
    tracing::info!(
        endpoint,
        sampler = sampler_name,
        service = args.otel_service_name,
        "exporting traces over OTLP/gRPC"
    );
    Ok(Tracing {
        provider: Some(provider),
    })
}

/// Whether this process exports spans.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The caller's context from W3C headers, if they hold a valid `traceparent`.
pub fn extract(tc: &v1::TraceContext) -> Option<Context> {
    if tc.traceparent.is_empty() {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&Headers(tc));
    cx.span().span_context().is_valid().then_some(cx)
}

/// The caller's context from the `traceparent` / `tracestate` metadata of an app's call.
pub fn extract_metadata(md: &tonic::metadata::MetadataMap) -> Option<Context> {
    let text = |k: &str| md.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    let tc = v1::TraceContext {
        traceparent: text("traceparent")?,
        tracestate: text("tracestate").unwrap_or_default(),
    };
    extract(&tc)
}

/// The W3C headers of `cx`'s span, if it has a valid one.
pub fn inject(cx: &Context) -> Option<v1::TraceContext> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut tc = v1::TraceContext::default();
    TraceContextPropagator::new().inject_context(cx, &mut HeadersMut(&mut tc));
    Some(tc)
}

/// The W3C headers of the ambient context (what a turn or a mesh hop hands on).
pub fn current() -> Option<v1::TraceContext> {
    Context::map_current(inject)
}

/// The ambient span's trace and span ids in W3C hex, if a trace is ambient (for log lines).
pub fn current_ids() -> Option<(String, String)> {
    Context::map_current(|cx| {
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid()
            .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
    })
}

/// Starts span `name` as a child of `parent` and returns the context holding it. With export
/// off, `parent` itself (the trace passes through, no span is made).
pub fn child(
    parent: &Context,
    name: &'static str,
    kind: SpanKind,
    attrs: Vec<KeyValue>,
) -> Context {
    match TRACER.get() {
        Some(tracer) => {
            let span = tracer
                .span_builder(name)
                .with_kind(kind)
                .with_attributes(attrs)
                .start_with_context(tracer, parent);
            parent.with_span(span)
        }
        None => parent.clone(),
    }
}

/// A child of the ambient context, or `None` when it carries no trace and export is off.
/// With export on and no ambient trace, a new root (sampled by the ratio). `attrs` is built
/// only when a span is made: with export off they would be dropped unread.
pub fn child_of_current(
    name: &'static str,
    kind: SpanKind,
    attrs: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Context> {
    let cx = Context::current();
    (enabled() || cx.span().span_context().is_valid()).then(|| child(&cx, name, kind, attrs()))
}

/// A span for one inner step of a traced call (routing, a directory look-up or claim, a state
/// commit): a child of the ambient context, made only when export is on *and* a trace is
/// ambient. `attrs` is built only then, so with export off a step costs one `OnceLock` read,
/// and background work outside any call (a rebalance's look-ups) makes no stray roots.
pub fn step(
    name: &'static str,
    kind: SpanKind,
    attrs: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Context> {
    TRACER.get()?;
    let cx = Context::current();
    cx.span()
        .span_context()
        .is_valid()
        .then(|| child(&cx, name, kind, attrs()))
}

/// A new root span (its own trace, sampled by the ratio) for work no call caused, such as a
/// reminder firing; `None` with export off. What it covers runs under it with [`traced`].
pub fn root(
    name: &'static str,
    kind: SpanKind,
    attrs: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Context> {
    TRACER.get()?;
    Some(child(&Context::new(), name, kind, attrs()))
}

/// Sets attributes on the ambient span, when export is on (`kvs` is built only then): what a
/// span learns while it runs, such as the host a call was routed to.
pub fn annotate<I: IntoIterator<Item = KeyValue>>(kvs: impl FnOnce() -> I) {
    if enabled() {
        Context::map_current(|cx| cx.span().set_attributes(kvs()));
    }
}

/// Runs `fut` with `cx` (when given) as its ambient context, ending no span: for work done
/// under a span that someone else ends (an activation's claim under its `sigx.activate`).
pub async fn within<F: Future>(cx: Option<Context>, fut: F) -> F::Output {
    match cx {
        None => fut.await,
        Some(cx) => fut.with_context(cx).await,
    }
}

/// Ends the span of `cx` with the outcome of what it covered: the error kind as `sigx.result`
/// and an error status, or `ok`.
pub fn finish<T>(cx: &Context, outcome: &Result<T, ActorError>) {
    finish_as(
        cx,
        outcome
            .as_ref()
            .err()
            .map(|e| (e.kind.as_str(), e.message.as_str())),
    );
}

/// Ends the span of `cx`: `ok`, or the failure's kind (as `sigx.result`) and message (as the
/// error status), for steps whose errors are not `ActorError`s (a state store's).
pub fn finish_as(cx: &Context, failure: Option<(&'static str, &str)>) {
    if !enabled() {
        return;
    }
    let span = cx.span();
    match failure {
        None => span.set_attribute(KeyValue::new("sigx.result", "ok")),
        Some((kind, message)) => {
            span.set_attribute(KeyValue::new("sigx.result", kind));
            span.set_status(SpanStatus::error(message.to_string()));
        }
    }
    span.end();
}

/// Runs `fut` under `cx` (when given) and ends its span with the outcome.
pub async fn traced<T, F>(cx: Option<Context>, fut: F) -> Result<T, ActorError>
where
    F: Future<Output = Result<T, ActorError>>,
{
    match cx {
        None => fut.await,
        Some(cx) => {
            let outcome = fut.with_context(cx.clone()).await;
            finish(&cx, &outcome);
            outcome
        }
    }
}

/// The attributes every sigx span of a call carries about its actor and method.
pub fn actor_attrs(actor: &crate::runtime::ActorId, method: &str) -> Vec<KeyValue> {
    let mut attrs = actor_only_attrs(actor);
    attrs.push(KeyValue::new("sigx.method", method.to_string()));
    attrs
}

/// The actor's attributes alone, for steps about the actor rather than one method (a
/// directory look-up or claim, a state commit).
pub fn actor_only_attrs(actor: &crate::runtime::ActorId) -> Vec<KeyValue> {
    vec![
        KeyValue::new("sigx.actor.type", actor.actor_type.to_string()),
        KeyValue::new("sigx.actor.key", actor.key.to_string()),
    ]
}

struct Headers<'a>(&'a v1::TraceContext);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(&self.0.traceparent),
            "tracestate" => Some(&self.0.tracestate),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

struct HeadersMut<'a>(&'a mut v1::TraceContext);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        match key {
            "traceparent" => self.0.traceparent = value,
            "tracestate" => self.0.tracestate = value,
            _ => {}
        }
    }
}

/// The OTLP exporter, with its failures logged at doubling intervals (the 1st, 2nd, 4th, 8th …
/// failed batch) and its recovery logged once: a collector that is down never floods the log,
/// and never blocks a turn (the batch processor's queue drops spans when full).
#[derive(Debug)]
struct LoggedExporter<E> {
    inner: E,
    endpoint: String,
    failures: AtomicU64,
}

impl<E> LoggedExporter<E> {
    fn new(inner: E, endpoint: String) -> Self {
        LoggedExporter {
            inner,
            endpoint,
            failures: AtomicU64::new(0),
        }
    }

    /// Counts one export's result; returns the failure count to log, if this one is logged.
    fn record(&self, ok: bool) -> Option<u64> {
        if ok {
            let before = self.failures.swap(0, Ordering::Relaxed);
            if before > 0 {
                tracing::info!(endpoint = %self.endpoint, "trace export recovered after {before} failed batch(es)");
            }
            return None;
        }
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        n.is_power_of_two().then_some(n)
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for LoggedExporter<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Some(n) = self.record(result.is_ok())
            && let Err(e) = &result
        {
            tracing::warn!(
                endpoint = %self.endpoint,
                "trace export failed ({n} batch(es) so far; {spans} span(s) dropped): {e}; \
                 is the collector at --otlp-endpoint up?"
            );
        }
        result
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn passes_the_context_through_unchanged_when_export_is_off() {
        let tc = v1::TraceContext {
            traceparent: PARENT.into(),
            tracestate: "vendor=x".into(),
        };
        let cx = extract(&tc).expect("a valid traceparent");
        let out = inject(&child(&cx, "t", SpanKind::Internal, vec![])).expect("a span");
        assert_eq!(out, tc);
    }

    #[test]
    fn ignores_malformed_and_missing_traceparents() {
        for bad in [
            "",
            "00-zz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let tc = v1::TraceContext {
                traceparent: bad.into(),
                tracestate: String::new(),
            };
            assert!(extract(&tc).is_none(), "{bad:?} was taken");
        }
        assert!(current().is_none(), "no ambient trace outside a call");
    }

    #[test]
    fn refuses_a_ratio_outside_zero_to_one_and_stays_off_without_an_endpoint() {
        for ratio in [-0.1, 1.5, f64::NAN] {
            let args = TraceArgs {
                trace_sample_ratio: Some(ratio),
                ..TraceArgs::default()
            };
            assert!(
                matches!(init(&args, "h"), Err(TraceError::Ratio(_))),
                "{ratio} was taken"
            );
        }
        let args = TraceArgs {
            otlp_endpoint: Some(String::new()),
            trace_sample_ratio: Some(0.5),
            ..TraceArgs::default()
        };
        init(&args, "h")
            .expect("an empty endpoint is off")
            .shutdown();
        assert!(!enabled(), "no endpoint, no export");
    }

    #[test]
    fn reads_the_standard_sampler_and_endpoint_settings() {
        let with = |sampler: &str, arg: &str, ratio: Option<f64>| TraceArgs {
            trace_sampler: Some(sampler.into()),
            trace_sampler_arg: Some(arg.into()),
            trace_sample_ratio: ratio,
            ..TraceArgs::default()
        };
        let dbg = |a: TraceArgs| format!("{:?}", a.sampler().expect("a sampler"));
        assert_eq!(
            dbg(TraceArgs::default()),
            format!(
                "{:?}",
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(1.0)))
            )
        );
        assert_eq!(
            dbg(with("traceidratio", "0.25", None)),
            format!("{:?}", Sampler::TraceIdRatioBased(0.25))
        );
        assert_eq!(
            dbg(with("parentbased_traceidratio", "0.25", Some(0.5))),
            format!(
                "{:?}",
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(0.5)))
            ),
            "sigx's own ratio wins over OTEL_TRACES_SAMPLER_ARG"
        );
        assert_eq!(
            dbg(with("always_off", "", None)),
            format!("{:?}", Sampler::AlwaysOff)
        );
        assert!(matches!(
            with("jaeger_remote", "", None).sampler(),
            Err(TraceError::Sampler(_))
        ));
        assert!(matches!(
            with("traceidratio", "half", None).sampler(),
            Err(TraceError::SamplerArg(_))
        ));
        let both = TraceArgs {
            otlp_endpoint: Some("http://general:4317".into()),
            otlp_traces_endpoint: Some("http://traces:4317".into()),
            ..TraceArgs::default()
        };
        assert_eq!(both.endpoint(), Some("http://traces:4317"));
    }

    #[test]
    fn logs_export_failures_at_doubling_intervals() {
        let e = LoggedExporter::new((), "x".into());
        let logged: Vec<u64> = (0..20).filter_map(|_| e.record(false)).collect();
        assert_eq!(logged, vec![1, 2, 4, 8, 16]);
        assert_eq!(e.record(true), None);
        assert_eq!(
            e.record(false),
            Some(1),
            "counting restarts after a recovery"
        );
    }
}
