//! Errors of one reconciliation.

/// Why a reconciliation failed. Each retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The object has no namespace: sigx resources are namespaced, so it did not come from the
    /// API server.
    #[error("{kind} {name:?} has no namespace; ActorCluster and ActorRole are namespaced")]
    NoNamespace { kind: &'static str, name: String },
    /// An API call failed.
    #[error("Kubernetes API call failed while {action} for {object}: {source}")]
    Kube {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    /// A desired object could not be rendered from the spec.
    #[error("rendering the objects of {object} failed: {source}")]
    Render {
        object: String,
        #[source]
        source: crate::render::RenderError,
    },
}

impl ReconcileError {
    pub(crate) fn render(
        object: impl Into<String>,
    ) -> impl FnOnce(crate::render::RenderError) -> Self {
        let object = object.into();
        move |source| ReconcileError::Render { object, source }
    }

    pub(crate) fn kube(
        action: &'static str,
        object: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> Self {
        let object = object.into();
        move |source| ReconcileError::Kube {
            action,
            object,
            source,
        }
    }
}
