//! Who a role's pods run as: the ServiceAccount (the cluster's, or the template's own with a
//! RoleBinding to the Lease Role; operator/src/render/account.rs) and the UID, GID and
//! `fsGroup` (none fixed unless the CRDs ask; operator/src/render/security.rs).

mod support;

use serde_json::json;
use sigx_operator::render;
use support::*;

#[test]
fn a_role_may_run_as_its_own_service_account_which_gets_the_lease_role() {
    let own = role(
        json!({"serviceAccountName": "billing-irsa", "containers": [{"name": "app", "image": "a"}]}),
        None,
    );
    let c = cluster(json!({}));
    let d = render::deployment(&c, &own).unwrap();
    assert_eq!(
        pod(&d).service_account_name.as_deref(),
        Some("billing-irsa")
    );
    let rb = render::role_lease_binding(&c, &own)
        .unwrap()
        .expect("a binding for the role's own account");
    assert_eq!(rb.metadata.name.as_deref(), Some("engine-sigx-role-leases"));
    assert_eq!(rb.metadata.namespace.as_deref(), Some("apps"));
    assert_eq!(rb.role_ref.kind, "Role");
    assert_eq!(
        rb.role_ref.name, "demo-sigx-leases",
        "the cluster's Lease Role"
    );
    let subjects = rb.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(
        (
            subjects[0].kind.as_str(),
            subjects[0].name.as_str(),
            subjects[0].namespace.as_deref()
        ),
        ("ServiceAccount", "billing-irsa", Some("apps"))
    );
    let owner = &rb.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("ActorRole", "r-uid-engine")
    );
}

#[test]
fn by_default_the_pods_run_as_the_clusters_account_and_no_binding_is_added() {
    let c = cluster(json!({}));
    for r in [
        role(one_app(), None),
        role(
            json!({"serviceAccountName": "", "containers": [{"name": "app", "image": "a"}]}),
            None,
        ),
        role(
            json!({"serviceAccountName": "demo-sigx", "containers": [{"name": "app", "image": "a"}]}),
            None,
        ),
    ] {
        let d = render::deployment(&c, &r).unwrap();
        assert_eq!(pod(&d).service_account_name.as_deref(), Some("demo-sigx"));
        assert!(render::role_lease_binding(&c, &r).unwrap().is_none());
    }
}

#[test]
fn no_uid_gid_or_fs_group_is_fixed_by_default() {
    let d = render::deployment(&cluster(json!({})), &role(one_app(), None)).unwrap();
    let sc = sidecar(&d).security_context.as_ref().unwrap();
    assert_eq!(
        sc.run_as_user, None,
        "OpenShift restricted-v2 assigns its own"
    );
    assert_eq!(sc.run_as_group, None);
    assert!(
        pod(&d)
            .security_context
            .as_ref()
            .and_then(|s| s.fs_group)
            .is_none(),
        "no fsGroup re-owning the app's volumes"
    );
    // The restricted profile stays.
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    // Without a shared group, the socket is open to the pod's containers (its volume is the
    // boundary).
    assert_eq!(env(sidecar(&d), "SIGX_SOCKET_MODE").as_deref(), Some("666"));
}

#[test]
fn a_uid_and_gid_set_in_the_crds_are_honoured_role_over_cluster() {
    let c = cluster(json!({"sidecar": {"image": "s:1", "runAsUser": 1001, "runAsGroup": 1002}}));
    let d = render::deployment(&c, &role(one_app(), None)).unwrap();
    let sc = sidecar(&d).security_context.clone().unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_group), (Some(1001), Some(1002)));

    let d = render::deployment(&c, &role(one_app(), Some(json!({"runAsUser": 2001})))).unwrap();
    let sc = sidecar(&d).security_context.clone().unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_group), (Some(2001), Some(1002)));
}
