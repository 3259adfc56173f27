//! `sigx actors where <Type>/<key>` and `sigx actors list <Type>`: where an actor is active, and
//! the live activations of a type across the fleet (the app API's `Locate` and `ListActors`).

use crate::call::{parse_target, render_error};
use crate::duration::human;
use crate::{EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, SocketArg};
use sigx_sdk::Client;
use sigx_sdk::proto::{ActorLocation, ListActorsResponse, LocateResponse, SkippedPartitions};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Subcommand)]
pub enum ActorsCommand {
    /// Where an actor is active: its host, activation id and (asked on its own host) epoch.
    /// Activates nothing; an actor nobody called is "not active".
    Where(WhereArgs),
    /// The live activations of a stateful actor type across the fleet, from the directory
    /// owners, one line each, in a stable order. Exits 1 when an owner did not answer (the
    /// skipped partitions are named on stderr).
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct WhereArgs {
    /// The actor, as `<Type>/<key>` (the key may contain further slashes).
    pub target: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The stateful actor type, e.g. Counter.
    pub actor_type: String,
    /// Actors fetched per request (1..=1000); every page is fetched and printed.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub page_size: u32,
    /// Also show each actor's stored reminders (name, next due time, period).
    #[arg(long)]
    pub reminders: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub socket: SocketArg,
    /// The deadline of each request, e.g. 500ms, 5s (default: the sidecar's, 30 s).
    #[arg(long, value_parser = crate::duration::parse)]
    pub timeout: Option<Duration>,
    /// Print JSON (stable camelCase field names) instead of text.
    #[arg(long)]
    pub json: bool,
}

async fn connect(common: &Common, what: &str) -> Result<Client, ExitCode> {
    match Client::connect(&common.socket.socket).await {
        Ok(c) => Ok(match common.timeout {
            Some(t) => c.with_timeout(t),
            None => c,
        }),
        Err(e) => {
            eprintln!("sigx actors {what}: {e}");
            Err(ExitCode::from(EXIT_UNREACHABLE))
        }
    }
}

pub async fn run(command: ActorsCommand) -> ExitCode {
    match command {
        ActorsCommand::Where(args) => where_is(args).await,
        ActorsCommand::List(args) => list(args).await,
    }
}

/// What `sigx actors where` prints for an answer.
pub fn render_where(target: &str, r: &LocateResponse) -> String {
    if !r.active {
        return format!(
            "{target} is not active: no activation of it is registered anywhere (a call \
             activates it)\n"
        );
    }
    let epoch = if r.epoch > 0 {
        r.epoch.to_string()
    } else {
        format!("- (known only to {}'s sidecar: ask it)", r.host_id)
    };
    format!(
        "{target} is active on host {}\n  activation  {}\n  epoch       {epoch}\n",
        r.host_id, r.activation_id
    )
}

async fn where_is(args: WhereArgs) -> ExitCode {
    let (actor_type, key) = match parse_target(&args.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sigx actors where: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let client = match connect(&args.common, "where").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.locate(actor_type, key).await {
        Ok(r) if args.common.json => {
            let v = serde_json::json!({
                "actor": {"actorType": actor_type, "key": key},
                "active": r.active,
                "hostId": r.host_id,
                "activationId": r.activation_id,
                "epoch": r.epoch,
            });
            println!("{v}");
            ExitCode::SUCCESS
        }
        Ok(r) => {
            print!("{}", render_where(&args.target, &r));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", render_error(&e));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn name(a: &ActorLocation) -> String {
    a.actor
        .as_ref()
        .map(|r| format!("{}/{}", r.actor_type, r.key))
        .unwrap_or_default()
}

/// The table `sigx actors list` prints, and its summary line.
pub fn render_list(actor_type: &str, actors: &[ActorLocation]) -> String {
    let header = ["ACTOR", "HOST", "ACTIVATION"];
    let rows: Vec<[String; 3]> = actors
        .iter()
        .map(|a| [name(a), a.host_id.clone(), a.activation_id.clone()])
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    if !rows.is_empty() {
        let line = |cells: [&str; 3]| {
            format!(
                "{:<w0$}  {:<w1$}  {}",
                cells[0],
                cells[1],
                cells[2],
                w0 = widths[0],
                w1 = widths[1]
            )
        };
        let _ = writeln!(out, "{}", line(header));
        for r in &rows {
            let _ = writeln!(out, "{}", line([&r[0], &r[1], &r[2]]));
        }
    }
    let hosts: std::collections::BTreeSet<&str> =
        actors.iter().map(|a| a.host_id.as_str()).collect();
    let _ = writeln!(
        out,
        "{} live actor(s) of type {actor_type} on {} host(s)",
        actors.len(),
        hosts.len()
    );
    out
}

/// The reminders of the listed actors, one line each, under the actor's name; due times are
/// shown relative to `now_unix_ms` (the caller's clock: informational).
pub fn render_reminders(actors: &[ActorLocation], now_unix_ms: i64) -> String {
    let mut out = String::new();
    let mut total = 0;
    for a in actors.iter().filter(|a| !a.reminders.is_empty()) {
        let _ = writeln!(out, "{}", name(a));
        for r in &a.reminders {
            total += 1;
            let gap = r.due_unix_ms - now_unix_ms;
            let due = if gap >= 0 {
                format!("due in {}", human(Duration::from_millis(gap as u64)))
            } else {
                format!("overdue by {}", human(Duration::from_millis((-gap) as u64)))
            };
            let every = match r.period_ms {
                0 => "one-shot".to_string(),
                p => format!("every {}", human(Duration::from_millis(p))),
            };
            let failed = match r.failed_attempts {
                0 => String::new(),
                n => format!(", {n} failed attempt(s)"),
            };
            let _ = writeln!(out, "  reminder {}  {due}  {every}{failed}", r.name);
        }
    }
    let _ = writeln!(out, "{total} reminder(s)");
    out
}

/// The stderr lines for partitions no owner answered for.
pub fn render_skipped(skipped: &[SkippedPartitions]) -> String {
    let total: usize = skipped.iter().map(|s| s.partitions.len()).sum();
    let mut out = format!(
        "incomplete: {total} directory partition(s) were not listed, so actors in them may be \
         missing; run the command again\n"
    );
    for s in skipped {
        let owner = if s.owner.is_empty() {
            "(no owner)"
        } else {
            &s.owner
        };
        let shown: Vec<String> = s.partitions.iter().take(8).map(u32::to_string).collect();
        let more = if s.partitions.len() > 8 { ", ..." } else { "" };
        let _ = writeln!(
            out,
            "  owner {owner}: {} ({} partition(s): {}{more})",
            s.reason,
            s.partitions.len(),
            shown.join(", ")
        );
    }
    out
}

async fn list(args: ListArgs) -> ExitCode {
    let client = match connect(&args.common, "list").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut actors = Vec::new();
    let mut skipped = Vec::new();
    let mut token = String::new();
    loop {
        let page: ListActorsResponse = match client
            .list_actors_with(
                args.actor_type.as_str(),
                args.page_size,
                token.as_str(),
                args.reminders,
            )
            .await
        {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{}", render_error(&e));
                return ExitCode::from(EXIT_FAILED);
            }
        };
        actors.extend(page.actors);
        skipped.extend(page.skipped);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    if args.common.json {
        let v = serde_json::json!({
            "actorType": args.actor_type,
            "actors": actors.iter().map(|a| serde_json::json!({
                "key": a.actor.as_ref().map(|r| r.key.as_str()).unwrap_or(""),
                "hostId": a.host_id,
                "activationId": a.activation_id,
                "reminders": args.reminders.then(|| a.reminders.iter().map(|r| serde_json::json!({
                    "name": r.name, "dueUnixMs": r.due_unix_ms, "periodMs": r.period_ms,
                    "failedAttempts": r.failed_attempts,
                })).collect::<Vec<_>>()),
            })).collect::<Vec<_>>(),
            "incomplete": !skipped.is_empty(),
            "skipped": skipped.iter().map(|s| serde_json::json!({
                "owner": s.owner, "reason": s.reason, "partitions": s.partitions,
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        print!("{}", render_list(&args.actor_type, &actors));
        if args.reminders {
            print!(
                "{}",
                render_reminders(&actors, crate::status::now_unix_ms())
            );
        }
    }
    if skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprint!("{}", render_skipped(&skipped));
        ExitCode::from(EXIT_FAILED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigx_sdk::proto::ActorRef;

    fn loc(key: &str, host: &str, act: &str) -> ActorLocation {
        ActorLocation {
            actor: Some(ActorRef {
                actor_type: "Counter".into(),
                key: key.into(),
            }),
            host_id: host.into(),
            activation_id: act.into(),
            reminders: Vec::new(),
        }
    }

    #[test]
    fn reminders_are_listed_under_their_actor_relative_to_now() {
        let mut a = loc("alice", "h1", "a1");
        a.reminders = vec![
            sigx_sdk::proto::ReminderInfo {
                name: "daily".into(),
                due_unix_ms: 61_000,
                period_ms: 86_400_000,
                payload: Default::default(),
                failed_attempts: 0,
            },
            sigx_sdk::proto::ReminderInfo {
                name: "late".into(),
                due_unix_ms: 500,
                period_ms: 0,
                payload: Default::default(),
                failed_attempts: 2,
            },
        ];
        let out = render_reminders(&[a, loc("bob", "h2", "b1")], 1_000);
        assert!(
            out.starts_with("Counter/alice\n  reminder daily  due in "),
            "{out}"
        );
        assert!(out.contains("  reminder late  overdue by "), "{out}");
        assert!(out.contains("one-shot, 2 failed attempt(s)\n"), "{out}");
        assert!(
            !out.contains("bob"),
            "an actor without reminders is not listed: {out}"
        );
        assert!(out.ends_with("2 reminder(s)\n"), "{out}");
    }

    #[test]
    fn list_is_a_table_with_a_summary() {
        let out = render_list(
            "Counter",
            &[loc("alice", "host-1", "a1"), loc("bob", "host-22", "b2")],
        );
        assert_eq!(
            out,
            "ACTOR          HOST     ACTIVATION\nCounter/alice  host-1   a1\nCounter/bob    \
             host-22  b2\n2 live actor(s) of type Counter on 2 host(s)\n"
        );
        assert_eq!(
            render_list("Counter", &[]),
            "0 live actor(s) of type Counter on 0 host(s)\n"
        );
    }

    #[test]
    fn where_says_active_or_not() {
        let r = LocateResponse {
            active: true,
            host_id: "host-2".into(),
            activation_id: "act".into(),
            epoch: 0,
        };
        assert_eq!(
            render_where("Counter/a", &r),
            "Counter/a is active on host host-2\n  activation  act\n  epoch       - (known \
             only to host-2's sidecar: ask it)\n"
        );
        let r = LocateResponse { epoch: 7, ..r };
        assert!(render_where("Counter/a", &r).ends_with("epoch       7\n"));
        assert!(
            render_where("Counter/a", &LocateResponse::default())
                .starts_with("Counter/a is not active")
        );
    }

    #[test]
    fn skipped_partitions_name_owner_reason_and_count() {
        let out = render_skipped(&[SkippedPartitions {
            owner: "host-3".into(),
            reason: "recovering".into(),
            partitions: (0..10).collect(),
        }]);
        assert!(
            out.starts_with("incomplete: 10 directory partition(s)"),
            "{out}"
        );
        assert!(
            out.contains("owner host-3: recovering (10 partition(s): 0, 1, 2, 3, 4, 5, 6, 7, ...)"),
            "{out}"
        );
    }
}
