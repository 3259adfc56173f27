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

use super::cluster::{SecretSource, secret_source};
use super::{RenderError, name_of, names, namespace_of, owned_meta, owner_ref};

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

    // App containers: the socket volume and SIGX_SOCKET.
    for c in &mut pod.containers {
        let env = c.env.get_or_insert_with(Vec::new);
        env.retain(|e| e.name != "SIGX_SOCKET");
        env.push(plain_env("SIGX_SOCKET", SOCKET_PATH));
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
    if project_token {
        volumes.push(token_volume());
    }

    pod.init_containers
        .get_or_insert_with(Vec::new)
        .push(sidecar(
            cluster,
            &cluster_name,
            &role_name,
            &secret,
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
    pod_labels.extend(selector.clone());
    pod_labels.extend(type_labels);
    pod_labels.insert(
        names::MANAGED_BY.to_owned(),
        labels::MANAGED_BY_VALUE.to_owned(),
    );
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(
        "kubectl.kubernetes.io/default-container".to_owned(),
        pod.containers[0].name.clone(),
    );
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
    cluster_name: &str,
    role_name: &str,
    secret: &SecretSource,
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
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_UID", "metadata.uid"),
        field_env("POD_IP", "status.podIP"),
        field_env("NODE_NAME", "spec.nodeName"),
    ];
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
        resources: spec.sidecar.resources.clone(),
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
