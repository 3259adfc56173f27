//! Reminders in a fleet (issue 13): set many reminders through every pod, then judge what the
//! *apps executed* (the counter-app's trace lines, one per delivery) against what was set —
//! occurrences never delivered, occurrences delivered more than once (inside and outside a crash
//! window), and lateness (handler start on the app's wall clock minus the due time).

use sigx_sdk::{Client, Due};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One reminder the test set: a one-shot, due at `due_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Expected {
    /// `Counter/<key>`.
    pub actor: String,
    /// The reminder's name.
    pub name: String,
    /// Its due time, Unix ms.
    pub due_ms: i64,
}

/// One delivery the app ran (a trace line).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `Counter/<key>`.
    pub actor: String,
    /// The reminder's name.
    pub name: String,
    /// The occurrence's due time, Unix ms.
    pub due_ms: i64,
    /// Which delivery of it (1 = first).
    pub attempt: u32,
    /// When the handler started, Unix ms (the app's wall clock).
    pub wall_ms: i64,
    /// The host whose app ran it.
    pub host: String,
}

/// Every reminder delivery in the trace at `path`.
pub fn deliveries(path: &Path) -> Vec<Delivery> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "reminder")
        .filter_map(|v| {
            Some(Delivery {
                actor: v["actor"].as_str()?.to_string(),
                name: v["name"].as_str()?.to_string(),
                due_ms: v["due_ms"].as_i64()?,
                attempt: v["attempt"].as_u64()? as u32,
                wall_ms: v["wall_ms"].as_i64()?,
                host: v["host"].as_str().unwrap_or("?").to_string(),
            })
        })
        .collect()
}

/// Now, Unix ms (the test's wall clock; the apps run on the same machine).
pub fn now_ms() -> i64 {
    #[allow(clippy::disallowed_methods)]
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Sets `per_actor` one-shot reminders on each of `actors` Counters (keys `r<i>`), spread over
/// the sockets in turn, due evenly over `[from_ms, from_ms + span]`, with `concurrency` sets in
/// flight. Payload 0: a pure wake-up (the counter-app traces it and writes nothing). Returns
/// what was set.
pub async fn set_spread(
    sockets: &[PathBuf],
    actors: usize,
    per_actor: usize,
    from_ms: i64,
    span: Duration,
    concurrency: usize,
) -> Vec<Expected> {
    let total = actors * per_actor;
    let step = span.as_millis() as f64 / total.max(1) as f64;
    let clients: Vec<Client> = sockets.iter().map(Client::lazy).collect();
    let mut want = Vec::with_capacity(total);
    for i in 0..total {
        want.push(Expected {
            actor: format!("Counter/r{}", i % actors),
            name: format!("n{}", i / actors),
            due_ms: from_ms + (i as f64 * step) as i64,
        });
    }
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, e) in want.iter().cloned().enumerate() {
        let client = clients[i % clients.len()].clone();
        let permit = sem.clone().acquire_owned().await.unwrap();
        tasks.spawn(async move {
            let _permit = permit;
            let key = e.actor.trim_start_matches("Counter/").to_string();
            let at = UNIX_EPOCH + Duration::from_millis(e.due_ms as u64);
            let mut tries = 0;
            loop {
                match client
                    .set_reminder(
                        "Counter",
                        key.as_str(),
                        e.name.as_str(),
                        Due::At(at),
                        None,
                        "0",
                    )
                    .await
                {
                    Ok(_) => break,
                    Err(err) if tries < 5 => {
                        tries += 1;
                        tracing::warn!(error = %err, "set_reminder failed; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(err) => panic!("set_reminder {e:?}: {err}"),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    want
}

/// The verdict on a run.
#[derive(Debug, Default)]
pub struct ReminderReport {
    /// Reminders set.
    pub set: usize,
    /// Set but never delivered.
    pub missing: Vec<Expected>,
    /// Delivered more than once, due outside the crash window.
    pub duplicates: usize,
    /// Delivered more than once, due inside the crash window.
    pub duplicates_in_crash_window: usize,
    /// First-delivery lateness percentiles over every occurrence, ms: p50, p99, max.
    pub lateness_ms: (i64, i64, i64),
    /// The same over the occurrences due inside the crash window.
    pub crash_window_lateness_ms: (i64, i64, i64),
    /// The same without each actor's first occurrence (which also activates the actor).
    pub warm_lateness_ms: (i64, i64, i64),
}

fn percentiles(mut v: Vec<i64>) -> (i64, i64, i64) {
    if v.is_empty() {
        return (0, 0, 0);
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.50), at(0.99), *v.last().unwrap())
}

impl ReminderReport {
    /// Judges `got` against `want`; `crash` is the window `[from, to)` (Unix ms) of due times
    /// a crash may delay or duplicate.
    pub fn judge(want: &[Expected], got: &[Delivery], crash: Option<(i64, i64)>) -> Self {
        let mut by_occurrence: HashMap<(&str, &str, i64), Vec<&Delivery>> = HashMap::new();
        for d in got {
            by_occurrence
                .entry((&d.actor, &d.name, d.due_ms))
                .or_default()
                .push(d);
        }
        let in_crash = |due: i64| crash.is_some_and(|(a, b)| due >= a && due < b);
        let mut report = ReminderReport {
            set: want.len(),
            ..Default::default()
        };
        let (mut late, mut crash_late, mut warm) = (Vec::new(), Vec::new(), Vec::new());
        let mut first_due: HashMap<&str, i64> = HashMap::new();
        for e in want {
            let f = first_due.entry(e.actor.as_str()).or_insert(e.due_ms);
            *f = (*f).min(e.due_ms);
        }
        for e in want {
            match by_occurrence.get(&(e.actor.as_str(), e.name.as_str(), e.due_ms)) {
                None => report.missing.push(e.clone()),
                Some(ds) => {
                    let first = ds.iter().map(|d| d.wall_ms).min().unwrap();
                    let l = (first - e.due_ms).max(0);
                    if in_crash(e.due_ms) {
                        crash_late.push(l);
                        if ds.len() > 1 {
                            report.duplicates_in_crash_window += 1;
                        }
                    } else if ds.len() > 1 {
                        report.duplicates += 1;
                    }
                    late.push(l);
                    if first_due.get(e.actor.as_str()) != Some(&e.due_ms) {
                        warm.push(l);
                    }
                }
            }
        }
        report.lateness_ms = percentiles(late);
        report.crash_window_lateness_ms = percentiles(crash_late);
        report.warm_lateness_ms = percentiles(warm);
        report
    }

    /// A summary line.
    pub fn render(&self) -> String {
        format!(
            "reminders set {}, missing {}, duplicates {} (+{} in the crash window), lateness \
             p50/p99/max {}/{}/{} ms (crash window {}/{}/{} ms; without each actor's first, \
             which activates it: {}/{}/{} ms)",
            self.set,
            self.missing.len(),
            self.duplicates,
            self.duplicates_in_crash_window,
            self.lateness_ms.0,
            self.lateness_ms.1,
            self.lateness_ms.2,
            self.crash_window_lateness_ms.0,
            self.crash_window_lateness_ms.1,
            self.crash_window_lateness_ms.2,
            self.warm_lateness_ms.0,
            self.warm_lateness_ms.1,
            self.warm_lateness_ms.2,
        )
    }
}
