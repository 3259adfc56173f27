//! Per-role objects: the Deployment whose pods carry the sidecar, and its PodDisruptionBudget.
//!
//! What a pod of a role looks like (DESIGN.md §9):
//! - the sidecar is a *native sidecar*: an init container with `restartPolicy: Always`, so it
//!   starts before the app (its startupProbe on `/startupz` passes once its listeners are bound)
//!   and is stopped only after the app containers have exited;
//! - the app containers and the sidecar share an `emptyDir` holding the sidecar's Unix socket,
//!   and every app container gets `SIGX_SOCKET` pointing at it;
//! - the sidecar learns its identity from the downward API (`POD_NAME`, `POD_NAMESPACE`,
//!   `POD_UID`, `POD_IP`, `NODE_NAME` from `spec.nodeName`, published as `meta.node`), and the
//!   cluster's settings from `SIGX_*` variables;
//! - pods are labelled with cluster, role and one `actors.sigx.dev/type.<Type>: "true"` per
//!   registered type;
//! - only the sidecar holds an API token (projected into it alone); the app talks to its sidecar,
//!   never to the API server;
//! - rolling updates add one pod before removing one (maxSurge 1, maxUnavailable 0) and the
//!   PodDisruptionBudget lets voluntary evictions take one pod at a time, so a rollout or a node
//!   drain hands actors over one host at a time.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection,
    DownwardAPIVolumeFile, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath,
    ObjectFieldSelector, PodSecurityContext, Probe, ProjectedVolumeSource, SeccompProfile,
    SecretVolumeSource, SecurityContext, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sigx_crds::{ActorCluster, ActorRole, labels};

use super::cluster::{SecretSource, secret_source, state_mode};
use super::{RenderError, name_of, names, namespace_of, owned_meta, owner_ref};
use k8s_openapi::api::core::v1::SecretKeySelector;
use sigx_crds::StateMode;

/// Name of the sidecar container. Reserved: a template may not use it.
pub const SIDECAR_CONTAINER: &str = "sigx-sidecar";
/// Name of the shared socket volume. Every volume name starting with `sigx-` is reserved.
pub const SOCKET_VOLUME: &str = "sigx-socket";
/// Where the socket volume is mounted in every container.
pub const SOCKET_DIR: &str = "/var/run/sigx";
/// The sidecar's socket, as `SIGX_SOCKET` tells both sides.
pub const SOCKET_PATH: &str = "/var/run/sigx/sidecar.sock";
/// The sidecar's health and metrics port (`/startupz`, `/livez`, `/readyz`, `/metrics`).
pub const HEALTH_PORT: i32 = 9090;
/// Volume and mount of the cluster secret (read through `SIGX_SECRET_FILE`).
pub const SECRET_VOLUME: &str = "sigx-secret";
/// Directory of the mounted cluster secret.
pub const SECRET_DIR: &str = "/etc/sigx/secret";
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
/// User and group the sidecar runs as; also the pod's `fsGroup` when the template sets none, so
/// the socket (mode 0660, group inherited from the setgid volume) is reachable by the app.
pub const SIDECAR_UID: i64 = 65532;
/// Seconds added to the drain for the sidecar's own shutdown after handoff.
pub const SHUTDOWN_MARGIN_SECONDS: i64 = 10;

const KIND: &str = "ActorRole";

/// Prefix of every label the operator owns on pods.
const SIGX_LABEL_PREFIX: &str = "actors.sigx.dev/";

