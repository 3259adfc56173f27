//! The sidecar's ports (operator/src/render/ports.rs): configurable per cluster and per role,
//! checked against the ports the app's containers declare, and `hostNetwork` refused — each
//! refusal with a reason the role's Stalled condition carries.

mod support;

use serde_json::json;
use sigx_operator::render::{self, RenderError};
use support::*;

#[test]
fn ports_come_from_the_role_then_the_cluster_then_the_defaults() {
    let d = render::deployment(&cluster(json!({})), &role(one_app(), None)).unwrap();
    assert_eq!(
        (port(sidecar(&d), "mesh"), port(sidecar(&d), "health")),
        (7311, 9090)
    );

    let c = cluster(json!({"meshPort": 7400, "healthPort": 9464}));
    let d = render::deployment(&c, &role(one_app(), None)).unwrap();
    let s = sidecar(&d);
    assert_eq!((port(s, "mesh"), port(s, "health")), (7400, 9464));
    assert_eq!(env(s, "SIGX_HEALTH_ADDR").as_deref(), Some("0.0.0.0:9464"));
    assert_eq!(env(s, "SIGX_MESH_ADDR").as_deref(), Some("0.0.0.0:7400"));

    let d = render::deployment(
        &c,
        &role(
            one_app(),
            Some(json!({"meshPort": 7500, "healthPort": 9555})),
        ),
    )
    .unwrap();
    let s = sidecar(&d);
    assert_eq!((port(s, "mesh"), port(s, "health")), (7500, 9555));
    assert_eq!(env(s, "SIGX_HEALTH_ADDR").as_deref(), Some("0.0.0.0:9555"));
}

#[test]
fn an_app_port_on_a_sidecar_port_is_refused_naming_both() {
    let metrics_app = json!({"containers": [{"name": "app", "image": "a",
        "ports": [{"name": "http", "containerPort": 8080}, {"name": "prom", "containerPort": 9090}]}]});
    let err =
        render::deployment(&cluster(json!({})), &role(metrics_app.clone(), None)).unwrap_err();
    assert!(
        matches!(
            err,
            RenderError::PortConflict {
                port: 9090,
                what: "health",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.reason(), "PortConflict");
    let text = err.to_string();
    assert!(text.contains("\"app\"") && text.contains("9090"), "{text}");
    assert!(
        text.contains("spec.sidecar.healthPort"),
        "says what to change: {text}"
    );

    // Moving the sidecar's health port resolves it.
    assert!(
        render::deployment(
            &cluster(json!({})),
            &role(metrics_app, Some(json!({"healthPort": 9191})))
        )
        .is_ok()
    );

    let mesh_in_init = json!({"containers": [{"name": "app", "image": "a"}],
        "initContainers": [{"name": "proxy", "image": "p", "restartPolicy": "Always",
            "ports": [{"containerPort": 7311}]}]});
    let err = render::deployment(&cluster(json!({})), &role(mesh_in_init, None)).unwrap_err();
    assert!(
        matches!(&err, RenderError::PortConflict { container, what: "mesh", .. } if container == "proxy"),
        "{err}"
    );
}

#[test]
fn the_same_number_over_udp_is_another_socket() {
    let dns = json!({"containers": [{"name": "app", "image": "a",
        "ports": [{"containerPort": 9090, "protocol": "UDP"}]}]});
    assert!(render::deployment(&cluster(json!({})), &role(dns, None)).is_ok());
}

#[test]
fn equal_mesh_and_health_ports_are_refused() {
    let err = render::deployment(
        &cluster(json!({"meshPort": 9000, "healthPort": 9000})),
        &role(one_app(), None),
    )
    .unwrap_err();
    assert!(
        matches!(err, RenderError::PortConflict { port: 9000, .. }),
        "{err}"
    );
}

#[test]
fn host_network_is_refused() {
    let host = json!({"hostNetwork": true, "containers": [{"name": "app", "image": "a"}]});
    let err = render::deployment(&cluster(json!({})), &role(host, None)).unwrap_err();
    assert!(matches!(err, RenderError::HostNetwork { .. }), "{err}");
    assert_eq!(err.reason(), "HostNetwork");
    assert!(err.to_string().contains("remove hostNetwork"), "{err}");
    let explicit_false =
        json!({"hostNetwork": false, "containers": [{"name": "app", "image": "a"}]});
    assert!(render::deployment(&cluster(json!({})), &role(explicit_false, None)).is_ok());
}
