//! Per-cluster objects: what every sidecar of a cluster shares.
//!
//! - a ServiceAccount the sidecars run as;
//! - a Role and RoleBinding that let it manage `coordination.k8s.io` Leases in the cluster's
//!   namespace — the membership records (DESIGN.md §3) — and nothing else;
//! - when `spec.auth` names no Secret and is not insecure, a generated Secret of 32 random bytes.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use sigx_crds::StateMode;
use sigx_crds::cluster::AuthMode;
use sigx_crds::{ActorCluster, ActorRole};

use super::{RenderError, name_of, names, namespace_of, owned_meta, owner_ref};

const KIND: &str = "ActorCluster";

/// The verbs a sidecar uses on Leases, and no more: read and watch its peers', create and renew
/// (`update`, with the read resourceVersion) its own, delete its own on leave and an expired
/// peer's record with a precondition (DESIGN.md §3; sidecar/src/membership/kubernetes). No
/// `patch`: the sidecar never patches a Lease. `e2e/tests/kube_real_operator_rbac.rs` runs a
/// real sidecar with exactly this Role.
pub const LEASE_VERBS: [&str; 6] = ["get", "list", "watch", "create", "update", "delete"];

/// Where a cluster's sidecars get the mesh secret from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// A Secret the user manages (`spec.auth.secretRef`).
    Referenced { name: String, key: String },
    /// The Secret the operator generates (see [`generated_secret`]).
    Generated { name: String, key: String },
    /// No secret: `spec.auth.insecure: true`.
    Insecure,
}

impl SecretSource {
    /// The Secret and key to mount, unless insecure.
    pub fn secret_key(&self) -> Option<(&str, &str)> {
        match self {
            Self::Referenced { name, key } | Self::Generated { name, key } => {
                Some((name.as_str(), key.as_str()))
            }
            Self::Insecure => None,
        }
    }
}

/// Which secret the cluster's sidecars use; refuses `secretRef` together with `insecure: true`.
pub fn secret_source(cluster: &ActorCluster) -> Result<SecretSource, RenderError> {
    let name = name_of(cluster, KIND)?;
    match cluster.spec.auth.mode() {
        Ok(AuthMode::SecretRef(r)) => Ok(SecretSource::Referenced {
            name: r.name.clone(),
            key: r.key.clone(),
        }),
        Ok(AuthMode::Generated) => Ok(SecretSource::Generated {
            name: names::generated_secret(&name),
            key: names::GENERATED_SECRET_KEY.to_owned(),
        }),
        Ok(AuthMode::Insecure) => Ok(SecretSource::Insecure),
        Err(source) => Err(RenderError::Auth {
            cluster: name,
            source,
        }),
    }
}

/// The state store the cluster's sidecars use (`None`: each sidecar's memory); refuses a
/// postgres store without its Secret (and a Secret for sqlite), which CEL refuses at admission.
pub fn state_mode(cluster: &ActorCluster) -> Result<Option<StateMode<'_>>, RenderError> {
    match &cluster.spec.state {
        None => Ok(None),
        Some(state) => state.mode().map(Some).map_err(|source| RenderError::State {
            cluster: name_of(cluster, KIND).unwrap_or_default(),
            source,
        }),
    }
}

/// The ServiceAccount the cluster's sidecars run as.
pub fn service_account(cluster: &ActorCluster) -> Result<ServiceAccount, RenderError> {
    let name = name_of(cluster, KIND)?;
    Ok(ServiceAccount {
        metadata: owned_meta(
            names::service_account(&name),
            namespace_of(cluster, KIND)?,
            names::cluster_labels(&name),
            owner_ref(cluster, KIND)?,
        ),
        ..ServiceAccount::default()
    })
}

/// A Role on Leases only: [`LEASE_VERBS`] on `coordination.k8s.io/leases`, nothing else.
///
/// Not narrowed by `resourceNames`: Lease names are host ids, which are chosen at pod start.
pub fn lease_role(cluster: &ActorCluster) -> Result<Role, RenderError> {
    let name = name_of(cluster, KIND)?;
    Ok(Role {
        metadata: owned_meta(
            names::lease_role(&name),
            namespace_of(cluster, KIND)?,
            names::cluster_labels(&name),
            owner_ref(cluster, KIND)?,
        ),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
            resources: Some(vec!["leases".to_owned()]),
            verbs: LEASE_VERBS.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        }]),
    })
}

