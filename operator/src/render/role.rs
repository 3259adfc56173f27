//! Per-role objects: the Deployment whose pods carry the sidecar, and its PodDisruptionBudget.
//!
//! What a pod of a role looks like (DESIGN.md §9):
//! - the sidecar is a *native sidecar*: an init container with `restartPolicy: Always`, so it
//!   starts before the app (its startupProbe on `/startupz` passes once its listeners are bound)
//!   and is stopped only after the app containers have exited;
//! - the app containers and the sidecar share an `emptyDir` holding the sidecar's Unix socket,
//!   and every app container gets `SIGX_SOCKET` pointing at it;
//! - the sidecar learns its identity from the downward API (`POD_NAME`, `POD_NAMESPACE`,
//!   `POD_UID`, `POD_IP`, `NODE_NAME` from `spec.nodeName`, published as `meta.node`, and
//!   `SIGX_ZONE` from the pod's `topology.kubernetes.io/zone` label, which the API server's
//!   PodTopologyLabels admission copies from the node at binding, published as `meta.zone`),
//!   and the cluster's settings from `SIGX_*` variables;
//! - pods are labelled with cluster, role and one `actors.sigx.dev/type.<Type>: "true"` per
//!   registered type;
//! - only the sidecar holds an API token (projected into it alone); the app talks to its sidecar,
//!   never to the API server;
//! - a pod stops in a fixed order — the app's preStop hook drains it through the sidecar, then
//!   the app exits, then the sidecar hands over — within a grace period sized from the drain
//!   (`stop.rs`);
//! - the sidecar's ports are the cluster's or the role's, checked against the app's
//!   (`ports.rs`); the pod's account is the cluster's or the template's own (`account.rs`); no
//!   UID or `fsGroup` is fixed unless asked for (`security.rs`);
//! - rolling updates add one pod before removing one (maxSurge 1, maxUnavailable 0) and the
//!   PodDisruptionBudget lets voluntary evictions take one pod at a time, so a rollout or a node
//!   drain hands actors over one host at a time; the pods spread across nodes and zones
//!   (`rollout.rs`, which also holds the role's overrides).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, KeyToPath, SecretVolumeSource, Volume};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use sigx_crds::{ActorCluster, ActorRole, StateMode, labels};

use super::cluster::{secret_source, state_mode};
use super::sidecar::{SidecarInput, join, plain_env, sidecar, socket_mount, token_volume};
use super::{RenderError, name_of, names, namespace_of, owned_meta, owner_ref};

pub use super::stop::termination_grace_seconds;

/// Name of the sidecar container. Reserved: a template may not use it.
pub const SIDECAR_CONTAINER: &str = "sigx-sidecar";
/// Name of the shared socket volume. Every volume name starting with `sigx-` is reserved.
pub const SOCKET_VOLUME: &str = "sigx-socket";
/// Where the socket volume is mounted in every container.
pub const SOCKET_DIR: &str = "/var/run/sigx";
/// The sidecar's socket, as `SIGX_SOCKET` tells both sides.
pub const SOCKET_PATH: &str = "/var/run/sigx/sidecar.sock";
/// The sidecar's default health port (`/startupz`, `/livez`, `/readyz`, `/metrics`, `/drain`);
/// `spec.healthPort` changes it.
pub const HEALTH_PORT: i32 = sigx_crds::cluster::DEFAULT_HEALTH_PORT;
/// Volume and mount of the cluster secret (read through `SIGX_SECRET_FILE`).
pub const SECRET_VOLUME: &str = "sigx-secret";
/// Directory of the mounted cluster secret.
pub const SECRET_DIR: &str = "/etc/sigx/secret";
/// Volume and mount of the second secret accepted during a rotation (`spec.auth.acceptSecretRef`,
/// read through `SIGX_SECRET_ACCEPT_FILE`).
pub const ACCEPT_SECRET_VOLUME: &str = "sigx-secret-accept";
/// Directory of the mounted accepted secret.
pub const ACCEPT_SECRET_DIR: &str = "/etc/sigx/secret-accept";
/// Volume and mount of the mTLS material (when `spec.mtls` is set).
pub const MTLS_VOLUME: &str = "sigx-mtls";
/// Directory of the mounted mTLS Secret (`tls.crt`, `tls.key`, `ca.crt`).
pub const MTLS_DIR: &str = "/etc/sigx/mtls";
/// Volume of the SQLite state file (`spec.state.kind: sqlite`), mounted in the sidecar only: an
/// `emptyDir` on the node's disk (the socket volume is a 1 MiB tmpfs).
pub const STATE_VOLUME: &str = "sigx-state";
/// Where the state volume is mounted; the file is `state.db` in it.
pub const STATE_DIR: &str = "/var/lib/sigx";
/// Volume of the API token projected into the sidecar only.
pub const TOKEN_VOLUME: &str = "sigx-api-token";
/// Where in-cluster clients (the kube crate included) look for the token.
pub const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const KIND: &str = "ActorRole";

/// Prefix of every label the operator owns on pods.
const SIGX_LABEL_PREFIX: &str = "actors.sigx.dev/";

