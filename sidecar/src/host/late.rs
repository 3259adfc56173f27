//! Late binding: the socket and the runtime exist before the host has joined the cluster (the
//! app must register first, because the host publishes the types it registers). Until the
//! cluster is up, the gate takes no activations and the dispatcher answers that the host is
//! still joining — answers that say the call never ran.

use crate::app::Dispatcher;
use crate::runtime::{ActivationGate, ActorId};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use sigx_proto::ActorError;
use sigx_proto::v1;
use std::sync::{Arc, OnceLock};
use tokio::time::Instant;

fn joining(host: &str) -> ActorError {
    ActorError::unreachable(format!(
        "host {host} is still joining the cluster: the call never ran; retry shortly"
    ))
}

/// A gate that refuses everything until the cluster's gate is set, and again once the host
/// fenced itself ([`LateGate::fence`]).
pub struct LateGate {
    host: String,
    inner: OnceLock<Arc<dyn ActivationGate>>,
    fenced: OnceLock<String>,
}

impl LateGate {
    /// An unset gate for `host`.
    pub fn new(host: impl Into<String>) -> Self {
        LateGate {
            host: host.into(),
            inner: OnceLock::new(),
            fenced: OnceLock::new(),
        }
    }
    /// Sets the cluster's gate (once).
    pub fn set(&self, gate: Arc<dyn ActivationGate>) {
        let _ = self.inner.set(gate);
    }
    /// Refuses every turn and activation from now on (`fenced`), whatever the lease says: the
    /// host stopped renewing its record and lets it lapse. Terminal.
    pub fn fence(&self, reason: impl Into<String>) {
        let _ = self.fenced.set(reason.into());
    }
    fn check_fenced(&self) -> Result<(), ActorError> {
        match self.fenced.get() {
            Some(reason) => Err(ActorError::fenced(format!(
                "host {} is fenced ({reason}): it runs no more turns",
                self.host
            ))),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl ActivationGate for LateGate {
    fn check_serving(&self) -> Result<(), ActorError> {
        self.check_fenced()?;
        match self.inner.get() {
            Some(g) => g.check_serving(),
            None => Err(joining(&self.host)),
        }
    }
    fn serving_until(&self) -> Result<Option<std::time::SystemTime>, ActorError> {
        match self.inner.get() {
            Some(g) => g.serving_until(),
            None => Err(joining(&self.host)),
        }
    }
    fn check_accepting(&self) -> Result<(), ActorError> {
        self.check_fenced()?;
        match self.inner.get() {
            Some(g) => g.check_accepting(),
            None => Err(joining(&self.host)),
        }
    }
    async fn claim(
        &self,
        actor: &ActorId,
        activation_id: &str,
        deadline: Instant,
    ) -> Result<(), ActorError> {
        self.check_fenced()?;
        match self.inner.get() {
            Some(g) => g.claim(actor, activation_id, deadline).await,
            None => Err(joining(&self.host)),
        }
    }
    async fn release(&self, actor: &ActorId, activation_id: &str) {
        if let Some(g) = self.inner.get() {
            g.release(actor, activation_id).await
        }
    }
}

/// A dispatcher that answers "joining" until the cluster's dispatcher is set, while
/// `fallback` answers `Status` and `Members`.
pub struct LateDispatcher {
    host: String,
    inner: OnceLock<Arc<dyn Dispatcher>>,
    fallback: Arc<dyn Dispatcher>,
}

impl LateDispatcher {
    /// An unset dispatcher.
    pub fn new(host: impl Into<String>, fallback: Arc<dyn Dispatcher>) -> Self {
        LateDispatcher {
            host: host.into(),
            inner: OnceLock::new(),
            fallback,
        }
    }
    /// Sets the cluster's dispatcher (once).
    pub fn set(&self, d: Arc<dyn Dispatcher>) {
        let _ = self.inner.set(d);
    }
}

#[async_trait]
impl Dispatcher for LateDispatcher {
    async fn call(
        &self,
        actor: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
        locality: crate::placement::Locality,
    ) -> Result<Bytes, ActorError> {
        match self.inner.get() {
            Some(d) => d.call(actor, method, payload, deadline, locality).await,
            None => Err(joining(&self.host)),
        }
    }
    async fn dispatch_on(
        &self,
        host_id: String,
        worker: ActorId,
        method: String,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        match self.inner.get() {
            Some(d) => {
                d.dispatch_on(host_id, worker, method, payload, deadline)
                    .await
            }
            None => Err(joining(&self.host)),
        }
    }
    async fn locate(
        &self,
        actor: ActorId,
        deadline: Instant,
    ) -> Result<v1::LocateResponse, ActorError> {
        match self.inner.get() {
            Some(d) => d.locate(actor, deadline).await,
            None => Err(joining(&self.host)),
        }
    }
    async fn list_actors(
        &self,
        actor_type: String,
        page_size: usize,
        after: Option<v1::ListCursor>,
        deadline: Instant,
    ) -> Result<crate::directory::ListPage, ActorError> {
        match self.inner.get() {
            Some(d) => d.list_actors(actor_type, page_size, after, deadline).await,
            None => Err(joining(&self.host)),
        }
    }
    fn members(&self, req: &v1::MembersRequest) -> v1::MembersResponse {
        self.inner.get().unwrap_or(&self.fallback).members(req)
    }
    fn watch_members(&self, req: v1::MembersRequest) -> BoxStream<'static, v1::MembersResponse> {
        self.inner
            .get()
            .unwrap_or(&self.fallback)
            .watch_members(req)
    }
    fn status(&self) -> v1::StatusResponse {
        self.inner.get().unwrap_or(&self.fallback).status()
    }
}