/// Adds a (non-controller) owner reference to each role of the cluster to `obj`, one of the
/// objects the roles' pods cannot run without: the ServiceAccount, its Lease Role and
/// RoleBinding, and the generated Secret.
///
/// Why the lifecycle is this and not a finalizer on the ActorCluster: with the roles as
/// co-owners, the garbage collector deletes these objects only once the cluster *and* every role
/// that uses them are gone, whatever the order of deletion (a namespace deletion, Argo CD
/// pruning, a background or `--cascade=foreground` delete of the cluster: the collector drops
/// the deleted owner's reference and keeps the object while another owner lives). Running pods
/// keep a valid token and the same Secret, and a re-created cluster adopts these same objects,
/// so its roles heal without a rollout. A finalizer would instead block `kubectl delete` (and a
/// namespace's deletion) on the operator being up — a stuck namespace when it is not — and would
/// still not protect these objects from a foreground delete, which collects dependents before the
/// owner's finalizers are honoured.
pub fn co_owned_by_roles<K: Resource>(mut obj: K, roles: &[&ActorRole]) -> K {
    let mut sorted: Vec<&ActorRole> = roles.to_vec();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let refs = obj.meta_mut().owner_references.get_or_insert_with(Vec::new);
    for role in sorted {
        let (Some(name), Some(uid)) = (role.metadata.name.clone(), role.metadata.uid.clone())
        else {
            continue;
        };
        if refs.iter().any(|r| r.uid == uid) {
            continue;
        }
        refs.push(OwnerReference {
            api_version: "actors.sigx.dev/v1alpha1".to_owned(),
            kind: "ActorRole".to_owned(),
            name,
            uid,
            controller: None,
            block_owner_deletion: None,
        });
    }
    obj
}

/// Binds [`lease_role`] to [`service_account`].
pub fn lease_role_binding(cluster: &ActorCluster) -> Result<RoleBinding, RenderError> {
    let name = name_of(cluster, KIND)?;
    let namespace = namespace_of(cluster, KIND)?;
    Ok(RoleBinding {
        metadata: owned_meta(
            names::lease_role(&name),
            namespace.clone(),
            names::cluster_labels(&name),
            owner_ref(cluster, KIND)?,
        ),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: names::lease_role(&name),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: names::service_account(&name),
            namespace: Some(namespace),
            ..Subject::default()
        }]),
    })
}

