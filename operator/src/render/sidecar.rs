//! The sidecar container injected into every pod of a role (DESIGN.md §9): its environment
//! (identity from the downward API, the cluster's settings as `SIGX_*`), mounts (socket,
//! secret, mTLS, state, API token), ports and probes.

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection, DownwardAPIVolumeFile,
    EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, Probe,
    ProjectedVolumeSource, SecretKeySelector, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sigx_crds::{ActorCluster, ActorRole, DEFAULT_SIDECAR_IMAGE, StateMode};

use super::RenderError;
use super::cluster::SecretSource;
use super::ports::SidecarPorts;
use super::role::{
    ACCEPT_SECRET_DIR, ACCEPT_SECRET_VOLUME, MTLS_DIR, MTLS_VOLUME, SECRET_DIR, SECRET_VOLUME,
    SIDECAR_CONTAINER, SOCKET_DIR, SOCKET_PATH, SOCKET_VOLUME, STATE_DIR, STATE_VOLUME, TOKEN_DIR,
    TOKEN_VOLUME,
};

/// What the sidecar container is rendered from.
#[derive(Clone, Copy)]
pub(super) struct SidecarInput<'a> {
    pub cluster: &'a ActorCluster,
    pub role: &'a ActorRole,
    pub cluster_name: &'a str,
    pub role_name: &'a str,
    pub secret: &'a SecretSource,
    pub state: Option<&'a StateMode<'a>>,
    /// Whether the API token is projected into the sidecar (automount is off).
    pub project_token: bool,
    pub ports: SidecarPorts,
    /// The `/drain` token (render/stop.rs).
    pub drain_token: &'a str,
}

/// The sidecar image of a role's pods: the role's own, else the cluster's, else the one of the
/// operator's release.
pub(super) fn sidecar_image<'a>(cluster: &'a ActorCluster, role: &'a ActorRole) -> &'a str {
    role.spec
        .sidecar
        .as_ref()
        .and_then(|s| s.image.as_deref())
        .or(cluster.spec.sidecar.image.as_deref())
        .unwrap_or(DEFAULT_SIDECAR_IMAGE)
}

