//! The routing loop at the call's deadline: an answer that arrived keeps its kind. Only answers
//! the loop would have retried (proof the call never ran) become `timeout` when the deadline
//! ends the routing; an `app`, `fenced` or `invalid` answer that arrives at the deadline is what
//! the caller must see, or it would misjudge what happened.

use async_trait::async_trait;
use bytes::Bytes;
use sigx_proto::{ActorError, ErrorKind, v1};
use sigx_sidecar::health::HostState;
use sigx_sidecar::membership::{HostDescriptor, MembershipConfig, MemoryHub};
use sigx_sidecar::mesh::{MeshAuth, MeshClient, MeshClientConfig, TcpConnector};
use sigx_sidecar::placement::{Locator, Router, RouterConfig};
use sigx_sidecar::runtime::{ActorId, OpenGate, Registry, Runtime, RuntimeConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A directory that answers `answer` exactly at the deadline of the lookup.
struct AnswersAtTheDeadline {
    answer: Mutex<Option<ActorError>>,
}

#[async_trait]
impl Locator for AnswersAtTheDeadline {
    async fn locate(
        &self,
        _actor: &ActorId,
        deadline: Instant,
    ) -> Result<Option<String>, ActorError> {
        tokio::time::sleep_until(deadline).await;
        Err(self.answer.lock().unwrap().clone().expect("an answer"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_arriving_at_the_deadline_keeps_its_kind() {
    let hub = MemoryHub::new();
    let clock = sigx_sidecar::clock::system();
    let membership = sigx_sidecar::membership::start(
        hub.provider("a"),
        HostDescriptor::new(
            "a",
            "127.0.0.1:9",
            Some(vec!["Counter".into()]),
            Some(vec!["Counter".into()]),
        ),
        MembershipConfig::with_timing(Duration::from_millis(100), Duration::from_millis(600)),
        clock.clone(),
    )
    .await
    .unwrap();
    let runtime = Runtime::new(
        RuntimeConfig {
            host_id: "a".into(),
            ..RuntimeConfig::default()
        },
        Arc::new(OpenGate),
    );
    let registry = Registry::from_proto(&v1::Register {
        actors: vec![v1::ActorTypeSpec {
            name: "Counter".into(),
            reentrant: false,
            idle_timeout_ms: 0,
            methods: vec![],
        }],
        workers: vec![],
        app_name: "routing".into(),
    })
    .unwrap();
    let (tx, _turns) = tokio::sync::mpsc::unbounded_channel();
    runtime.attach(registry, tx).unwrap();
    let mesh = Arc::new(MeshClient::new(
        "a",
        MeshAuth::Insecure,
        clock,
        Arc::new(TcpConnector),
        MeshClientConfig::default(),
    ));
    let locator = Arc::new(AnswersAtTheDeadline {
        answer: Mutex::new(None),
    });
    let router = Router::new(
        RouterConfig::default(),
        membership,
        runtime,
        mesh,
        locator.clone(),
        Arc::new(HostState::default()),
    );
    let x = ActorId::new("Counter", "x");
    let route = |answer: ActorError| {
        *locator.answer.lock().unwrap() = Some(answer);
        let deadline = Instant::now() + Duration::from_millis(100);
        router.route(&x, "m", Bytes::new(), deadline)
    };
    for answer in [
        ActorError::fenced("the owner is fenced"),
        ActorError::invalid("the owner refused the request as malformed"),
    ] {
        let kind = answer.kind;
        let e = route(answer).await.unwrap_err();
        assert_eq!(e.kind, kind, "the answer that arrived is kept: {e}");
    }
    // An answer the loop would have retried is proof the call never ran; at the deadline the
    // routing ended, and that is what the caller hears.
    let e = route(ActorError::unreachable("the owner refused the connection"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
}
