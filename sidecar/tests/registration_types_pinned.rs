//! A clustered host publishes the types of its first app registration in its membership
//! descriptor, and its fence policy follows them. A replacement app registering other types
//! would leave that descriptor stale (peers placing actors of types it no longer serves, or never
//! sending the new ones), so it is refused with an error saying what to do; a replacement with
//! the same types is accepted, and the published descriptor still names them.

mod support;

use sigx_proto::v1;
use sigx_sidecar::host::{Host, StopKind};
use std::collections::HashMap;
use std::time::Duration;
use support::*;

fn register(actors: &[&str], workers: &[&str]) -> v1::Register {
    v1::Register {
        actors: actors.iter().map(|a| actor_spec(a, false, 0)).collect(),
        workers: workers
            .iter()
            .map(|w| v1::WorkerTypeSpec {
                name: w.to_string(),
                max_concurrency: 1,
                methods: vec![],
            })
            .collect(),
        app_name: "replaceable".into(),
    }
}

async fn wait_detached(host: &Host) {
    for _ in 0..500 {
        if host.runtime.app().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the app never detached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_app_with_other_types_is_refused_and_one_with_the_same_is_accepted() {
    let dir = tempdir();
    let host = Host::start(cluster_host_config(dir.path(), "pinned", &[]))
        .await
        .unwrap();
    let first = TestApp::start(&host.socket, register(&["A"], &["W"]), HashMap::new())
        .await
        .unwrap();
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    let published = || {
        host.cluster
            .get()
            .expect("joined")
            .membership
            .descriptor()
            .types
    };
    assert_eq!(published(), Some(vec!["A".to_string(), "W".to_string()]));
    first.kill();
    wait_detached(&host).await;

    for (actors, workers) in [
        (&["B"][..], &["W"][..]),
        (&["A"], &[]),
        (&["A", "B"], &["W"]),
    ] {
        let refused = TestApp::start(&host.socket, register(actors, workers), HashMap::new())
            .await
            .err()
            .unwrap_or_else(|| panic!("{actors:?}/{workers:?} must be refused"));
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        let msg = refused.message();
        assert!(
            msg.contains("published actors [A] and workers [W]")
                && msg.contains("restart the sidecar"),
            "{msg}"
        );
    }

    let _same = TestApp::start(&host.socket, register(&["A"], &["W"]), HashMap::new())
        .await
        .expect("the same types are accepted");
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    assert_eq!(published(), Some(vec!["A".to_string(), "W".to_string()]));
    host.stop(StopKind::Fast).await;
}
