//! The load generator and its ledger: every call's id, actor, outcome and latency, and the
//! report judged from it.

use sigx_sdk::{Client, ErrorKind};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The increment ran; the counter's new value.
    Ok(i64),
    /// An error kind that proves the call never ran (or an app error).
    Failed(ErrorKind, String),
    /// It may or may not have run (outcome-unknown, or a timeout).
    Ambiguous(ErrorKind, String),
}

/// One call.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: u64,
    pub actor: String,
    pub outcome: Outcome,
    pub latency: Duration,
}

/// Every call the load made.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Mutex<Vec<Entry>>,
    next: AtomicU64,
}

impl Ledger {
    /// A copy of the entries.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().clone()
    }
    fn record(&self, actor: String, outcome: Outcome, latency: Duration) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries.lock().unwrap().push(Entry {
            id,
            actor,
            outcome,
            latency,
        });
    }
    /// Calls recorded so far.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
    /// Whether no call was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A running load.
pub struct Load {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The ledger the load writes.
    pub ledger: Arc<Ledger>,
}

/// Starts `workers` callers that increment `Counter/c<k>` (k < `counters`) through the sockets
/// in `targets`, round-robin, each call with a `timeout` deadline.
pub fn start_load(
    targets: Arc<RwLock<Vec<PathBuf>>>,
    counters: usize,
    workers: usize,
    timeout: Duration,
) -> Load {
    start_load_into(
        Arc::new(Ledger::default()),
        targets,
        0..counters,
        workers,
        timeout,
    )
}

/// As [`start_load`] on the counters `c<k>` for k in `keys`, recording into `ledger`: a fresh
/// key range puts new activations on a newly started host (actors stay where they live), and
/// several loads on different sockets (callers on a
/// faulted host's own socket and on a peer's) share one ledger, so the final values are judged
/// against every acknowledged write.
pub fn start_load_into(
    ledger: Arc<Ledger>,
    targets: Arc<RwLock<Vec<PathBuf>>>,
    keys: std::ops::Range<usize>,
    workers: usize,
    timeout: Duration,
) -> Load {
    let (first, counters) = (keys.start, keys.len());
    let (stop, stop_rx) = watch::channel(false);
    let tasks = (0..workers)
        .map(|w| {
            let targets = targets.clone();
            let ledger = ledger.clone();
            let stop_rx = stop_rx.clone();
            tokio::spawn(async move {
                let mut clients: HashMap<PathBuf, Client> = HashMap::new();
                let mut i = w;
                while !*stop_rx.borrow() {
                    let target = {
                        let t = targets.read().unwrap();
                        if t.is_empty() {
                            None
                        } else {
                            Some(t[i % t.len()].clone())
                        }
                    };
                    let Some(target) = target else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let client = clients
                        .entry(target.clone())
                        .or_insert_with(|| Client::lazy(&target).with_timeout(timeout))
                        .clone();
                    // The worker's n-th call: 7919 is prime, so n * 7919 walks every residue of
                    // `counters` (i itself steps by `workers`, and i * 7919 + w hit only a
                    // handful of counters, the same ones for every worker).
                    let n = (i - w) / workers;
                    let key = format!("c{}", first + (n * 7919 + w) % counters);
                    let t = Instant::now();
                    let r: Result<i64, _> =
                        client.call_json("Counter", &key, "increment", &1).await;
                    let outcome = match r {
                        Ok(v) => Outcome::Ok(v),
                        Err(e)
                            if matches!(e.kind, ErrorKind::OutcomeUnknown | ErrorKind::Timeout) =>
                        {
                            Outcome::Ambiguous(e.kind, e.message)
                        }
                        Err(e) => Outcome::Failed(e.kind, e.message),
                    };
                    ledger.record(format!("Counter/{key}"), outcome, t.elapsed());
                    i += workers;
                }
            })
        })
        .collect();
    Load {
        stop,
        tasks,
        ledger,
    }
}

impl Load {
    /// Stops the callers and waits for their last calls.
    pub async fn stop(self) -> Arc<Ledger> {
        self.stop.send_replace(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.ledger
    }
}

/// What a chaos run shows.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub scenario: String,
    pub sent: u64,
    pub succeeded: u64,
    pub failed_by_kind: BTreeMap<String, u64>,
    pub ambiguous_by_kind: BTreeMap<String, u64>,
    pub duplicate_activations: Vec<String>,
    pub ledger_problems: Vec<String>,
    pub handoffs: Vec<Duration>,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub notes: Vec<String>,
}

