//! The Kubernetes Lease provider against the Kubernetes API test double, through the real
//! `kube` client over HTTP, in real time with short TTLs (beat 200 ms, TTL 1 s): join, leave and
//! expiry across three hosts; a Lease deleted under a host fences it at once, also when its
//! watch lags (renewals carry a uid precondition, so they never re-create it); a second process
//! under the same host id is refused; an API outage
//! longer than the TTL fences every stateful host (and a worker-only host rejoins), a shorter one
//! fences nothing; a watch that comes back after compaction re-lists (410 Gone).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use sigx_e2e::kube_double::{KubeDouble, Mode};
use sigx_e2e::lease_fleet::wait_all_see;
use sigx_sidecar::clock;
use sigx_sidecar::membership::kubernetes::{CLUSTER_LABEL, DESCRIPTOR_ANNOTATION, ROLE_LABEL};
use sigx_sidecar::membership::{
    FenceReason, HostDescriptor, HostStatus, KubernetesOptions, KubernetesProvider, LostCause,
    MembershipConfig, MembershipError, MembershipHandle, MembershipProvider, ProviderError, start,
};
use std::time::Duration;
use tokio::time::Instant;

const BEAT: Duration = Duration::from_millis(200);
const TTL: Duration = Duration::from_millis(1000);
const DRIFT: Duration = Duration::from_millis(200);
const NS: &str = "default";

fn cfg() -> MembershipConfig {
    MembershipConfig {
        drift_margin: DRIFT,
        ..MembershipConfig::with_timing(BEAT, TTL)
    }
}

fn opts(id: &str) -> KubernetesOptions {
    KubernetesOptions {
        namespace: NS.into(),
        cluster: "demo".into(),
        role: "engine".into(),
        pod_name: format!("pod-{id}"),
        pod_uid: Some(format!("uid-{id}")),
        watch_backoff_max: Duration::from_millis(200),
    }
}

fn descriptor(id: &str, stateful: bool) -> HostDescriptor {
    let (types, st) = if stateful {
        (
            vec!["Counter".into(), "Relay".into()],
            vec!["Counter".into()],
        )
    } else {
        (vec!["Relay".into()], vec![])
    };
    let mut d = HostDescriptor::new(id, format!("10.0.0.1:{}", 7400), Some(types), Some(st));
    d.meta.insert("node".into(), format!("node-{id}"));
    d
}

