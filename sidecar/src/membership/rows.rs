//! Decoding the rows of the SQL membership stores (SQLite, PostgreSQL): both keep a lease
//! table (`id, holder, descriptor JSON, ttl_ms, version`) and a change log (`seq, id, op,
//! holder, descriptor, ttl_ms`), with the same meaning, so they decode them in one place.

use super::descriptor::HostDescriptor;
use super::provider::{Change, LeaseRecord, ProviderError};
use std::time::Duration;

/// A lease row as a record. The version doubles as the renewal token: every write by the
/// holder gets a new one, and only a write changes it.
pub(crate) fn lease_record(
    provider: &'static str,
    id: String,
    holder: String,
    descriptor: &str,
    ttl_ms: i64,
    version: i64,
) -> Result<LeaseRecord, ProviderError> {
    let descriptor =
        HostDescriptor::from_json(descriptor).map_err(|e| ProviderError::Malformed {
            provider,
            id: id.clone(),
            detail: e.to_string(),
        })?;
    Ok(LeaseRecord {
        descriptor,
        holder,
        renew: version.to_string(),
        ttl: super::config::published_ttl(Duration::from_millis(ttl_ms.max(0) as u64)),
        version: version as u64,
    })
}

/// One change-log row as a change. An `upsert` carries its record; any other op is a
/// deletion, which names a holder only when that holder withdrew its own record.
pub(crate) fn change_row(
    provider: &'static str,
    seq: i64,
    id: String,
    op: &str,
    holder: Option<String>,
    descriptor: Option<String>,
    ttl_ms: Option<i64>,
) -> Result<Change, ProviderError> {
    Ok(match (op, holder, descriptor, ttl_ms) {
        ("upsert", Some(holder), Some(descriptor), Some(ttl_ms)) => Change::Upsert(lease_record(
            provider,
            id,
            holder,
            &descriptor,
            ttl_ms,
            seq,
        )?),
        ("upsert", ..) => {
            return Err(ProviderError::Malformed {
                provider,
                detail: format!("change {seq} lacks its record"),
                id,
            });
        }
        (_, holder, _, _) => Change::Delete {
            id,
            version: seq as u64,
            withdrawn: holder.is_some(),
        },
    })
}
