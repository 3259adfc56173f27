//! The counter app's trace file (test hook): one JSON object per line for every activation start
//! and end and every turn start and end.
//!
//! Timestamps come from `CLOCK_MONOTONIC`, which is one clock for every process on a machine and
//! never jumps, so lines written by several apps (several hosts) can be ordered against each
//! other. Each line goes out in one `write` on a file opened with `O_APPEND`, so lines from
//! several processes sharing one file do not interleave.

use sigx_sdk::Context;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// What happened.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    ActivationStart,
    ActivationEnd,
    TurnStart,
    TurnEnd,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Event::ActivationStart => "activation-start",
            Event::ActivationEnd => "activation-end",
            Event::TurnStart => "turn-start",
            Event::TurnEnd => "turn-end",
        }
    }
}

/// A shared handle on the trace file, or nothing when tracing is off.
#[derive(Clone, Default)]
pub struct Trace {
    file: Option<Arc<Mutex<File>>>,
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Trace {
    /// Tracing off.
    pub fn off() -> Self {
        Trace { file: None }
    }

    /// Appends to `path` (created if missing).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("COUNTER_TRACE_FILE={}: {e}", path.display()),
                )
            })?;
        Ok(Trace {
            file: Some(Arc::new(Mutex::new(file))),
        })
    }

    /// Appends one event about the actor of `ctx`.
    pub fn record(&self, event: Event, ctx: &Context) {
        self.write_line(
            Line {
                event,
                actor: &format!("{}/{}", ctx.actor_type(), ctx.key()),
                activation: ctx.activation_id(),
                host: ctx.host_id(),
                method: ctx.method(),
                traceparent: ctx.traceparent(),
            },
            false,
        );
    }

    /// Appends one line for a due reminder the actor of `ctx` ran: its name, the occurrence's
    /// due time, the attempt, and the wall time the handler started (so tests can judge what
    /// the app executed: every occurrence delivered, how late, and how many times).
    pub fn reminder(&self, ctx: &Context, reminder: &sigx_sdk::Reminder, wall_ms: i64) {
        let Some(file) = &self.file else { return };
        let due_ms = reminder
            .due
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let line = serde_json::json!({
            "t_ns": monotonic_ns(),
            "event": "reminder",
            "actor": format!("{}/{}", ctx.actor_type(), ctx.key()),
            "activation": ctx.activation_id(),
            "host": ctx.host_id(),
            "pid": std::process::id(),
            "name": reminder.name,
            "due_ms": due_ms,
            "attempt": reminder.attempt,
            "wall_ms": wall_ms,
        });
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(e) = file.lock().unwrap().write_all(&bytes) {
            tracing::error!(error = %e, "cannot append to the trace file");
        }
    }

    fn write_line(&self, line: Line<'_>, dropped: bool) {
        let Line {
            event,
            actor,
            activation,
            host,
            method,
            traceparent,
        } = line;
        let Some(file) = &self.file else { return };
        let mut line = serde_json::json!({
            "t_ns": monotonic_ns(),
            "event": event.as_str(),
            "actor": actor,
            "activation": activation,
            "host": host,
            "pid": std::process::id(),
        });
        if !method.is_empty() {
            line["method"] = method.into();
        }
        if dropped {
            line["dropped"] = true.into();
        }
        // The W3C trace context the turn was handed (tests check it continues the caller's).
        if let Some(tp) = traceparent {
            line["traceparent"] = tp.into();
        }
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(e) = file.lock().unwrap().write_all(&bytes) {
            tracing::error!(error = %e, "cannot append to the trace file");
        }
    }

    /// Records the start of an activation; the returned guard records its end when dropped.
    pub fn activation(&self, ctx: &Context) -> ActivationGuard {
        self.record(Event::ActivationStart, ctx);
        ActivationGuard {
            trace: self.clone(),
            actor: format!("{}/{}", ctx.actor_type(), ctx.key()),
            activation: ctx.activation_id().to_string(),
            host: ctx.host_id().to_string(),
            deactivated: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Lives inside an activation's state; its drop is the activation's end.
pub struct ActivationGuard {
    trace: Trace,
    actor: String,
    activation: String,
    host: String,
    /// Set by the Deactivate hook. Without it, the drop is the SDK dropping the state (the
    /// sidecar fenced, or its connection was lost): no app code ran for the activation after
    /// its last turn, and the end line says so (`"dropped": true`).
    deactivated: std::sync::atomic::AtomicBool,
}

impl ActivationGuard {
    /// The activation's Deactivate turn runs: its end is a deactivation, not a drop.
    pub fn deactivating(&self) {
        self.deactivated
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for ActivationGuard {
    fn drop(&mut self) {
        let dropped = !self.deactivated.load(std::sync::atomic::Ordering::SeqCst);
        let line = Line {
            event: Event::ActivationEnd,
            actor: &self.actor,
            activation: &self.activation,
            host: &self.host,
            method: "",
            traceparent: None,
        };
        self.trace.write_line(line, dropped);
    }
}

/// What one trace line says.
struct Line<'a> {
    event: Event,
    actor: &'a str,
    activation: &'a str,
    host: &'a str,
    method: &'a str,
    traceparent: Option<&'a str>,
}
