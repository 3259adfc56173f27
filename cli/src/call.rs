//! `sigx call <Type>/<key> <method> [json]`.

use crate::{EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, SocketArg};
use sigx_sdk::{ActorError, Client};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The actor, as `<Type>/<key>` (the key may contain further slashes).
    pub target: String,
    /// The method.
    pub method: String,
    /// The payload, as JSON (omit for none).
    pub payload: Option<String>,
    #[command(flatten)]
    pub socket: SocketArg,
    /// The call's deadline, e.g. 500ms, 5s (default: the sidecar's, 30 s).
    #[arg(long, value_parser = crate::duration::parse)]
    pub timeout: Option<Duration>,
}

/// Splits `Type/key` at the first slash.
pub fn parse_target(target: &str) -> Result<(&str, &str), String> {
    match target.split_once('/') {
        Some((t, k)) if !t.is_empty() => Ok((t, k)),
        _ => Err(format!(
            "{target:?} is not an actor: write <Type>/<key>, e.g. Counter/user-42"
        )),
    }
}

/// The reply as a person wants to read it: pretty JSON when it is JSON, the text when it is
/// UTF-8, otherwise a hex dump naming the length.
pub fn render_reply(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return String::new();
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
        return serde_json::to_string_pretty(&value).unwrap_or_default();
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("<{} bytes, not text> {hex}", bytes.len())
        }
    }
}

/// An actor error as lines for stderr: the kind, the message, and the chain of causes.
pub fn render_error(e: &ActorError) -> String {
    let mut out = format!("error: {}: {}", e.kind, e.message);
    let mut cause = e.cause.as_deref();
    while let Some(c) = cause {
        out.push_str(&format!("\n  last answer: {}: {}", c.kind, c.message));
        cause = c.cause.as_deref();
    }
    if let Some(owner) = &e.owner_hint {
        out.push_str(&format!("\n  owner: {owner}"));
    }
    out
}

pub async fn run(args: CallArgs) -> ExitCode {
    let (actor_type, key) = match parse_target(&args.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sigx call: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let payload = match &args.payload {
        None => Vec::new(),
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(_) => text.as_bytes().to_vec(),
            Err(e) => {
                eprintln!(
                    "sigx call: the payload is not JSON ({e}); quote strings, e.g. '\"hello\"'"
                );
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    let client = match Client::connect(&args.socket.socket).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sigx call: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let client = match args.timeout {
        Some(t) => client.with_timeout(t),
        None => client,
    };
    match client
        .call(actor_type, key, args.method.as_str(), payload)
        .await
    {
        Ok(reply) => {
            let text = render_reply(&reply);
            if !text.is_empty() {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", render_error(&e));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_splits_at_the_first_slash() {
        assert_eq!(parse_target("Counter/a").unwrap(), ("Counter", "a"));
        assert_eq!(parse_target("Counter/a/b").unwrap(), ("Counter", "a/b"));
        assert_eq!(parse_target("Counter/").unwrap(), ("Counter", ""));
        assert!(parse_target("Counter").is_err());
        assert!(parse_target("/a").is_err());
    }

    #[test]
    fn replies_render_as_json_text_or_hex() {
        assert_eq!(render_reply(b"{\"a\":1}"), "{\n  \"a\": 1\n}");
        assert_eq!(render_reply(b"42"), "42");
        assert_eq!(render_reply(b"hello there"), "hello there");
        assert_eq!(render_reply(&[0xff, 0x00]), "<2 bytes, not text> ff00");
        assert_eq!(render_reply(b""), "");
    }

    #[test]
    fn errors_show_kind_message_and_causes() {
        let e = ActorError::activation(
            "retries spent",
            ActorError::unplaceable("actor type \"Report\" is registered by no ACTIVE host"),
        );
        assert_eq!(
            render_error(&e),
            "error: activation: retries spent\n  last answer: unplaceable: actor type \"Report\" \
             is registered by no ACTIVE host"
        );
        assert_eq!(render_error(&ActorError::app("boom")), "error: app: boom");
    }
}
