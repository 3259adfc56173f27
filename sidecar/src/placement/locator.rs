//! Where the directory says an actor lives: the routing loop's lookups, and what `Locate` and
//! `ListActors` ask of it.

use crate::directory::{ListPage, Located};
use crate::runtime::ActorId;
use async_trait::async_trait;
use sigx_proto::ActorError;
use sigx_proto::v1;
use tokio::time::Instant;

/// Where the directory says an actor lives.
#[async_trait]
pub trait Locator: Send + Sync + 'static {
    /// The host holding `actor`'s activation according to its partition owner, or `None` when
    /// it is not registered. Internal directory answers are retried inside `deadline`.
    async fn locate(
        &self,
        actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<String>, ActorError>;

    /// Where `actor` lives with its activation id (for `Locate`). By default the host of
    /// [`Locator::locate`] with no activation id, for locators that know only hosts.
    async fn where_is(
        &self,
        actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<Located>, ActorError> {
        Ok(self.locate(actor, deadline).await?.map(|host| Located {
            host,
            activation_id: String::new(),
        }))
    }

    /// One page of the live activations of `actor_type` (for `ListActors`). By default
    /// refused: a locator that is no directory has nothing to list.
    async fn list(
        &self,
        actor_type: &str,
        page_size: usize,
        after: Option<v1::ListCursor>,
        deadline: Instant,
    ) -> Result<ListPage, ActorError> {
        let _ = (page_size, after, deadline);
        Err(ActorError::invalid(format!(
            "this host's locator keeps no directory: it cannot list the actors of {actor_type:?}"
        )))
    }

    /// Counters to report in `Status`, by stable name.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

/// [`Locator::locate`] under a `sigx.directory.lookup` span when the call is traced (its
/// `sigx.host` is the answer, when the directory named one).
pub(super) async fn locate_traced(
    locator: &dyn Locator,
    actor: &ActorId,
    deadline: Instant,
) -> Result<Option<String>, ActorError> {
    let cx = crate::trace::step(
        "sigx.directory.lookup",
        opentelemetry::trace::SpanKind::Internal,
        || crate::trace::actor_only_attrs(actor),
    );
    crate::trace::traced(cx, async {
        let located = locator.locate(actor, deadline).await;
        if let Ok(Some(h)) = &located {
            crate::trace::annotate(|| [opentelemetry::KeyValue::new("sigx.host", h.clone())]);
        }
        located
    })
    .await
}
