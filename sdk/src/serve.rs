//! Keeping the app registered with its sidecar: the `Serve` stream, turn delivery, reconnects.

use crate::app::{App, Dispatcher};
use crate::client::{Client, MAX_MESSAGE_BYTES};
use crate::connect;
use sigx_proto::ActorError;
use sigx_proto::v1::{self, actor_host_client::ActorHostClient};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

/// How long dialing the sidecar and getting `Registered` back may take before the app retries.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping app waits for the sidecar to drain it (finish in-flight turns, deactivate
/// every activation through this app, end the stream) before it closes the stream itself. The
/// sidecar's own drain timeout defaults to 20 s; deactivation turns come on top of it.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why serving stopped for good. Everything transient (no sidecar yet, the sidecar restarted,
/// the stream broke) is retried with backoff instead.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ServeError {
    /// The app's declaration is malformed, or the sidecar refused it as invalid. Retrying the
    /// same registration would be refused again, so the app must be fixed.
    #[error("the app's registration is invalid: {0}")]
    Invalid(String),
    /// The serving task panicked or was cancelled.
    #[error("the serving task ended abnormally: {0}")]
    Aborted(String),
}

/// Where the serving loop is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeState {
    /// Dialing the sidecar or registering; `attempt` counts failures since the last success.
    Connecting {
        /// Failed attempts since the last successful registration.
        attempt: u32,
    },
    /// Registered and receiving turns.
    Registered {
        /// The sidecar's host id.
        host_id: String,
        /// How many times the app has registered so far (1 for the first session, 2 after the
        /// first reconnect, ...).
        session: u64,
    },
    /// Stopped (shut down, or a fatal [`ServeError`]).
    Stopped,
}

/// Capped exponential backoff: 100 ms, doubling, at most 5 s; reset after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
    }
}

impl Backoff {
    /// Starts at `initial`, doubles per failure, never exceeds `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The delay before the next attempt; doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// Back to the initial delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// A serving app running in a background task (see [`App::spawn`]).
#[derive(Debug)]
pub struct ServeHandle {
    state: watch::Receiver<ServeState>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl ServeHandle {
    /// The current state.
    pub fn state(&self) -> ServeState {
        self.state.borrow().clone()
    }

    /// A receiver that sees every state change.
    pub fn watch(&self) -> watch::Receiver<ServeState> {
        self.state.clone()
    }

    /// Waits until the app is registered in session `session` or later (1 = the first), and
    /// returns the host id. Errors when serving stopped first.
    pub async fn registered(&self, session: u64) -> Result<String, ServeError> {
        let mut rx = self.state.clone();
        let state = rx
            .wait_for(|s| match s {
                ServeState::Registered { session: n, .. } => *n >= session,
                ServeState::Stopped => true,
                ServeState::Connecting { .. } => false,
            })
            .await
            .map_err(|_| ServeError::Aborted("the serving task is gone".into()))?
            .clone();
        match state {
            ServeState::Registered { host_id, .. } => Ok(host_id),
            _ => Err(ServeError::Aborted(
                "serving stopped before the app registered".into(),
            )),
        }
    }

    /// Asks the app to stop gracefully: the app sends `Drain`, the sidecar stops placing new
    /// activations here, lets in-flight turns finish and deactivates every activation through
    /// this app (so `on_deactivate` hooks run and state can be saved), then ends the stream
    /// (bounded by 30 s). Returns how serving ended. Dropping the handle stops serving too.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        let _ = self.shutdown.send(true);
        self.join().await
    }

    /// Waits for serving to end on its own (a fatal error).
    pub async fn join(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(ServeError::Aborted(e.to_string())),
        }
    }
}

impl App {
    /// Serves the app through the sidecar `client` talks to, until a fatal error. Reconnects
    /// with capped backoff whenever the sidecar is not there or goes away.
    pub async fn serve(self, client: &Client) -> Result<(), ServeError> {
        self.serve_until(client, std::future::pending()).await
    }

    /// Like [`App::serve`], stopping gracefully when `shutdown` completes.
    pub async fn serve_until(
        self,
        client: &Client,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let (state_tx, _) = watch::channel(ServeState::Connecting { attempt: 0 });
        let (stop_tx, stop_rx) = watch::channel(false);
        let run = run(self, client.clone(), stop_rx, state_tx);
        let mut run = std::pin::pin!(run);
        tokio::select! {
            r = &mut run => r,
            () = shutdown => {
                let _ = stop_tx.send(true);
                run.await
            }
        }
    }

    /// Serves the app in a background task and returns a handle to watch and stop it.
    pub fn spawn(self, client: &Client) -> ServeHandle {
        let (state_tx, state_rx) = watch::channel(ServeState::Connecting { attempt: 0 });
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(self, client.clone(), stop_rx, state_tx));
        ServeHandle {
            state: state_rx,
            shutdown: stop_tx,
            task,
        }
    }
}

