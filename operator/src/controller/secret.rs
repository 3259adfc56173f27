//! The cluster's mesh secret: generated once (never rotated silently, never logged) or
//! referenced, and its `SecretReady` state; a generated Secret follows its cluster and roles as
//! owners.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, condition_types};
use tracing::info;

use super::Context;
use super::cluster::SecretState;
use crate::error::ReconcileError;
use crate::render::{self, SecretSource};

const KIND: &str = "ActorCluster";

/// Makes sure the sidecars' secret exists. A generated Secret is created once and never
/// rewritten (never rotated silently); its bytes are never logged.
pub(crate) async fn ensure_secret(
    cluster: &ActorCluster,
    ctx: &Context,
    namespace: &str,
    source: &SecretSource,
    roles: &[&sigx_crds::ActorRole],
) -> Result<SecretState, ReconcileError> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let (name, key, generated) = match source {
        SecretSource::Insecure => {
            return Ok(SecretState {
                ready: true,
                reason: "Insecure",
                message: "auth.insecure is true: host-to-host calls are not authenticated".into(),
            });
        }
        SecretSource::Referenced { name, key } => (name, key, false),
        SecretSource::Generated { name, key } => (name, key, true),
    };
    let what = format!("Secret {namespace}/{name}");
    let mut existing = secrets
        .get_opt(name)
        .await
        .map_err(ReconcileError::kube("reading", what.clone()))?;
    if existing.is_none() && generated {
        let bytes = (ctx.random)();
        let rendered =
            render::generated_secret(cluster, &bytes).map_err(ReconcileError::render(&what))?;
        if let Some(secret) = rendered.map(|s| render::co_owned_by_roles(s, roles)) {
            // Named like the applies, so the fields of the one object the operator creates
            // rather than applies are not recorded under "unknown" by a real API server.
            let pp = PostParams {
                field_manager: Some(ctx.field_manager.clone()),
                ..PostParams::default()
            };
            match secrets.create(&pp, &secret).await {
                Ok(created) => {
                    ctx.metrics.secrets_generated.inc();
                    let recreated = cluster
                        .status
                        .as_ref()
                        .and_then(|s| {
                            s.conditions
                                .iter()
                                .find(|c| c.type_ == condition_types::SECRET_READY)
                        })
                        // Rotating: a rotation was under way with the generated Secret signing.
                        .is_some_and(|c| c.reason == "Generated" || c.reason == "Rotating");
                    let (type_, reason, note) = if recreated {
                        (
                            EventType::Warning,
                            "SecretRegenerated",
                            format!(
                                "the generated Secret {name} was deleted, so a new one was generated; running hosts keep the old one until they restart"
                            ),
                        )
                    } else {
                        (
                            EventType::Normal,
                            "SecretGenerated",
                            format!("generated Secret {name} (key {key}) with 32 random bytes"),
                        )
                    };
                    info!(secret = %name, "generated the cluster secret");
                    ctx.event(
                        cluster,
                        Event {
                            type_,
                            reason: reason.into(),
                            note: Some(note),
                            action: "Generate".into(),
                            secondary: None,
                        },
                    )
                    .await;
                    existing = Some(created);
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    existing = secrets
                        .get_opt(name)
                        .await
                        .map_err(ReconcileError::kube("reading", what.clone()))?;
                }
                Err(e) => return Err(ReconcileError::kube("creating", what)(e)),
            }
        }
    }
    let Some(secret) = existing else {
        return Ok(SecretState {
            ready: false,
            reason: "SecretNotFound",
            message: format!(
                "Secret {name} named by auth.secretRef does not exist in namespace {namespace}; create it"
            ),
        });
    };
    if generated {
        adopt_generated_secret(cluster, ctx, &secrets, &secret, roles, &what).await?;
    }
    let value = secret.data.as_ref().and_then(|d| d.get(key));
    let state = match value {
        None => SecretState {
            ready: false,
            reason: "SecretKeyMissing",
            message: format!("Secret {name} has no key {key:?}; add it"),
        },
        Some(v) if v.0.iter().all(u8::is_ascii_whitespace) => SecretState {
            ready: false,
            reason: "SecretEmpty",
            message: format!(
                "key {key:?} of Secret {name} is empty or whitespace; the sidecar refuses it"
            ),
        },
        Some(_) if generated => SecretState {
            ready: true,
            reason: "Generated",
            message: format!("using generated Secret {name}, key {key}"),
        },
        Some(_) => SecretState {
            ready: true,
            reason: "Referenced",
            message: format!("using Secret {name}, key {key}"),
        },
    };
    let mut state = match &cluster.spec.auth.accept_secret_ref {
        Some(accept) if state.ready => {
            accepted_secret(&secrets, namespace, accept, state, value).await?
        }
        _ => state,
    };
    if state.ready && cluster.spec.auth.accept_unsigned == Some(true) {
        state.message.push_str(
            "; also accepting unsigned mesh requests (auth.acceptUnsigned): any process that can reach the mesh port can act as a host until it is removed",
        );
    }
    Ok(state)
}

