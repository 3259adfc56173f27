use super::*;
use crate::dashboard::probe::{ProbeError, Target};
use sigx_sdk::proto as v1;

fn desc(id: &str, node: Option<&str>) -> v1::HostDescriptor {
    v1::HostDescriptor {
        id: id.into(),
        advertise: "127.0.0.1:7311".into(),
        types: Some(v1::TypeList {
            names: vec!["Counter".into(), "Echo".into()],
        }),
        meta: node
            .map(|n| [("node".to_string(), n.to_string())].into())
            .unwrap_or_default(),
        status: v1::HostStatus::Active as i32,
        started_at_unix_ms: 1_000,
        stateful_types: Some(v1::TypeList {
            names: vec!["Counter".into()],
        }),
    }
}

fn target(label: &str) -> Target {
    Target {
        label: label.into(),
        socket: Some(format!("/nowhere/{label}.sock").into()),
        health: None,
        host_id: None,
    }
}

fn answering(label: &str, id: &str, view: &[&str], counters: u64, acts: u64) -> Probe {
    Probe {
        target: target(label),
        status: Some(Ok(v1::StatusResponse {
            host: Some(desc(id, Some("box"))),
            state: "ready".into(),
            fence_reason: String::new(),
            app_connected: true,
            activations: vec![v1::TypeActivations {
                actor_type: "Counter".into(),
                activations: acts,
            }],
            counters: [
                ("localDispatches".to_string(), counters),
                ("partitionsRecovering".to_string(), 0),
            ]
            .into(),
            view: Some(v1::MembersResponse {
                version: 1,
                hosts: view.iter().map(|h| desc(h, Some("box"))).collect(),
            }),
        })),
        metrics: None,
    }
}

fn silent(label: &str) -> Probe {
    Probe {
        target: target(label),
        status: Some(Err(ProbeError::Connect("connection refused".into()))),
        metrics: None,
    }
}

#[test]
fn answers_are_summed_and_the_fleet_is_counted_from_the_views() {
    let probes = vec![
        answering("host-1", "h1", &["h1", "h2", "h3"], 5, 2),
        answering("host-2", "h2", &["h1", "h2", "h3"], 7, 3),
        answering("host-3", "h3", &["h1", "h2", "h3"], 1, 4),
    ];
    let s = build(&probes, &BTreeMap::new(), None, 0);
    assert_eq!(s.summary.text, "3 host(s) / 1 node(s)");
    assert_eq!(s.summary.hosts, 3);
    assert_eq!(s.summary.nodes, Some(1));
    assert_eq!(s.summary.reachable, 3);
    assert_eq!(s.summary.unreachable, 0);
    assert_eq!(s.activations_by_type["Counter"], 9);
    assert_eq!(s.counters["localDispatches"], 13);
    assert_eq!(s.hosts.len(), 3);
    assert!(
        s.hosts
            .iter()
            .all(|h| h.seen_by == 3 && h.node_text == "box")
    );
}

#[test]
fn a_sidecar_that_stops_answering_stays_a_row_under_its_last_id() {
    let last: BTreeMap<String, Host> = [(
        "host-3".to_string(),
        Host::from_proto(desc("h3", Some("box"))),
    )]
    .into();
    // Still in the others' views (its lease has not lapsed): counted, but unreachable.
    let probes = vec![
        answering("host-1", "h1", &["h1", "h2", "h3"], 5, 2),
        answering("host-2", "h2", &["h1", "h2", "h3"], 7, 3),
        silent("host-3"),
    ];
    let s = build(&probes, &last, None, 0);
    assert_eq!(s.summary.hosts, 3);
    assert_eq!(s.summary.unreachable, 1);
    let row = s
        .hosts
        .iter()
        .find(|h| h.source.as_deref() == Some("host-3"));
    let row = row.expect("the silent sidecar is a row");
    assert_eq!(row.id.as_deref(), Some("h3"));
    assert_eq!(row.reachable, Some(false));
    assert_eq!(row.state, "unreachable");
    assert_eq!(row.view_status.as_deref(), Some("active"));
    assert!(row.error.as_deref().unwrap().contains("refused"));
    assert_eq!(
        s.activations_by_type["Counter"], 5,
        "only answers are summed"
    );

    // Its lease lapsed: the views drop it, the count follows, the row stays.
    let probes = vec![
        answering("host-1", "h1", &["h1", "h2"], 5, 2),
        answering("host-2", "h2", &["h1", "h2"], 7, 3),
        silent("host-3"),
    ];
    let s = build(&probes, &last, None, 0);
    assert_eq!(s.summary.text, "2 host(s) / 1 node(s)");
    assert_eq!(s.hosts.len(), 3);
    let row = s
        .hosts
        .iter()
        .find(|h| h.id.as_deref() == Some("h3"))
        .unwrap();
    assert_eq!(row.view_status, None);
    assert_eq!(row.seen_by, 0);
    assert_eq!(row.node_text, "box", "the node of its last answer");
}

#[test]
fn a_sidecar_that_never_answered_is_not_said_to_report_no_node() {
    let s = build(&[silent("host-1")], &BTreeMap::new(), None, 0);
    assert_eq!(s.hosts[0].id, None);
    assert_eq!(s.hosts[0].node_text, NEVER_ANSWERED);
    assert_eq!(s.hosts[0].types, None);
    assert_eq!(s.summary.hosts, 0);
    assert_eq!(s.summary.unreachable, 1);
}

