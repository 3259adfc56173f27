//! `reminders`: what an app's `SetReminder` asks for, and the `$reminder` turn's payload
//! (`sidecar/src/reminders/`).
//!
//! Byte 0 even: the rest is a `SetReminderRequest`, checked by [`spec_of`] as the sidecar
//! does at [`NOW_MS`]; a periodic reminder it accepts must have a next due time, from any wall
//! clock time up to the year 9999 it may be delivered at (the first eight bytes, then a few
//! around the due time), strictly later than that time and on the reminder's grid
//! (`due + k·period`); and [`next_due`] of any stored row (the bytes as three integers) must
//! not panic. Odd: the rest is a delivery payload, read by [`decode_delivery`]; one that reads
//! must survive [`delivery`] unchanged.

use crate::support::{NOW_MS, decode};
use sigx_proto::v1;
use sigx_sidecar::reminders::api::spec_of;
use sigx_sidecar::reminders::{ReminderRow, decode_delivery, delivery, next_due};
use sigx_sidecar::runtime::ActorId;

/// The fuzz target.
pub fn reminders(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        set(rest);
    } else {
        delivered(rest);
    }
}

/// The last wall clock millisecond of the year 9999.
const MAX_WALL_MS: i64 = 253_402_300_799_999;

fn int(data: &[u8], at: usize) -> i64 {
    data.get(at..at + 8)
        .map_or(0, |b| i64::from_le_bytes(b.try_into().unwrap()))
}

fn set(data: &[u8]) {
    // Whatever a store holds, the scheduler's arithmetic on it must not panic.
    let _ = next_due(int(data, 0), int(data, 8) as u64, int(data, 16));
    let extra = int(data, 0).clamp(0, MAX_WALL_MS);
    let Some(req) = decode::<v1::SetReminderRequest>(data) else {
        return;
    };
    let Ok(spec) = spec_of(req, NOW_MS) else {
        return;
    };
    if spec.period_ms == 0 {
        return;
    }
    let due = spec.due_unix_ms;
    for now in [
        NOW_MS,
        extra,
        due,
        due.saturating_sub(1),
        due.saturating_add(1),
        0,
        MAX_WALL_MS,
    ] {
        let now = now.clamp(0, MAX_WALL_MS);
        let next = next_due(due, spec.period_ms, now);
        assert!(
            next > now,
            "next due {next} of a reminder due {due} every {} ms is not after {now}",
            spec.period_ms
        );
        let off = i128::from(next) - i128::from(due);
        assert!(
            off > 0 && off % i128::from(spec.period_ms) == 0,
            "next due {next} is off the grid of {due} + k·{} ms",
            spec.period_ms
        );
    }
}

fn delivered(data: &[u8]) {
    let Ok(r) = decode_delivery(data) else {
        return;
    };
    if r.attempt == 0 {
        // A sidecar counts attempts from 1.
        return;
    }
    let row = ReminderRow {
        actor: ActorId::new("Fuzz", "k"),
        name: r.name.clone(),
        due_unix_ms: r.due_unix_ms,
        period_ms: r.period_ms,
        payload: r.payload.clone(),
        next_attempt_ms: r.due_unix_ms,
        attempts: r.attempt - 1,
        version: 1,
        claimed_by: None,
        claim_until_ms: 0,
    };
    let again = decode_delivery(&delivery(&row)).expect("a delivery sigx made reads back");
    assert!(
        again == r,
        "a delivery does not round-trip: {r:?} vs {again:?}"
    );
}
