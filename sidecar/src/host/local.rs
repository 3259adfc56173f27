//! The dispatcher of a single host with no cluster (`--membership none`).

use crate::app::Dispatcher;
use crate::health::HostState;
use crate::runtime::{ActorId, Runtime};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use sigx_proto::ActorError;
use sigx_proto::v1;
use std::sync::Arc;
use tokio::time::Instant;

/// The dispatcher of a single host with no cluster: every call runs here.
pub struct LocalDispatcher {
    pub(crate) runtime: Runtime,
    pub(crate) state: Arc<HostState>,
    pub(crate) started_at_unix_ms: i64,
    pub(crate) node: Option<String>,
    pub(crate) zone: Option<String>,
}

impl LocalDispatcher {
    fn descriptor(&self) -> v1::HostDescriptor {
        let (types, stateful) = match self.runtime.app() {
            Some(app) => (app.registry.all_types(), app.registry.stateful_types()),
            None => (Vec::new(), Vec::new()),
        };
        v1::HostDescriptor {
            id: self.runtime.config().host_id.clone(),
            advertise: String::new(),
            types: Some(v1::TypeList { names: types }),
            meta: [("node", &self.node), ("zone", &self.zone)]
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
                .collect(),
            status: if self.state.leaving() {
                v1::HostStatus::Leaving
            } else if self.state.ready() {
                v1::HostStatus::Active
            } else {
                v1::HostStatus::Joining
            } as i32,
            started_at_unix_ms: self.started_at_unix_ms,
            stateful_types: Some(v1::TypeList { names: stateful }),
        }
    }

    fn view(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        let d = self.descriptor();
        let status_ok = req.status == v1::MemberStatusFilter::Any as i32
            || d.status == v1::HostStatus::Active as i32;
        let type_ok = req.registers.is_empty()
            || d.types
                .as_ref()
                .is_none_or(|t| t.names.contains(&req.registers));
        v1::MembersResponse {
            version: 1,
            hosts: if status_ok && type_ok {
                vec![d]
            } else {
                vec![]
            },
        }
    }
}

#[async_trait]
impl Dispatcher for LocalDispatcher {
    async fn call(
        &self,
        actor: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
        _locality: crate::placement::Locality,
    ) -> Result<Bytes, ActorError> {
        // One host: every activation is here, whatever the caller prefers.
        self.runtime
            .invoke(&actor, &method, payload, deadline)
            .await
    }

    async fn dispatch_on(
        &self,
        host_id: String,
        worker: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        if host_id != self.runtime.config().host_id {
            return Err(ActorError::unreachable(format!(
                "host {host_id:?} is not in this host's view (a single host with no cluster)"
            )));
        }
        if self.runtime.registers(&worker.actor_type) == Some(true) {
            return Err(ActorError::invalid(format!(
                "{:?} is a stateful actor type: DispatchOn targets workers only (placement decides \
                 where an actor lives); use Call",
                worker.actor_type
            )));
        }
        self.runtime
            .invoke(&worker, &method, payload, deadline)
            .await
    }

    async fn locate(
        &self,
        actor: ActorId,
        _deadline: Instant,
    ) -> Result<v1::LocateResponse, ActorError> {
        crate::app::refuse_worker(self.runtime.registers(&actor.actor_type), &actor)?;
        Ok(match self.runtime.activation_of(&actor) {
            Some((activation_id, epoch)) => v1::LocateResponse {
                active: true,
                host_id: self.runtime.config().host_id.clone(),
                activation_id: activation_id.to_string(),
                epoch,
            },
            None => v1::LocateResponse::default(),
        })
    }

    async fn list_actors(
        &self,
        actor_type: String,
        page_size: usize,
        after: Option<v1::ListCursor>,
        _deadline: Instant,
    ) -> Result<crate::directory::ListPage, ActorError> {
        // One host is the whole fleet: its runtime is the directory.
        let host = &self.runtime.config().host_id;
        let entries = self
            .runtime
            .live_activations()
            .into_iter()
            .filter(|(id, _)| *id.actor_type == *actor_type)
            .map(|(id, activation)| {
                let p = crate::directory::partition(&id.actor_type, &id.key);
                let entry = v1::DirectoryEntry {
                    actor: Some(id.to_proto()),
                    host_id: host.clone(),
                    activation_id: activation.to_string(),
                };
                (p, entry)
            })
            .collect();
        Ok(crate::directory::listing::page_of(
            entries,
            page_size,
            after.as_ref(),
        ))
    }

    fn members(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        self.view(req)
    }

    fn watch_members(&self, req: v1::MembersRequest) -> BoxStream<'static, v1::MembersResponse> {
        let first = self.view(&req);
        Box::pin(futures::stream::once(async move { first }).chain(futures::stream::pending()))
    }

    fn status(&self) -> v1::StatusResponse {
        let d = self.descriptor();
        let mut counters = self.runtime.counters().snapshot();
        counters.insert(
            "localDispatches".into(),
            counters.get("turns").copied().unwrap_or(0),
        );
        crate::app::status_response(
            &self.state,
            &self.runtime,
            d.clone(),
            counters,
            v1::MembersResponse {
                version: 1,
                hosts: vec![d],
            },
        )
    }
}
