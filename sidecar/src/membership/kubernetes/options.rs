//! Where and as whom a host publishes its Lease, checked before anything binds.

use super::CLUSTER_LABEL;
use std::time::Duration;

/// Where and as whom the host publishes its Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesOptions {
    /// The namespace of the Leases (the pod's namespace, `POD_NAMESPACE`).
    pub namespace: String,
    /// The ActorCluster name (label `actors.sigx.dev/cluster`).
    pub cluster: String,
    /// The ActorRole name (label `actors.sigx.dev/role`).
    pub role: String,
    /// The pod name (`POD_NAME`): the owner of the Lease.
    pub pod_name: String,
    /// The pod UID (`POD_UID`); without it the Lease has no owner reference and outlives a
    /// deleted pod until a peer expires it.
    pub pod_uid: Option<String>,
    /// Cap of the watch's reconnect backoff (default 2 s).
    pub watch_backoff_max: Duration,
}

/// Kubernetes mode cannot start; reported before anything binds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubernetesConfigError {
    /// A piece of pod identity the Lease needs is missing.
    #[error(
        "kubernetes membership needs the pod's {what}: set {var} from the downward API \
         (fieldRef: {field})"
    )]
    MissingPodIdentity {
        /// What is missing.
        what: &'static str,
        /// The environment variable that carries it.
        var: &'static str,
        /// The downward-API field to fill it from.
        field: &'static str,
    },
    /// The cluster name is missing.
    #[error("kubernetes membership needs the ActorCluster name (SIGX_CLUSTER)")]
    MissingCluster,
}

impl KubernetesOptions {
    /// Checks that every piece of identity is present.
    pub fn validate(&self) -> Result<(), KubernetesConfigError> {
        if self.pod_name.trim().is_empty() {
            return Err(KubernetesConfigError::MissingPodIdentity {
                what: "name",
                var: "POD_NAME",
                field: "metadata.name",
            });
        }
        if self.namespace.trim().is_empty() {
            return Err(KubernetesConfigError::MissingPodIdentity {
                what: "namespace",
                var: "POD_NAMESPACE",
                field: "metadata.namespace",
            });
        }
        if self.cluster.trim().is_empty() {
            return Err(KubernetesConfigError::MissingCluster);
        }
        Ok(())
    }

    /// The label selector of this cluster's Leases.
    pub fn selector(&self) -> String {
        format!("{CLUSTER_LABEL}={}", self.cluster)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> KubernetesOptions {
        KubernetesOptions {
            namespace: "default".into(),
            cluster: "demo".into(),
            role: "engine".into(),
            pod_name: "engine-0".into(),
            pod_uid: Some("uid-1".into()),
            watch_backoff_max: Duration::from_secs(2),
        }
    }

    #[test]
    fn missing_pod_identity_is_a_named_error() {
        assert_eq!(opts().validate(), Ok(()));
        let err = KubernetesOptions {
            pod_name: " ".into(),
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(matches!(
            err,
            KubernetesConfigError::MissingPodIdentity {
                var: "POD_NAME",
                ..
            }
        ));
        assert!(err.to_string().contains("metadata.name"), "{err}");
        let err = KubernetesOptions {
            namespace: String::new(),
            ..opts()
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("POD_NAMESPACE"), "{err}");
    }
}