/// The sidecar container of a role's pods (a native sidecar: an init container with
/// `restartPolicy: Always`).
pub(super) fn sidecar(input: &SidecarInput<'_>) -> Container {
    let SidecarInput {
        cluster,
        role,
        cluster_name,
        role_name,
        secret,
        state,
        project_token,
        ports,
        drain_token,
    } = *input;
    let spec = &cluster.spec;
    let ms = |s: i32| (i64::from(s) * 1000).to_string();
    let mut env = vec![
        plain_env("SIGX_MEMBERSHIP", "kubernetes"),
        plain_env("SIGX_CLUSTER", cluster_name),
        plain_env("SIGX_ROLE", role_name),
        plain_env("SIGX_SOCKET", SOCKET_PATH),
        plain_env("SIGX_MESH_ADDR", &format!("0.0.0.0:{}", ports.mesh)),
        plain_env("SIGX_HEALTH_ADDR", &format!("0.0.0.0:{}", ports.health)),
        // The socket's volume is this pod's alone; the app need not share the sidecar's UID.
        plain_env("SIGX_SOCKET_MODE", super::security::SOCKET_MODE),
        // What the app containers' preStop hook sends to `/drain` (render/stop.rs).
        plain_env("SIGX_DRAIN_TOKEN", drain_token),
        plain_env("SIGX_BEAT_MS", &ms(spec.membership.heartbeat_seconds)),
        plain_env("SIGX_TTL_MS", &ms(spec.membership.ttl_seconds)),
        plain_env("SIGX_CALL_TIMEOUT_MS", &ms(spec.calls.timeout_seconds)),
        plain_env("SIGX_RETRIES", &spec.calls.retries.to_string()),
        plain_env("SIGX_PLACEMENT", spec.placement.as_str()),
        plain_env("SIGX_DRAIN_TIMEOUT_MS", &ms(spec.calls.drain_seconds())),
    ];
    // Only when set: an older sidecar ignores unknown variables, and the sidecar's own default
    // applies otherwise.
    if !spec.placement_by_type.is_empty() {
        let types: Vec<String> = spec
            .placement_by_type
            .iter()
            .map(|t| format!("{}={}", t.actor_type, t.policy.as_str()))
            .collect();
        env.push(plain_env("SIGX_PLACEMENT_TYPES", &types.join(",")));
    }
    if let Some(rebalance) = spec.rebalance {
        env.push(plain_env("SIGX_REBALANCE", &rebalance.to_string()));
    }
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
        // The downward API cannot read a Node's labels, but Kubernetes' PodTopologyLabels
        // admission plugin (on by default since 1.35) copies the node's zone label onto the
        // Pod when it is bound, before the kubelet starts a container: the env resolves to it.
        // On older servers the label is absent and the env empty, which reads as "no zone".
        field_env("SIGX_ZONE", ZONE_FIELD),
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
            if cluster.spec.auth.accept_unsigned == Some(true) {
                env.push(plain_env("SIGX_ACCEPT_UNSIGNED", "true"));
            }
            if cluster.spec.auth.accept_secret_ref.is_some() {
                env.push(plain_env(
                    "SIGX_SECRET_ACCEPT_FILE",
                    &format!("{ACCEPT_SECRET_DIR}/secret"),
                ));
                mounts.push(read_only_mount(ACCEPT_SECRET_VOLUME, ACCEPT_SECRET_DIR));
            }
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

    // The role's own, after the operator's (check_env refused the names the operator sets).
    env.extend(role.spec.sidecar.iter().flat_map(|s| s.env.iter().cloned()));

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
        image: Some(sidecar_image(cluster, role).to_owned()),
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
                container_port: ports.mesh,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("health".to_owned()),
                container_port: ports.health,
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
        security_context: Some(super::security::sidecar_security_context(cluster, role)),
        ..Container::default()
    }
}

/// The pod's API token, CA and namespace, projected into the sidecar only (what the kubelet would
/// mount into every container with automount on).
pub(super) fn token_volume() -> Volume {
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

pub(super) fn join(types: &[sigx_crds::TypeName]) -> String {
    types
        .iter()
        .map(sigx_crds::TypeName::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn socket_mount() -> VolumeMount {
    VolumeMount {
        name: SOCKET_VOLUME.to_owned(),
        mount_path: SOCKET_DIR.to_owned(),
        ..VolumeMount::default()
    }
}

pub(super) fn read_only_mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The downward-API variables the operator sets on the sidecar (besides every `SIGX_*`).
const IDENTITY_ENV: [&str; 5] = [
    "POD_NAME",
    "POD_NAMESPACE",
    "POD_UID",
    "POD_IP",
    "NODE_NAME",
];

/// Refuses a role whose `spec.sidecar.env` sets a variable the operator sets: the sidecar reads
/// its settings and identity from them, and two values of one name in a container are the
/// kubelet's to pick from.
pub(super) fn check_env(role: &ActorRole, role_name: &str) -> Result<(), RenderError> {
    let env = role.spec.sidecar.iter().flat_map(|s| s.env.iter());
    for var in env {
        if var.name.starts_with("SIGX_") || IDENTITY_ENV.contains(&var.name.as_str()) {
            return Err(RenderError::ReservedEnv {
                role: role_name.to_owned(),
                name: var.name.clone(),
            });
        }
    }
    Ok(())
}

pub(super) fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

/// The pod label PodTopologyLabels copies from its node, as a downward-API field path.
pub const ZONE_FIELD: &str = "metadata.labels['topology.kubernetes.io/zone']";

pub(super) fn field_env(name: &str, path: &str) -> EnvVar {
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
