//! Single activation and turn-based delivery, judged from the counter app's own trace: first
//! that the checker catches each kind of broken trace, then real runs against it.

mod sdk_support;

#[path = "sdk_support/trace.rs"]
mod trace;

use sdk_support::{Scratch, Sidecar, bin, counter_app};
use sigx_sdk::Client;
use std::time::Duration;
use trace::{Event, check};

fn ev(t: u64, event: &str, actor: &str, activation: &str, host: &str) -> Event {
    Event {
        t_ns: t,
        event: event.into(),
        actor: actor.into(),
        activation: activation.into(),
        host: host.into(),
        method: None,
    }
}

fn clean_history() -> Vec<Event> {
    vec![
        ev(10, "activation-start", "Counter/a", "A1", "h1"),
        ev(11, "turn-start", "Counter/a", "A1", "h1"),
        ev(12, "turn-end", "Counter/a", "A1", "h1"),
        ev(13, "turn-start", "Counter/a", "A1", "h1"),
        ev(14, "turn-end", "Counter/a", "A1", "h1"),
        ev(15, "activation-end", "Counter/a", "A1", "h1"),
        ev(20, "activation-start", "Counter/a", "A2", "h2"),
        ev(21, "turn-start", "Counter/a", "A2", "h2"),
        ev(22, "turn-end", "Counter/a", "A2", "h2"),
        // Another actor, live at the same time on another host: fine.
        ev(12, "activation-start", "Counter/b", "B1", "h2"),
        ev(13, "turn-start", "Counter/b", "B1", "h2"),
        ev(14, "turn-end", "Counter/b", "B1", "h2"),
    ]
}

#[test]
fn the_checker_passes_a_clean_history() {
    let (summary, violations) = check(&clean_history());
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(summary.actors, 2);
    assert_eq!(summary.activations, 3);
    assert_eq!(summary.turns, 4);
    assert_eq!(summary.reactivated_actors, 1);
    assert_eq!(summary.hosts, 2);
}

#[test]
fn the_checker_catches_two_live_activations_of_one_actor() {
    let mut h = clean_history();
    // A2 starts on h2 before A1 on h1 ended.
    h.iter_mut()
        .filter(|e| e.activation == "A2" && e.event == "activation-start")
        .for_each(|e| e.t_ns = 14);
    let (_, violations) = check(&h);
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert!(
        violations[0].contains("while activation A1 on host h1 was live"),
        "{violations:#?}"
    );
}

#[test]
fn the_checker_treats_an_unended_activation_as_live_forever() {
    let h: Vec<Event> = clean_history()
        .into_iter()
        .filter(|e| !(e.activation == "A1" && e.event == "activation-end"))
        .collect();
    let (_, violations) = check(&h);
    assert!(
        violations.iter().any(|v| v.contains("never ended")),
        "{violations:#?}"
    );
}

#[test]
fn the_checker_catches_overlapping_turns_and_turns_outside_the_activation() {
    let mut h = clean_history();
    h.iter_mut()
        .filter(|e| e.activation == "A1" && e.t_ns == 12)
        .for_each(|e| e.t_ns = 14); // the first turn now ends after the second started
    h.push(ev(16, "turn-start", "Counter/a", "A1", "h1"));
    h.push(ev(17, "turn-end", "Counter/a", "A1", "h1"));
    let (_, violations) = check(&h);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("two turns of activation A1 overlap")),
        "{violations:#?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("outside activation A1")),
        "{violations:#?}"
    );
}

/// One host, many concurrent callers, short idle timeout (so actors deactivate and come back
/// while calls continue), turns slowed to widen any overlap: the trace must stay clean. Counts
/// are durable (the state API; a single host keeps its store in memory for its lifetime), so
/// every increment must be in the final value however many times a busy machine makes an actor
/// idle out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_under_concurrent_calls_and_reactivation_keeps_both_guarantees() {
    let scratch = Scratch::new("trace1");
    let socket = scratch.path("s.sock");
    let trace_path = scratch.path("trace.jsonl");
    let sidecar = Sidecar::start(&scratch, &socket, &[]);
    let _app = counter_app(
        &scratch,
        &socket,
        &[
            ("COUNTER_TRACE_FILE", trace_path.to_str().unwrap()),
            ("COUNTER_TURN_DELAY_MS", "2"),
            ("COUNTER_IDLE_TIMEOUT_MS", "150"),
        ],
    );
    sidecar.wait_ready();
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(10));
    let keys = ["a", "b", "c", "d"];
    let mut calls = 0;
    for round in 0..2 {
        let batch = keys.iter().flat_map(|k| (0..15).map(move |_| *k)).map(|k| {
            let client = client.clone();
            async move { client.call("Counter", k, "increment", "").await.unwrap() }
        });
        calls += futures::future::join_all(batch).await.len();
        if round == 0 {
            // Past the idle timeout: every counter deactivates, the next round re-activates.
            tokio::time::sleep(Duration::from_millis(1_000)).await;
        }
    }
    for k in keys {
        let v: i64 = client.call_json("Counter", k, "get", &()).await.unwrap();
        assert_eq!(
            v, 30,
            "Counter/{k}: every increment of both rounds counted once"
        );
    }
    let (summary, violations) = check(&trace::read(&trace_path));
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(
        summary.turns,
        calls + keys.len(),
        "every call's turn is in the trace"
    );
    assert_eq!(summary.reactivated_actors, keys.len(), "{summary:?}");
}

/// `sigx dev up --hosts 3`: the workload calls every counter from every host at once, and the
/// shared trace must show one activation per actor at any time, across all three hosts.
#[test]
fn three_hosts_under_the_dev_workload_never_run_an_actor_twice() {
    let scratch = Scratch::new("trace3");
    let dir = scratch.path("d");
    let out = std::process::Command::new(bin("sigx"))
        .args(["dev", "up", "--hosts", "3", "--workload", "300", "--trace"])
        .arg("--exit-after-workload")
        .args(["--ready-timeout", "30s", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 lost, 0 doubled"), "{stdout}");
    // The status table shows the whole fleet, and that it all runs on this one machine.
    assert!(stdout.contains("3 host(s) / 1 node(s)"), "{stdout}");
    for i in 1..=3 {
        assert!(
            stdout.contains(&format!("sidecar {i} stopped\n")),
            "{stdout}"
        );
    }
    let (summary, violations) = check(&trace::read(&dir.join("trace.jsonl")));
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(summary.actors, 300, "{summary:?}");
    assert_eq!(
        summary.turns,
        300 * 3 + 300,
        "each increment from each host and each final get ran exactly one turn: {summary:?}"
    );
    assert!(
        summary.hosts >= 2,
        "actors were placed on several hosts: {summary:?}"
    );
}
