//! Durations on the command line: `250ms`, `5s`, `2m`, `1h`, or a bare number of milliseconds.

use std::time::Duration;

/// Parses `250ms`, `5s`, `1.5s`, `2m`, `1h` or `250` (milliseconds).
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 500ms, 5s, 2m)"))?;
    let millis = match unit.trim() {
        "" | "ms" => value,
        "s" => value * 1_000.0,
        "m" => value * 60_000.0,
        "h" => value * 3_600_000.0,
        other => return Err(format!("{s:?}: unknown unit {other:?} (use ms, s, m or h)")),
    };
    if !(millis.is_finite() && millis >= 1.0) {
        return Err(format!("{s:?} must be at least 1ms"));
    }
    Ok(Duration::from_millis(millis as u64))
}

/// A short human form: `850ms`, `42s`, `3m07s`, `2h05m`, `4d03h`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        format!("{}ms", d.as_millis())
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3_600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_bare_milliseconds() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("250").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1_500));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3_600));
        assert!(parse("5 parsecs").is_err());
        assert!(parse("0s").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn human_form_is_short() {
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_secs(42)), "42s");
        assert_eq!(human(Duration::from_secs(187)), "3m07s");
        assert_eq!(human(Duration::from_secs(7_500)), "2h05m");
        assert_eq!(human(Duration::from_secs(356_400)), "4d03h");
    }
}