/// How one session with the sidecar ended.
enum SessionEnd {
    /// Asked to stop.
    Shutdown,
    /// Lost or never got the stream; try again. `registered` = the session did register.
    Retry { registered: bool, why: String },
}

async fn run(
    app: App,
    client: Client,
    mut stop: watch::Receiver<bool>,
    state: watch::Sender<ServeState>,
) -> Result<(), ServeError> {
    if let Err(e) = app.validate() {
        state.send_replace(ServeState::Stopped);
        return Err(e);
    }
    let registration = app.registration();
    let dispatcher = Arc::new(app.into_dispatcher(client.clone()));
    let mut backoff = Backoff::default();
    let mut session = 0u64;
    let mut attempt = 0u32;
    let result = loop {
        let span = tracing::info_span!(
            "serve",
            app = %dispatcher.app_name(),
            socket = %client.socket().display()
        );
        let end = run_session(
            &client,
            &dispatcher,
            registration.clone(),
            &mut stop,
            &state,
            session + 1,
        )
        .instrument(span)
        .await;
        match end {
            Ok(SessionEnd::Shutdown) => break Ok(()),
            Err(fatal) => break Err(fatal),
            Ok(SessionEnd::Retry { registered, why }) => {
                if registered {
                    session += 1;
                    attempt = 0;
                    backoff.reset();
                }
                let dropped = dispatcher.drop_all();
                attempt += 1;
                let delay = backoff.next_delay();
                if registered || attempt == 1 {
                    tracing::warn!(%why, dropped, ?delay, "lost the sidecar; reconnecting");
                } else {
                    tracing::debug!(%why, attempt, ?delay, "sidecar not reachable yet");
                }
                state.send_replace(ServeState::Connecting { attempt });
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stopped(&mut stop) => break Ok(()),
                }
            }
        }
    };
    dispatcher.drop_all();
    state.send_replace(ServeState::Stopped);
    result
}

/// Waits (bounded) for turns still running when the session ends, so their results are sent.
async fn finish_turns(turns: &mut JoinSet<()>) {
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        while turns.join_next().await.is_some() {}
    })
    .await;
    if done.is_err() {
        tracing::warn!(
            left = turns.len(),
            "turns still running at shutdown; abandoning them"
        );
    }
}

/// Completes once a stop was asked for (or the handle that could ask is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; drop it before anything else awaits.
    let _ = stop.wait_for(|s| *s).await;
}

/// Whether a status from `Serve` means the registration itself is wrong (fatal) or the moment is
/// (retry). Another app holding the sidecar is the moment: it may be our own previous
/// incarnation whose connection the sidecar has not yet seen close.
fn classify(status: &tonic::Status) -> Result<String, ServeError> {
    let err = ActorError::from_status(status);
    if status.code() == tonic::Code::InvalidArgument {
        return Err(ServeError::Invalid(err.message));
    }
    Ok(format!("{err}"))
}

/// An open, registered session: the outgoing half, the incoming stream, the host id.
type Opened = (
    mpsc::Sender<v1::AppMessage>,
    tonic::Streaming<v1::SidecarMessage>,
    String,
);

