//! Who the sidecar runs as, and how the app reaches its socket without sharing that identity.
//!
//! Nothing here fixes a UID, a GID or an `fsGroup` unless the CRDs ask for one: OpenShift's
//! `restricted-v2` assigns each namespace its own UID range and `fsGroup` and refuses pods that
//! fix others, and a default `fsGroup` makes the kubelet re-own every volume of the pod
//! (recursively, for the app's PersistentVolumes too). The sidecar image's user is numeric
//! (65532), so `runAsNonRoot` holds without `runAsUser`; the rest of the `restricted` Pod
//! Security profile is always set (no privilege escalation, every capability dropped, the
//! runtime's seccomp profile, a read-only root filesystem).
//!
//! The app and the sidecar may then run as different users with no group in common, so the
//! sidecar makes its socket mode [`SOCKET_MODE`]: the socket's directory is an `emptyDir`
//! mounted only into this pod's containers, so the volume, not the file mode, is the boundary.
//! A template that sets `fsGroup` keeps it.

use k8s_openapi::api::core::v1::{Capabilities, SeccompProfile, SecurityContext};
use sigx_crds::{ActorCluster, ActorRole};

/// `SIGX_SOCKET_MODE` in a pod: read-write for every container that mounts the socket volume.
pub const SOCKET_MODE: &str = "666";

/// The sidecar's security context: the `restricted` profile, with a UID and GID only when the
/// role (`spec.sidecar.runAsUser`/`runAsGroup`) or else the cluster (`spec.sidecar...`) sets one.
pub fn sidecar_security_context(cluster: &ActorCluster, role: &ActorRole) -> SecurityContext {
    let role_sidecar = role.spec.sidecar.as_ref();
    let run_as_user = role_sidecar
        .and_then(|s| s.run_as_user)
        .or(cluster.spec.sidecar.run_as_user);
    let run_as_group = role_sidecar
        .and_then(|s| s.run_as_group)
        .or(cluster.spec.sidecar.run_as_group);
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user,
        run_as_group,
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
    }
}
