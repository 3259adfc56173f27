//! The sidecar's ports, and the checks that keep a role's pods from failing at bind time.
//!
//! Every container of a pod shares one network namespace, so an app container listening on the
//! sidecar's mesh or health port makes one of them fail to bind (the sidecar exits with "address
//! in use", or the app does): a CrashLoopBackOff far from its cause. The ports the template
//! declares are checked at render time instead, and a collision is refused with the port and
//! the setting to change (the role reports it as `Stalled`, reason `PortConflict`). Ports an app
//! listens on without declaring them cannot be checked.
//!
//! `hostNetwork: true` is refused outright: the sidecar's ports would be the node's, so two
//! pods of a cluster on one node collide and `/drain` and `/metrics` are exposed on the node's
//! address; and `POD_IP`, the address the host advertises, would be the node's.

use k8s_openapi::api::core::v1::PodSpec;
use sigx_crds::{ActorCluster, ActorRole};

use super::RenderError;
use super::role::SIDECAR_CONTAINER;

/// The ports a role's sidecars listen on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidecarPorts {
    /// Host-to-host mesh.
    pub mesh: i32,
    /// Probes, `/metrics` and `/drain`.
    pub health: i32,
}

/// The role's `spec.sidecar.meshPort`/`healthPort`, else the cluster's `spec.meshPort`/`healthPort`.
pub fn sidecar_ports(cluster: &ActorCluster, role: &ActorRole) -> SidecarPorts {
    let role_sidecar = role.spec.sidecar.as_ref();
    SidecarPorts {
        mesh: role_sidecar
            .and_then(|s| s.mesh_port)
            .unwrap_or(cluster.spec.mesh_port),
        health: role_sidecar
            .and_then(|s| s.health_port)
            .unwrap_or(cluster.spec.health_port),
    }
}

/// Refuses `hostNetwork`, equal mesh and health ports, and a TCP port of the template's
/// containers (app or init) that is one of the sidecar's.
pub(super) fn check(pod: &PodSpec, ports: SidecarPorts, role: &str) -> Result<(), RenderError> {
    if pod.host_network == Some(true) {
        return Err(RenderError::HostNetwork {
            role: role.to_owned(),
        });
    }
    if ports.mesh == ports.health {
        return Err(RenderError::PortConflict {
            role: role.to_owned(),
            container: SIDECAR_CONTAINER.to_owned(),
            port: ports.health,
            what: "mesh and health",
        });
    }
    let containers = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten());
    for c in containers {
        for p in c.ports.iter().flatten() {
            // The same number over UDP or SCTP is another socket.
            if p.protocol.as_deref().is_some_and(|proto| proto != "TCP") {
                continue;
            }
            let what = if p.container_port == ports.mesh {
                "mesh"
            } else if p.container_port == ports.health {
                "health"
            } else {
                continue;
            };
            return Err(RenderError::PortConflict {
                role: role.to_owned(),
                container: c.name.clone(),
                port: p.container_port,
                what,
            });
        }
    }
    Ok(())
}
