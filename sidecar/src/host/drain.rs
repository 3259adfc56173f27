//! `/drain`: a pod's stop sequence that holds for any app (DESIGN.md §8).
//!
//! A native sidecar is stopped only after the app containers exited, so its own graceful stop
//! (SIGTERM: drain, Deactivate turns, hand-over) would find the app already gone unless the app
//! asked for `Drain` itself on SIGTERM. The operator therefore gives every app container a
//! `preStop` hook, `GET /drain` on this host's health port, which the kubelet runs *before* it
//! sends the app SIGTERM. The hook asks for exactly what the app's own `Drain` asks for — the
//! host publishes `leaving`, in-flight turns finish, every activation gets its Deactivate turn,
//! the app's stream ends with OK — and answers once that is over, so the app is signalled only
//! then. Then the app exits, and then the sidecar gets SIGTERM and hands over and withdraws.
//!
//! A `/drain` is one-way: the host is marked leaving first (readiness fails for good, and the
//! host never publishes `active` again). An SDK that did not ask for the drain sees its stream
//! end and reconnects; without this its new registration would make a terminating pod's host
//! active again until SIGTERM.

use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper::StatusCode;
use tokio::time::Instant;

use crate::health::{DrainHook, HostState};
use crate::runtime::Runtime;

/// How much longer than the drain timeout `/drain` waits for the drain to end: the host loop
/// starts the drain's clock when it picks the request up, a moment after this request.
const ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// The hook behind `/drain` for `runtime`, waiting at most `drain_timeout` (+ a margin). It
/// holds the host's state weakly: the state holds the hook.
pub(crate) fn hook(runtime: Runtime, state: Weak<HostState>, drain_timeout: Duration) -> DrainHook {
    Arc::new(move || {
        let (runtime, state) = (runtime.clone(), state.clone());
        futures::FutureExt::boxed(async move {
            if let Some(state) = state.upgrade() {
                state.set_leaving();
            }
            drain_attached(&runtime, drain_timeout).await
        })
    })
}

/// Asks the attached app to be drained (as its `Drain` would) and waits until its stream ended.
async fn drain_attached(runtime: &Runtime, drain_timeout: Duration) -> (StatusCode, String) {
    let Some(session) = runtime.app() else {
        tracing::info!(step = "prestop-drain", "no app attached: nothing to drain");
        return (StatusCode::OK, "no app attached: nothing to drain\n".into());
    };
    let t = Instant::now();
    session.request_drain();
    let over = tokio::time::timeout(drain_timeout + ANSWER_MARGIN, async {
        tokio::select! {
            _ = session.stream_ended() => {}
            _ = session.closed() => {}
        }
    })
    .await
    .is_ok();
    let ms = t.elapsed().as_millis() as u64;
    if over {
        tracing::info!(
            step = "prestop-drain",
            ms,
            "app drained on the preStop hook's request"
        );
        (StatusCode::OK, format!("drained in {ms} ms\n"))
    } else {
        tracing::warn!(
            step = "prestop-drain",
            ms,
            "the app's drain did not end in time"
        );
        (
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "the drain did not end within {ms} ms; raise SIGX_DRAIN_TIMEOUT_MS or make the app answer its turns sooner\n"
            ),
        )
    }
}
