//! The `sigx dev up --workload` check: increment counters from every host at once, then read
//! every final value and judge it against what was acknowledged (no lost, no doubled increment).

use futures::StreamExt;
use sigx_sdk::{ActorError, Client};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

/// What the workload saw.
#[derive(Debug, Default)]
pub struct WorkloadReport {
    pub counters: u32,
    pub hosts: u32,
    pub increments_ok: u64,
    pub increments_failed: BTreeMap<String, u64>,
    pub first_failures: Vec<String>,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub correct: u32,
    pub lost: u64,
    pub doubled: u64,
    pub unreadable: u32,
    pub mismatches: Vec<String>,
}

impl WorkloadReport {
    /// Every increment acknowledged and every counter reading exactly its acknowledged count.
    pub fn passed(&self) -> bool {
        self.increments_failed.is_empty()
            && self.lost == 0
            && self.doubled == 0
            && self.unreadable == 0
            && self.correct == self.counters
    }

    pub fn render(&self) -> String {
        let total = self.counters as u64 * self.hosts as u64;
        let failed: u64 = self.increments_failed.values().sum();
        let rate = total as f64 / self.elapsed.as_secs_f64().max(1e-9);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "workload: {} counters x {} host(s) = {total} increments in {:.2}s ({rate:.0} calls/s; \
             p50 {:.2}ms, p99 {:.2}ms); {} acknowledged, {failed} failed",
            self.counters,
            self.hosts,
            self.elapsed.as_secs_f64(),
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.increments_ok,
        );
        for (kind, n) in &self.increments_failed {
            let _ = writeln!(out, "  failed as {kind}: {n}");
        }
        for f in &self.first_failures {
            let _ = writeln!(out, "  e.g. {f}");
        }
        let _ = writeln!(
            out,
            "check:    {}/{} counters hold exactly their acknowledged increments; {} lost, {} \
             doubled, {} unreadable -> {}",
            self.correct,
            self.counters,
            self.lost,
            self.doubled,
            self.unreadable,
            if self.passed() { "PASS" } else { "FAIL" }
        );
        for m in &self.mismatches {
            let _ = writeln!(out, "  {m}");
        }
        out
    }
}