/// Dials the sidecar on a connection of its own (so turns never queue behind the app's
/// outgoing calls), opens `Serve`, registers, and waits for `Registered`. The outer error is
/// fatal (the registration is invalid); the inner one says why to retry.
async fn open_session(
    client: &Client,
    registration: v1::Register,
) -> Result<Result<Opened, String>, ServeError> {
    let channel = match connect::eager_channel(client.socket()).await {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut grpc = ActorHostClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel::<v1::AppMessage>(1024);
    tx.send(v1::AppMessage {
        msg: Some(v1::app_message::Msg::Register(registration)),
    })
    .await
    .expect("the receiver is alive: it is ours");
    let mut inbound = match grpc.serve(ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(status) => return classify(&status).map(Err),
    };
    match inbound.message().await {
        Ok(Some(v1::SidecarMessage {
            msg: Some(v1::sidecar_message::Msg::Registered(r)),
        })) => {
            tracing::info!(host = %r.host_id, max_payload = r.max_payload_bytes, "registered");
            Ok(Ok((tx, inbound, r.host_id)))
        }
        Ok(Some(other)) => Ok(Err(format!(
            "the sidecar's first message was not `registered`: {other:?}"
        ))),
        Ok(None) => Ok(Err(
            "the sidecar closed the stream before registering".into()
        )),
        Err(status) => classify(&status).map(Err),
    }
}

async fn run_session(
    client: &Client,
    dispatcher: &Arc<Dispatcher>,
    registration: v1::Register,
    stop: &mut watch::Receiver<bool>,
    state: &watch::Sender<ServeState>,
    session: u64,
) -> Result<SessionEnd, ServeError> {
    let retry = |why: String| {
        Ok(SessionEnd::Retry {
            registered: false,
            why,
        })
    };
    // Dialing and registering are bounded, and a stop asked for meanwhile is heard at once: a
    // sidecar that accepts the stream but never answers must not hold the app forever.
    let opened = tokio::select! {
        r = tokio::time::timeout(REGISTER_TIMEOUT, open_session(client, registration)) => r,
        () = stopped(stop) => return Ok(SessionEnd::Shutdown),
    };
    let (tx, mut inbound, host_id) = match opened {
        Ok(Ok(Ok(opened))) => opened,
        Ok(Ok(Err(why))) => return retry(why),
        Ok(Err(fatal)) => return Err(fatal),
        Err(_) => {
            return retry(format!(
                "the sidecar did not acknowledge the registration within {REGISTER_TIMEOUT:?}"
            ));
        }
    };
    dispatcher.set_host_id(&host_id);
    state.send_replace(ServeState::Registered {
        host_id: host_id.clone(),
        session,
    });

    let mut turns = JoinSet::new();
    // Set once a stop was asked for and `Drain` sent: from then on the session ends when the
    // sidecar ends the stream (it has deactivated everything through us) or at the deadline.
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let why = loop {
        let draining = drain_deadline.is_some();
        let deadline = drain_deadline.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(v1::SidecarMessage { msg: Some(v1::sidecar_message::Msg::Turn(turn)) })) => {
                    let dispatcher = dispatcher.clone();
                    let tx = tx.clone();
                    let span = tracing::debug_span!(
                        "turn",
                        host = %host_id,
                        actor = %turn.actor.as_ref().map(|a| format!("{}/{}", a.actor_type, a.key)).unwrap_or_default(),
                        activation = %turn.activation_id,
                        turn_id = turn.turn_id,
                    );
                    turns.spawn(async move {
                        let result = dispatcher.handle(turn).await;
                        // A closed stream means the session is over; the sidecar has already
                        // answered the caller, so there is nobody to tell.
                        let _ = tx.send(v1::AppMessage {
                            msg: Some(v1::app_message::Msg::Result(result)),
                        }).await;
                    }.instrument(span));
                }
                Ok(Some(v1::SidecarMessage { msg: Some(v1::sidecar_message::Msg::Fenced(notice)) })) => {
                    let dropped = dispatcher.fence();
                    tracing::error!(reason = %notice.reason, dropped, running = turns.len(),
                        "the sidecar fenced: every activation is dropped and running turns are cancelled");
                }
                Ok(Some(other)) => tracing::warn!(?other, "ignoring an unexpected message from the sidecar"),
                Ok(None) if draining => {
                    tracing::info!("drained: the sidecar deactivated this app's actors and ended the stream");
                    finish_turns(&mut turns).await;
                    return Ok(SessionEnd::Shutdown);
                }
                Err(status) if draining => {
                    tracing::warn!(error = %ActorError::from_status(&status), "the serve stream failed while draining");
                    finish_turns(&mut turns).await;
                    return Ok(SessionEnd::Shutdown);
                }
                Ok(None) => break "the sidecar closed the serve stream".to_string(),
                Err(status) => break format!("the serve stream failed: {}", ActorError::from_status(&status)),
            },
            Some(_) = turns.join_next(), if !turns.is_empty() => {}
            () = stopped(stop), if !draining => {
                tracing::info!(in_flight = turns.len(), "stopping: asking the sidecar to drain this app");
                drain_deadline = Some(tokio::time::Instant::now() + DRAIN_TIMEOUT);
                let asked = tx.send(v1::AppMessage {
                    msg: Some(v1::app_message::Msg::Drain(v1::Drain {})),
                }).await;
                if asked.is_err() {
                    finish_turns(&mut turns).await;
                    return Ok(SessionEnd::Shutdown);
                }
            }
            () = tokio::time::sleep_until(deadline), if draining => {
                tracing::warn!(
                    after = ?DRAIN_TIMEOUT,
                    "the sidecar did not finish draining this app in time; closing the stream"
                );
                finish_turns(&mut turns).await;
                return Ok(SessionEnd::Shutdown);
            }
        }
    };
    // Turns still running belong to activations the sidecar has already dropped; let them run
    // to completion rather than cut them at an arbitrary await point.
    turns.detach_all();
    Ok(SessionEnd::Retry {
        registered: true,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let delays: Vec<u64> = (0..5).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, vec![100, 200, 400, 500, 500]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}
