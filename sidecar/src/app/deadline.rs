//! Call deadlines: the request's own `timeout_ms`, the gRPC `grpc-timeout` header, and the
//! default, whichever ends first.

use std::time::Duration;
use tokio::time::Instant;

/// Parses a `grpc-timeout` value (`<digits><unit>`, unit one of H M S m u n).
///
/// Anything else is `None`: the header is then ignored. (Split by bytes: splitting the `str`
/// before its last character panicked on a non-ASCII one, found by fuzzing.)
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (&unit, digits) = value.as_bytes().split_last()?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n.saturating_mul(3600)),
        b'M' => Duration::from_secs(n.saturating_mul(60)),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The deadline of a call received at `now`.
pub fn from_request(
    metadata: &tonic::metadata::MetadataMap,
    timeout_ms: u64,
    default: Duration,
    now: Instant,
) -> Instant {
    let mut timeout = if timeout_ms == 0 {
        default
    } else {
        Duration::from_millis(timeout_ms)
    };
    if let Some(grpc) = metadata
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
    {
        timeout = timeout.min(grpc);
    }
    now + timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("x"), None);
        assert_eq!(parse_grpc_timeout("10q"), None);
        assert_eq!(parse_grpc_timeout("+5m"), None, "digits only");
        assert_eq!(parse_grpc_timeout("5ϒ"), None, "a non-ASCII unit");
    }

    #[tokio::test(start_paused = true)]
    async fn the_shortest_deadline_wins() {
        let now = Instant::now();
        let mut md = tonic::metadata::MetadataMap::new();
        assert_eq!(
            from_request(&md, 0, Duration::from_secs(30), now),
            now + Duration::from_secs(30)
        );
        assert_eq!(
            from_request(&md, 500, Duration::from_secs(30), now),
            now + Duration::from_millis(500)
        );
        md.insert("grpc-timeout", "100m".parse().unwrap());
        assert_eq!(
            from_request(&md, 500, Duration::from_secs(30), now),
            now + Duration::from_millis(100)
        );
    }
}
