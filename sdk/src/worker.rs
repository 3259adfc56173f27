//! Declaring a stateless worker type: its methods, one async handler each, and its concurrency.

use crate::app::BoxFuture;
use crate::context::Context;
use crate::payload;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sigx_proto::ActorError;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

pub(crate) type WorkerFn =
    Arc<dyn Fn(Context) -> BoxFuture<Result<Bytes, ActorError>> + Send + Sync>;

/// A stateless worker type: runs on the host that receives the call, with no identity and no
/// directory, up to `max_concurrency` turns at once on each host.
///
/// ```
/// use sigx_sdk::WorkerType;
///
/// let echo = WorkerType::new("Echo")
///     .max_concurrency(32)
///     .method("echo", |ctx| async move { Ok(ctx.payload().clone()) });
/// ```
pub struct WorkerType {
    pub(crate) name: String,
    pub(crate) max_concurrency: u32,
    pub(crate) methods: BTreeMap<String, WorkerFn>,
}

impl WorkerType {
    /// A worker type named `name` (default concurrency: the sidecar's, 16).
    pub fn new(name: impl Into<String>) -> Self {
        WorkerType {
            name: name.into(),
            max_concurrency: 0,
            methods: BTreeMap::new(),
        }
    }

    /// How many turns of this type may run at once on one host.
    pub fn max_concurrency(mut self, n: u32) -> Self {
        self.max_concurrency = n;
        self
    }

    /// Handles `method` with raw payload bytes in and out.
    pub fn method<F, Fut>(mut self, method: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Bytes, ActorError>> + Send + 'static,
    {
        self.methods
            .insert(method.into(), Arc::new(move |ctx| Box::pin(handler(ctx))));
        self
    }

    /// Handles `method` with a JSON request and a JSON reply.
    pub fn json_method<Req, Resp, F, Fut>(self, method: impl Into<String>, handler: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + 'static,
        F: Fn(Context, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, ActorError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.method(method, move |ctx: Context| {
            let handler = handler.clone();
            async move {
                let request: Req = ctx.json()?;
                let reply = handler(ctx, request).await?;
                payload::json(&reply)
            }
        })
    }
}