/// Seconds a pod of `cluster` is given to stop: in-flight turns may run to their deadline (the
/// call timeout, also the sidecar's drain timeout), then the host hands its partitions over and
/// withdraws its Lease, which takes up to a TTL for peers to converge; plus a margin.
pub fn termination_grace_seconds(cluster: &ActorCluster) -> i64 {
    i64::from(cluster.spec.calls.timeout_seconds)
        + i64::from(cluster.spec.membership.ttl_seconds)
        + SHUTDOWN_MARGIN_SECONDS
}

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
/// added. Refuses templates that collide with what it adds (names, service account).
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

    let sa = names::service_account(&cluster_name);
    match pod.service_account_name.as_deref() {
        None | Some("") => {}
        Some(found) if found == sa => {}
        Some(found) => {
            return Err(RenderError::ServiceAccount {
                role: role_name,
                found: found.to_owned(),
                wanted: sa,
            });
        }
    }
    pod.service_account_name = Some(sa);

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
    if let Some((secret_name, key)) = secret.secret_key() {
        volumes.push(Volume {
            name: SECRET_VOLUME.to_owned(),
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
        });
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
        .push(sidecar(
            cluster,
            role,
            &cluster_name,
            &role_name,
            &secret,
            state.as_ref(),
            project_token,
        ));

    let security = pod
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    if security.fs_group.is_none() {
        security.fs_group = Some(SIDECAR_UID);
    }

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
    Ok(Deployment {
        metadata: owned_meta(
            names::deployment(&role_name),
            namespace,
            deploy_labels,
            owner_ref(role, KIND)?,
        ),
        spec: DeploymentSpec {
            replicas: Some(role.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
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
            max_unavailable: Some(IntOrString::Int(1)),
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

fn sidecar(
    cluster: &ActorCluster,
    role: &ActorRole,
    cluster_name: &str,
    role_name: &str,
    secret: &SecretSource,
    state: Option<&StateMode<'_>>,
    project_token: bool,
) -> Container {
    let spec = &cluster.spec;
    let ms = |s: i32| (i64::from(s) * 1000).to_string();
    let mut env = vec![
        plain_env("SIGX_MEMBERSHIP", "kubernetes"),
        plain_env("SIGX_CLUSTER", cluster_name),
        plain_env("SIGX_ROLE", role_name),
        plain_env("SIGX_SOCKET", SOCKET_PATH),
        plain_env("SIGX_MESH_ADDR", &format!("0.0.0.0:{}", spec.mesh_port)),
        plain_env("SIGX_HEALTH_ADDR", &format!("0.0.0.0:{HEALTH_PORT}")),
        plain_env("SIGX_BEAT_MS", &ms(spec.membership.heartbeat_seconds)),
        plain_env("SIGX_TTL_MS", &ms(spec.membership.ttl_seconds)),
        plain_env("SIGX_CALL_TIMEOUT_MS", &ms(spec.calls.timeout_seconds)),
        plain_env("SIGX_RETRIES", &spec.calls.retries.to_string()),
        plain_env("SIGX_PLACEMENT", spec.placement.as_str()),
        plain_env("SIGX_DRAIN_TIMEOUT_MS", &ms(spec.calls.timeout_seconds)),
    ];
    // Only when set: an older sidecar ignores unknown variables, and the sidecar's own default
    // applies otherwise.
    if let Some(coalesce) = spec.membership.coalesce_ms {
        env.push(plain_env(
            "SIGX_MEMBERSHIP_COALESCE_MS",
            &coalesce.to_string(),
        ));
    }
    env.extend([
        // The types the role declares (and labels its pods with), comma-separated, so the
        // sidecar can hold the app's registration to them.
        plain_env("SIGX_ACTORS", &join(&role.spec.actors)),
        plain_env("SIGX_WORKERS", &join(&role.spec.workers)),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_UID", "metadata.uid"),
        field_env("POD_IP", "status.podIP"),
        field_env("NODE_NAME", "spec.nodeName"),
    ]);
    let mut mounts = vec![socket_mount()];
    match secret {
        SecretSource::Insecure => env.push(plain_env("SIGX_INSECURE", "true")),
        SecretSource::Referenced { .. } | SecretSource::Generated { .. } => {
            env.push(plain_env(
                "SIGX_SECRET_FILE",
                &format!("{SECRET_DIR}/secret"),
            ));
            mounts.push(read_only_mount(SECRET_VOLUME, SECRET_DIR));
        }
    }
    // The state store; without a state section the sidecar keeps state in memory.
    match state {
        None => {}
        Some(StateMode::Sqlite) => {
            env.push(plain_env("SIGX_STATE", "sqlite"));
            env.push(plain_env(
                "SIGX_STATE_PATH",
                &format!("{STATE_DIR}/state.db"),
            ));
            mounts.push(VolumeMount {
                name: STATE_VOLUME.to_owned(),
                mount_path: STATE_DIR.to_owned(),
                ..VolumeMount::default()
            });
        }
        Some(StateMode::Postgres(r)) => {
            env.push(plain_env("SIGX_STATE", "postgres"));
            env.push(EnvVar {
                name: "SIGX_STATE_DSN".to_owned(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: r.name.clone(),
                        key: r.key.clone(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
            });
        }
    }
    if spec.mtls.is_some() {
        env.push(plain_env("SIGX_MTLS_DIR", MTLS_DIR));
        mounts.push(read_only_mount(MTLS_VOLUME, MTLS_DIR));
    }
    if project_token {
        mounts.push(read_only_mount(TOKEN_VOLUME, TOKEN_DIR));
    }

    let probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("health".to_owned()),
            scheme: Some("HTTP".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(1),
        ..Probe::default()
    };

    Container {
        name: SIDECAR_CONTAINER.to_owned(),
        image: Some(spec.sidecar.image.clone()),
        image_pull_policy: spec
            .sidecar
            .image_pull_policy
            .map(|p| p.as_str().to_owned()),
        // A native sidecar: started before the app, stopped after it.
        restart_policy: Some("Always".to_owned()),
        env: Some(env),
        ports: Some(vec![
            ContainerPort {
                name: Some("mesh".to_owned()),
                container_port: spec.mesh_port,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("health".to_owned()),
                container_port: HEALTH_PORT,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
        ]),
        // Passes once every listener is bound; the app starts only then.
        startup_probe: Some(probe("/startupz", 1, 60)),
        // Fails once the host fenced: a restart is the way back (as a new incarnation).
        liveness_probe: Some(probe("/livez", 5, 3)),
        // Passes while the host is active with a registered app.
        readiness_probe: Some(probe("/readyz", 2, 2)),
        resources: Some(super::resources::sidecar_resources(
            spec.sidecar.resources.as_ref(),
            role.spec
                .sidecar
                .as_ref()
                .and_then(|s| s.resources.as_ref()),
        )),
        volume_mounts: Some(mounts),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(SIDECAR_UID),
            run_as_group: Some(SIDECAR_UID),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                localhost_profile: None,
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// The pod's API token, CA and namespace, projected into the sidecar only (what the kubelet would
/// mount into every container with automount on).
fn token_volume() -> Volume {
    Volume {
        name: TOKEN_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o444),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_owned(),
                        expiration_seconds: Some(3607),
                        ..ServiceAccountTokenProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            ..KeyToPath::default()
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".to_owned()),
                                field_path: "metadata.namespace".to_owned(),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn join(types: &[sigx_crds::TypeName]) -> String {
    types
        .iter()
        .map(sigx_crds::TypeName::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

fn socket_mount() -> VolumeMount {
    VolumeMount {
        name: SOCKET_VOLUME.to_owned(),
        mount_path: SOCKET_DIR.to_owned(),
        ..VolumeMount::default()
    }
}

fn read_only_mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_owned()),
                field_path: path.to_owned(),
            }),
            ..EnvVarSource::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::fixtures;
    use k8s_openapi::api::core::v1::PodSpec;
    use serde_json::json;

    fn pod_spec(d: &Deployment) -> &PodSpec {
        d.spec.template.spec.as_ref().expect("pod spec")
    }

    fn the_sidecar(d: &Deployment) -> &Container {
        let inits = pod_spec(d)
            .init_containers
            .as_ref()
            .expect("init containers");
        let found: Vec<_> = inits
            .iter()
            .filter(|c| c.name == SIDECAR_CONTAINER)
            .collect();
        assert_eq!(found.len(), 1, "exactly one sidecar");
        found[0]
    }

    fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
        c.env.iter().flatten().find(|e| e.name == name)
    }

    fn env_value<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
        env(c, name).and_then(|e| e.value.as_deref())
    }

    fn engine() -> Deployment {
        deployment(&fixtures::default_cluster(), &fixtures::engine_role()).unwrap()
    }

    #[test]
    fn sidecar_is_a_native_sidecar_with_the_three_probes() {
        let d = engine();
        let s = the_sidecar(&d);
        assert_eq!(s.restart_policy.as_deref(), Some("Always"));
        assert_eq!(s.image.as_deref(), Some("ghcr.io/sigx/sidecar:0.1.0"));
        let path = |p: &Option<Probe>| {
            let get = p.as_ref().unwrap().http_get.as_ref().unwrap();
            assert_eq!(get.port, IntOrString::String("health".into()));
            get.path.clone().unwrap()
        };
        assert_eq!(path(&s.startup_probe), "/startupz");
        assert_eq!(path(&s.liveness_probe), "/livez");
        assert_eq!(path(&s.readiness_probe), "/readyz");
        let ports = s.ports.as_ref().unwrap();
        let port = |n: &str| {
            ports
                .iter()
                .find(|p| p.name.as_deref() == Some(n))
                .unwrap()
                .container_port
        };
        assert_eq!(port("health"), HEALTH_PORT);
        assert_eq!(port("mesh"), 7311);
        assert_eq!(env_value(s, "SIGX_HEALTH_ADDR"), Some("0.0.0.0:9090"));
        assert_eq!(env_value(s, "SIGX_MESH_ADDR"), Some("0.0.0.0:7311"));
        // The app containers are untouched apart from the socket: no sidecar among them.
        assert!(
            pod_spec(&d)
                .containers
                .iter()
                .all(|c| c.name != SIDECAR_CONTAINER)
        );
    }

    #[test]
    fn socket_volume_is_shared_and_announced_to_every_app_container() {
        let mut role = fixtures::engine_role();
        let pod = role.spec.template.spec.as_mut().unwrap();
        let mut second = pod.containers[0].clone();
        second.name = "helper".into();
        second.env = Some(vec![
            plain_env("SIGX_SOCKET", "/wrong"),
            plain_env("KEEP", "me"),
        ]);
        pod.containers.push(second);
        let d = deployment(&fixtures::default_cluster(), &role).unwrap();
        let spec = pod_spec(&d);
        let vol = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == SOCKET_VOLUME)
            .unwrap();
        assert!(vol.empty_dir.is_some());
        for c in spec.containers.iter().chain([the_sidecar(&d)]) {
            let m = c
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.name == SOCKET_VOLUME);
            assert_eq!(
                m.map(|m| m.mount_path.as_str()),
                Some(SOCKET_DIR),
                "{}",
                c.name
            );
            assert_eq!(env_value(c, "SIGX_SOCKET"), Some(SOCKET_PATH), "{}", c.name);
            let count = c
                .env
                .iter()
                .flatten()
                .filter(|e| e.name == "SIGX_SOCKET")
                .count();
            assert_eq!(count, 1, "{} has SIGX_SOCKET once", c.name);
        }
        assert!(SOCKET_PATH.starts_with(SOCKET_DIR));
        let helper = spec.containers.iter().find(|c| c.name == "helper").unwrap();
        assert_eq!(env_value(helper, "KEEP"), Some("me"), "user env is kept");
        for c in &spec.containers {
            assert_eq!(env_value(c, "SIGX_ACTORS"), Some("Counter"), "{}", c.name);
            assert_eq!(env_value(c, "SIGX_WORKERS"), Some(""), "{}", c.name);
        }
    }

    #[test]
    fn sidecar_learns_its_identity_from_the_downward_api() {
        let d = engine();
        let s = the_sidecar(&d);
        for (name, path) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
            ("POD_UID", "metadata.uid"),
            ("POD_IP", "status.podIP"),
            ("NODE_NAME", "spec.nodeName"),
        ] {
            let field = env(s, name)
                .and_then(|e| e.value_from.as_ref())
                .and_then(|v| v.field_ref.as_ref())
                .unwrap_or_else(|| panic!("{name} from the downward API"));
            assert_eq!(field.field_path, path, "{name}");
        }
    }

    #[test]
    fn sidecar_env_carries_the_cluster_spec() {
        let cluster = fixtures::cluster(json!({
            "sidecar": {"image": "s:1", "imagePullPolicy": "IfNotPresent"},
            "membership": {"heartbeatSeconds": 2, "ttlSeconds": 7},
            "meshPort": 7400,
            "calls": {"timeoutSeconds": 12, "retries": 5},
            "placement": "prefer-local"
        }));
        let d = deployment(&cluster, &fixtures::engine_role()).unwrap();
        let s = the_sidecar(&d);
        let expect = [
            ("SIGX_MEMBERSHIP", "kubernetes"),
            ("SIGX_CLUSTER", "demo"),
            ("SIGX_ROLE", "engine"),
            ("SIGX_BEAT_MS", "2000"),
            ("SIGX_TTL_MS", "7000"),
            ("SIGX_MESH_ADDR", "0.0.0.0:7400"),
            ("SIGX_CALL_TIMEOUT_MS", "12000"),
            ("SIGX_RETRIES", "5"),
            ("SIGX_PLACEMENT", "prefer-local"),
            ("SIGX_DRAIN_TIMEOUT_MS", "12000"),
        ];
        for (k, v) in expect {
            assert_eq!(env_value(s, k), Some(v), "{k}");
        }
        assert_eq!(s.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            pod_spec(&d).termination_grace_period_seconds,
            Some(12 + 7 + 10)
        );
    }

    #[test]
    fn generated_secret_is_mounted_as_a_file() {
        let d = engine();
        let s = the_sidecar(&d);
        assert_eq!(
            env_value(s, "SIGX_SECRET_FILE"),
            Some("/etc/sigx/secret/secret")
        );
        assert!(env(s, "SIGX_INSECURE").is_none());
        assert!(
            env(s, "SIGX_SECRET").is_none(),
            "the secret is never a plain env value"
        );
        let vol = pod_spec(&d)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == SECRET_VOLUME)
            .unwrap();
        let secret = vol.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("demo-sigx-secret"));
        assert_eq!(secret.items.as_ref().unwrap()[0].key, "secret");
        // Only the sidecar mounts it.
        for c in &pod_spec(&d).containers {
            assert!(
                c.volume_mounts
                    .iter()
                    .flatten()
                    .all(|m| m.name != SECRET_VOLUME)
            );
        }
    }

    #[test]
    fn referenced_secret_and_insecure_are_rendered_as_asked() {
        let referenced = fixtures::cluster(json!({
            "sidecar": {"image": "s"}, "auth": {"secretRef": {"name": "mine", "key": "hmac"}}
        }));
        let d = deployment(&referenced, &fixtures::engine_role()).unwrap();
        let vol = pod_spec(&d)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == SECRET_VOLUME)
            .unwrap();
        let secret = vol.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("mine"));
        assert_eq!(secret.items.as_ref().unwrap()[0].key, "hmac");

        let insecure =
            fixtures::cluster(json!({"sidecar": {"image": "s"}, "auth": {"insecure": true}}));
        let d = deployment(&insecure, &fixtures::engine_role()).unwrap();
        let s = the_sidecar(&d);
        assert_eq!(env_value(s, "SIGX_INSECURE"), Some("true"));
        assert!(env(s, "SIGX_SECRET_FILE").is_none());
        assert!(
            pod_spec(&d)
                .volumes
                .iter()
                .flatten()
                .all(|v| v.name != SECRET_VOLUME)
        );
    }

    #[test]
    fn pods_are_labelled_with_cluster_role_and_types_and_the_selector_matches() {
        let role = fixtures::role(
            "mixed",
            json!({
                "clusterRef": {"name": "demo"},
                "actors": ["Counter", "billing.Invoice"],
                "workers": ["Echo"],
                "template": {"metadata": {"labels": {"app": "x", "actors.sigx.dev/role": "spoofed", "actors.sigx.dev/type.Undeclared": "true"}},
                             "spec": {"containers": [{"name": "app", "image": "a"}]}}
            }),
        );
        let d = deployment(&fixtures::default_cluster(), &role).unwrap();
        let labels = d
            .spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(labels["actors.sigx.dev/cluster"], "demo");
        assert_eq!(
            labels["actors.sigx.dev/role"], "mixed",
            "operator labels win"
        );
        for t in ["Counter", "billing.Invoice", "Echo"] {
            assert_eq!(labels[&format!("actors.sigx.dev/type.{t}")], "true");
        }
        assert_eq!(labels["app"], "x", "user labels are kept");
        let annotations = d
            .spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap();
        assert_eq!(
            annotations["kubectl.kubernetes.io/default-container"],
            "app"
        );
        assert!(
            !labels.contains_key("actors.sigx.dev/type.Undeclared"),
            "a template cannot claim a type its role does not declare"
        );
        assert_eq!(
            labels
                .keys()
                .filter(|k| k.starts_with("actors.sigx.dev/"))
                .count(),
            5,
            "cluster, role and three types"
        );
        let s = the_sidecar(&d);
        assert_eq!(env_value(s, "SIGX_ACTORS"), Some("Counter,billing.Invoice"));
        assert_eq!(env_value(s, "SIGX_WORKERS"), Some("Echo"));
        let selector = d.spec.selector.match_labels.as_ref().unwrap();
        assert_eq!(selector.len(), 2, "selector: cluster and role only");
        for (k, v) in selector {
            assert_eq!(labels.get(k), Some(v), "pod labels satisfy the selector");
        }
        assert_eq!(
            selector_string(&fixtures::default_cluster(), &role).unwrap(),
            "actors.sigx.dev/cluster=demo,actors.sigx.dev/role=mixed"
        );
    }

    #[test]
    fn rollout_adds_before_it_removes_and_replicas_follow_the_role() {
        let d = engine();
        assert_eq!(d.spec.replicas, Some(3));
        let ru = d
            .spec
            .strategy
            .as_ref()
            .unwrap()
            .rolling_update
            .as_ref()
            .unwrap();
        assert_eq!(ru.max_surge, Some(IntOrString::Int(1)));
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));

        let mut scaled = fixtures::engine_role();
        scaled.spec.replicas = 5;
        let d5 = deployment(&fixtures::default_cluster(), &scaled).unwrap();
        assert_eq!(d5.spec.replicas, Some(5));
        let owner = &d5.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ActorRole", "engine")
        );
        assert_eq!(d5.metadata.name.as_deref(), Some("engine"));
        assert_eq!(d5.metadata.namespace.as_deref(), Some("apps"));
    }

    #[test]
    fn grace_period_covers_the_drain_and_keeps_a_longer_one() {
        let c = fixtures::default_cluster();
        assert_eq!(termination_grace_seconds(&c), 30 + 15 + 10);
        assert_eq!(
            pod_spec(&engine()).termination_grace_period_seconds,
            Some(55)
        );
        let mut role = fixtures::engine_role();
        role.spec
            .template
            .spec
            .as_mut()
            .unwrap()
            .termination_grace_period_seconds = Some(300);
        let d = deployment(&c, &role).unwrap();
        assert_eq!(pod_spec(&d).termination_grace_period_seconds, Some(300));
    }

    #[test]
    fn only_the_sidecar_gets_an_api_token() {
        let d = engine();
        let spec = pod_spec(&d);
        assert_eq!(spec.service_account_name.as_deref(), Some("demo-sigx"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let has_token = |c: &Container| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == TOKEN_DIR)
        };
        assert!(has_token(the_sidecar(&d)));
        assert!(spec.containers.iter().all(|c| !has_token(c)));

        let mut wants_token = fixtures::engine_role();
        wants_token
            .spec
            .template
            .spec
            .as_mut()
            .unwrap()
            .automount_service_account_token = Some(true);
        let d = deployment(&fixtures::default_cluster(), &wants_token).unwrap();
        assert!(
            !has_token(the_sidecar(&d)),
            "kubelet mounts it; no second mount at the same path"
        );
        assert!(
            pod_spec(&d)
                .volumes
                .iter()
                .flatten()
                .all(|v| v.name != TOKEN_VOLUME)
        );
    }

    #[test]
    fn socket_group_is_shared_unless_the_template_chose_one() {
        assert_eq!(
            pod_spec(&engine())
                .security_context
                .as_ref()
                .unwrap()
                .fs_group,
            Some(SIDECAR_UID)
        );
        let mut role = fixtures::engine_role();
        role.spec.template.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(2000),
            ..PodSecurityContext::default()
        });
        let d = deployment(&fixtures::default_cluster(), &role).unwrap();
        assert_eq!(
            pod_spec(&d).security_context.as_ref().unwrap().fs_group,
            Some(2000)
        );
    }

    #[test]
    fn user_init_containers_run_before_the_sidecar() {
        let mut role = fixtures::engine_role();
        role.spec.template.spec.as_mut().unwrap().init_containers = Some(vec![Container {
            name: "migrate".into(),
            image: Some("m".into()),
            ..Container::default()
        }]);
        let d = deployment(&fixtures::default_cluster(), &role).unwrap();
        let names: Vec<_> = pod_spec(&d)
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["migrate", SIDECAR_CONTAINER]);
    }

    #[test]
    fn pdb_allows_one_disruption_over_the_same_pods() {
        let c = fixtures::default_cluster();
        let r = fixtures::engine_role();
        let pdb = pod_disruption_budget(&c, &r).unwrap();
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert!(
            spec.min_available.is_none(),
            "maxUnavailable and minAvailable are exclusive"
        );
        assert_eq!(
            spec.selector.unwrap(),
            deployment(&c, &r).unwrap().spec.selector
        );
        assert_eq!(pdb.metadata.owner_references.unwrap()[0].kind, "ActorRole");
    }

    #[test]
    fn mismatches_and_collisions_are_refused_with_a_reason() {
        let c = fixtures::default_cluster();
        let template = json!({"spec": {"containers": [{"name": "app", "image": "a"}]}});
        let refuse = |role: ActorRole| deployment(&c, &role).unwrap_err();

        let other = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "other"}, "actors": ["A"], "template": template}),
        );
        assert!(matches!(refuse(other), RenderError::WrongCluster { .. }));

        let mut elsewhere = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "template": template}),
        );
        elsewhere.metadata.namespace = Some("other-ns".into());
        assert!(matches!(
            refuse(elsewhere),
            RenderError::CrossNamespace { .. }
        ));

        let dup = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "workers": ["A"], "template": template}),
        );
        assert!(matches!(refuse(dup), RenderError::DuplicateType { .. }));

        let none = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "template": template}),
        );
        assert!(matches!(refuse(none), RenderError::NoTypes { .. }));

        let bad = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["9lives"], "template": template}),
        );
        let err = refuse(bad);
        assert!(matches!(err, RenderError::TypeName { .. }));
        assert!(err.to_string().contains("9lives"), "{err}");

        let empty = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"], "template": {"spec": {"containers": []}}}),
        );
        assert!(matches!(refuse(empty), RenderError::NoAppContainer { .. }));

        let reserved = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
            "template": {"spec": {"containers": [{"name": "sigx-sidecar", "image": "a"}]}}}),
        );
        assert!(matches!(
            refuse(reserved),
            RenderError::ReservedName {
                what: "container",
                ..
            }
        ));

        let reserved_vol = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
            "template": {"spec": {"containers": [{"name": "app", "image": "a"}], "volumes": [{"name": "sigx-socket", "emptyDir": {}}]}}}),
        );
        assert!(matches!(
            refuse(reserved_vol),
            RenderError::ReservedName { what: "volume", .. }
        ));

        let reserved_mount = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
            "template": {"spec": {"containers": [{"name": "app", "image": "a",
                "volumeMounts": [{"name": "data", "mountPath": "/var/run/sigx/"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}]}}}),
        );
        assert!(matches!(
            refuse(reserved_mount),
            RenderError::ReservedName {
                what: "mount path",
                ..
            }
        ));

        let sa = fixtures::role(
            "r",
            json!({"clusterRef": {"name": "demo"}, "actors": ["A"],
            "template": {"spec": {"serviceAccountName": "app-sa", "containers": [{"name": "app", "image": "a"}]}}}),
        );
        assert!(matches!(refuse(sa), RenderError::ServiceAccount { .. }));
    }
}
