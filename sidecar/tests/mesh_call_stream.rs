//! Calls on the mesh's call stream (`DeliverStream`, one per peer pair) over real loopback TCP:
//! answers find their callers, large calls go unary, a draining host answers what it has and
//! refuses the rest as never run, an older peer is called by `Deliver`. (A stream broken
//! mid-call: `mesh_bad_input.rs`, `a_connection_dying_in_flight_is_outcome_unknown`.)

#[path = "support/mesh_server.rs"]
mod mesh_server;

use async_trait::async_trait;
use bytes::Bytes;
use mesh_server::{CLIENT_ID, MeshServer, call};
use sigx_proto::ActorError;
use sigx_proto::v1::DeliverRequest;
use sigx_sidecar::clock::system;
use sigx_sidecar::mesh::client::STREAM_PAYLOAD_MAX;
use sigx_sidecar::mesh::{
    BoxedIo, Connector, DeliverHandler, MeshAuth, MeshCallError, MeshClient, MeshClientConfig,
    MeshServerConfig, TcpConnector,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

const SECRET: &str = "correct horse battery staple";

/// Echoes after `delay_ms` (from the payload's method name), counting calls that started.
#[derive(Default)]
struct Handler {
    started: AtomicUsize,
    entered: Notify,
}

#[async_trait]
impl DeliverHandler for Handler {
    async fn deliver(
        &self,
        _peer: &str,
        req: DeliverRequest,
        _deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.entered.notify_one();
        match req.method.as_str() {
            "echo" => Ok(req.payload),
            "slow" => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(req.payload)
            }
            "hang" => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(Bytes::new())
            }
            other => Err(ActorError::invalid(format!("no method {other}"))),
        }
    }
}

fn secret() -> MeshAuth {
    MeshAuth::from_config(Some(SECRET), false).unwrap()
}

/// Dials over TCP, counting dials.
#[derive(Default)]
struct CountingTcp {
    dials: AtomicUsize,
}

#[async_trait]
impl Connector for CountingTcp {
    async fn connect(&self, addr: &str) -> std::io::Result<BoxedIo> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        TcpConnector.connect(addr).await
    }
}

fn client(connector: Arc<dyn Connector>) -> Arc<MeshClient> {
    Arc::new(MeshClient::new(
        CLIENT_ID,
        secret(),
        system(),
        connector,
        MeshClientConfig::default(),
    ))
}

async fn server() -> MeshServer<Handler> {
    MeshServer::tcp(secret(), Handler::default(), MeshServerConfig::default()).await
}

async fn deliver(
    c: &MeshClient,
    s: &MeshServer<Handler>,
    req: DeliverRequest,
    within: Duration,
) -> Result<Bytes, MeshCallError> {
    c.deliver(s.peer(), req, Instant::now() + within).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_stream_and_each_gets_its_own_answer() {
    let s = server().await;
    let net = Arc::new(CountingTcp::default());
    let c = client(net.clone());
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let (c, peer) = (c.clone(), s.addr.clone());
            tokio::spawn(async move {
                let method = if i % 3 == 0 { "slow" } else { "echo" };
                let r = c
                    .deliver(
                        sigx_sidecar::mesh::PeerAddr {
                            id: mesh_server::SERVER_ID,
                            advertise: &peer,
                        },
                        call(method, format!("payload {i}")),
                        Instant::now() + Duration::from_secs(10),
                    )
                    .await;
                (i, r)
            })
        })
        .collect();
    for task in calls {
        let (i, r) = task.await.unwrap();
        assert_eq!(
            r.unwrap(),
            format!("payload {i}"),
            "call {i} got another's answer"
        );
    }
    assert_eq!(net.dials.load(Ordering::SeqCst), 1, "one connection");
    assert_eq!(c.call_streams_opened(), 1, "one call stream for 200 calls");
    s.stop().await;
}

#[tokio::test]
async fn calls_with_large_payloads_go_unary_and_small_ones_on_the_stream() {
    let s = server().await;
    let c = client(Arc::new(TcpConnector));
    let large = Bytes::from(vec![7u8; STREAM_PAYLOAD_MAX + 1]);
    let r = deliver(&c, &s, call("echo", large.clone()), Duration::from_secs(5)).await;
    assert_eq!(r.unwrap(), large);
    assert_eq!(c.call_streams_opened(), 0, "a large call opens no stream");
    let r = deliver(&c, &s, call("echo", "small"), Duration::from_secs(5)).await;
    assert_eq!(r.unwrap(), "small");
    assert_eq!(c.call_streams_opened(), 1);
    s.stop().await;
}

