//! The Kubernetes API double, exercised through the real `kube` client: if these pass, the
//! Lease provider and the operator are tested against the semantics they depend on.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::WatchStreamExt;
use kube::{Api, Error, ResourceExt};
use serde_json::json;
use sigx_e2e::kube_double::{KubeDouble, Mode, ResourceRef};

const NS: &str = "sigx";
const WAIT: Duration = Duration::from_secs(5);

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "actors.sigx.dev/cluster".into(),
                "c1".into(),
            )])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    }
}

fn api_code(e: &Error) -> Option<(u16, String)> {
    match e {
        Error::Api(s) => Some((s.code, s.reason.clone())),
        _ => None,
    }
}

#[tokio::test]
async fn crud_conflict_and_already_exists() {
    let double = KubeDouble::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();

    let created = cms.create(&pp, &cm("a", &[])).await.unwrap();
    let rv1 = created.resource_version().unwrap();
    assert!(created.uid().is_some(), "the server assigns a uid");
    assert_eq!(created.namespace().as_deref(), Some(NS));

    let dup = cms.create(&pp, &cm("a", &[])).await.unwrap_err();
    assert_eq!(api_code(&dup), Some((409, "AlreadyExists".into())));

    let mut changed = created.clone();
    changed.data = Some(BTreeMap::from([("k".into(), "v2".into())]));
    let updated = cms.replace("a", &pp, &changed).await.unwrap();
    let rv2 = updated.resource_version().unwrap();
    assert!(rv2.parse::<u64>().unwrap() > rv1.parse::<u64>().unwrap());

    // Writing with the first resourceVersion again is a stale write.
    let stale = cms.replace("a", &pp, &changed).await.unwrap_err();
    assert_eq!(api_code(&stale), Some((409, "Conflict".into())));

    // A no-op write does not consume a resourceVersion.
    let same = cms.replace("a", &pp, &updated).await.unwrap();
    assert_eq!(same.resource_version().unwrap(), rv2);

    let mut generated = cm("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let g = cms.create(&pp, &generated).await.unwrap();
    assert!(
        g.name_any().starts_with("gen-") && g.name_any().len() == 9,
        "{}",
        g.name_any()
    );

    // Delete with a stale precondition is refused; with the current one it goes through.
    let dp = DeleteParams::default().preconditions(kube::api::Preconditions {
        resource_version: Some(rv1.clone()),
        uid: None,
    });
    let refused = cms.delete("a", &dp).await.unwrap_err();
    assert_eq!(api_code(&refused), Some((409, "Conflict".into())));
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let gone = cms.get("a").await.unwrap_err();
    assert_eq!(api_code(&gone), Some((404, "NotFound".into())));
    assert!(cms.get_opt("a").await.unwrap().is_none());

    // Other namespaces are separate.
    let other: Api<ConfigMap> = Api::namespaced(double.client(), "other");
    assert!(
        other
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let all: Api<ConfigMap> = Api::all(double.client());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn label_selectors_select() {
    let double = KubeDouble::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();
    cms.create(&pp, &cm("web-1", &[("role", "web"), ("tier", "front")]))
        .await
        .unwrap();
    cms.create(&pp, &cm("web-2", &[("role", "web")]))
        .await
        .unwrap();
    cms.create(&pp, &cm("engine-1", &[("role", "engine")]))
        .await
        .unwrap();
    let names = |sel: &str| {
        let cms = cms.clone();
        let sel = sel.to_owned();
        async move {
            let mut n: Vec<String> = cms
                .list(&ListParams::default().labels(&sel))
                .await
                .unwrap()
                .items
                .iter()
                .map(|c| c.name_any())
                .collect();
            n.sort();
            n
        }
    };
    assert_eq!(names("role=web").await, ["web-1", "web-2"]);
    assert_eq!(names("role!=web").await, ["engine-1"]);
    assert_eq!(names("role in (engine,nothing)").await, ["engine-1"]);
    assert_eq!(names("role notin (engine)").await, ["web-1", "web-2"]);
    assert_eq!(names("tier").await, ["web-1"]);
    assert_eq!(names("!tier,role=web").await, ["web-2"]);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=web-2"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);

    // Pagination hands out every object exactly once.
    let page = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().expect("a continue token");
    let rest = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert!(rest.metadata.continue_.is_none());
}

#[tokio::test]
async fn watch_streams_changes_and_resumes() {
    let double = KubeDouble::start().await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();
    let first = leases.create(&pp, &lease("h1", "h1")).await.unwrap();
    let start_rv = first.resource_version().unwrap();

    let wp = WatchParams::default().labels("actors.sigx.dev/cluster=c1");
    let mut stream = leases.watch(&wp, &start_rv).await.unwrap().boxed();
    let mut renewed = first.clone();
    renewed.spec.as_mut().unwrap().lease_duration_seconds = Some(20);
    let renewed = leases.replace("h1", &pp, &renewed).await.unwrap();
    leases.create(&pp, &lease("h2", "h2")).await.unwrap();
    leases.delete("h1", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(WAIT, stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(match ev {
            WatchEvent::Added(l) => format!("ADDED {}", l.name_any()),
            WatchEvent::Modified(l) => format!("MODIFIED {}", l.name_any()),
            WatchEvent::Deleted(l) => format!("DELETED {}", l.name_any()),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("unexpected error event {e:?}"),
        });
    }
    assert_eq!(seen, ["MODIFIED h1", "ADDED h2", "DELETED h1"]);

    // Resuming from the renewal's version replays exactly what came after it.
    let wp = wp.disable_bookmarks();
    let mut resumed = leases
        .watch(&wp, &renewed.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let mut replay = Vec::new();
    while replay.len() < 2 {
        match tokio::time::timeout(WAIT, resumed.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Added(l) => replay.push(format!("ADDED {}", l.name_any())),
            WatchEvent::Deleted(l) => replay.push(format!("DELETED {}", l.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(replay, ["ADDED h2", "DELETED h1"]);

    // Relabelling an object out of the selection looks like a deletion to that watch.
    let mut h2 = leases.get("h2").await.unwrap();
    h2.metadata.labels = Some(BTreeMap::from([(
        "actors.sigx.dev/cluster".into(),
        "c2".into(),
    )]));
    leases.replace("h2", &pp, &h2).await.unwrap();
    match tokio::time::timeout(WAIT, resumed.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Deleted(l) => assert_eq!(l.name_any(), "h2"),
        other => panic!("expected DELETED for a relabelled lease, got {other:?}"),
    }
}

#[tokio::test]
async fn compacted_resource_version_is_gone_and_the_runtime_watcher_relists() {
    let double = KubeDouble::start().await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();
    let old = leases.create(&pp, &lease("h1", "h1")).await.unwrap();
    leases.create(&pp, &lease("h2", "h2")).await.unwrap();
    double.compact();

    let mut stream = leases
        .watch(&WatchParams::default(), &old.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(WAIT, stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }

    // kube-runtime's watcher: list, watch; break the stream and compact underneath it, so its
    // resume hits 410; it must re-list and still converge on the truth.
    let store = kube::runtime::reflector::store::Writer::<Lease>::default();
    let reader = store.as_reader();
    let events = kube::runtime::watcher(leases.clone(), kube::runtime::watcher::Config::default())
        .default_backoff()
        .reflect(store);
    let task = tokio::spawn(events.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 2);

    double.fail();
    leases
        .delete("h1", &DeleteParams::default())
        .await
        .unwrap_err();
    double.recover();
    leases.delete("h1", &DeleteParams::default()).await.unwrap();
    leases.create(&pp, &lease("h3", "h3")).await.unwrap();
    double.compact();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let mut names: Vec<String> = reader.state().iter().map(|l| l.name_any()).collect();
            names.sort();
            if names == ["h2", "h3"] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the watcher re-lists after 410 and converges");
    task.abort();
}

#[tokio::test]
async fn bookmarks_are_sent_when_allowed() {
    let double = KubeDouble::start().await;
    double.set_bookmark_interval(Duration::from_millis(50));
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    leases
        .create(&PostParams::default(), &lease("h1", "h1"))
        .await
        .unwrap();
    let rv = double.resource_version().to_string();
    let mut stream = leases
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(WAIT, stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    assert!(double.stats().bookmarks_sent >= 1);
    // Without allowWatchBookmarks, none.
    let mut quiet = leases
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), quiet.try_next())
            .await
            .is_err(),
        "no events and no bookmarks expected"
    );
}

#[tokio::test]
async fn owner_reference_cascade_and_orphan() {
    let double = KubeDouble::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(double.client(), NS);
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();
    let owner = cms.create(&pp, &cm("owner", &[])).await.unwrap();
    let oref = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.uid().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut dep = lease("dep", "x");
    dep.metadata.owner_references = Some(vec![oref.clone()]);
    leases.create(&pp, &dep).await.unwrap();
    // A grandchild, owned by the lease.
    let mut grandchild = cm("grandchild", &[]);
    grandchild.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        name: "dep".into(),
        uid: leases.get("dep").await.unwrap().uid().unwrap(),
        ..Default::default()
    }]);
    cms.create(&pp, &grandchild).await.unwrap();
    leases.create(&pp, &lease("unrelated", "x")).await.unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        leases.get_opt("dep").await.unwrap().is_none(),
        "dependent collected"
    );
    assert!(
        cms.get_opt("grandchild").await.unwrap().is_none(),
        "transitively collected"
    );
    assert!(leases.get_opt("unrelated").await.unwrap().is_some());

    // Orphan propagation keeps dependents and strips the reference.
    let owner = cms.create(&pp, &cm("owner2", &[])).await.unwrap();
    let mut kept = lease("kept", "x");
    kept.metadata.owner_references = Some(vec![OwnerReference {
        uid: owner.uid().unwrap(),
        name: "owner2".into(),
        ..oref
    }]);
    leases.create(&pp, &kept).await.unwrap();
    cms.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    let kept = leases.get("kept").await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let double = KubeDouble::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(double.client(), NS);
    let mut c = cm("held", &[]);
    c.metadata.finalizers = Some(vec!["sigx.dev/test".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = cms.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["sigx.dev/test"]},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("held").await.unwrap().is_none());
}

#[tokio::test]
async fn merge_patch_and_server_side_apply() {
    let double = KubeDouble::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(double.client(), NS);

    // Apply creates, then updates; fields the manager stops applying go away.
    let apply = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": data});
    let pa = PatchParams::apply("sigx-operator");
    let created = cms
        .patch(
            "cfg",
            &pa,
            &Patch::Apply(apply(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(created.data.unwrap().len(), 2);
    let again = cms
        .patch(
            "cfg",
            &pa,
            &Patch::Apply(apply(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        again.resource_version(),
        created.metadata.resource_version,
        "a no-op apply writes nothing"
    );
    let updated = cms
        .patch("cfg", &pa, &Patch::Apply(apply(json!({"a": "1"}))))
        .await
        .unwrap();
    assert_eq!(
        updated.data.unwrap(),
        BTreeMap::from([("a".into(), "1".into())])
    );

    // Another manager changing an owned field conflicts, unless forced.
    let other = PatchParams::apply("someone-else");
    let conflict = cms
        .patch("cfg", &other, &Patch::Apply(apply(json!({"a": "X"}))))
        .await
        .unwrap_err();
    assert_eq!(api_code(&conflict), Some((409, "Conflict".into())));
    let forced = cms
        .patch(
            "cfg",
            &other.clone().force(),
            &Patch::Apply(apply(json!({"a": "X"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "X");
    let managers = double
        .field_managers(&ResourceRef::new("", "v1", "configmaps"), Some(NS), "cfg")
        .unwrap();
    assert!(
        managers.contains(&"someone-else".to_string()),
        "{managers:?}"
    );

    // Merge patch: null removes, objects merge.
    let merged = cms
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"data": {"a": null, "c": "3"}, "metadata": {"labels": {"x": "y"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels()["x"], "y");
    assert_eq!(
        merged.data.unwrap(),
        BTreeMap::from([("c".into(), "3".into())])
    );

    // A merge patch carrying a stale resourceVersion is a conflict.
    let stale = cms
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"c": "4"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&stale), Some((409, "Conflict".into())));
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            replicas: Some(99),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn status_and_scale_subresources() {
    let double = KubeDouble::start().await;
    let deps: Api<Deployment> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();
    let d = deps.create(&pp, &deployment("web", 2)).await.unwrap();
    assert!(d.status.is_none(), "status is not settable on create");
    assert_eq!(d.metadata.generation, Some(1));

    let st = deps
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 2, "readyReplicas": 1}, "spec": {"replicas": 7}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(st.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(st.spec.replicas, Some(2), "/status leaves spec alone");
    assert_eq!(
        st.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );

    let mut main = st.clone();
    main.status.as_mut().unwrap().ready_replicas = Some(0);
    main.spec.replicas = Some(3);
    let main = deps.replace("web", &pp, &main).await.unwrap();
    assert_eq!(
        main.status.unwrap().ready_replicas,
        Some(1),
        "the main resource leaves status alone"
    );
    assert_eq!(main.metadata.generation, Some(2));

    let scale = deps.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    deps.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    let scaled = deps.get("web").await.unwrap();
    assert_eq!(scaled.spec.replicas, Some(5));
    assert_eq!(scaled.metadata.generation, Some(3));
}

#[tokio::test]
async fn outage_fails_or_stalls_then_recovers() {
    let double = KubeDouble::start().await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let pp = PostParams::default();
    leases.create(&pp, &lease("h1", "h1")).await.unwrap();
    let rv = double.resource_version().to_string();
    let mut stream = leases
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    double.fail();
    assert_eq!(double.mode(), Mode::Failing);
    let err = leases.get("h1").await.unwrap_err();
    assert_eq!(api_code(&err).map(|c| c.0), Some(503));
    // The open watch breaks rather than going silent.
    let broken = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the watch ends promptly");
    assert!(matches!(broken, None | Some(Err(_))), "{broken:?}");

    double.stall();
    let stalled = tokio::time::timeout(Duration::from_millis(300), leases.get("h1")).await;
    assert!(stalled.is_err(), "a stalled API server does not answer");
    let pending = tokio::spawn({
        let leases = leases.clone();
        async move { leases.get("h1").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());
    double.recover();
    let got = tokio::time::timeout(WAIT, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.name_any(), "h1");
    leases.get("h1").await.unwrap();
}

#[tokio::test]
async fn counters_measure_watch_fan_out() {
    let double = KubeDouble::start().await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let rv = double.resource_version().to_string();
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(
            leases
                .watch(&WatchParams::default().disable_bookmarks(), &rv)
                .await
                .unwrap()
                .boxed(),
        );
    }
    double.reset_stats();
    let pp = PostParams::default();
    leases.create(&pp, &lease("h1", "h1")).await.unwrap();
    leases.create(&pp, &lease("h2", "h2")).await.unwrap();
    for s in &mut streams {
        for _ in 0..2 {
            tokio::time::timeout(WAIT, s.try_next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
        }
    }
    let stats = double.stats();
    assert_eq!(stats.watch_events_sent, 6, "2 writes x 3 watchers");
    assert_eq!(stats.by_verb.get("create"), Some(&2));
    assert_eq!(stats.mutations, 2);
    assert_eq!(stats.active_watches, 3);
    drop(streams);
    tokio::time::timeout(WAIT, async {
        while double.stats().active_watches > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("closed watches are unregistered");
}

#[tokio::test]
async fn a_partition_cuts_off_one_named_client_only() {
    let double = KubeDouble::start().await;
    let cut: Api<Lease> = Api::namespaced(double.client_named("operator"), NS);
    let other: Api<Lease> = Api::namespaced(double.client(), NS);
    other
        .create(&PostParams::default(), &lease("h1", "h1"))
        .await
        .unwrap();
    let rv = double.resource_version().to_string();
    let mut stream = cut
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    double.partition("operator", Mode::Failing);
    assert_eq!(
        api_code(&cut.get("h1").await.unwrap_err()).map(|c| c.0),
        Some(503)
    );
    other.get("h1").await.unwrap();
    let broken = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the partitioned watch ends");
    assert!(matches!(broken, None | Some(Err(_))), "{broken:?}");

    double.partition("operator", Mode::Serving);
    cut.get("h1").await.unwrap();
    let rv = double.resource_version().to_string();
    let mut again = cut
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    other
        .create(&PostParams::default(), &lease("h2", "h2"))
        .await
        .unwrap();
    let ev = tokio::time::timeout(WAIT, again.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Added(_)), "{ev:?}");
}

#[tokio::test]
async fn streaming_lists_end_with_the_initial_events_bookmark() {
    let double = KubeDouble::start().await;
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    for id in ["h1", "h2"] {
        leases
            .create(&PostParams::default(), &lease(id, id))
            .await
            .unwrap();
    }
    let config = kube::runtime::watcher::Config::default().streaming_lists();
    let mut events = kube::runtime::watcher(leases.clone(), config).boxed();
    let mut initial = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            kube::runtime::watcher::Event::Init => {}
            kube::runtime::watcher::Event::InitApply(l) => initial.push(l.name_any()),
            kube::runtime::watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(initial, ["h1", "h2"]);
    assert_eq!(
        double.stats().by_verb.get("list"),
        None,
        "no LIST: the watch streamed the state"
    );
    leases
        .create(&PostParams::default(), &lease("h3", "h3"))
        .await
        .unwrap();
    match tokio::time::timeout(WAIT, events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        kube::runtime::watcher::Event::Apply(l) => assert_eq!(l.name_any(), "h3"),
        other => panic!("unexpected {other:?}"),
    }
}

fn api_message(e: &Error) -> String {
    match e {
        Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// genericregistry `Store.Update` semantics for Leases (`AllowCreateOnUpdate` = true), which the
/// membership provider's "renewals never re-create a record" rule is built on: a PUT on a
/// deleted Lease creates it again (201, a new uid) even when the body carries the old
/// resourceVersion; the body's `metadata.uid` is the one precondition the server honours (409
/// "Precondition failed: UID in precondition: …" against a missing Lease or another uid); a
/// matching uid with a stale resourceVersion is the ordinary 409 "the object has been modified".
/// Kinds without create-on-update (ConfigMaps) still answer a PUT on a missing object with 404.
#[tokio::test]
async fn lease_put_creates_on_update_unless_a_uid_precondition_fails() {
    let double = KubeDouble::start().await;
    let client = double.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    let first = leases.create(&pp, &lease("h1", "h1/a")).await.unwrap();
    let uid = first.uid().expect("a uid");
    leases.delete("h1", &DeleteParams::default()).await.unwrap();

    // With the uid: refused, with the server's message shape (an empty uid in object meta).
    let refused = leases.replace("h1", &pp, &first).await.unwrap_err();
    assert_eq!(api_code(&refused), Some((409, "Conflict".into())));
    assert!(
        api_message(&refused).ends_with(&format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: "
        )),
        "{}",
        api_message(&refused)
    );
    assert!(
        leases.get_opt("h1").await.unwrap().is_none(),
        "not re-created"
    );

    // Without the uid (old resourceVersion and all): created again, answered 201, a new uid.
    let mut no_uid = first.clone();
    no_uid.metadata.uid = None;
    let body = serde_json::to_vec(&no_uid).unwrap();
    let req = http::Request::put(format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/h1"
    ))
    .header("content-type", "application/json")
    .body(body)
    .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(resp.status(), http::StatusCode::CREATED);
    let again = leases.get("h1").await.unwrap();
    let new_uid = again.uid().unwrap();
    assert_ne!(new_uid, uid, "a re-created Lease is a new object");
    assert_eq!(
        again.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("h1/a")
    );

    // The old uid against the re-created Lease: 409 naming both uids.
    let mut stale_uid = again.clone();
    stale_uid.metadata.uid = Some(uid.clone());
    let refused = leases.replace("h1", &pp, &stale_uid).await.unwrap_err();
    assert_eq!(api_code(&refused), Some((409, "Conflict".into())));
    assert!(
        api_message(&refused).contains(&format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {new_uid}"
        )),
        "{}",
        api_message(&refused)
    );

    // The right uid and the current resourceVersion: an ordinary update (200).
    let mut renewed = again.clone();
    renewed.spec.as_mut().unwrap().lease_duration_seconds = Some(20);
    let renewed = leases.replace("h1", &pp, &renewed).await.unwrap();
    assert_eq!(renewed.uid().as_deref(), Some(new_uid.as_str()));
    // The right uid with a stale resourceVersion: 409 "the object has been modified".
    let stale = leases.replace("h1", &pp, &again).await.unwrap_err();
    assert_eq!(api_code(&stale), Some((409, "Conflict".into())));
    assert!(
        api_message(&stale).contains("the object has been modified"),
        "{}",
        api_message(&stale)
    );

    // A kind without create-on-update: 404, nothing created.
    let cms: Api<ConfigMap> = Api::namespaced(client, NS);
    let c = cms.create(&pp, &cm("c", &[])).await.unwrap();
    cms.delete("c", &DeleteParams::default()).await.unwrap();
    let mut c = c;
    c.metadata.uid = None;
    let missing = cms.replace("c", &pp, &c).await.unwrap_err();
    assert_eq!(api_code(&missing), Some((404, "NotFound".into())));
    assert!(cms.get_opt("c").await.unwrap().is_none());
}

/// A named client's watches can lag while its reads and writes are served (the fault the
/// provider's renewal path must survive on its own), and catch up, in order, once resumed.
#[tokio::test]
async fn a_stalled_watch_delivers_nothing_until_resumed_while_writes_work() {
    let double = KubeDouble::start().await;
    let leases: Api<Lease> = Api::namespaced(double.client_named("lagging"), NS);
    let pp = PostParams::default();
    let first = leases.create(&pp, &lease("h1", "h1")).await.unwrap();
    let mut stream = leases
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &first.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    double.stall_watches("lagging", true);
    leases.create(&pp, &lease("h2", "h2")).await.unwrap();
    assert!(leases.get_opt("h2").await.unwrap().is_some(), "reads work");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stream.try_next())
            .await
            .is_err(),
        "a stalled watch delivered an event"
    );
    double.stall_watches("lagging", false);
    match tokio::time::timeout(WAIT, stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Added(l) => assert_eq!(l.name_any(), "h2"),
        other => panic!("expected ADDED h2, got {other:?}"),
    }
}
