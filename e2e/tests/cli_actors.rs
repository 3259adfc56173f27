//! `sigx actors list` and `sigx actors where` against a 3-host cluster of the real binaries
//! (`sigx dev up --hosts 3`: sidecars and counter apps on 127.0.0.1), cross-checked with what
//! each actor says about itself (`Counter.info` answers its host id and activation id).

mod sdk_support;

use sdk_support::dev_up::DevUp;
use sdk_support::{Scratch, bin};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

fn sigx(args: &[&str], socket: &Path) -> Output {
    Command::new(bin("sigx"))
        .args(args)
        .arg("--socket")
        .arg(socket)
        .env_remove("SIGX_SOCKET")
        .output()
        .expect("run sigx")
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "sigx failed ({:?}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn actors_list_and_where_name_every_live_counter_and_its_host() {
    let scratch = Scratch::new("actors");
    let dev = DevUp::start(&scratch, &["--hosts", "3"]);
    dev.wait_running();
    // 13 counters, activated through the three hosts in turn; each says where it runs.
    let mut truth: BTreeMap<String, (String, String)> = BTreeMap::new();
    let keys: Vec<String> = (0..12)
        .map(|i| format!("k{i}"))
        .chain(["alice".to_string()])
        .collect();
    for (i, key) in keys.iter().enumerate() {
        let info = stdout_ok(&sigx(
            &["call", &format!("Counter/{key}"), "info"],
            &dev.socket(i % 3 + 1),
        ));
        let v: serde_json::Value = serde_json::from_str(&info).unwrap();
        truth.insert(
            key.clone(),
            (
                v["host_id"].as_str().unwrap().to_string(),
                v["activation_id"].as_str().unwrap().to_string(),
            ),
        );
    }
    let hosts: std::collections::BTreeSet<&str> = truth.values().map(|(h, _)| h.as_str()).collect();

    // The table, fetched in pages of 5 from host 1: every counter exactly once, with its host
    // and activation, and the summary line.
    let table = stdout_ok(&sigx(
        &["actors", "list", "Counter", "--page-size", "5"],
        &dev.socket(1),
    ));
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ACTOR") && header.contains("HOST") && header.ends_with("ACTIVATION"),
        "{table}"
    );
    let mut listed: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut summary = None;
    for line in lines {
        let cols: Vec<&str> = line.split_whitespace().collect();
        match cols.as_slice() {
            [actor, host, act] if actor.starts_with("Counter/") => {
                let key = actor.trim_start_matches("Counter/").to_string();
                let prev = listed.insert(key.clone(), (host.to_string(), act.to_string()));
                assert!(prev.is_none(), "{key} listed twice:\n{table}");
            }
            _ => summary = Some(line.to_string()),
        }
    }
    assert_eq!(listed, truth, "{table}");
    assert_eq!(
        summary.as_deref(),
        Some(
            format!(
                "13 live actor(s) of type Counter on {} host(s)",
                hosts.len()
            )
            .as_str()
        ),
        "{table}"
    );

    // The same set as JSON, asked of another host in one page.
    let json = stdout_ok(&sigx(
        &["actors", "list", "Counter", "--json"],
        &dev.socket(2),
    ));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["incomplete"], false, "{json}");
    let from_json: BTreeMap<String, (String, String)> = v["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["key"].as_str().unwrap().to_string(),
                (
                    a["hostId"].as_str().unwrap().to_string(),
                    a["activationId"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(from_json, truth);

    // Where is alice: its host and activation, from a host that may not hold it.
    let (host, act) = &truth["alice"];
    let out = stdout_ok(&sigx(&["actors", "where", "Counter/alice"], &dev.socket(3)));
    assert!(
        out.starts_with(&format!("Counter/alice is active on host {host}\n")),
        "{out}"
    );
    assert!(out.contains(&format!("activation  {act}\n")), "{out}");
    let out = stdout_ok(&sigx(
        &["actors", "where", "Counter/nobody"],
        &dev.socket(1),
    ));
    assert!(out.starts_with("Counter/nobody is not active"), "{out}");

    // Clear errors: bad usage exits 2, no sidecar exits 3, each saying what was wrong.
    let out = sigx(&["actors", "where", "Counter"], &dev.socket(1));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("write <Type>/<key>"));
    let out = sigx(
        &["actors", "list", "Counter"],
        &scratch.path("nobody-here.sock"),
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("sigx actors list:"));
}
