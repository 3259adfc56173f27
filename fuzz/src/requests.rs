//! `app_requests`: the app API's requests as the sidecar checks them (`sidecar/src/app/`,
//! `runtime/registry.rs`, `runtime/timers.rs`, `trace.rs`).
//!
//! Byte 0 mod 6 picks what the rest is: a `CallRequest` ([`check_call`]), a `Register`
//! ([`Registry::from_proto`]), a `SetTimerRequest` ([`TimerSpec::from_proto`]), a `Serve`
//! stream message (`AppMessage`), a `TraceContext` ([`sigx_sidecar::trace::extract`]), or a
//! `grpc-timeout` header value with a request timeout ([`deadline::from_request`]). Every
//! message must round-trip through prost, and what a check accepts must hold what it promises.

use crate::support::decode;
use sigx_proto::v1;
use sigx_sidecar::app::{check_call, deadline};
use sigx_sidecar::runtime::registry::valid_type_name;
use sigx_sidecar::runtime::{MAX_TIMER_DELAY, MAX_TIMER_NAME_BYTES, Registry, TimerSpec};
use std::collections::HashSet;
use std::time::Duration;

/// The payload limit the checks run with (the sidecar's default).
pub const MAX_PAYLOAD: usize = 4 * 1024 * 1024;

/// The fuzz target.
pub fn app_requests(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 6 {
        0 => call(rest),
        1 => register(rest),
        2 => timer(rest),
        3 => {
            decode::<v1::AppMessage>(rest);
        }
        4 => {
            if let Some(tc) = decode::<v1::TraceContext>(rest) {
                let _ = sigx_sidecar::trace::extract(&tc);
            }
        }
        _ => grpc_timeout(rest),
    }
}

fn call(data: &[u8]) {
    let Some(req) = decode::<v1::CallRequest>(data) else {
        return;
    };
    if let Some(tc) = &req.trace {
        let _ = sigx_sidecar::trace::extract(tc);
    }
    let Ok((actor, _locality)) = check_call(&req, MAX_PAYLOAD) else {
        return;
    };
    assert!(!actor.actor_type.is_empty() && actor.key.len() <= 1024);
    assert!(!req.method.is_empty() && !req.method.starts_with('$'));
    assert!(req.payload.len() <= MAX_PAYLOAD);
}

fn register(data: &[u8]) {
    let Some(reg) = decode::<v1::Register>(data) else {
        return;
    };
    let Ok(registry) = Registry::from_proto(&reg) else {
        return;
    };
    let names: Vec<&str> = reg
        .actors
        .iter()
        .map(|a| a.name.as_str())
        .chain(reg.workers.iter().map(|w| w.name.as_str()))
        .collect();
    assert!(!names.is_empty(), "an empty registration was accepted");
    let unique: HashSet<&str> = names.iter().copied().collect();
    assert_eq!(
        unique.len(),
        names.len(),
        "a type registered twice was accepted"
    );
    for n in &names {
        assert!(valid_type_name(n), "type name {n:?} was accepted");
    }
    let _ = registry;
}

fn timer(data: &[u8]) {
    let Some(req) = decode::<v1::SetTimerRequest>(data) else {
        return;
    };
    let Ok(spec) = TimerSpec::from_proto(&req, MAX_PAYLOAD) else {
        return;
    };
    assert!(!spec.name.is_empty() && spec.name.len() <= MAX_TIMER_NAME_BYTES);
    assert!(spec.due <= MAX_TIMER_DELAY);
    assert!(
        spec.period
            .is_none_or(|p| p <= MAX_TIMER_DELAY && !p.is_zero())
    );
    assert!(spec.payload.len() <= MAX_PAYLOAD);
}

fn grpc_timeout(data: &[u8]) {
    let (ms, value) = data.split_at(data.len().min(8));
    let mut b = [0u8; 8];
    b[..ms.len()].copy_from_slice(ms);
    let timeout_ms = u64::from_le_bytes(b);
    let Ok(text) = std::str::from_utf8(value) else {
        return;
    };
    let parsed = deadline::parse_grpc_timeout(text);
    let mut md = tonic::metadata::MetadataMap::new();
    if let Ok(v) = text.parse() {
        md.insert("grpc-timeout", v);
    }
    let default = Duration::from_secs(30);
    let now = tokio::time::Instant::now();
    let at = deadline::from_request(&md, timeout_ms, default, now);
    let own = if timeout_ms == 0 {
        default
    } else {
        Duration::from_millis(timeout_ms)
    };
    let want = parsed
        .filter(|_| md.contains_key("grpc-timeout"))
        .map_or(own, |g| own.min(g));
    assert_eq!(
        at - now,
        want,
        "deadline of {timeout_ms} ms and grpc-timeout {text:?}"
    );
}
