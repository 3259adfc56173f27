//! The client's connection to its sidecar (`SidecarChannel`), against a real tonic server on a
//! real Unix socket: calls go through it, it is dialed once however many calls wait for it, it
//! is dialed again after the sidecar went away and came back, and each way a call can fail reads
//! as the right error kind.
//!
//! The stand-in sidecar runs on a runtime and thread of its own, so stopping it is what a crash
//! is to the client: every socket of the process closes at once, mid-call or not.

use futures::StreamExt;
use sigx_sdk::proto::actor_host_server::{ActorHost, ActorHostServer};
use sigx_sdk::proto::{self as v1};
use sigx_sdk::{Client, ErrorKind, MemberFilter};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// Bounds every test: a hang fails the test instead of stalling the run.
const TEST_BOUND: Duration = Duration::from_secs(20);

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigx-sdk-ch-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A minimal app API: `call` echoes the payload prefixed with the server's name, except method
/// `hang`, which reports that it arrived and never answers.
struct Echo {
    name: &'static str,
    arrived: mpsc::UnboundedSender<()>,
}

type BoxStream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ActorHost for Echo {
    type ServeStream = BoxStream<v1::SidecarMessage>;
    type WatchMembersStream = BoxStream<v1::MembersResponse>;

    async fn serve(
        &self,
        _: Request<tonic::Streaming<v1::AppMessage>>,
    ) -> Result<Response<Self::ServeStream>, Status> {
        Err(Status::unimplemented("not served by this test sidecar"))
    }

    async fn call(
        &self,
        request: Request<v1::CallRequest>,
    ) -> Result<Response<v1::CallResponse>, Status> {
        let request = request.into_inner();
        if request.method == "hang" {
            let _ = self.arrived.send(());
            std::future::pending::<()>().await;
        }
        let mut payload = format!("{}:", self.name).into_bytes();
        payload.extend_from_slice(&request.payload);
        Ok(Response::new(v1::CallResponse {
            payload: payload.into(),
        }))
    }

    async fn members(
        &self,
        _: Request<v1::MembersRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        Ok(Response::new(v1::MembersResponse {
            version: 7,
            hosts: vec![],
        }))
    }

    async fn dispatch_on(
        &self,
        _: Request<v1::DispatchOnRequest>,
    ) -> Result<Response<v1::CallResponse>, Status> {
        Err(Status::unimplemented("not served by this test sidecar"))
    }

    async fn watch_members(
        &self,
        _: Request<v1::MembersRequest>,
    ) -> Result<Response<Self::WatchMembersStream>, Status> {
        let views = (1..=3).map(|version| {
            Ok(v1::MembersResponse {
                version,
                hosts: vec![],
            })
        });
        Ok(Response::new(Box::pin(futures::stream::iter(views))))
    }

    async fn status(
        &self,
        _: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        Ok(Response::new(v1::StatusResponse {
            state: format!("ready ({})", self.name),
            ..Default::default()
        }))
    }

    async fn read_state(
        &self,
        _: Request<v1::ReadStateRequest>,
    ) -> Result<Response<v1::ReadStateResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn set_timer(
        &self,
        _: Request<v1::SetTimerRequest>,
    ) -> Result<Response<v1::SetTimerResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn cancel_timer(
        &self,
        _: Request<v1::CancelTimerRequest>,
    ) -> Result<Response<v1::CancelTimerResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn set_reminder(
        &self,
        _: Request<v1::SetReminderRequest>,
    ) -> Result<Response<v1::SetReminderResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn delete_reminder(
        &self,
        _: Request<v1::DeleteReminderRequest>,
    ) -> Result<Response<v1::DeleteReminderResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn list_reminders(
        &self,
        _: Request<v1::ListRemindersRequest>,
    ) -> Result<Response<v1::ListRemindersResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn locate(
        &self,
        _: Request<v1::LocateRequest>,
    ) -> Result<Response<v1::LocateResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }

    async fn list_actors(
        &self,
        _: Request<v1::ListActorsRequest>,
    ) -> Result<Response<v1::ListActorsResponse>, Status> {
        Err(Status::unimplemented("not a sidecar"))
    }
}

/// A stand-in sidecar serving [`Echo`] on `socket`, counting the connections it accepts.
struct Sidecar {
    runtime: Option<tokio::runtime::Runtime>,
    accepts: Arc<AtomicUsize>,
    arrived: mpsc::UnboundedReceiver<()>,
}