/// A host whose requests carry its id, so the double can partition it alone.
async fn host(double: &KubeDouble, id: &str, stateful: bool) -> MembershipHandle {
    let provider =
        KubernetesProvider::new(double.client_named(id), opts(id), id, clock::system()).unwrap();
    let h = start(provider, descriptor(id, stateful), cfg(), clock::system())
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

fn ids(h: &MembershipHandle) -> Vec<String> {
    h.view().hosts().iter().map(|d| d.id.clone()).collect()
}

async fn wait_ids(h: &MembershipHandle, want: &[&str], within: Duration) -> Instant {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    let w = want.clone();
    h.wait_for_view(within, move |v| {
        v.hosts().iter().map(|d| &d.id).eq(w.iter())
    })
    .await
    .unwrap_or_else(|_| panic!("{} sees {:?}, wanted {want:?}", h.self_id(), ids(h)));
    Instant::now()
}

async fn three(double: &KubeDouble, c_stateful: bool) -> [MembershipHandle; 3] {
    let a = host(double, "a", true).await;
    let b = host(double, "b", true).await;
    let c = host(double, "c", c_stateful).await;
    for h in [&a, &b, &c] {
        wait_ids(h, &["a", "b", "c"], Duration::from_secs(5)).await;
        h.wait_for_view(Duration::from_secs(5), |v| {
            v.hosts().iter().all(|d| d.status == HostStatus::Active)
        })
        .await
        .unwrap();
        assert!(h.is_self_active());
    }
    [a, b, c]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_leave_and_expire_across_three_hosts() {
    let double = KubeDouble::start().await;
    let [a, b, c] = three(&double, true).await;

    // The Lease is shaped as DESIGN.md §3 says.
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let lease = leases.get("a").await.unwrap();
    let labels = lease.metadata.labels.clone().unwrap();
    assert_eq!(labels[CLUSTER_LABEL], "demo");
    assert_eq!(labels[ROLE_LABEL], "engine");
    let spec = lease.spec.clone().unwrap();
    // The holder is the host id plus this process's incarnation nonce.
    let holder = spec.holder_identity.clone().unwrap();
    assert!(
        holder.strip_prefix("a/").is_some_and(|n| n.len() == 16),
        "{holder}"
    );
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert!(spec.renew_time.is_some());
    let owner = &lease.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Pod", "pod-a", "uid-a")
    );
    let d = HostDescriptor::from_json(&lease.metadata.annotations.unwrap()[DESCRIPTOR_ANNOTATION])
        .unwrap();
    assert_eq!((d.status, d.node()), (HostStatus::Active, Some("node-a")));
    // Renewals move renewTime.
    tokio::time::sleep(BEAT * 2).await;
    let later = leases.get("a").await.unwrap().spec.unwrap().renew_time;
    assert_ne!(later, spec.renew_time);

    // A graceful leave: the Lease is marked withdrawn and deleted, and the others drop it at
    // once (well before a lease that was renewed at most a beat ago could lapse).
    c.leave().await.unwrap();
    wait_ids(&a, &["a", "b"], TTL - BEAT * 2).await;
    wait_ids(&b, &["a", "b"], TTL - BEAT * 2).await;
    assert!(leases.get_opt("c").await.unwrap().is_none());

    // A crash (tasks stop, the Lease stays): the survivor expires it within the TTL.
    b.abort();
    let t0 = Instant::now();
    let gone = wait_ids(&a, &["a"], TTL * 4).await;
    assert!(
        gone - t0 <= TTL + DRIFT + BEAT * 2,
        "dropped after {:?}",
        gone - t0
    );
    assert!(
        gone - t0 >= TTL - BEAT,
        "dropped too early: {:?}",
        gone - t0
    );
    // The watch may report the deletion before the delete's own answer is back.
    let deadline = Instant::now() + Duration::from_secs(1);
    while a.counters().expiries_observed == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.counters().expiries_observed, 1);
    assert!(
        leases.get_opt("b").await.unwrap().is_none(),
        "the observer deleted the Lease"
    );
    assert_eq!(a.fence_state(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_under_a_host_fences_it_at_once() {
    let double = KubeDouble::start().await;
    let [a, b, c] = three(&double, true).await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let t0 = Instant::now();
    leases.delete("c", &DeleteParams::default()).await.unwrap();
    let mut fenced = c.fenced_signal();
    tokio::time::timeout(Duration::from_secs(2), fenced.wait_for(|r| r.is_some()))
        .await
        .expect("c fenced")
        .unwrap();
    let after = t0.elapsed();
    assert!(
        after < TTL / 2,
        "proof of loss must not wait for the TTL: {after:?}"
    );
    assert!(
        matches!(c.fence_state(), Some(FenceReason::Lost(_))),
        "{:?}",
        c.fence_state()
    );
    assert!(c.check_lease().is_err());
    // A deletion by a third party proves nothing about c's turns: peers keep it until its last
    // renewal (at most a beat before the delete) is past TTL + margin (issue 12, hole D).
    if t0.elapsed() < TTL - BEAT {
        for s in [&a, &b] {
            assert!(
                s.view().get("c").is_some(),
                "{} dropped c at once",
                s.self_id()
            );
        }
    }
    for s in [&a, &b] {
        wait_ids(s, &["a", "b"], TTL + DRIFT + BEAT * 2).await;
    }
    // Terminal: c never writes its Lease back.
    tokio::time::sleep(TTL).await;
    assert!(leases.get_opt("c").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_over_by_another_holder_fences_its_host() {
    let double = KubeDouble::start().await;
    let a = host(&double, "a", true).await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let patch = serde_json::json!({ "spec": { "holderIdentity": "someone-else" } });
    leases
        .patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut fenced = a.fenced_signal();
    tokio::time::timeout(Duration::from_secs(2), fenced.wait_for(|r| r.is_some()))
        .await
        .expect("a fenced")
        .unwrap();
    assert!(t0.elapsed() < TTL, "{:?}", t0.elapsed());
    assert!(
        matches!(a.fence_state(), Some(FenceReason::Lost(ref c)) if format!("{c:?}").contains("someone-else")),
        "{:?}",
        a.fence_state()
    );
}

/// Waits up to `within` for `h` to fence; returns how long it took.
async fn fenced_within(h: &MembershipHandle, within: Duration) -> Duration {
    let t0 = Instant::now();
    let mut fenced = h.fenced_signal();
    tokio::time::timeout(within, fenced.wait_for(|r| r.is_some()))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} did not fence within {within:?}: {:?}",
                h.self_id(),
                h.counters()
            )
        })
        .unwrap();
    t0.elapsed()
}

/// Hole D of issue 12. A third party deletes a live host's Lease (`kubectl delete lease`, Pod GC
/// after a force delete) while the host's own watch lags, so only its renewal can find out. On a
/// real API server a PUT re-creates a deleted Lease; the renewal carries the uid of the Lease the
/// host created, so it is refused (409, the fresh GET shows 404) and the host fences within a
/// beat or two, and the Lease stays deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_while_its_hosts_watch_lags_fences_it_and_is_not_re_created() {
    let double = KubeDouble::start().await;
    let a = host(&double, "a", true).await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    double.stall_watches("a", true);
    leases.delete("a", &DeleteParams::default()).await.unwrap();
    let took = fenced_within(&a, BEAT * 3).await;
    assert_eq!(
        a.fence_state(),
        Some(FenceReason::Lost(LostCause::Gone)),
        "fenced after {took:?}"
    );
    assert!(a.check_lease().is_err());
    // Renewals never re-create the record (and a fenced host writes nothing).
    tokio::time::sleep(BEAT * 3).await;
    assert!(
        leases.get_opt("a").await.unwrap().is_none(),
        "the host's renewal re-created its deleted Lease"
    );
    double.stall_watches("a", false);
}

