//! The mesh over real loopback TCP: signed calls work; every kind of bad input is refused with
//! the right status and nothing crashes; every failed call is classified by whether it ran.

#[path = "support/mesh_server.rs"]
mod mesh_server;

use async_trait::async_trait;
use bytes::Bytes;
use mesh_server::{CLIENT_ID, Cuttable, MeshServer, SERVER_ID, call};
use sigx_proto::v1::DeliverRequest;
use sigx_proto::{ActorError, ErrorKind};
use sigx_sidecar::clock::{ManualClock, SharedClock, system};
use sigx_sidecar::mesh::{
    AcceptLimits, Connector, DeliverHandler, MeshAuth, MeshCallError, MeshClient, MeshClientConfig,
    MeshServerConfig, PeerAddr, TcpConnector,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;

const SECRET: &str = "correct horse battery staple";
const MAX_MSG: usize = 64 * 1024;

/// The host side of the test: echoes, fails, hangs or reports who called.
struct Handler {
    entered: Arc<Notify>,
}

#[async_trait]
impl DeliverHandler for Handler {
    async fn deliver(
        &self,
        peer: &str,
        req: DeliverRequest,
        _deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        match req.method.as_str() {
            "echo" => Ok(req.payload),
            "who" => Ok(Bytes::from(peer.to_owned())),
            "fail" => Err(ActorError::app("the actor said no")),
            "hang" => {
                self.entered.notify_one();
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(Bytes::new())
            }
            other => Err(ActorError::invalid(format!("no method {other}"))),
        }
    }
}

type Server = MeshServer<Handler>;

async fn start_server() -> Server {
    start_server_with(|_| {}).await
}

/// A server on loopback TCP with messages capped at `MAX_MSG`, then `tweak`ed.
async fn start_server_with(tweak: impl FnOnce(&mut MeshServerConfig)) -> Server {
    let mut config = MeshServerConfig {
        max_message_bytes: MAX_MSG,
        ..Default::default()
    };
    tweak(&mut config);
    let handler = Handler {
        entered: Arc::new(Notify::new()),
    };
    MeshServer::tcp(secret(), handler, config).await
}

fn client_with(
    id: &str,
    auth: MeshAuth,
    clock: SharedClock,
    connector: Arc<dyn Connector>,
) -> MeshClient {
    MeshClient::new(
        id,
        auth,
        clock,
        connector,
        MeshClientConfig {
            connect_timeout: Duration::from_millis(500),
            max_message_bytes: 4 * MAX_MSG,
            ..Default::default()
        },
    )
}

fn client(auth: MeshAuth) -> MeshClient {
    client_with(CLIENT_ID, auth, system(), Arc::new(TcpConnector))
}

fn secret() -> MeshAuth {
    MeshAuth::from_config(Some(SECRET), false).unwrap()
}

async fn deliver(c: &MeshClient, s: &Server, req: DeliverRequest) -> Result<Bytes, MeshCallError> {
    c.deliver(s.peer(), req, Instant::now() + Duration::from_secs(5))
        .await
}

fn answered_kind(r: Result<Bytes, MeshCallError>) -> (ErrorKind, String) {
    match r {
        Err(MeshCallError::Answered(e)) => (e.kind, e.message),
        other => panic!("expected an answered error, got {other:?}"),
    }
}

#[tokio::test]
async fn signed_calls_round_trip_and_answers_keep_their_kind() {
    let s = start_server().await;
    let c = client(secret());
    assert_eq!(deliver(&c, &s, call("echo", "hi")).await.unwrap(), "hi");
    // The handler sees the authenticated peer id.
    assert_eq!(deliver(&c, &s, call("who", "")).await.unwrap(), "client");
    let (kind, msg) = answered_kind(deliver(&c, &s, call("fail", "")).await);
    assert_eq!(kind, ErrorKind::App);
    assert!(msg.contains("the actor said no"));
    s.stop().await;
}

#[tokio::test]
async fn missing_and_wrong_macs_are_unauthenticated() {
    let s = start_server().await;
    let (kind, _) =
        answered_kind(deliver(&client(MeshAuth::Insecure), &s, call("echo", "x")).await);
    assert_eq!(kind, ErrorKind::Unauthenticated);
    let wrong = MeshAuth::from_config(Some("another secret"), false).unwrap();
    let (kind, msg) = answered_kind(deliver(&client(wrong), &s, call("echo", "x")).await);
    assert_eq!(kind, ErrorKind::Unauthenticated);
    assert!(msg.contains("wrong MAC"), "{msg}");
    assert!(!msg.contains(SECRET));
    // Still serving.
    assert_eq!(
        deliver(&client(secret()), &s, call("echo", "ok"))
            .await
            .unwrap(),
        "ok"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_replayed_old_timestamp_is_refused() {
    let s = start_server().await;
    // A client whose requests are stamped two minutes ago: exactly what a captured and replayed
    // request looks like to the server.
    let old = ManualClock::new(system().wall() - Duration::from_secs(120));
    let c = client_with(CLIENT_ID, secret(), Arc::new(old), Arc::new(TcpConnector));
    let (kind, msg) = answered_kind(deliver(&c, &s, call("echo", "x")).await);
    assert_eq!(kind, ErrorKind::Unauthenticated);
    assert!(msg.contains("window"), "{msg}");
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_peer_is_refused_before_any_work() {
    let s = start_server().await;
    let c = client_with("stranger", secret(), system(), Arc::new(TcpConnector));
    match deliver(&c, &s, call("hang", "x")).await {
        Err(e @ MeshCallError::Answered(_)) => {
            assert!(e.never_ran());
            let e = e.into_actor_error();
            assert_eq!(e.kind, ErrorKind::Unreachable);
            assert!(e.retry_after.is_some());
        }
        other => panic!("{other:?}"),
    }
    s.stop().await;
}

#[tokio::test]
async fn garbage_bytes_and_oversize_frames_do_not_crash_the_server() {
    let s = start_server().await;
    // 1. Not HTTP/2 at all.
    let mut junk = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let bytes: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let _ = junk.write_all(&bytes).await;
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), junk.read_to_end(&mut sink)).await;
    assert!(
        read.is_ok(),
        "the server must close a connection that speaks garbage"
    );
    // 2. A valid preface, then a frame header announcing a 16 MiB DATA frame.
    let mut big = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    big.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    big.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await.unwrap(); // empty SETTINGS
    big.write_all(&[0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1])
        .await
        .unwrap();
    let _ = big.write_all(&vec![0u8; 64 * 1024]).await;
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), big.read_to_end(&mut sink)).await;
    assert!(
        read.is_ok(),
        "the server must close a connection with an oversize frame"
    );
    // The server answered with GOAWAY(FRAME_SIZE_ERROR) before closing.
    assert_eq!(goaway_code(&sink), Some(0x6), "reply frames: {sink:?}");
    // 3. A gRPC message over the limit: refused by the server's decoder, before the handler.
    let c = client(secret());
    let (kind, _) = answered_kind(deliver(&c, &s, call("echo", vec![7u8; MAX_MSG + 1])).await);
    assert_eq!(kind, ErrorKind::Invalid);
    // 4. An oversize header list.
    let huge_id = "h".repeat(64 * 1024);
    let c_big = client_with(&huge_id, secret(), system(), Arc::new(TcpConnector));
    assert!(deliver(&c_big, &s, call("echo", "x")).await.is_err());
    // Through all of it the server kept serving.
    assert_eq!(
        deliver(&c, &s, call("echo", "alive")).await.unwrap(),
        "alive"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_refused_dial_is_unreachable_and_never_ran() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let c = client(secret());
    let r = c
        .deliver(
            PeerAddr {
                id: "gone",
                advertise: &addr,
            },
            call("echo", "x"),
            Instant::now() + Duration::from_secs(2),
        )
        .await;
    match r {
        Err(e @ MeshCallError::Unreachable { .. }) => {
            assert!(e.never_ran());
            assert_eq!(e.into_actor_error().kind, ErrorKind::Unreachable);
        }
        other => panic!("{other:?}"),
    }
}

/// A call in flight when its connection (and so its call stream) dies may have run: it is
/// outcome-unknown, at once, not at its deadline. The next call dials again, opens a new
/// stream, and works.
#[tokio::test]
async fn a_connection_dying_in_flight_is_outcome_unknown() {
    let s = start_server().await;
    let net = Arc::new(Cuttable::default());
    let cut = net.cut.clone();
    let c = Arc::new(client_with("client", secret(), system(), net.clone()));
    let addr = s.addr.clone();
    let call_task = {
        let c = c.clone();
        tokio::spawn(async move {
            c.deliver(
                PeerAddr {
                    id: SERVER_ID,
                    advertise: &addr,
                },
                call("hang", "x"),
                Instant::now() + Duration::from_secs(10),
            )
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(5), s.handler.entered.notified())
        .await
        .expect("the call reached the handler");
    cut.notify_one();
    let r = tokio::time::timeout(Duration::from_secs(5), call_task)
        .await
        .expect("the call ends when its connection dies, not at its deadline")
        .unwrap();
    match r {
        Err(e @ MeshCallError::OutcomeUnknown { .. }) => {
            assert!(!e.never_ran());
            assert_eq!(e.into_actor_error().kind, ErrorKind::OutcomeUnknown);
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    assert_eq!(
        deliver(&c, &s, call("echo", "again")).await.unwrap(),
        "again"
    );
    assert_eq!(net.dials.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(c.call_streams_opened(), 2);
    s.stop().await;
}

#[tokio::test]
async fn the_deadline_bounds_a_call() {
    let s = start_server().await;
    let c = client(secret());
    let started = Instant::now();
    let r = c
        .deliver(
            s.peer(),
            call("hang", "x"),
            Instant::now() + Duration::from_millis(200),
        )
        .await;
    assert!(matches!(r, Err(MeshCallError::Timeout { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    s.stop().await;
}

/// Walks HTTP/2 frames and returns the error code of the first GOAWAY.
fn goaway_code(mut bytes: &[u8]) -> Option<u32> {
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        let kind = bytes[3];
        let payload = bytes.get(9..9 + len)?;
        if kind == 0x7 && payload.len() >= 8 {
            return Some(u32::from_be_bytes([
                payload[4], payload[5], payload[6], payload[7],
            ]));
        }
        bytes = &bytes[9 + len..];
    }
    None
}

/// A bare HTTP/2 server that refuses every stream with RST_STREAM(REFUSED_STREAM): what a
/// peer at its concurrency limit or in a drain does. RFC 9113 says such a stream was not
/// processed, so the call must come back as `unreachable` (retryable), not outcome-unknown.
#[tokio::test]
async fn a_refused_stream_is_unreachable_and_never_ran() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::handshake(socket).await.unwrap();
        while let Some(Ok((_req, mut respond))) = conn.accept().await {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
        }
    });
    let c = client(secret());
    let r = c
        .deliver(
            PeerAddr {
                id: "draining",
                advertise: &addr,
            },
            call("echo", "x"),
            Instant::now() + Duration::from_secs(5),
        )
        .await;
    match r {
        Err(e @ MeshCallError::Unreachable { .. }) => assert!(e.never_ran()),
        other => panic!("expected unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn silent_connections_are_closed_and_connections_are_capped() {
    let s = start_server_with(|c| {
        c.accept = AcceptLimits {
            max_connections: 2,
            first_byte_timeout: Duration::from_millis(300),
        };
    })
    .await;
    // A socket that never speaks is closed after the first-byte timeout.
    let mut silent = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let mut sink = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), silent.read_to_end(&mut sink)).await;
    assert!(closed.is_ok(), "a silent connection must be closed");

    // Two connections that keep the server busy fill the cap: a third waits in the backlog.
    let mut hogs = Vec::new();
    for _ in 0..2 {
        let mut h = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
        h.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        h.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await.unwrap();
        hogs.push(h);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c = client(secret());
    let blocked = c
        .deliver(
            s.peer(),
            call("echo", "x"),
            Instant::now() + Duration::from_millis(500),
        )
        .await;
    assert!(
        matches!(blocked, Err(MeshCallError::Timeout { .. })),
        "{blocked:?}"
    );
    // When they go, the waiting connection is accepted and served.
    drop(hogs);
    assert_eq!(deliver(&c, &s, call("echo", "in")).await.unwrap(), "in");
    s.stop().await;
}