impl Sidecar {
    fn start(socket: &Path, name: &'static str) -> Sidecar {
        let _ = std::fs::remove_file(socket);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = {
            let _guard = runtime.enter();
            tokio::net::UnixListener::bind(socket).unwrap()
        };
        let accepts = Arc::new(AtomicUsize::new(0));
        let counted = accepts.clone();
        let incoming =
            tokio_stream::wrappers::UnixListenerStream::new(listener).inspect(move |r| {
                if r.is_ok() {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            });
        let (tx, arrived) = mpsc::unbounded_channel();
        let service = ActorHostServer::new(Echo { name, arrived: tx });
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming),
        );
        Sidecar {
            runtime: Some(runtime),
            accepts,
            arrived,
        }
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until the server has accepted `n` connections.
    async fn await_accepts(&self, n: usize) {
        for _ in 0..200 {
            if self.accepts() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "the sidecar accepted {} connections, expected {n}",
            self.accepts()
        );
    }

    /// Stops the process-like runtime and waits until every one of its sockets is closed: the
    /// listener (its file stays behind, as a crashed sidecar leaves it) and every connection.
    fn crash(mut self) {
        let runtime = self.runtime.take().unwrap();
        // Dropping a runtime blocks until its tasks are gone; not allowed on an async thread.
        std::thread::spawn(move || drop(runtime)).join().unwrap();
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Lets the client's connection task read the end of a connection whose peer just closed.
async fn let_the_close_arrive() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn calls_members_watch_and_raw_go_through_one_connection() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("calls");
        let socket = dir.join("s.sock");
        let sidecar = Sidecar::start(&socket, "one");
        let client = Client::lazy(&socket);
        assert_eq!(sidecar.accepts(), 0, "a lazy client dials nothing up front");

        let reply = client.call("Counter", "a", "get", "hello").await.unwrap();
        assert_eq!(&reply[..], b"one:hello");
        let members = client.members(&MemberFilter::active()).await.unwrap();
        assert_eq!(members.version, 7);
        let views: Vec<u64> = client
            .watch_members(&MemberFilter::active())
            .await
            .unwrap()
            .map(|m| m.unwrap().version)
            .collect()
            .await;
        assert_eq!(views, [1, 2, 3]);
        let status = client
            .raw()
            .status(v1::StatusRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(status.state, "ready (one)");
        // Clones share the connection too.
        let clone = client.with_timeout(Duration::from_secs(3));
        assert_eq!(
            &clone.call("Counter", "b", "get", "x").await.unwrap()[..],
            b"one:x"
        );

        assert_eq!(sidecar.accepts(), 1, "every call shares one connection");
        drop(sidecar);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn concurrent_first_calls_share_one_dial() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("one-dial");
        let socket = dir.join("s.sock");
        let sidecar = Sidecar::start(&socket, "one");
        let client = Client::lazy(&socket);
        let calls = (0..64).map(|i| {
            let client = client.clone();
            async move {
                client
                    .call("Counter", format!("k{i}"), "get", format!("{i}"))
                    .await
            }
        });
        let replies = futures::future::join_all(calls).await;
        for (i, reply) in replies.into_iter().enumerate() {
            assert_eq!(reply.unwrap(), format!("one:{i}").into_bytes());
        }
        assert_eq!(
            sidecar.accepts(),
            1,
            "64 calls waiting for a connection made one dial"
        );
        client.call("Counter", "a", "get", "").await.unwrap();
        assert_eq!(sidecar.accepts(), 1);
        drop(sidecar);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn the_connection_is_dialed_again_after_the_sidecar_comes_back() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("redial");
        let socket = dir.join("s.sock");
        let first = Sidecar::start(&socket, "first");
        let client = Client::lazy(&socket);
        assert_eq!(
            &client.call("Counter", "a", "get", "1").await.unwrap()[..],
            b"first:1"
        );

        first.crash();
        let_the_close_arrive().await;
        // Down: the socket file is left behind and nobody listens. Each call dials, fails, and
        // says the call did not run, naming the socket.
        for _ in 0..2 {
            let e = client.call("Counter", "a", "get", "2").await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::Unreachable, "the call never left: {e}");
            assert!(e.message.contains(socket.to_str().unwrap()), "{e}");
        }
        let e = client.members(&MemberFilter::active()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
        // The raw client sees what a gRPC client expects of a server that is not there.
        let status = client.raw().status(v1::StatusRequest {}).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains(socket.to_str().unwrap()),
            "{status:?}"
        );

        // Back: the same client dials the new sidecar by itself.
        let second = Sidecar::start(&socket, "second");
        assert_eq!(
            &client.call("Counter", "a", "get", "3").await.unwrap()[..],
            b"second:3"
        );
        assert_eq!(
            &client.call("Counter", "a", "get", "4").await.unwrap()[..],
            b"second:4"
        );
        assert_eq!(second.accepts(), 1, "one new connection, kept");
        drop(second);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn a_call_in_flight_when_the_sidecar_dies_is_outcome_unknown() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("in-flight");
        let socket = dir.join("s.sock");
        let mut sidecar = Sidecar::start(&socket, "one");
        let client = Client::lazy(&socket);
        let call = tokio::spawn({
            let client = client.clone();
            async move { client.call("Counter", "a", "hang", "").await }
        });
        // The sidecar has the call: it may have run (here it has begun to).
        sidecar.arrived.recv().await.unwrap();
        sidecar.crash();
        let e = call.await.unwrap().unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::OutcomeUnknown,
            "a call the sidecar received must not read as not run (or as a timeout): {e}"
        );
        assert!(e.message.contains(socket.to_str().unwrap()), "{e}");
        assert!(e.message.contains("in flight"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn connect_dials_now_and_names_the_socket_when_nobody_listens() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("connect");
        let socket = dir.join("s.sock");

        // A socket file nobody listens on (what a crashed sidecar leaves behind).
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let e = Client::connect(&socket).await.unwrap_err();
        assert_eq!(e.path, socket);
        assert_eq!(
            e.source.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{e}"
        );
        let message = e.to_string();
        assert!(message.contains(socket.to_str().unwrap()), "{message}");
        assert!(message.contains("is the sidecar running"), "{message}");

        // No file at all.
        let missing = dir.join("missing.sock");
        let e = Client::connect(&missing).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound, "{e}");
        assert!(e.to_string().contains(missing.to_str().unwrap()), "{e}");

        // Listening: the connection is made by `connect` itself, and calls use it.
        let sidecar = Sidecar::start(&socket, "one");
        let client = Client::connect(&socket).await.unwrap();
        sidecar.await_accepts(1).await;
        assert_eq!(
            &client.call("Counter", "a", "get", "x").await.unwrap()[..],
            b"one:x"
        );
        assert_eq!(
            sidecar.accepts(),
            1,
            "the call used the connection `connect` made"
        );
        drop(sidecar);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn a_call_a_frozen_sidecar_never_answers_ends_at_its_deadline() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("deadline");
        let socket = dir.join("s.sock");
        // Frozen: the kernel completes the connection into the backlog, nobody ever reads it.
        // (A live tonic server would enforce the deadline itself and hide a client that does
        // not.)
        let _frozen = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let client = Client::lazy(&socket);
        let mut request = Request::new(v1::CallRequest::default());
        request.set_timeout(Duration::from_millis(200));
        let outcome =
            tokio::time::timeout(Duration::from_secs(5), client.raw().call(request)).await;
        let status = outcome
            .expect("the request's own deadline ended the call")
            .unwrap_err();
        // What tonic's `Channel` answered too; the SDK reads it as `timeout`.
        assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

/// A client kept across runtimes (a static one, or one made in a test's setup) finds the
/// connection its first runtime drove gone with that runtime, and dials again.
#[test]
fn a_client_outlives_the_runtime_that_dialed() {
    let dir = scratch("runtimes");
    let socket = dir.join("s.sock");
    let sidecar = Sidecar::start(&socket, "one");
    let client = Client::lazy(&socket);
    let call = |client: &Client| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(TEST_BOUND, client.call("Counter", "a", "get", "x"))
                .await
                .expect("bounded")
        })
    };
    assert_eq!(&call(&client).unwrap()[..], b"one:x");
    assert_eq!(&call(&client).unwrap()[..], b"one:x");
    assert_eq!(sidecar.accepts(), 2, "one connection per runtime");
    drop(sidecar);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bare HTTP/2 server on `socket` that hands every accepted connection to `answer`: what a