/// The generated cluster secret, when the cluster asks for one (`Ok(None)` otherwise).
///
/// `random` must be 32 bytes from a CSPRNG; the caller draws them so this stays pure. They are
/// stored hex-encoded, so the key stays printable in `kubectl get secret -o yaml` and survives
/// tools that edit Secrets as text (the sidecar takes `SIGX_SECRET_FILE` byte for byte, minus one
/// trailing line ending, so raw bytes would work too). The Secret is `immutable`: the controller creates it once and never rewrites it, so
/// the key is never rotated silently (a rotation is a deliberate delete).
pub fn generated_secret(
    cluster: &ActorCluster,
    random: &[u8; 32],
) -> Result<Option<Secret>, RenderError> {
    let SecretSource::Generated { name, key } = secret_source(cluster)? else {
        return Ok(None);
    };
    let cluster_name = name_of(cluster, KIND)?;
    Ok(Some(Secret {
        metadata: owned_meta(
            name,
            namespace_of(cluster, KIND)?,
            names::cluster_labels(&cluster_name),
            owner_ref(cluster, KIND)?,
        ),
        type_: Some("Opaque".to_owned()),
        immutable: Some(true),
        data: Some(BTreeMap::from([(
            key,
            ByteString(hex(random).into_bytes()),
        )])),
        ..Secret::default()
    }))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::fixtures;
    use serde_json::json;

    #[test]
    fn role_grants_leases_and_nothing_else() {
        let role = lease_role(&fixtures::default_cluster()).unwrap();
        assert_eq!(role.metadata.name.as_deref(), Some("demo-sigx-leases"));
        assert_eq!(role.metadata.namespace.as_deref(), Some("apps"));
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1, "exactly one rule");
        let rule = &rules[0];
        assert_eq!(
            rule.api_groups.as_deref(),
            Some(&["coordination.k8s.io".to_owned()][..])
        );
        assert_eq!(rule.resources.as_deref(), Some(&["leases".to_owned()][..]));
        let mut verbs = rule.verbs.clone();
        verbs.sort();
        assert_eq!(
            verbs,
            ["create", "delete", "get", "list", "update", "watch"]
        );
        assert!(rule.non_resource_urls.is_none());
        assert!(
            !rule
                .verbs
                .iter()
                .any(|v| v == "*" || v == "deletecollection")
        );
    }

    #[test]
    fn binding_ties_the_role_to_the_sidecar_account() {
        let c = fixtures::default_cluster();
        let sa = service_account(&c).unwrap();
        let rb = lease_role_binding(&c).unwrap();
        assert_eq!(
            rb.role_ref.kind, "Role",
            "a namespaced Role, never a ClusterRole"
        );
        assert_eq!(
            rb.role_ref.name,
            lease_role(&c).unwrap().metadata.name.unwrap()
        );
        let subjects = rb.subjects.unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(Some(&subjects[0].name), sa.metadata.name.as_ref());
        assert_eq!(subjects[0].namespace.as_deref(), Some("apps"));
    }

    #[test]
    fn owned_objects_point_at_the_cluster() {
        let c = fixtures::default_cluster();
        let owners = [
            service_account(&c).unwrap().metadata.owner_references,
            lease_role(&c).unwrap().metadata.owner_references,
            lease_role_binding(&c).unwrap().metadata.owner_references,
        ];
        for o in owners {
            let o = &o.unwrap()[0];
            assert_eq!(
                (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
                ("ActorCluster", "demo", "c-uid-1")
            );
            assert_eq!(o.api_version, "actors.sigx.dev/v1alpha1");
            assert_eq!(o.controller, Some(true));
        }
    }

    #[test]
    fn roles_co_own_what_their_pods_need_without_taking_control() {
        let c = fixtures::default_cluster();
        let mut web = fixtures::role(
            "web",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "template": {}}),
        );
        web.metadata.uid = Some("r-uid-web".into());
        let engine = fixtures::engine_role();
        let sa = co_owned_by_roles(service_account(&c).unwrap(), &[&web, &engine, &web]);
        let refs = sa.metadata.owner_references.unwrap();
        let got: Vec<_> = refs
            .iter()
            .map(|r| (r.kind.as_str(), r.name.as_str(), r.controller))
            .collect();
        assert_eq!(
            got,
            [
                ("ActorCluster", "demo", Some(true)),
                ("ActorRole", "engine", None),
                ("ActorRole", "web", None),
            ],
            "the cluster stays the controller; each role once, sorted"
        );
        assert!(
            refs.iter()
                .skip(1)
                .all(|r| r.block_owner_deletion.is_none())
        );
    }

    #[test]
    fn generated_secret_holds_the_given_bytes_hex_encoded_and_is_immutable() {
        let c = fixtures::default_cluster();
        let mut bytes = [0u8; 32];
        bytes[0] = 0xab;
        bytes[31] = 0x0f;
        let s = generated_secret(&c, &bytes)
            .unwrap()
            .expect("generated mode");
        assert_eq!(s.metadata.name.as_deref(), Some("demo-sigx-secret"));
        assert_eq!(s.immutable, Some(true));
        let data = s.data.unwrap();
        let value = std::str::from_utf8(&data["secret"].0).unwrap();
        assert_eq!(value.len(), 64);
        assert!(value.starts_with("ab00"));
        assert!(value.ends_with("000f"));
        // Different bytes, different secret: nothing in here is a constant.
        let other = generated_secret(&c, &[7u8; 32]).unwrap().unwrap();
        assert_ne!(other.data.unwrap()["secret"], data["secret"]);
    }

    #[test]
    fn no_secret_is_generated_for_a_reference_or_insecure() {
        let referenced = fixtures::cluster(json!({
            "sidecar": {"image": "s"}, "auth": {"secretRef": {"name": "mine", "key": "k"}}
        }));
        assert!(generated_secret(&referenced, &[1; 32]).unwrap().is_none());
        assert_eq!(
            secret_source(&referenced).unwrap(),
            SecretSource::Referenced {
                name: "mine".into(),
                key: "k".into()
            }
        );
        let insecure =
            fixtures::cluster(json!({"sidecar": {"image": "s"}, "auth": {"insecure": true}}));
        assert!(generated_secret(&insecure, &[1; 32]).unwrap().is_none());
        assert_eq!(secret_source(&insecure).unwrap(), SecretSource::Insecure);
    }

    #[test]
    fn both_auth_modes_are_refused() {
        let both = fixtures::cluster(json!({
            "sidecar": {"image": "s"},
            "auth": {"secretRef": {"name": "mine", "key": "k"}, "insecure": true}
        }));
        let err = secret_source(&both).unwrap_err();
        assert!(matches!(err, RenderError::Auth { .. }), "{err}");
        assert!(err.to_string().contains("demo"), "{err}");
        assert!(generated_secret(&both, &[1; 32]).is_err());
    }

    #[test]
    fn objects_without_uid_are_refused() {
        let mut c = fixtures::default_cluster();
        c.metadata.uid = None;
        let err = service_account(&c).unwrap_err();
        assert!(
            matches!(err, RenderError::MissingMetadata { field: "uid", .. }),
            "{err}"
        );
    }
}
