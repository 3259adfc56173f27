//! The page itself, embedded in the binary: no front-end build, nothing fetched from elsewhere.

/// The HTML.
pub const INDEX: &str = include_str!("page/index.html");
/// The script: polls `/api/fleet` and renders it; runs the actor search.
pub const SCRIPT: &str = include_str!("page/dashboard.js");
/// The style sheet.
pub const STYLE: &str = include_str!("page/dashboard.css");