/// sidecar that refuses calls (draining, at its stream limit) looks like on the wire.
fn refusing_sidecar<F, Fut>(socket: &Path, answer: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(tokio::net::UnixStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream));
        }
    })
}

/// RST_STREAM(REFUSED_STREAM) proves the sidecar did not process the stream (RFC 9113 §8.7):
/// the call did not run, so it reads as `unreachable` (safe to retry), not `outcome-unknown`.
#[tokio::test]
async fn a_stream_the_sidecar_refused_is_unreachable() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("refused");
        let socket = dir.join("s.sock");
        let server = refusing_sidecar(&socket, |stream| async move {
            let Ok(mut conn) = h2::server::handshake(stream).await else {
                return;
            };
            while let Some(Ok((_request, mut respond))) = conn.accept().await {
                respond.send_reset(h2::Reason::REFUSED_STREAM);
            }
        });
        let client = Client::lazy(&socket);
        // Twice: the refusal leaves the connection up, and the next call is refused on it too.
        for _ in 0..2 {
            let e = client.call("Counter", "a", "get", "x").await.unwrap_err();
            assert_eq!(
                e.kind,
                ErrorKind::Unreachable,
                "a refused call never ran: {e}"
            );
            assert!(e.message.contains(socket.to_str().unwrap()), "{e}");
            assert!(
                e.message.contains("refused the call before running it"),
                "{e}"
            );
        }
        server.abort();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}

