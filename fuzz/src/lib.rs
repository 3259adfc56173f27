//! Fuzz targets over sigx's decoders (issue 17): each function takes the fuzzer's bytes, feeds
//! them to the production code that decodes untrusted input, and panics when that code panics
//! or breaks an invariant it promises (a MAC accepted that was not signed, a rewritten HTTP/2
//! header block that decodes differently, a descriptor that does not round-trip, ...).
//!
//! `fuzz_targets/` runs each under libFuzzer (`make fuzz`, nightly); `tests/corpus.rs` replays
//! the checked-in corpus and every crash found through the same functions on stable
//! (`make test`), so a finding stays fixed.

#![forbid(unsafe_code)]

mod authority;
mod descriptor;
mod mesh;
mod mesh_auth;
mod operator;
mod reminders;
mod requests;
mod support;

pub use authority::app_authority;
pub use descriptor::host_descriptor;
pub use mesh::mesh_messages;
pub use mesh_auth::mesh_auth;
pub use operator::operator_render;
pub use reminders::reminders;
pub use requests::app_requests;

/// A fuzz target: the fuzzer's bytes in, a panic on a bug.
pub type Target = fn(&[u8]);

/// Every target by name (the name of its `fuzz_targets/` binary and corpus folder).
pub const TARGETS: &[(&str, Target)] = &[
    ("app_authority", app_authority),
    ("app_requests", app_requests),
    ("host_descriptor", host_descriptor),
    ("mesh_auth", mesh_auth),
    ("mesh_messages", mesh_messages),
    ("operator_render", operator_render),
    ("reminders", reminders),
];