/// A host shutting down gracefully answers the calls it is running, and a call made after
/// its closing notice is refused as never run (retryable elsewhere), never outcome-unknown.
/// The server then stops promptly although the caller's stream was long-lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_host_answers_what_it_runs_and_refuses_the_rest_as_never_run() {
    let s = server().await;
    let c = client(Arc::new(TcpConnector));
    // Open the stream first, then start calls that are running when the drain begins.
    assert_eq!(
        deliver(&c, &s, call("echo", "warm"), Duration::from_secs(5))
            .await
            .unwrap(),
        "warm"
    );
    let running: Vec<_> = (0..5)
        .map(|i| {
            let (c, peer) = (c.clone(), s.addr.clone());
            tokio::spawn(async move {
                c.deliver(
                    sigx_sidecar::mesh::PeerAddr {
                        id: mesh_server::SERVER_ID,
                        advertise: &peer,
                    },
                    call("slow", format!("running {i}")),
                    Instant::now() + Duration::from_secs(10),
                )
                .await
            })
        })
        .collect();
    while s.handler.started.load(Ordering::SeqCst) < 6 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let addr = s.addr.clone();
    let handler_calls = s.handler.started.load(Ordering::SeqCst);
    let stopping = tokio::spawn(s.stop());
    // Calls keep coming while the host drains: none may be lost or left unknown.
    let mut refused = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let r = c
            .deliver(
                sigx_sidecar::mesh::PeerAddr {
                    id: mesh_server::SERVER_ID,
                    advertise: &addr,
                },
                call("echo", "late"),
                Instant::now() + Duration::from_secs(2),
            )
            .await;
        match r {
            Ok(b) => assert_eq!(b, "late"),
            Err(e) => {
                assert!(
                    e.never_ran(),
                    "a call during the drain must be never-ran: {e:?}"
                );
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "the draining host refused nothing");
    for (i, task) in running.into_iter().enumerate() {
        assert_eq!(
            task.await.unwrap().unwrap(),
            format!("running {i}"),
            "a call running when the drain began is answered"
        );
    }
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("the server stops although a call stream was open")
        .unwrap();
    assert!(handler_calls >= 6);
}

/// A peer of an older version: it serves `Deliver` but not `DeliverStream`.
struct OlderPeer {
    delivered: AtomicUsize,
}

#[tonic::async_trait]
impl sigx_proto::v1::mesh_server::Mesh for OlderPeer {
    async fn deliver(
        &self,
        request: tonic::Request<DeliverRequest>,
    ) -> Result<tonic::Response<sigx_proto::v1::DeliverResponse>, tonic::Status> {
        self.delivered.fetch_add(1, Ordering::SeqCst);
        Ok(tonic::Response::new(sigx_proto::v1::DeliverResponse {
            outcome: Some(sigx_proto::v1::deliver_response::Outcome::Ok(
                request.into_inner().payload,
            )),
        }))
    }
    type DeliverStreamStream =
        futures::stream::Empty<Result<sigx_proto::v1::DeliverAnswer, tonic::Status>>;
    async fn deliver_stream(
        &self,
        _request: tonic::Request<tonic::Streaming<sigx_proto::v1::DeliverFrame>>,
    ) -> Result<tonic::Response<Self::DeliverStreamStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this version"))
    }
    async fn lookup(
        &self,
        _r: tonic::Request<sigx_proto::v1::LookupRequest>,
    ) -> Result<tonic::Response<sigx_proto::v1::LookupResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("test peer"))
    }
    async fn register(
        &self,
        _r: tonic::Request<sigx_proto::v1::RegisterRequest>,
    ) -> Result<tonic::Response<sigx_proto::v1::RegisterResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("test peer"))
    }
    async fn unregister(
        &self,
        _r: tonic::Request<sigx_proto::v1::UnregisterRequest>,
    ) -> Result<tonic::Response<sigx_proto::v1::UnregisterResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("test peer"))
    }
    async fn collect(
        &self,
        _r: tonic::Request<sigx_proto::v1::CollectRequest>,
    ) -> Result<tonic::Response<sigx_proto::v1::CollectResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("test peer"))
    }
    async fn list_entries(
        &self,
        _r: tonic::Request<sigx_proto::v1::ListEntriesRequest>,
    ) -> Result<tonic::Response<sigx_proto::v1::ListEntriesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("test peer"))
    }
}

/// During a rolling upgrade a new host calls an old one: the stream is refused as
/// UNIMPLEMENTED once, and every call (that one included) goes by `Deliver` instead.
#[tokio::test]
async fn a_peer_without_call_streams_is_called_by_deliver() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let peer = Arc::new(OlderPeer {
        delivered: AtomicUsize::new(0),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(sigx_proto::v1::mesh_server::MeshServer::from_arc(
                peer.clone(),
            ))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let c = client(Arc::new(TcpConnector));
    for i in 0..3 {
        let r = c
            .deliver(
                sigx_sidecar::mesh::PeerAddr {
                    id: "older",
                    advertise: &addr,
                },
                call("echo", format!("call {i}")),
                Instant::now() + Duration::from_secs(5),
            )
            .await;
        assert_eq!(r.unwrap(), format!("call {i}"));
    }
    assert_eq!(peer.delivered.load(Ordering::SeqCst), 3);
    assert_eq!(c.call_streams_opened(), 0);
}