/// Reads the client's side of a new connection until its first HEADERS frame (a request) has
/// arrived, and returns every byte read: the preface and the frames up to that one's header.
async fn read_through_first_headers(stream: &mut tokio::net::UnixStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    const PREFACE_LEN: usize = 24;
    const FRAME_HEADER_LEN: usize = 9;
    const HEADERS: u8 = 0x1;
    let mut read = Vec::new();
    let mut frame = PREFACE_LEN;
    loop {
        // A frame header: a 24-bit payload length, the type, flags and the stream id.
        while read.len() >= frame + FRAME_HEADER_LEN {
            if read[frame + 3] == HEADERS {
                return read;
            }
            let len = u32::from_be_bytes([0, read[frame], read[frame + 1], read[frame + 2]]);
            frame += FRAME_HEADER_LEN + len as usize;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "the client closed the connection before sending a request"
        );
        read.extend_from_slice(&chunk[..n]);
    }
}

/// A GOAWAY whose last-stream-id (0) is below the call's stream, sent after the call's HEADERS
/// left the client: h2 fails exactly the streams the sidecar says it never processed, so the
/// call reads as `unreachable` too. (A GOAWAY that arrives before the request is written is
/// hyper's cancelled request, covered by the redial test.)
#[tokio::test]
async fn a_stream_past_the_sidecars_goaway_is_unreachable() {
    tokio::time::timeout(TEST_BOUND, async {
        let dir = scratch("goaway");
        let socket = dir.join("s.sock");
        let server = refusing_sidecar(&socket, |mut stream| async move {
            use tokio::io::AsyncReadExt;
            // The request is on the wire before the server says anything: the client has
            // certainly sent it when the GOAWAY arrives.
            let seen = read_through_first_headers(&mut stream).await;
            let (reader, writer) = stream.into_split();
            let mut io = tokio::io::join(std::io::Cursor::new(seen).chain(reader), writer);
            {
                let Ok(mut conn) = h2::server::handshake(&mut io).await else {
                    return;
                };
                // No frame after the preface has been read yet: the GOAWAY names last stream
                // 0, and h2 ignores the HEADERS above it.
                conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                // Drives the connection until it closes: it sends the GOAWAY, then shuts down.
                let accepted = conn.accept().await;
                assert!(
                    !matches!(accepted, Some(Ok(_))),
                    "no stream is accepted past GOAWAY(0)"
                );
            }
            // h2 shut down only the write half. Keep the socket open until the client closes
            // it, so the client reads the GOAWAY rather than a write failing on a closed socket.
            let _ = tokio::io::copy(&mut io, &mut tokio::io::sink()).await;
        });
        let client = Client::lazy(&socket);
        let e = client.call("Counter", "a", "get", "x").await.unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::Unreachable,
            "a call past GOAWAY never ran: {e}"
        );
        assert!(e.message.contains(socket.to_str().unwrap()), "{e}");
        assert!(
            e.message.contains("refused the call before running it"),
            "{e}"
        );
        server.abort();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await
    .expect("bounded");
}
