//! How a pod of a role stops, and how long it is given to (DESIGN.md §8).
//!
//! The sidecar is a native sidecar, which the kubelet stops only after every app container has
//! exited; its own graceful stop would find the app gone. So the order is made explicit:
//!
//! 1. The kubelet runs each app container's `preStop` hook, `GET /drain` on the sidecar's health
//!    port (with the role's token in `X-Sigx-Drain-Token`). The sidecar publishes `leaving`
//!    (peers stop routing to it, readiness fails), lets in-flight turns finish, gives every
//!    activation its Deactivate turn, ends the app's stream with OK, and only then answers: at
//!    most the drain timeout (`spec.calls.drainTimeoutSeconds`, default the call timeout) plus
//!    [`PRESTOP_MARGIN_SECONDS`]. This holds for any app, whatever it does on SIGTERM.
//! 2. The kubelet sends the app SIGTERM; with its stream ended it has nothing left to do
//!    ([`APP_EXIT_SECONDS`]).
//! 3. The kubelet sends the sidecar SIGTERM: it waits one beat for peers to see `leaving`
//!    (hand-over) and withdraws its Lease ([`WITHDRAW_SECONDS`] at most).
//!
//! `terminationGracePeriodSeconds` is the sum, so the kubelet's SIGKILL never cuts a drain
//! short; a longer one in the template is kept. A container whose template has a preStop hook
//! of its own keeps it: such an app asks for `Drain` itself (the SDKs do on SIGTERM) or calls
//! `/drain` from its hook.

use k8s_openapi::api::core::v1::{HTTPGetAction, HTTPHeader, Lifecycle, LifecycleHandler, PodSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sigx_crds::{ActorCluster, ActorRole};

use super::{RenderError, name_of};

/// The header `/drain` checks (the sidecar's `health::DRAIN_TOKEN_HEADER`).
pub const DRAIN_TOKEN_HEADER: &str = "X-Sigx-Drain-Token";
/// The sidecar's `/drain` path.
pub const DRAIN_PATH: &str = "/drain";
/// How much longer than the drain timeout the hook may take to be answered.
pub const PRESTOP_MARGIN_SECONDS: i64 = 2;
/// Seconds the app is given to exit after SIGTERM, its stream already ended.
pub const APP_EXIT_SECONDS: i64 = 5;
/// Upper bound of the sidecar's Lease withdrawal.
pub const WITHDRAW_SECONDS: i64 = 5;

/// Seconds a pod of `cluster` is given to stop: the drain on the preStop hook, the app's exit,
/// one beat for the hand-over and the withdrawal (see the module documentation).
pub fn termination_grace_seconds(cluster: &ActorCluster) -> i64 {
    i64::from(cluster.spec.calls.drain_seconds())
        + PRESTOP_MARGIN_SECONDS
        + APP_EXIT_SECONDS
        + i64::from(cluster.spec.membership.heartbeat_seconds)
        + WITHDRAW_SECONDS
}

/// The token `/drain` requires for a role's pods: the role's uid. Not a secret from whoever
/// reads the pod spec (who could as well delete the pod), but unknown to a peer that only
/// reaches the pod network; stable for the role's life, so it never rolls the pods.
pub fn drain_token(role: &ActorRole) -> Result<String, RenderError> {
    role.metadata
        .uid
        .clone()
        .ok_or_else(|| RenderError::MissingMetadata {
            kind: "ActorRole",
            name: name_of(role, "ActorRole").unwrap_or_default(),
            field: "uid",
        })
}

/// Gives every app container without a preStop hook of its own the `/drain` hook.
pub(super) fn add_pre_stop(pod: &mut PodSpec, health_port: i32, token: &str) {
    for c in &mut pod.containers {
        let lifecycle = c.lifecycle.get_or_insert_with(Lifecycle::default);
        if lifecycle.pre_stop.is_some() {
            continue;
        }
        lifecycle.pre_stop = Some(LifecycleHandler {
            http_get: Some(HTTPGetAction {
                path: Some(DRAIN_PATH.to_owned()),
                // A number: a named port would be looked up among the app container's ports.
                port: IntOrString::Int(health_port),
                scheme: Some("HTTP".to_owned()),
                http_headers: Some(vec![HTTPHeader {
                    name: DRAIN_TOKEN_HEADER.to_owned(),
                    value: token.to_owned(),
                }]),
                ..HTTPGetAction::default()
            }),
            ..LifecycleHandler::default()
        });
    }
}
