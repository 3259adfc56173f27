//! One activation: a task that owns the actor's mailbox and runs its turns one at a time (or
//! concurrently, for a reentrant type), from its Activate turn to its Deactivate turn.

use super::registry::ActorType;
use super::session::{AppSession, TurnKind, TurnOutcome};
use super::{ActorId, InFlight, Runtime};
use bytes::Bytes;
use sigx_proto::{ActorError, ErrorKind, v1};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A queued call for an activation.
pub(crate) struct Envelope {
    pub(crate) method: String,
    pub(crate) payload: Bytes,
    pub(crate) deadline: Instant,
    pub(crate) reply: oneshot::Sender<TurnOutcome>,
}

/// The table entry of a live activation.
pub(crate) struct Activation {
    pub(crate) activation_id: Arc<str>,
    pub(crate) tx: mpsc::UnboundedSender<Envelope>,
    stop: Option<oneshot::Sender<oneshot::Sender<()>>>,
}

impl Activation {
    /// Spawns the activation's task. The caller inserts the entry into the table.
    pub(crate) fn spawn(
        rt: Runtime,
        app: Arc<AppSession>,
        actor: ActorId,
        activation_id: Arc<str>,
        ty: ActorType,
    ) -> Activation {
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let id = activation_id.clone();
        tokio::spawn(async move {
            let span = tracing::info_span!("activation", actor = %actor, activation = %id);
            let _ = tracing::Instrument::instrument(run(rt, app, actor, id, ty, rx, stop_rx), span)
                .await;
        });
        Activation {
            activation_id,
            tx,
            stop: Some(stop_tx),
        }
    }

    /// Asks the activation to deactivate (shutdown) and resolves once it has.
    pub(crate) fn stop(mut self) -> impl std::future::Future<Output = ()> + Send {
        let (done_tx, done_rx) = oneshot::channel();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(done_tx);
        }
        async move {
            let _ = done_rx.await;
        }
    }
}

fn fail_all(rx: &mut mpsc::UnboundedReceiver<Envelope>, err: &ActorError) {
    rx.close();
    while let Ok(env) = rx.try_recv() {
        let _ = env.reply.send(Err(err.clone()));
    }
}

/// Removes this activation from the table if it is still the one recorded there.
fn remove_self(rt: &Runtime, actor: &ActorId, activation_id: &Arc<str>) {
    let mut table = rt.inner.activations.lock().expect("activations lock");
    if table
        .get(actor)
        .is_some_and(|a| Arc::ptr_eq(&a.activation_id, activation_id))
    {
        table.remove(actor);
    }
}