/// Judges the final values. `acked[i]` increments of counter `i` were acknowledged and
/// `unknown[i]` failed (they may or may not have run); `values[i]` is what `get` read.
pub fn judge(
    report: &mut WorkloadReport,
    keys: &[String],
    acked: &[u64],
    unknown: &[u64],
    values: &[Result<i64, ActorError>],
) {
    for i in 0..keys.len() {
        match &values[i] {
            Err(e) => {
                report.unreadable += 1;
                if report.mismatches.len() < 10 {
                    report
                        .mismatches
                        .push(format!("Counter/{}: get failed: {e}", keys[i]));
                }
            }
            Ok(v) => {
                let v = (*v).max(0) as u64;
                let (lo, hi) = (acked[i], acked[i] + unknown[i]);
                if v < lo {
                    report.lost += lo - v;
                } else if v > hi {
                    report.doubled += v - hi;
                } else if unknown[i] == 0 {
                    report.correct += 1;
                    continue;
                }
                if report.mismatches.len() < 10 {
                    report.mismatches.push(format!(
                        "Counter/{} reads {v}, expected {lo}{}",
                        keys[i],
                        if hi > lo {
                            format!("..{hi}")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Increments every counter once from every host (concurrently, each host starting at a
/// different counter so they contend on the same actors), then reads every counter back.
pub async fn workload(sockets: &[PathBuf], counters: u32, concurrency: usize) -> WorkloadReport {
    use rand::RngExt;
    let run: u32 = rand::rng().random();
    let keys: Vec<String> = (0..counters)
        .map(|i| format!("demo-{run:08x}-{i}"))
        .collect();
    let clients: Vec<Client> = sockets
        .iter()
        .map(|s| Client::lazy(s).with_timeout(Duration::from_secs(10)))
        .collect();
    let n = counters as usize;
    let hosts = clients.len();
    let started = Instant::now();
    let per_host = clients.iter().enumerate().map(|(h, client)| {
        let keys = &keys;
        async move {
            let offset = h * n / hosts.max(1);
            futures::stream::iter((0..n).map(|j| (j + offset) % n))
                .map(|i| async move {
                    let t0 = Instant::now();
                    let r = client
                        .call("Counter", keys[i].as_str(), "increment", "1")
                        .await;
                    (i, t0.elapsed(), r)
                })
                .buffer_unordered(concurrency.max(1))
                .collect::<Vec<_>>()
                .await
        }
    });
    let results = futures::future::join_all(per_host).await;
    let elapsed = started.elapsed();

    let mut report = WorkloadReport {
        counters,
        hosts: hosts as u32,
        elapsed,
        ..Default::default()
    };
    let mut acked = vec![0u64; n];
    let mut unknown = vec![0u64; n];
    let mut latencies = Vec::with_capacity(n * hosts);
    for (i, latency, r) in results.into_iter().flatten() {
        latencies.push(latency);
        match r {
            Ok(_) => {
                acked[i] += 1;
                report.increments_ok += 1;
            }
            Err(e) => {
                unknown[i] += 1;
                *report
                    .increments_failed
                    .entry(e.kind.to_string())
                    .or_default() += 1;
                if report.first_failures.len() < 5 {
                    report
                        .first_failures
                        .push(format!("Counter/{}: {e}", keys[i]));
                }
            }
        }
    }
    latencies.sort();
    report.p50 = percentile(&latencies, 0.50);
    report.p99 = percentile(&latencies, 0.99);

    let values: Vec<Result<i64, ActorError>> = futures::stream::iter(0..n)
        .map(|i| {
            let client = &clients[i % hosts];
            let key = keys[i].as_str();
            async move {
                client
                    .call_json::<(), i64>("Counter", key, "get", &())
                    .await
            }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await;
    judge(&mut report, &keys, &acked, &unknown, &values);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("k{i}")).collect()
    }

    #[test]
    fn exact_counts_pass() {
        let mut r = WorkloadReport {
            counters: 2,
            hosts: 3,
            ..Default::default()
        };
        judge(&mut r, &keys(2), &[3, 3], &[0, 0], &[Ok(3), Ok(3)]);
        assert!(r.passed(), "{}", r.render());
        assert_eq!(r.correct, 2);
    }

    #[test]
    fn a_lost_and_a_doubled_increment_are_both_caught() {
        let mut r = WorkloadReport {
            counters: 3,
            hosts: 3,
            ..Default::default()
        };
        judge(
            &mut r,
            &keys(3),
            &[3, 3, 3],
            &[0, 0, 0],
            &[Ok(2), Ok(4), Ok(3)],
        );
        assert!(!r.passed());
        assert_eq!((r.lost, r.doubled, r.correct), (1, 1, 1));
        let text = r.render();
        assert!(text.contains("Counter/k0 reads 2, expected 3"), "{text}");
        assert!(text.contains("FAIL"), "{text}");
    }

    #[test]
    fn failed_increments_widen_the_range_but_fail_the_run() {
        let mut r = WorkloadReport {
            counters: 1,
            hosts: 3,
            ..Default::default()
        };
        r.increments_failed.insert("timeout".into(), 1);
        judge(&mut r, &keys(1), &[2], &[1], &[Ok(3)]);
        assert_eq!((r.lost, r.doubled), (0, 0), "3 is within 2..3");
        assert!(!r.passed(), "a failed call is never a clean run");
    }

    #[test]
    fn an_unreadable_counter_fails_the_check() {
        let mut r = WorkloadReport {
            counters: 1,
            hosts: 1,
            ..Default::default()
        };
        judge(
            &mut r,
            &keys(1),
            &[1],
            &[0],
            &[Err(ActorError::timeout("slow"))],
        );
        assert!(!r.passed());
        assert_eq!(r.unreadable, 1);
    }

    #[test]
    fn percentiles_pick_from_the_sorted_sample() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&s, 0.5), Duration::from_millis(51));
        assert_eq!(percentile(&s, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
