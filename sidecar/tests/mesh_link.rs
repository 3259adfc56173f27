//! What the mesh client knows about its link to a peer, and what it lets a failed call say.
//!
//! A call that started with no open connection and ended before any dial succeeded was never
//! written to a socket: it is `unreachable` (never ran), whether the dial failed, hung past the
//! call's deadline, or the peer left the view first. A dial failure ends every call queued
//! behind it at once, and calls in the backoff window after it fail without dialling. A peer
//! that leaves the view (`forget` / `retain_peers`) ends its calls at once: `outcome-unknown`
//! when they may have been sent, `unreachable` when not.
//!
//! The time-driven tests run under tokio's paused clock over an in-memory network plugged into
//! the mesh's own `Connector` / `Listener` seams (the real tonic client and server on both
//! ends), so "within one connect timeout" is measured exactly, not guessed. The tests that need
//! a real kernel socket run on loopback TCP with real time and bounds far from their timeouts.

#[path = "support/mesh_server.rs"]
mod mesh_server;

use async_trait::async_trait;
use bytes::Bytes;
use mesh_server::{CLIENT_ID, MeshServer, call, tcp_listener};
use sigx_proto::v1::DeliverRequest;
use sigx_proto::{ActorError, ErrorKind};
use sigx_sidecar::clock::system;
use sigx_sidecar::mesh::{
    BoxedIo, Connector, DeliverHandler, Listener, MeshAuth, MeshCallError, MeshClient,
    MeshClientConfig, MeshServerConfig, PeerAddr, TcpConnector,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::DuplexStream;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SECRET: &str = "mesh-link-test-secret";
/// The advertised address of the in-memory peer (parsed by tonic, never dialled for real).
const MEM_ADDR: &str = "10.0.0.1:7000";

fn auth() -> MeshAuth {
    MeshAuth::from_config(Some(SECRET), false).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The peer: a real mesh server (auth layer, tonic, the Deliver dispatch) on any listener.

/// Echoes, or never answers (after saying it was entered).
struct Handler {
    entered: Arc<Notify>,
}

#[async_trait]
impl DeliverHandler for Handler {
    async fn deliver(
        &self,
        _peer: &str,
        req: DeliverRequest,
        _deadline: Instant,
    ) -> Result<Bytes, ActorError> {
        match req.method.as_str() {
            "echo" => Ok(req.payload),
            "hang" => {
                self.entered.notify_one();
                std::future::pending().await
            }
            other => Err(ActorError::invalid(format!("no method {other}"))),
        }
    }
}

type Server = MeshServer<Handler>;

/// Serves `listener`, known to its peers as `server` at `addr`; accepts calls from `client`.
async fn serve_on(listener: impl Listener, addr: String) -> Server {
    let handler = Handler {
        entered: Arc::new(Notify::new()),
    };
    MeshServer::start(listener, addr, auth(), handler, MeshServerConfig::default()).await
}

async fn serve_tcp() -> Server {
    let (listener, addr) = tcp_listener().await;
    serve_on(listener, addr).await
}

// ---------------------------------------------------------------------------------------------
// An in-memory network behind the mesh's own seams, whose dials can hang, fail or connect.

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// The dial connects to the in-memory server.
    Up,
    /// The dial never completes (a SYN into a black hole).
    Hang,
    /// The dial fails with "connection refused" after this long.
    Refuse(Duration),
    /// The dial connects to a peer that never reads nor answers (its machine froze).
    BlackHole,
}

struct MemNet {
    mode: Mutex<Mode>,
    dials: AtomicUsize,
    accept: mpsc::UnboundedSender<DuplexStream>,
    frozen: Mutex<Vec<DuplexStream>>,
}

impl MemNet {
    /// The network and the listener its `Up` dials reach.
    fn new(mode: Mode) -> (Arc<MemNet>, MemListener) {
        let (accept, rx) = mpsc::unbounded_channel();
        let net = Arc::new(MemNet {
            mode: Mutex::new(mode),
            dials: AtomicUsize::new(0),
            accept,
            frozen: Mutex::new(Vec::new()),
        });
        (net, MemListener(rx))
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Dials attempted so far.
    fn dials(&self) -> usize {
        self.dials.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Connector for MemNet {
    async fn connect(&self, _addr: &str) -> std::io::Result<BoxedIo> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Up => {
                let (mine, theirs) = tokio::io::duplex(256 * 1024);
                self.accept
                    .send(theirs)
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::ConnectionRefused))?;
                Ok(Box::new(mine))
            }
            Mode::Hang => std::future::pending().await,
            Mode::BlackHole => {
                let (mine, theirs) = tokio::io::duplex(256 * 1024);
                self.frozen.lock().unwrap().push(theirs);
                Ok(Box::new(mine))
            }
            Mode::Refuse(after) => {
                tokio::time::sleep(after).await;
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "connection refused (in-memory network)",
                ))
            }
        }
    }
}

