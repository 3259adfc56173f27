//! The sigx operator: reconciles ActorCluster and ActorRole (DESIGN.md §9).
//!
//! - [`render`]: pure functions from custom resources to manifests.
//! - [`controller`]: the two reconcilers and the shared Lease watch.
//! - [`fleet`]: what the cluster's Leases say (hosts, nodes, states), and lapse judgement.
//! - [`leader`]: leader election so two replicas are safe.
//! - [`operator`]: wiring; [`config`]: flags and environment; [`server`]: `/metrics` and health.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod config;
pub mod controller;
pub mod error;
pub mod fleet;
pub mod leader;
pub mod metrics;
pub mod operator;
pub mod render;
pub mod server;

pub use operator::{Operator, Settings};
