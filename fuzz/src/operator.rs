//! `operator_render`: the custom resources the operator reads and what it renders from them
//! (`crds/`, `operator/src/render/`).
//!
//! The input is one JSON object `{"cluster": <ActorCluster>, "role": <ActorRole>}` (both
//! optional). Whatever deserializes must render without panicking, to an error or to objects
//! that serialize; rendering is deterministic; and a role's Deployment selects its own pods.

use serde_json::Value;
use sigx_crds::{ActorCluster, ActorRole};
use sigx_operator::render;

/// The fuzz target.
pub fn operator_render(data: &[u8]) {
    let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let cluster = doc
        .get("cluster")
        .and_then(|c| serde_json::from_value::<ActorCluster>(c.clone()).ok());
    let role = doc
        .get("role")
        .and_then(|r| serde_json::from_value::<ActorRole>(r.clone()).ok());
    if let Some(c) = &cluster {
        let first = cluster_objects(c, role.as_ref());
        assert_eq!(
            first,
            cluster_objects(c, role.as_ref()),
            "cluster rendering is not deterministic"
        );
    }
    if let (Some(c), Some(r)) = (&cluster, &role) {
        let first = role_objects(c, r);
        assert_eq!(
            first,
            role_objects(c, r),
            "role rendering is not deterministic"
        );
    }
}

fn json<T: serde::Serialize, E: std::fmt::Display>(r: Result<T, E>) -> String {
    match r {
        Ok(v) => serde_json::to_string(&v).expect("a rendered object serializes"),
        Err(e) => format!("error: {e}"),
    }
}

fn cluster_objects(c: &ActorCluster, role: Option<&ActorRole>) -> Vec<String> {
    let roles: Vec<&ActorRole> = role.into_iter().collect();
    vec![
        json(render::secret_source(c).map(|s| format!("{s:?}"))),
        json(render::state_mode(c).map(|s| format!("{s:?}"))),
        json(render::service_account(c).map(|sa| render::co_owned_by_roles(sa, &roles))),
        json(render::lease_role(c)),
        json(render::lease_role_binding(c)),
        json(render::generated_secret(c, &[7; 32])),
        render::termination_grace_seconds(c).to_string(),
    ]
}

fn role_objects(c: &ActorCluster, r: &ActorRole) -> Vec<String> {
    let deployment = render::deployment(c, r);
    if let Ok(d) = &deployment {
        let spec = &d.spec;
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone());
        for (k, v) in spec.selector.match_labels.iter().flatten() {
            assert_eq!(
                labels.as_ref().and_then(|l| l.get(k)),
                Some(v),
                "the Deployment's selector {k}={v} does not select its own pods"
            );
        }
    }
    vec![
        json(deployment),
        json(render::pod_disruption_budget(c, r)),
        json(render::selector_string(c, r)),
        json(render::role_lease_binding(c, r)),
        format!("{:?}", render::sidecar_ports(c, r)),
        json(render::drain_token(r)),
        format!("{:?}", render::rollout::strategy(r)),
        format!("{:?}", render::rollout::min_ready_seconds(r)),
        format!("{:?}", render::rollout::max_disruption(r)),
    ]
}