struct MemListener(mpsc::UnboundedReceiver<DuplexStream>);

#[async_trait]
impl Listener for MemListener {
    async fn accept(&mut self) -> std::io::Result<(BoxedIo, Option<SocketAddr>)> {
        match self.0.recv().await {
            Some(io) => Ok((Box::new(io), None)),
            None => std::future::pending().await,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client side.

fn client(connector: Arc<dyn Connector>, config: MeshClientConfig) -> Arc<MeshClient> {
    Arc::new(MeshClient::new(
        CLIENT_ID,
        auth(),
        system(),
        connector,
        config,
    ))
}

fn config(connect_timeout: Duration) -> MeshClientConfig {
    MeshClientConfig {
        connect_timeout,
        ..Default::default()
    }
}

/// Starts a call to `id` at `addr` on its own task; the answer comes with the instant it came.
fn spawn_call(
    c: &Arc<MeshClient>,
    id: &str,
    addr: &str,
    method: &str,
    deadline: Instant,
) -> JoinHandle<(Result<Bytes, MeshCallError>, Instant)> {
    let (c, id, addr, req) = (
        c.clone(),
        id.to_owned(),
        addr.to_owned(),
        call(method, &b"payload"[..]),
    );
    tokio::spawn(async move {
        let r = c
            .deliver(
                PeerAddr {
                    id: &id,
                    advertise: &addr,
                },
                req,
                deadline,
            )
            .await;
        (r, Instant::now())
    })
}

async fn deliver(
    c: &MeshClient,
    id: &str,
    addr: &str,
    method: &str,
    deadline: Instant,
) -> Result<Bytes, MeshCallError> {
    c.deliver(
        PeerAddr {
            id,
            advertise: addr,
        },
        call(method, &b"payload"[..]),
        deadline,
    )
    .await
}

/// Asserts `r` is `unreachable` (never ran) and returns its reason.
#[track_caller]
fn unreachable_reason(r: &Result<Bytes, MeshCallError>) -> String {
    match r {
        Err(e @ MeshCallError::Unreachable { reason, .. }) => {
            assert!(e.never_ran());
            assert_eq!(e.clone().into_actor_error().kind, ErrorKind::Unreachable);
            reason.clone()
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
}

/// Lets every task run until all of them wait (paused clock: without moving it).
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

// ---------------------------------------------------------------------------------------------
// (b) A failed dial ends every call queued behind it, and the backoff after it.

/// Five calls with a 30 s deadline queue behind one dial that never completes. When the 1 s
/// connect timeout ends that dial, all five end with it as `unreachable`: one connect timeout
/// for all of them, not one each, and one dial, not five. The next call, in the backoff window,
/// fails at once without dialling.
#[tokio::test(start_paused = true)]
async fn calls_queued_behind_a_hanging_dial_all_end_unreachable_after_one_connect_timeout() {
    let (net, _listener) = MemNet::new(Mode::Hang);
    let c = client(net.clone(), config(Duration::from_secs(1)));
    let deadline = Instant::now() + Duration::from_secs(30);
    five_calls_end_together_after_one_connect_timeout(&c, deadline).await;
    assert_eq!(net.dials(), 1, "the queued calls shared one dial");
    let t = Instant::now();
    let r = deliver(&c, "peer", MEM_ADDR, "echo", deadline).await;
    assert!(unreachable_reason(&r).contains("not dialled again"));
    assert_eq!(t.elapsed(), Duration::ZERO);
    settle().await;
    assert_eq!(net.dials(), 1, "nothing dialled in the backoff window");
}

/// The same with the backoff switched off: the queued calls still end together, because the
/// failed dial itself ends every call that was waiting for it (not the backoff that follows).
#[tokio::test(start_paused = true)]
async fn without_a_backoff_queued_calls_still_end_with_the_dial_they_waited_for() {
    let (net, _listener) = MemNet::new(Mode::Hang);
    let c = client(
        net.clone(),
        MeshClientConfig {
            dial_backoff_min: Duration::ZERO,
            dial_backoff_max: Duration::ZERO,
            ..config(Duration::from_secs(1))
        },
    );
    five_calls_end_together_after_one_connect_timeout(&c, Instant::now() + Duration::from_secs(30))
        .await;
}

async fn five_calls_end_together_after_one_connect_timeout(c: &Arc<MeshClient>, deadline: Instant) {
    let started = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| spawn_call(c, "peer", MEM_ADDR, "echo", deadline))
        .collect();
    for call in calls {
        let (r, at) = call.await.unwrap();
        unreachable_reason(&r);
        assert_eq!(
            at - started,
            Duration::from_secs(1),
            "every queued call ends when the one dial times out"
        );
    }
}

/// After a refused dial, calls in the backoff window fail at once without dialling; after the
/// window a dial is tried again, and once the peer is back it serves the call.
#[tokio::test(start_paused = true)]
async fn a_failed_dial_fails_calls_fast_for_the_backoff_then_the_recovered_peer_serves() {
    let refuse_after = Duration::from_millis(50);
    let (net, listener) = MemNet::new(Mode::Refuse(refuse_after));
    let server = serve_on(listener, MEM_ADDR.to_owned()).await;
    let backoff = Duration::from_millis(500);
    let c = client(
        net.clone(),
        MeshClientConfig {
            dial_backoff_min: backoff,
            dial_backoff_max: Duration::from_secs(4),
            ..config(Duration::from_secs(1))
        },
    );
    let deadline = || Instant::now() + Duration::from_secs(30);

    // The dial is refused: the call is unreachable as soon as the refusal comes.
    let t0 = Instant::now();
    let r = deliver(&c, "server", MEM_ADDR, "echo", deadline()).await;
    unreachable_reason(&r);
    assert_eq!(t0.elapsed(), refuse_after);
    assert_eq!(net.dials(), 1);
    let failed_at = Instant::now();

    // The peer is back, but within the backoff window nothing is dialled: calls fail at once.
    net.set(Mode::Up);
    for at in [
        Duration::ZERO,
        backoff / 2,
        backoff - Duration::from_millis(1),
    ] {
        tokio::time::sleep_until(failed_at + at).await;
        let t = Instant::now();
        let r = deliver(&c, "server", MEM_ADDR, "echo", deadline()).await;
        let reason = unreachable_reason(&r);
        assert_eq!(t.elapsed(), Duration::ZERO, "failed fast");
        assert!(reason.contains("not dialled again"), "{reason}");
        assert_eq!(net.dials(), 1, "no dial within the backoff window");
    }

    // After the window the next call dials again and the recovered peer serves it.
    tokio::time::sleep_until(failed_at + backoff).await;
    let r = deliver(&c, "server", MEM_ADDR, "echo", deadline()).await;
    assert_eq!(r.unwrap(), "payload");
    assert_eq!(net.dials(), 2);
    // The connection is pooled: more calls, no more dials.
    let r = deliver(&c, "server", MEM_ADDR, "echo", deadline()).await;
    assert_eq!(r.unwrap(), "payload");
    assert_eq!(net.dials(), 2);
    server.stop().await;
}

/// The pause after a failed dial doubles per consecutive failure up to its cap.
#[tokio::test(start_paused = true)]
async fn the_dial_backoff_doubles_per_consecutive_failure_up_to_its_cap() {
    let refuse_after = Duration::from_millis(10);
    let (net, _listener) = MemNet::new(Mode::Refuse(refuse_after));
    let (min, max) = (Duration::from_millis(100), Duration::from_millis(400));
    let c = client(
        net.clone(),
        MeshClientConfig {
            dial_backoff_min: min,
            dial_backoff_max: max,
            ..config(Duration::from_secs(1))
        },
    );
    let deadline = || Instant::now() + Duration::from_secs(30);
    let ms = Duration::from_millis;
    // 100, 200, 400, then capped at 400.
    for (n, pause) in [min, ms(200), max, max, max].into_iter().enumerate() {
        let r = deliver(&c, "peer", MEM_ADDR, "echo", deadline()).await;
        unreachable_reason(&r);
        assert_eq!(net.dials(), n + 1);
        let failed_at = Instant::now();
        // Just before the pause ends: still failing fast, no dial.
        tokio::time::sleep_until(failed_at + pause - ms(1)).await;
        let r = deliver(&c, "peer", MEM_ADDR, "echo", deadline()).await;
        assert!(
            unreachable_reason(&r).contains("not dialled again"),
            "failure {}: the pause is at least {pause:?}",
            n + 1
        );
        assert_eq!(net.dials(), n + 1, "failure {}: dialled too early", n + 1);
        // When it ends: the next call dials (and fails again).
        tokio::time::sleep_until(failed_at + pause).await;
    }
    let r = deliver(&c, "peer", MEM_ADDR, "echo", deadline()).await;
    assert!(!unreachable_reason(&r).contains("not dialled again"));
    assert_eq!(net.dials(), 6, "the pause is at most {max:?}");
}

// ---------------------------------------------------------------------------------------------
// (a) A call that ended before any dial succeeded never ran.

/// The call's deadline (1 s) passes while its dial (10 s connect timeout) hangs: nothing was
/// sent, so the call is `unreachable`, not `timeout`.
#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_passes_while_the_dial_hangs_is_unreachable() {
    let (net, _listener) = MemNet::new(Mode::Hang);
    let c = client(net.clone(), config(Duration::from_secs(10)));
    let t0 = Instant::now();
    let r = deliver(&c, "peer", MEM_ADDR, "echo", t0 + Duration::from_secs(1)).await;
    let reason = unreachable_reason(&r);
    assert!(reason.contains("within the call's deadline"), "{reason}");
    assert_eq!(t0.elapsed(), Duration::from_secs(1), "ends at its deadline");
    assert_eq!(net.dials(), 1);
}

/// The other side of the same line: a call sent on an open connection whose deadline passes
/// may have run, so it is `timeout` — never claimed unreachable. Also when it was the call
/// that made the connection.
#[tokio::test(start_paused = true)]
async fn a_call_sent_on_a_connection_that_times_out_is_timeout_not_unreachable() {
    let (net, listener) = MemNet::new(Mode::Up);
    let server = serve_on(listener, MEM_ADDR.to_owned()).await;
    let c = client(net.clone(), config(Duration::from_secs(1)));
    // First call: it dials, is sent, and the handler never answers.
    let t0 = Instant::now();
    let r = deliver(&c, "server", MEM_ADDR, "hang", t0 + Duration::from_secs(2)).await;
    match &r {
        Err(e @ MeshCallError::Timeout { .. }) => assert!(!e.never_ran()),
        other => panic!("expected timeout, got {other:?}"),
    }
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    // Second call, on the pooled open connection.
    let r = deliver(&c, "server", MEM_ADDR, "hang", Instant::now() + ms(500)).await;
    assert!(matches!(r, Err(MeshCallError::Timeout { .. })), "{r:?}");
    assert_eq!(net.dials(), 1);
    server.stop().await;
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A call written on the connection it dialled, to a peer that then never answers, may have
/// run: when its deadline passes it is `timeout`, not `unreachable`. (tonic's own grpc-timeout
/// ends it at the deadline; the client must classify that as `timeout`.)
#[tokio::test(start_paused = true)]
async fn a_call_written_to_a_peer_that_never_answers_is_timeout_not_unreachable() {
    let (net, _listener) = MemNet::new(Mode::BlackHole);
    let c = client(net.clone(), config(Duration::from_secs(1)));
    for _ in 0..2 {
        let t0 = Instant::now();
        let r = deliver(&c, "peer", MEM_ADDR, "echo", t0 + Duration::from_secs(2)).await;
        match &r {
            Err(e @ MeshCallError::Timeout { .. }) => assert!(!e.never_ran()),
            other => panic!("expected timeout, got {other:?}"),
        }
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
    }
    assert_eq!(
        net.dials(),
        1,
        "the second call went on the open connection"
    );
}

/// After the pooled connection closed (the peer stopped its server), the link no longer counts
/// it open: a call whose deadline passes while the next dial hangs cannot have been sent on
/// the closed connection, so it is `unreachable`.
#[tokio::test(start_paused = true)]
async fn a_closed_connection_no_longer_counts_as_open() {
    let (net, listener) = MemNet::new(Mode::Up);
    let server = serve_on(listener, MEM_ADDR.to_owned()).await;
    let c = client(net.clone(), config(Duration::from_secs(10)));
    let r = deliver(&c, "server", MEM_ADDR, "echo", Instant::now() + ms(500)).await;
    assert_eq!(r.unwrap(), "payload");
    server.stop().await;
    net.set(Mode::Hang);
    tokio::time::sleep(ms(10)).await;
    let t0 = Instant::now();
    let r = deliver(&c, "server", MEM_ADDR, "echo", t0 + Duration::from_secs(1)).await;
    let reason = unreachable_reason(&r);
    assert!(reason.contains("within the call's deadline"), "{reason}");
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert_eq!(net.dials(), 2, "the call waited for a new dial");
}

// ---------------------------------------------------------------------------------------------
// (c) A peer that leaves the view ends its calls at once.

/// A call the peer's handler is running when the peer leaves the view ends at once as
/// `outcome-unknown` (it may have run), not at its deadline. A later call re-dials and is
/// served: forgetting a peer does not poison its id.
#[tokio::test]
async fn forget_ends_a_call_in_flight_as_outcome_unknown() {
    let s = serve_tcp().await;
    let c = client(Arc::new(TcpConnector), config(Duration::from_secs(1)));
    let in_flight = spawn_call(
        &c,
        "server",
        &s.addr,
        "hang",
        Instant::now() + Duration::from_secs(20),
    );
    tokio::time::timeout(Duration::from_secs(5), s.handler.entered.notified())
        .await
        .expect("the call reached the handler");
    let forgot_at = Instant::now();
    c.forget("server");
    let (r, at) = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("the call ends well before its 20 s deadline")
        .unwrap();
    match &r {
        Err(e @ MeshCallError::OutcomeUnknown { reason, .. }) => {
            assert!(!e.never_ran());
            assert!(reason.contains("left"), "{reason}");
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    assert!(
        at - forgot_at < Duration::from_secs(1),
        "{:?}",
        at - forgot_at
    );
    let r = c
        .deliver(
            s.peer(),
            call("echo", &b"payload"[..]),
            Instant::now() + Duration::from_secs(5),
        )
        .await;
    assert_eq!(r.unwrap(), "payload");
    s.stop().await;
}

/// A call still waiting for its dial when the peer leaves the view was never sent: it ends at
/// once as `unreachable`, not at the connect timeout or its deadline.
#[tokio::test(start_paused = true)]
async fn forget_ends_a_call_waiting_for_its_dial_as_unreachable() {
    let (net, _listener) = MemNet::new(Mode::Hang);
    let c = client(net.clone(), config(Duration::from_secs(10)));
    let pending = spawn_call(
        &c,
        "peer",
        MEM_ADDR,
        "echo",
        Instant::now() + Duration::from_secs(30),
    );
    tokio::time::sleep(ms(100)).await;
    assert_eq!(net.dials(), 1, "the call is waiting for its dial");
    assert!(!pending.is_finished());
    let forgot_at = Instant::now();
    c.forget("peer");
    let (r, at) = pending.await.unwrap();
    let reason = unreachable_reason(&r);
    assert!(reason.contains("left"), "{reason}");
    assert_eq!(at, forgot_at, "ended at once");
}

/// `retain_peers` (the view's departures) ends calls only to the peers it drops; a call to a
/// kept peer runs its course.
#[tokio::test(start_paused = true)]
async fn retain_peers_ends_calls_only_to_the_peers_it_drops() {
    let (net, _listener) = MemNet::new(Mode::Hang);
    let c = client(net.clone(), config(Duration::from_secs(2)));
    let deadline = Instant::now() + Duration::from_secs(30);
    let to_gone = spawn_call(&c, "gone", MEM_ADDR, "echo", deadline);
    let to_kept = spawn_call(&c, "kept", "10.0.0.2:7000", "echo", deadline);
    tokio::time::sleep(ms(100)).await;
    assert_eq!(net.dials(), 2);
    let at_retain = Instant::now();
    c.retain_peers(|id| id == "kept");
    let (r, at) = to_gone.await.unwrap();
    assert!(unreachable_reason(&r).contains("left"));
    assert_eq!(at, at_retain);
    settle().await;
    assert!(!to_kept.is_finished(), "the kept peer's call was not ended");
    let (r, at) = to_kept.await.unwrap();
    assert!(unreachable_reason(&r).contains("timed out"));
    assert_eq!(
        at - at_retain,
        ms(1900),
        "it ended at its own connect timeout"
    );
}

// ---------------------------------------------------------------------------------------------
// (d) hyper's proof that a request was never handed to a connection.

/// A socket whose peer has already shut it: reads end at once, writes vanish. This is what a
/// peer that accepts and immediately closes looks like to the client.
#[derive(Default)]
struct ClosedAtOnce {
    dials: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Connector for ClosedAtOnce {
    async fn connect(&self, _addr: &str) -> std::io::Result<BoxedIo> {
        self.dials.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Box::new(tokio::io::join(
            tokio::io::empty(),
            tokio::io::sink(),
        )))
    }
}

/// The dial succeeds but the connection ends before the request is handed to it (the client
/// sees it closed, or hyper cancels the request: "operation was canceled"). It was never
/// written, so the call is `unreachable` (safe to send elsewhere), not `timeout`, and it ends
/// at once, not at its deadline, after one dial (not one dial after another until then).
#[tokio::test(start_paused = true)]
async fn a_request_hyper_cancelled_before_it_was_written_is_unreachable() {
    let net = Arc::new(ClosedAtOnce::default());
    let c = client(net.clone(), config(Duration::from_secs(1)));
    for _ in 0..3 {
        let t0 = Instant::now();
        let r = deliver(&c, "peer", MEM_ADDR, "echo", t0 + Duration::from_secs(5)).await;
        let reason = unreachable_reason(&r);
        assert!(reason.contains("never sent"), "{reason}");
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }
    assert_eq!(
        net.dials.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "one dial per call"
    );
}
