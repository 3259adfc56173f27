//! How a role's pods stop (operator/src/render/stop.rs): every app container's preStop hook asks
//! the sidecar to drain the app (`GET /drain` on the health port, with the role's token), and the
//! grace period is sized from the configured drain, not fixed.

mod support;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use sigx_operator::render;
use support::*;

#[test]
fn every_app_container_drains_through_the_sidecar_before_it_is_signalled() {
    let r = role(
        json!({"containers": [{"name": "app", "image": "a"}, {"name": "helper", "image": "h"}]}),
        None,
    );
    let d = render::deployment(&cluster(json!({})), &r).unwrap();
    let token = render::drain_token(&r).unwrap();
    assert_eq!(token, "r-uid-engine");
    assert_eq!(
        env(sidecar(&d), "SIGX_DRAIN_TOKEN").as_deref(),
        Some("r-uid-engine")
    );
    for name in ["app", "helper"] {
        let hook = app(&d, name)
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{name} has the /drain preStop hook"));
        assert_eq!(hook.path.as_deref(), Some("/drain"));
        assert_eq!(
            hook.port,
            IntOrString::Int(9090),
            "a number: a named port would be looked up in the app container"
        );
        assert_eq!(hook.host, None, "the pod's own IP");
        let headers = hook.http_headers.as_ref().unwrap();
        assert_eq!(headers.len(), 1);
        assert_eq!(headers[0].name, render::DRAIN_TOKEN_HEADER);
        assert_eq!(headers[0].value, token);
    }
}

#[test]
fn a_container_with_its_own_pre_stop_keeps_it() {
    let r = role(
        json!({"containers": [{"name": "app", "image": "a",
            "lifecycle": {"preStop": {"exec": {"command": ["/bin/flush"]}}}}]}),
        None,
    );
    let d = render::deployment(&cluster(json!({})), &r).unwrap();
    let pre_stop = app(&d, "app")
        .lifecycle
        .as_ref()
        .unwrap()
        .pre_stop
        .as_ref()
        .unwrap();
    assert!(pre_stop.http_get.is_none());
    assert_eq!(
        pre_stop.exec.as_ref().unwrap().command.as_deref(),
        Some(&["/bin/flush".to_owned()][..])
    );
}

#[test]
fn the_grace_period_follows_the_configured_drain() {
    let short = cluster(json!({"calls": {"timeoutSeconds": 30, "drainTimeoutSeconds": 10}}));
    let d = render::deployment(&short, &role(one_app(), None)).unwrap();
    assert_eq!(
        env(sidecar(&d), "SIGX_DRAIN_TIMEOUT_MS").as_deref(),
        Some("10000")
    );
    // drain + the hook's margin + the app's exit + one beat + the withdrawal.
    assert_eq!(
        pod(&d).termination_grace_period_seconds,
        Some(10 + 2 + 5 + 5 + 5)
    );

    let long = cluster(json!({"calls": {"drainTimeoutSeconds": 120},
        "membership": {"heartbeatSeconds": 10, "ttlSeconds": 30}}));
    let d = render::deployment(&long, &role(one_app(), None)).unwrap();
    assert_eq!(
        env(sidecar(&d), "SIGX_DRAIN_TIMEOUT_MS").as_deref(),
        Some("120000")
    );
    assert_eq!(
        pod(&d).termination_grace_period_seconds,
        Some(120 + 2 + 5 + 10 + 5)
    );
    assert_eq!(render::termination_grace_seconds(&long), 142);
}

#[test]
fn the_hook_follows_a_moved_health_port() {
    let d = render::deployment(
        &cluster(json!({"healthPort": 9464})),
        &role(one_app(), Some(json!({"healthPort": 9555}))),
    )
    .unwrap();
    let hook = app(&d, "app")
        .lifecycle
        .as_ref()
        .unwrap()
        .pre_stop
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(hook.port, IntOrString::Int(9555));
}