/// A rotation in progress (`auth.acceptSecretRef`): the second secret must exist and hold a
/// non-blank key, or the pods would not start (the volume is not optional) or their sidecars
/// would refuse it; said on `SecretReady` with the reasons `AcceptSecret*`.
async fn accepted_secret(
    secrets: &Api<Secret>,
    namespace: &str,
    accept: &sigx_crds::SecretKeyRef,
    signing: SecretState,
    signing_value: Option<&k8s_openapi::ByteString>,
) -> Result<SecretState, ReconcileError> {
    let (name, key) = (&accept.name, &accept.key);
    let found = secrets.get_opt(name).await.map_err(ReconcileError::kube(
        "reading",
        format!("Secret {namespace}/{name}"),
    ))?;
    let value = found
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(key));
    Ok(match (found.is_some(), value) {
        (false, _) => SecretState {
            ready: false,
            reason: "AcceptSecretNotFound",
            message: format!(
                "Secret {name} named by auth.acceptSecretRef does not exist in namespace {namespace}; create it or remove acceptSecretRef"
            ),
        },
        (true, None) => SecretState {
            ready: false,
            reason: "AcceptSecretKeyMissing",
            message: format!("Secret {name} (auth.acceptSecretRef) has no key {key:?}; add it"),
        },
        (true, Some(v)) if v.0.iter().all(u8::is_ascii_whitespace) => SecretState {
            ready: false,
            reason: "AcceptSecretEmpty",
            message: format!(
                "key {key:?} of Secret {name} (auth.acceptSecretRef) is empty or whitespace; the sidecar refuses it"
            ),
        },
        // The same key as the signing one: nothing rotates; the second Secret is there so that
        // a rotation can be made in place by editing the Secrets (README, "Rotating the mesh
        // secret in place"). Compared as the sidecar reads the files (one trailing line ending
        // dropped).
        (true, Some(v)) if signing_value.is_some_and(|s| same_key(&s.0, &v.0)) => SecretState {
            message: format!(
                "{}; also accepting Secret {name}, key {key} (auth.acceptSecretRef), which holds the same key: ready for a rotation in place",
                signing.message
            ),
            ..signing
        },
        (true, Some(_)) => SecretState {
            ready: true,
            reason: "Rotating",
            message: format!(
                "{}; rotation in progress: also accepting Secret {name}, key {key} (auth.acceptSecretRef)",
                signing.message
            ),
        },
    })
}

/// Points the generated Secret's owner references at this cluster and its live roles. The
/// Secret is immutable, but its metadata is not: after the cluster was deleted and re-created it
/// holds only the roles' references, and the new cluster takes it over (same bytes, so running
/// pods and new ones agree). A Secret of that name without the operator's label is the user's
/// and is left alone.
async fn adopt_generated_secret(
    cluster: &ActorCluster,
    ctx: &Context,
    secrets: &Api<Secret>,
    secret: &Secret,
    roles: &[&sigx_crds::ActorRole],
    what: &str,
) -> Result<(), ReconcileError> {
    let ours = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::render::names::MANAGED_BY))
        .is_some_and(|v| v == sigx_crds::labels::MANAGED_BY_VALUE);
    if !ours {
        return Ok(());
    }
    let Ok(owner) = crate::render::owner_ref(cluster, KIND) else {
        return Ok(());
    };
    let mut wanted = Secret::default();
    wanted.metadata.owner_references = Some(vec![owner]);
    let wanted = render::co_owned_by_roles(wanted, roles)
        .metadata
        .owner_references;
    let uids =
        |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.iter()
                .flatten()
                .map(|r| (r.uid.clone(), r.controller))
                .collect::<Vec<_>>()
        };
    if uids(&secret.metadata.owner_references) == uids(&wanted) {
        return Ok(());
    }
    let patch = json!({"metadata": {
        "ownerReferences": wanted,
        "resourceVersion": secret.metadata.resource_version,
    }});
    let pp = PatchParams {
        field_manager: Some(ctx.field_manager.clone()),
        ..PatchParams::default()
    };
    secrets
        .patch(&secret.name_any(), &pp, &Patch::Merge(&patch))
        .await
        .map_err(ReconcileError::kube(
            "setting the owners of",
            what.to_owned(),
        ))?;
    Ok(())
}

/// Whether two Secret values are the same mesh key as the sidecar reads them from files: the
/// bytes minus one trailing line ending (the sidecar's `config::secret_file_key`).
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let key = |v: &[u8]| {
        v.strip_suffix(b"\r\n")
            .or_else(|| v.strip_suffix(b"\n"))
            .unwrap_or(v)
            .to_vec()
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::same_key;

    #[test]
    fn the_same_key_is_judged_as_the_sidecar_reads_it() {
        assert!(same_key(b"k", b"k\n"));
        assert!(same_key(b"k\r\n", b"k"));
        assert!(!same_key(b"k", b"k\n\n"));
        assert!(!same_key(b"k", b"K"));
    }
}
