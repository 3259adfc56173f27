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
    /// An object the operator would render already exists and sigx did not make it (no
    /// `app.kubernetes.io/managed-by: sigx-operator`): taking it over could break whoever runs
    /// it, and would hand it to the garbage collector with sigx's owner references.
    #[error(
        "{object} already exists and is not managed by sigx (its fields belong to {managers}; it \
         has no app.kubernetes.io/managed-by: sigx-operator label): sigx will not take it over. \
         Rename the ActorRole or ActorCluster, or delete that object if it is a leftover"
    )]
    NotOurs { object: String, managers: String },
    /// A desired object could not be rendered from the spec.
    #[error("rendering the objects of {object} failed: {source}")]
    Render {
        object: String,
        #[source]
        source: crate::render::RenderError,
    },
}

impl ReconcileError {
    /// For an API call the server refused for good (400 Bad Request, 403 Forbidden by an
    /// admission policy or webhook, 422 Invalid): the object and the server's own message.
    /// None for what a retry may fix (timeouts, 409, 429, 5xx, transport).
    pub(crate) fn refusal(&self) -> Option<String> {
        match self {
            Self::Kube {
                object,
                source: kube::Error::Api(s),
                ..
            } if matches!(s.code, 400 | 403 | 422) => {
                Some(format!("{object} ({} {}): {}", s.code, s.reason, s.message))
            }
            Self::NotOurs { .. } => Some(self.to_string()),
            _ => None,
        }
    }

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