async fn run(
    rt: Runtime,
    app: Arc<AppSession>,
    actor: ActorId,
    activation_id: Arc<str>,
    ty: ActorType,
    mut rx: mpsc::UnboundedReceiver<Envelope>,
    mut stop_rx: oneshot::Receiver<oneshot::Sender<()>>,
) {
    let gate = rt.inner.gate.clone();
    let lifecycle = rt.inner.cfg.lifecycle_turn_timeout;

    // Rule 1: register before activate.
    if let Err(e) = gate.claim(&actor, &activation_id).await {
        remove_self(&rt, &actor, &activation_id);
        fail_all(&mut rx, &e);
        return;
    }
    let activate = async {
        gate.check_serving()?;
        let deadline = Instant::now() + lifecycle;
        let turn = app.start_turn(
            &actor,
            &activation_id,
            TurnKind::Activate,
            deadline,
            Instant::now(),
        );
        match rt.run_timed(&actor, "<activate>", deadline, turn).await {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(ActorError::new(
                if e.kind == ErrorKind::App {
                    ErrorKind::App
                } else {
                    e.kind
                },
                format!("activation of {actor} failed: {}", e.message),
            )),
            None => Err(ActorError::timeout(format!(
                "activation of {actor} did not finish within {lifecycle:?}"
            ))),
        }
    };
    if let Err(e) = activate.await {
        remove_self(&rt, &actor, &activation_id);
        fail_all(&mut rx, &e);
        gate.release(&actor, &activation_id).await;
        return;
    }
    rt.inner
        .counters
        .activations
        .fetch_add(1, Ordering::Relaxed);
    tracing::debug!("activated");

    let mut reentrant_turns: JoinSet<()> = JoinSet::new();
    let mut idle_at = Instant::now() + ty.idle_timeout;
    let mut done_signal: Option<oneshot::Sender<()>> = None;
    let reason = loop {
        tokio::select! {
            biased;
            stop = &mut stop_rx => {
                done_signal = stop.ok();
                break v1::DeactivateReason::Shutdown;
            }
            _ = app.closed() => {
                // The app went away: nothing to deactivate, every queued call never ran.
                remove_self(&rt, &actor, &activation_id);
                fail_all(&mut rx, &ActorError::unreachable(format!(
                    "the app disconnected before this call to {actor} ran: it never ran")));
                reentrant_turns.shutdown().await;
                gate.release(&actor, &activation_id).await;
                return;
            }
            Some(_) = reentrant_turns.join_next(), if !reentrant_turns.is_empty() => {
                idle_at = Instant::now() + ty.idle_timeout;
            }
            env = rx.recv() => {
                let Some(env) = env else { break v1::DeactivateReason::Shutdown };
                if ty.reentrant {
                    let rt2 = rt.clone();
                    let app2 = app.clone();
                    let actor2 = actor.clone();
                    let aid = activation_id.clone();
                    reentrant_turns.spawn(async move {
                        dispatch(&rt2, &app2, &actor2, &aid, env).await;
                    });
                } else {
                    dispatch(&rt, &app, &actor, &activation_id, env).await;
                }
                idle_at = Instant::now() + ty.idle_timeout;
            }
            _ = tokio::time::sleep_until(idle_at), if reentrant_turns.is_empty() => {
                // Idle: leave the table only if nothing was queued meanwhile. Senders queue under
                // the same lock, so an empty mailbox here stays empty once we are removed.
                let mut table = rt.inner.activations.lock().expect("activations lock");
                if rx.is_empty() {
                    if table.get(&actor).is_some_and(|a| Arc::ptr_eq(&a.activation_id, &activation_id)) {
                        table.remove(&actor);
                    }
                    rx.close();
                    break v1::DeactivateReason::Idle;
                }
            }
        }
    };
    while reentrant_turns.join_next().await.is_some() {}
    remove_self(&rt, &actor, &activation_id);
    // A fenced host runs no turn at all, Deactivate included: another host may already hold
    // the actor, and this activation's state must not be written back.
    if let Err(fenced) = gate.check_serving() {
        fail_all(&mut rx, &fenced);
        rt.inner
            .counters
            .deactivations
            .fetch_add(1, Ordering::Relaxed);
        gate.release(&actor, &activation_id).await;
        if let Some(done) = done_signal {
            let _ = done.send(());
        }
        return;
    }
    // Calls that raced into the mailbox before it closed never ran: the caller may re-place.
    fail_all(
        &mut rx,
        &ActorError::wrong_host(format!(
            "{actor} was deactivated on this host before the call ran: it never ran; re-place it"
        )),
    );
    let deadline = Instant::now() + lifecycle;
    let turn = app.start_turn(
        &actor,
        &activation_id,
        TurnKind::Deactivate(reason),
        deadline,
        Instant::now(),
    );
    if let Some(Err(e)) = rt.run_timed(&actor, "<deactivate>", deadline, turn).await {
        tracing::warn!(error = %e, "deactivate turn failed");
    }
    rt.inner
        .counters
        .deactivations
        .fetch_add(1, Ordering::Relaxed);
    gate.release(&actor, &activation_id).await;
    tracing::debug!(?reason, "deactivated");
    if let Some(done) = done_signal {
        let _ = done.send(());
    }
}

/// Runs one call's turn. The caller is answered at its deadline at the latest; the activation
/// keeps waiting for the app's (discarded) late answer, so turns never overlap in the app.
async fn dispatch(
    rt: &Runtime,
    app: &Arc<AppSession>,
    actor: &ActorId,
    activation_id: &str,
    env: Envelope,
) {
    let now = Instant::now();
    if env.deadline <= now || env.reply.is_closed() {
        let _ = env.reply.send(Err(ActorError::timeout(format!(
            "call {actor}.{} waited past its deadline in the mailbox; it never ran",
            env.method
        ))));
        return;
    }
    // Fencing is checked at every turn dispatch (DESIGN.md §3).
    if let Err(e) = rt.inner.gate.check_serving() {
        let _ = env.reply.send(Err(e));
        return;
    }
    rt.inner.counters.turns.fetch_add(1, Ordering::Relaxed);
    // The caller's reply travels with the turn: the app's answer reaches the caller straight
    // from the stream that delivered it, not through this task. The caller answers itself
    // with `timeout` at its deadline; this task keeps waiting for the (discarded) late answer
    // so that turns never overlap in the app.
    let turn = app.start_turn_for(
        actor,
        activation_id,
        TurnKind::Invoke {
            method: env.method.clone(),
            payload: env.payload,
        },
        env.deadline,
        now,
        Some(env.reply),
    );
    let _in_flight = InFlight::new(&rt.inner.in_flight);
    let mut turn = std::pin::pin!(turn);
    let slow_at = now + rt.inner.cfg.slow_turn;
    let outcome = tokio::select! {
        biased;
        outcome = &mut turn => outcome,
        _ = tokio::time::sleep_until(slow_at) => {
            rt.inner.counters.slow_turns.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(actor = %actor, method = %env.method,
                after_ms = rt.inner.cfg.slow_turn.as_millis() as u64,
                "slow turn: it holds its activation; chunk long work or move it off the turn");
            turn.await
        }
    };
    if let Err(e) = &outcome
        && e.kind == ErrorKind::App
    {
        rt.inner.counters.app_errors.fetch_add(1, Ordering::Relaxed);
    }
}