impl Report {
    /// Judges a ledger against the final counter values read back (`finals`) and the trace's
    /// duplicate activations.
    pub fn judge(
        scenario: &str,
        ledger: &Ledger,
        finals: &HashMap<String, i64>,
        duplicate_activations: Vec<String>,
    ) -> Report {
        let entries = ledger.entries();
        let mut r = Report {
            scenario: scenario.to_string(),
            sent: entries.len() as u64,
            duplicate_activations,
            ..Report::default()
        };
        let mut values: HashMap<&str, Vec<i64>> = HashMap::new();
        let mut ambiguous: HashMap<&str, u64> = HashMap::new();
        let mut lat: Vec<Duration> = entries.iter().map(|e| e.latency).collect();
        lat.sort();
        if !lat.is_empty() {
            r.p50 = lat[lat.len() / 2];
            r.p99 = lat[(lat.len() * 99 / 100).min(lat.len() - 1)];
            r.max = *lat.last().unwrap();
        }
        for e in &entries {
            match &e.outcome {
                Outcome::Ok(v) => {
                    r.succeeded += 1;
                    values.entry(&e.actor).or_default().push(*v);
                }
                Outcome::Failed(kind, message) => {
                    let n = r.failed_by_kind.entry(kind.to_string()).or_default();
                    *n += 1;
                    // The first of each kind, so a failed run says why.
                    if *n == 1 {
                        r.notes
                            .push(format!("first {kind} failure ({}): {message}", e.actor));
                    }
                }
                Outcome::Ambiguous(kind, _) => {
                    *r.ambiguous_by_kind.entry(kind.to_string()).or_default() += 1;
                    *ambiguous.entry(&e.actor).or_default() += 1;
                }
            }
        }
        let actors: BTreeSet<&str> = values.keys().chain(ambiguous.keys()).copied().collect();
        for actor in actors {
            let vals = values.get(actor).cloned().unwrap_or_default();
            let ok = vals.len() as i64;
            let amb = ambiguous.get(actor).copied().unwrap_or(0) as i64;
            let distinct: BTreeSet<i64> = vals.iter().copied().collect();
            if distinct.len() != vals.len() {
                r.ledger_problems.push(format!(
                    "{actor}: two increments returned the same value (a doubled activation or lost state)"
                ));
            }
            match finals.get(actor) {
                Some(&f) if f < ok || f > ok + amb => r.ledger_problems.push(format!(
                    "{actor}: final value {f} but {ok} increments succeeded and {amb} are ambiguous"
                )),
                Some(&f) if amb == 0 && distinct != (1..=f).collect::<BTreeSet<i64>>() => {
                    r.ledger_problems.push(format!(
                        "{actor}: the returned values are not exactly 1..={f}"
                    ))
                }
                Some(_) => {}
                None => r
                    .ledger_problems
                    .push(format!("{actor}: its final value could not be read")),
            }
        }
        r
    }

    /// Asserts the run lost nothing: no failed or ambiguous call, no duplicate activation, no
    /// ledger problem (the report is the message).
    pub fn assert_clean(&self) {
        assert_eq!(self.failed(), 0, "{}", self.render());
        assert!(self.ambiguous_by_kind.is_empty(), "{}", self.render());
        assert!(self.duplicate_activations.is_empty(), "{}", self.render());
        assert!(self.ledger_problems.is_empty(), "{}", self.render());
    }

    /// Failed calls (excluding ambiguous ones).
    pub fn failed(&self) -> u64 {
        self.failed_by_kind.values().sum()
    }

    /// The report as Markdown lines for BENCHMARKS.md.
    pub fn render(&self) -> String {
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        let mut s = format!(
            "scenario: {}\ncalls sent: {}, succeeded: {}, failed: {} {:?}, outcome-unknown/timeout: {:?}\n\
             duplicate activations: {}\nledger problems: {}\nlatency p50 {} p99 {} max {}\n",
            self.scenario,
            self.sent,
            self.succeeded,
            self.failed(),
            self.failed_by_kind,
            self.ambiguous_by_kind,
            self.duplicate_activations.len(),
            self.ledger_problems.len(),
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
        );
        if !self.handoffs.is_empty() {
            let list: Vec<String> = self.handoffs.iter().map(|d| ms(*d)).collect();
            s.push_str(&format!(
                "stop time per restarted pod: {}\n",
                list.join(", ")
            ));
        }
        for n in &self.notes {
            s.push_str(n);
            s.push('\n');
        }
        for p in self
            .duplicate_activations
            .iter()
            .chain(&self.ledger_problems)
            .take(10)
        {
            s.push_str(&format!("  ! {p}\n"));
        }
        s
    }
}

/// Reads every counter's final value through `client` (retrying transient answers).
pub async fn read_finals(client: &Client, actors: &[String]) -> HashMap<String, i64> {
    let mut out = HashMap::new();
    for actor in actors {
        let key = actor.trim_start_matches("Counter/");
        for _ in 0..20 {
            match client
                .call_json::<(), i64>("Counter", key, "get", &())
                .await
            {
                Ok(v) => {
                    out.insert(actor.clone(), v);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    out
}