/// A Lease deleted and re-created by someone else (a restore from a backup, a copy) is not ours
/// even if it names our holder: the renewal's uid precondition fails and the fresh GET shows
/// another uid, so the host fences instead of adopting the stranger's resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_re_created_by_someone_else_fences_its_host_even_under_its_holder() {
    let double = KubeDouble::start().await;
    let a = host(&double, "a", true).await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    double.stall_watches("a", true);
    let mut copy = leases.get("a").await.unwrap();
    leases.delete("a", &DeleteParams::default()).await.unwrap();
    copy.metadata.uid = None;
    copy.metadata.resource_version = None;
    leases.create(&PostParams::default(), &copy).await.unwrap();
    fenced_within(&a, BEAT * 3).await;
    assert_eq!(
        a.fence_state(),
        Some(FenceReason::Lost(LostCause::Replaced))
    );
    double.stall_watches("a", false);
}

/// Hole G of issue 12: a second process joining under a host id whose Lease is live and held by
/// another incarnation is refused, with an error naming the id and the holder; the first keeps
/// renewing its Lease, unfenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_incarnation_of_a_host_id_is_refused_and_the_first_keeps_serving() {
    let double = KubeDouble::start().await;
    let first =
        KubernetesProvider::new(double.client_named("a"), opts("a"), "a", clock::system()).unwrap();
    let holder = first.holder().to_string();
    assert!(holder.starts_with("a/") && holder.len() > 2, "{holder}");
    let a = start(first, descriptor("a", true), cfg(), clock::system())
        .await
        .unwrap();
    a.set_status(HostStatus::Active).await.unwrap();

    let second =
        KubernetesProvider::new(double.client_named("a2"), opts("a"), "a", clock::system())
            .unwrap();
    assert_ne!(
        second.holder(),
        holder,
        "each process is its own incarnation"
    );
    let err = start(second, descriptor("a", true), cfg(), clock::system())
        .await
        .expect_err("a second process with the same host id must be refused");
    match &err {
        MembershipError::Provider(ProviderError::Conflict { id, holder: h, .. }) => {
            assert_eq!((id.as_str(), h.as_str()), ("a", holder.as_str()));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(err.to_string().contains(&holder), "{err}");

    let beats = a.counters().beats;
    tokio::time::sleep(BEAT * 4).await;
    assert_eq!(a.fence_state(), None);
    assert!(a.counters().beats >= beats + 2, "{:?}", a.counters());
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let spec = leases.get("a").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(holder.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_shorter_than_the_ttl_fences_nothing() {
    let double = KubeDouble::start().await;
    let [a, b, c] = three(&double, true).await;
    double.fail();
    tokio::time::sleep(TTL / 2).await;
    double.recover();
    tokio::time::sleep(TTL * 2).await;
    for h in [&a, &b, &c] {
        assert_eq!(
            h.fence_state(),
            None,
            "{} fenced on a short outage",
            h.self_id()
        );
        assert_eq!(h.check_lease(), Ok(()));
        assert!(h.counters().beat_failures >= 1, "the outage was felt");
    }
    assert_eq!(ids(&a), ["a", "b", "c"]);
    assert_eq!(a.counters().expiries_observed, 0);
}

/// The documented consequence: the API server is the membership store, so an outage longer than
/// the TTL fences every stateful host (a worker-only host rejoins once the API is back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_longer_than_the_ttl_fences_every_stateful_host() {
    let double = KubeDouble::start().await;
    let [a, b, w] = three(&double, false).await;
    double.fail();
    tokio::time::sleep(TTL + BEAT * 2).await;
    for h in [&a, &b] {
        assert!(
            matches!(h.fence_state(), Some(FenceReason::SuspectMonotonic)),
            "{}: {:?}",
            h.self_id(),
            h.fence_state()
        );
        assert!(h.check_lease().is_err());
    }
    assert_eq!(w.fence_state(), None);
    assert_eq!(w.counters().rejoin_attempts, 1);
    double.recover();
    // The fenced hosts withdraw (or are expired); the worker gets back in.
    let deadline = Instant::now() + Duration::from_secs(5);
    while w.counters().rejoins == 0 {
        assert!(
            Instant::now() < deadline,
            "the worker never rejoined: {:?}",
            w.counters()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_ids(&w, &["c"], Duration::from_secs(5)).await;
    assert_eq!(w.counters().rejoins, 1);
    assert!(w.is_self_active());
}

/// A stalled (hanging) API server is an outage too: the write timeouts and the clock fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_api_server_longer_than_the_ttl_fences_stateful_hosts() {
    let double = KubeDouble::start().await;
    let a = host(&double, "a", true).await;
    double.stall();
    let t0 = Instant::now();
    let mut fenced = a.fenced_signal();
    tokio::time::timeout(TTL * 2, fenced.wait_for(|r| r.is_some()))
        .await
        .expect("a fenced while the API hangs")
        .unwrap();
    assert!(t0.elapsed() <= TTL + BEAT, "{:?}", t0.elapsed());
    double.recover();
}

/// One host partitioned from the API: it fences; the others expire it, confirmed by a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_host_fences_and_its_peers_expire_it() {
    let double = KubeDouble::start().await;
    let [a, b, c] = three(&double, true).await;
    double.partition("c", Mode::Failing);
    let mut fenced = c.fenced_signal();
    tokio::time::timeout(TTL * 2, fenced.wait_for(|r| r.is_some()))
        .await
        .expect("c fenced")
        .unwrap();
    let fenced_at = Instant::now();
    let gone = wait_ids(&a, &["a", "b"], TTL * 3).await;
    wait_ids(&b, &["a", "b"], TTL * 3).await;
    assert!(fenced_at <= gone, "a peer expired c before c fenced");
}

/// After the history is compacted, a watch that reconnects from its old resourceVersion gets
/// 410 Gone and re-lists; the view converges, including changes made while it was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resuming_after_compaction_relists() {
    let double = KubeDouble::start().await;
    let a = host(&double, "a", true).await;
    let b = host(&double, "b", true).await;
    wait_ids(&a, &["a", "b"], Duration::from_secs(5)).await;
    double.reset_stats();
    // Cut a's connection briefly (its watch breaks), change the world, compact the history.
    double.partition("a", Mode::Failing);
    b.leave().await.unwrap();
    let c = host(&double, "c", false).await;
    double.compact();
    double.partition("a", Mode::Serving);
    wait_ids(&a, &["a", "c"], Duration::from_secs(5)).await;
    assert_eq!(a.fence_state(), None, "a short cut does not fence");
    let stats = double.stats();
    assert!(
        stats.by_verb.get("list").copied().unwrap_or(0) >= 1,
        "a re-listed: {stats:?}"
    );
    drop(c);
}

/// The watch fan-out of the Lease provider, measured on the double: every host watches every
/// Lease, so each renewal reaches all N watchers, N²/beat events per second across the fleet.
/// A measurement, not a check of speed: run with
/// `cargo test -p sigx-e2e --test membership_kubernetes watch_fan_out -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md; slow"]
async fn watch_fan_out() {
    // The production defaults: beat 5 s, TTL 15 s.
    let cfg = MembershipConfig::default();
    let beat = cfg.beat;
    for n in [10usize, 50, 100] {
        let double = KubeDouble::start().await;
        double.set_bookmark_interval(Duration::from_secs(3600));
        let mut hosts = Vec::new();
        for i in 0..n {
            let id = format!("h{i:03}");
            let provider =
                KubernetesProvider::new(double.client(), opts(&id), id.as_str(), clock::system())
                    .unwrap();
            hosts.push(
                start(
                    provider,
                    descriptor(&id, true),
                    cfg.clone(),
                    clock::system(),
                )
                .await
                .expect("join"),
            );
        }
        wait_all_see(&hosts, n, Duration::from_secs(60), String::new).await;
        double.reset_stats();
        let window = Duration::from_secs(20);
        tokio::time::sleep(window).await;
        let s = double.stats();
        let secs = window.as_secs_f64();
        let updates = s.by_verb.get("update").copied().unwrap_or(0);
        let expected = (n * n) as f64 / beat.as_secs_f64();
        println!(
            "fan-out n={n} beat={beat:?}: {:.0} watch events/s (N²/beat = {:.0}), {:.1} lease updates/s, {} watches",
            s.watch_events_sent as f64 / secs,
            expected,
            updates as f64 / secs,
            s.active_watches
        );
        assert!(s.watch_events_sent as f64 / secs > expected * 0.5);
        for h in &hosts {
            h.abort();
        }
    }
}
