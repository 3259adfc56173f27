//! Hosts of the production Lease membership (`KubernetesProvider` + `membership::start`) in the
//! test's own process, so tens of them fit on a 2-core machine: for the tests that measure or
//! break what the membership asks of an API server, real or double.

use std::time::Duration;

use sigx_sidecar::clock;
use sigx_sidecar::membership::{
    HostDescriptor, KubernetesOptions, KubernetesProvider, MembershipConfig, MembershipHandle,
    start,
};

/// Joins host `id` of cluster `demo`, role `engine`, in `namespace` through `client`, as a
/// stateful `Counter` host. Its Lease has no owner (no Pod for the garbage collector to tie it
/// to).
pub async fn lease_host(
    client: kube::Client,
    namespace: &str,
    id: &str,
    cfg: &MembershipConfig,
    watch_backoff_max: Duration,
) -> MembershipHandle {
    let options = KubernetesOptions {
        namespace: namespace.into(),
        cluster: "demo".into(),
        role: "engine".into(),
        pod_name: format!("pod-{id}"),
        pod_uid: None,
        watch_backoff_max,
    };
    let provider =
        KubernetesProvider::new(client, options, id, clock::system()).expect("a Lease provider");
    let mut descriptor = HostDescriptor::new(
        id,
        "10.0.0.1:7400",
        Some(vec!["Counter".into()]),
        Some(vec!["Counter".into()]),
    );
    descriptor.meta.insert("node".into(), format!("node-{id}"));
    start(provider, descriptor, cfg.clone(), clock::system())
        .await
        .unwrap_or_else(|e| panic!("{id} joins: {e}"))
}

/// Waits until every host of `hosts` sees `n` hosts; panics naming the first that does not,
/// how many are fenced, and `diagnostics()` (say, the control plane's log).
pub async fn wait_all_see(
    hosts: &[MembershipHandle],
    n: usize,
    within: Duration,
    diagnostics: impl Fn() -> String,
) {
    for h in hosts {
        if h.wait_for_view(within, |v| v.len() == n).await.is_err() {
            let fenced = hosts.iter().filter(|h| h.fence_state().is_some()).count();
            panic!(
                "{} sees {} of {n} hosts ({fenced} fenced){}",
                h.self_id(),
                h.view().len(),
                diagnostics()
            );
        }
    }
}