/// The role's pod selector in string form, for `status.selector` (the scale subresource).
pub fn selector_string(cluster: &ActorCluster, role: &ActorRole) -> Result<String, RenderError> {
    let (cluster_name, role_name, _) = check_pair(cluster, role)?;
    Ok(names::selector(&cluster_name, &role_name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(","))
}

/// The role's Deployment: the app's pod template with the sidecar, socket, identity and labels
/// added. Refuses templates that collide with what it adds (names, ports) or that use
/// `hostNetwork`.
pub fn deployment(cluster: &ActorCluster, role: &ActorRole) -> Result<Deployment, RenderError> {
    let (cluster_name, role_name, namespace) = check_pair(cluster, role)?;
    let type_labels = type_labels(role, &role_name)?;
    let secret = secret_source(cluster)?;
    let state = state_mode(cluster)?;
    let selector = names::selector(&cluster_name, &role_name);

    let mut template = role.spec.template.clone();
    let mut pod = template.spec.take().unwrap_or_default();
    if pod.containers.is_empty() {
        return Err(RenderError::NoAppContainer { role: role_name });
    }
    check_reserved(&pod, &role_name)?;
    super::sidecar::check_env(role, &role_name)?;

    let ports = super::ports::sidecar_ports(cluster, role);
    super::ports::check(&pod, ports, &role_name)?;
    let drain_token = super::stop::drain_token(role)?;
    // The template's own account (cloud IAM, Vault), bound to the Lease Role by the role's
    // RoleBinding (account.rs), or the cluster's.
    pod.service_account_name = Some(super::account::pod_service_account(&cluster_name, &pod));

    // Only the sidecar needs the API; unless the template explicitly wants the token in every
    // container, project it into the sidecar alone.
    let project_token = pod.automount_service_account_token != Some(true);
    if project_token {
        pod.automount_service_account_token = Some(false);
    }

    // App containers: the socket volume, SIGX_SOCKET, and the declared types (the sidecar holds
    // the app's registration to exactly these, so an app serving several types can register the
    // subset its role declares).
    let app_env = [
        plain_env("SIGX_SOCKET", SOCKET_PATH),
        plain_env("SIGX_ACTORS", &join(&role.spec.actors)),
        plain_env("SIGX_WORKERS", &join(&role.spec.workers)),
    ];
    for c in &mut pod.containers {
        let env = c.env.get_or_insert_with(Vec::new);
        env.retain(|e| !app_env.iter().any(|a| a.name == e.name));
        env.extend(app_env.iter().cloned());
        c.volume_mounts
            .get_or_insert_with(Vec::new)
            .push(socket_mount());
    }

    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    volumes.push(Volume {
        name: SOCKET_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                "1Mi".to_owned(),
            )),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    });
    // One key of a Secret as the file `secret` (the sidecar reads it through an env naming it).
    let key_volume = |volume: &str, secret_name: &str, key: &str| Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name.to_owned()),
            items: Some(vec![KeyToPath {
                key: key.to_owned(),
                path: "secret".to_owned(),
                ..KeyToPath::default()
            }]),
            default_mode: Some(0o440),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    if let Some((secret_name, key)) = secret.secret_key() {
        volumes.push(key_volume(SECRET_VOLUME, secret_name, key));
    }
    if let Some(accept) = &cluster.spec.auth.accept_secret_ref {
        volumes.push(key_volume(ACCEPT_SECRET_VOLUME, &accept.name, &accept.key));
    }
    if let Some(mtls) = &cluster.spec.mtls {
        volumes.push(Volume {
            name: MTLS_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(mtls.secret_name.clone()),
                default_mode: Some(0o440),
                optional: Some(false),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    if state == Some(StateMode::Sqlite) {
        volumes.push(Volume {
            name: STATE_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    if project_token {
        volumes.push(token_volume());
    }

    pod.init_containers
        .get_or_insert_with(Vec::new)
        .push(sidecar(&SidecarInput {
            cluster,
            role,
            cluster_name: &cluster_name,
            role_name: &role_name,
            secret: &secret,
            state: state.as_ref(),
            project_token,
            ports,
            drain_token: &drain_token,
        }));
    super::stop::add_pre_stop(&mut pod, ports.health, &drain_token);
    super::rollout::add_default_spread(&mut pod, &selector);

    let grace = termination_grace_seconds(cluster);
    pod.termination_grace_period_seconds = Some(
        pod.termination_grace_period_seconds
            .map_or(grace, |t| t.max(grace)),
    );

    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let pod_labels = meta.labels.get_or_insert_with(BTreeMap::new);
    // The sigx labels say what the operator knows (cluster, role, declared types); a template
    // may not claim any of them, e.g. a type its role does not declare.
    pod_labels.retain(|k, _| !k.starts_with(SIGX_LABEL_PREFIX));
    pod_labels.extend(selector.clone());
    pod_labels.extend(type_labels);
    pod_labels.insert(
        names::MANAGED_BY.to_owned(),
        labels::MANAGED_BY_VALUE.to_owned(),
    );
    // `kubectl exec/logs` pick the app unless the template chose otherwise.
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .entry("kubectl.kubernetes.io/default-container".to_owned())
        .or_insert_with(|| pod.containers[0].name.clone());
    template.spec = Some(pod);

    let mut deploy_labels = selector.clone();
    deploy_labels.insert(
        names::MANAGED_BY.to_owned(),
        labels::MANAGED_BY_VALUE.to_owned(),
    );
    let mut metadata = owned_meta(
        names::deployment(&role_name),
        namespace,
        deploy_labels,
        owner_ref(role, KIND)?,
    );
    metadata.annotations = Some(BTreeMap::from([(
        names::TEMPLATE_HASH.to_owned(),
        names::template_hash(&template),
    )]));
    Ok(Deployment {
        metadata,
        spec: DeploymentSpec {
            replicas: Some(role.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            },
            strategy: Some(super::rollout::strategy(role)),
            min_ready_seconds: super::rollout::min_ready_seconds(role),
            template,
            ..DeploymentSpec::default()
        },
        status: None,
    })
}

/// A PodDisruptionBudget letting voluntary disruptions (node drains, evictions) take one pod of
/// the role at a time. Unhealthy pods (e.g. a fenced host failing readiness) may always be
/// evicted, so a stuck pod never blocks a drain.
pub fn pod_disruption_budget(
    cluster: &ActorCluster,
    role: &ActorRole,
) -> Result<PodDisruptionBudget, RenderError> {
    let (cluster_name, role_name, namespace) = check_pair(cluster, role)?;
    let selector = names::selector(&cluster_name, &role_name);
    let mut pdb_labels = selector.clone();
    pdb_labels.insert(
        names::MANAGED_BY.to_owned(),
        labels::MANAGED_BY_VALUE.to_owned(),
    );
    Ok(PodDisruptionBudget {
        metadata: owned_meta(
            names::deployment(&role_name),
            namespace,
            pdb_labels,
            owner_ref(role, KIND)?,
        ),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(super::rollout::max_disruption(role)),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// Cluster name, role name and namespace, after checking that the pair belongs together and that
/// the names can be label values.
fn check_pair(
    cluster: &ActorCluster,
    role: &ActorRole,
) -> Result<(String, String, String), RenderError> {
    let cluster_name = name_of(cluster, "ActorCluster")?;
    let role_name = name_of(role, KIND)?;
    let cluster_ns = namespace_of(cluster, "ActorCluster")?;
    let role_ns = namespace_of(role, KIND)?;
    for (kind, name) in [("ActorCluster", &cluster_name), (KIND, &role_name)] {
        if name.len() > 63 {
            return Err(RenderError::NameTooLong {
                kind,
                name: name.clone(),
            });
        }
    }
    if role.spec.cluster_ref.name != cluster_name {
        return Err(RenderError::WrongCluster {
            role: role_name,
            wanted: role.spec.cluster_ref.name.clone(),
            got: cluster_name,
        });
    }
    if role_ns != cluster_ns {
        return Err(RenderError::CrossNamespace {
            role: role_name,
            role_ns,
            cluster: cluster_name,
            cluster_ns,
        });
    }
    Ok((cluster_name, role_name, role_ns))
}

/// One `actors.sigx.dev/type.<Type>: "true"` label per registered type, after checking every name
/// and refusing duplicates.
fn type_labels(role: &ActorRole, role_name: &str) -> Result<BTreeMap<String, String>, RenderError> {
    let mut seen = BTreeSet::new();
    let mut out = BTreeMap::new();
    for t in role.spec.all_types() {
        t.validate().map_err(|source| RenderError::TypeName {
            role: role_name.to_owned(),
            source,
        })?;
        if !seen.insert(t.as_str()) {
            return Err(RenderError::DuplicateType {
                role: role_name.to_owned(),
                type_name: t.to_string(),
            });
        }
        out.insert(labels::type_key(t), labels::TYPE_VALUE.to_owned());
    }
    if out.is_empty() {
        return Err(RenderError::NoTypes {
            role: role_name.to_owned(),
        });
    }
    Ok(out)
}

fn check_reserved(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    role: &str,
) -> Result<(), RenderError> {
    let containers = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten());
    for c in containers {
        if c.name == SIDECAR_CONTAINER {
            return Err(RenderError::ReservedName {
                role: role.to_owned(),
                what: "container",
                name: c.name.clone(),
            });
        }
    }
    for c in &pod.containers {
        for m in c.volume_mounts.iter().flatten() {
            if m.mount_path.trim_end_matches('/') == SOCKET_DIR {
                return Err(RenderError::ReservedName {
                    role: role.to_owned(),
                    what: "mount path",
                    name: m.mount_path.clone(),
                });
            }
        }
    }
    for v in pod.volumes.iter().flatten() {
        if v.name.starts_with("sigx-") {
            return Err(RenderError::ReservedName {
                role: role.to_owned(),
                what: "volume",
                name: v.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "role_tests.rs"]
mod tests;