#[test]
fn hosts_known_only_from_a_view_are_listed_as_not_asked() {
    let probes = vec![answering("/run/a.sock", "h1", &["h1", "h9"], 0, 0)];
    let s = build(&probes, &BTreeMap::new(), None, 0);
    let row = s
        .hosts
        .iter()
        .find(|h| h.id.as_deref() == Some("h9"))
        .unwrap();
    assert_eq!(row.reachable, None);
    assert_eq!(row.source, None);
    assert_eq!(row.activations, None, "never a guess");
    assert_eq!(s.summary.asked, 1);
    assert_eq!(s.summary.hosts, 2);
}

#[test]
fn a_host_without_a_node_said_nothing_about_where_it_runs() {
    let mut p = answering("host-1", "h1", &[], 0, 0);
    if let Some(Ok(s)) = &mut p.status {
        s.host = Some(desc("h1", None));
        s.view = Some(v1::MembersResponse {
            version: 1,
            hosts: vec![desc("h1", None), desc("h2", Some("n2"))],
        });
    }
    let s = build(&[p], &BTreeMap::new(), None, 0);
    assert_eq!(s.hosts[0].node_text, SAID_NOTHING);
    assert_eq!(s.hosts[0].node, None);
    assert_eq!(
        s.summary.text,
        "2 host(s) / 1 node(s) (1 host(s) report no node)"
    );
    let mut p = answering("host-1", "h1", &[], 0, 0);
    if let Some(Ok(s)) = &mut p.status {
        s.view = Some(v1::MembersResponse {
            version: 1,
            hosts: vec![desc("h1", None)],
        });
    }
    let s = build(&[p], &BTreeMap::new(), None, 0);
    assert_eq!(s.summary.nodes, None);
    assert!(
        s.summary
            .text
            .ends_with("the fleet said nothing about where it runs"),
        "{}",
        s.summary.text
    );
}

#[test]
fn fenced_hosts_are_named() {
    let mut p = answering("host-1", "h1", &["h1"], 0, 0);
    if let Some(Ok(s)) = &mut p.status {
        s.state = "fenced".into();
        s.fence_reason = "lease lost".into();
        s.counters.insert("partitionsRecovering".into(), 4);
    }
    let s = build(&[p], &BTreeMap::new(), None, 0);
    assert_eq!(s.summary.fenced, vec!["h1".to_string()]);
    assert_eq!(s.summary.partitions_recovering, 4);
    assert_eq!(s.hosts[0].fence_reason.as_deref(), Some("lease lost"));
}

fn scraped(id: &str, activations: u64, fenced: bool) -> Probe {
    let text = format!(
        "# TYPE sigx_turns counter\nsigx_turns_total 4\n\
         sigx_live_activations{{actor_type=\"Counter\"}} {activations}\n\
         sigx_ready {}\nsigx_fenced {}\n",
        u8::from(!fenced),
        u8::from(fenced)
    );
    Probe {
        target: Target::metrics_only(id, Some("10.0.0.9:9090")),
        status: None,
        metrics: Some(Ok(crate::dashboard::probe::Scrape::parse(&text))),
    }
}

#[test]
fn hosts_known_from_the_leases_show_what_their_metrics_say() {
    let leases: Vec<Host> = ["h1", "h2", "h3", "h4"]
        .iter()
        .map(|id| Host::from_proto(desc(id, Some(&format!("node-{id}")))))
        .collect();
    let mut stopped = scraped("h3", 0, false);
    stopped.metrics = Some(Err(ProbeError::Timeout(std::time::Duration::from_secs(1))));
    let mut old = scraped("h4", 0, false);
    old.target = Target::metrics_only("h4", None);
    old.metrics = None;
    let probes = vec![
        scraped("h1", 2, false),
        scraped("h2", 5, true),
        stopped,
        old,
    ];
    let s = build(&probes, &BTreeMap::new(), Some(&leases), 0);
    assert_eq!(s.summary.hosts, 4, "the Leases are the fleet");
    assert_eq!(s.summary.text, "4 host(s) / 4 node(s)");
    assert_eq!(s.hosts.len(), 4, "no host twice, none dropped");
    assert_eq!(s.activations_by_type["Counter"], 7);
    assert_eq!(s.counters["turns"], 8);
    assert_eq!(s.latency_hosts, 2);
    let r = |id: &str| {
        s.hosts
            .iter()
            .find(|h| h.id.as_deref() == Some(id))
            .unwrap()
    };
    assert_eq!(r("h1").state, "ready");
    assert_eq!(r("h1").reachable, Some(true));
    assert_eq!(r("h1").node.as_deref(), Some("node-h1"));
    assert_eq!(
        r("h1").source.as_deref(),
        Some("http://10.0.0.9:9090/metrics")
    );
    assert_eq!(r("h2").state, "fenced");
    assert_eq!(s.summary.fenced, vec!["h2".to_string()]);
    assert_eq!(r("h3").state, "unreachable");
    assert_eq!(r("h3").reachable, Some(false));
    assert_eq!(r("h3").node.as_deref(), Some("node-h3"), "still named");
    assert!(r("h4").error.as_deref().unwrap().contains("meta.health"));
    assert_eq!(r("h4").reachable, Some(false));
    assert_eq!(s.summary.unreachable, 2);
}

#[test]
fn a_host_whose_lease_is_gone_keeps_its_last_descriptor() {
    let mut gone = scraped("h9", 0, false);
    gone.metrics = Some(Err(ProbeError::Timeout(std::time::Duration::from_secs(1))));
    let known = BTreeMap::from([(
        gone.target.label.clone(),
        Host::from_proto(desc("h9", Some("node-9"))),
    )]);
    let s = build(&[gone], &known, Some(&[]), 0);
    assert_eq!(s.summary.hosts, 0, "no Lease holds it");
    assert_eq!(s.hosts.len(), 1, "but it stays listed");
    assert_eq!(s.hosts[0].node.as_deref(), Some("node-9"));
    assert_eq!(s.hosts[0].view_status, None);
}
