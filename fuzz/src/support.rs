//! What several targets share: a fixed clock, and the prost round-trip check.

use prost::Message;
use sigx_sidecar::clock::Clock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock every target reads: fixed, so a corpus file means the same on every run.
pub const NOW_MS: i64 = 1_700_000_000_000;

/// A clock standing at [`NOW_MS`].
#[derive(Debug)]
pub struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
    fn wall(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(NOW_MS as u64)
    }
}

/// Decodes `bytes` as `M`; a message that decodes must encode to bytes that decode equal.
pub fn decode<M: Message + Default + PartialEq>(bytes: &[u8]) -> Option<M> {
    let m = M::decode(bytes).ok()?;
    let again = M::decode(m.encode_to_vec().as_slice())
        .unwrap_or_else(|e| panic!("{} re-encoded does not decode: {e}", type_name::<M>()));
    assert!(again == m, "{} does not round-trip", type_name::<M>());
    Some(m)
}

fn type_name<M>() -> &'static str {
    std::any::type_name::<M>()
}

/// Splits `data` at the first `sep`.
pub fn split(data: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == sep) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}
