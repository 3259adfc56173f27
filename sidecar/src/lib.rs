//! The sigx sidecar: one per pod, one host of the actor system.
//!
//! Each top-level module is one concept of DESIGN.md:
//! * [`config`]: flags and `SIGX_*` environment, validated before anything binds.
//! * [`clock`]: injectable monotonic and wall clocks.
//! * [`runtime`]: local activations, turn-based delivery, workers, deadlines, idle deactivation.
//! * [`app`]: the app API on the Unix socket (the `Serve` stream and the unary RPCs).
//! * [`membership`]: views, the HeartbeatClock, fencing, and the providers.
//! * [`directory`]: the in-mesh, partitioned, strongly consistent actor directory.
//! * [`placement`]: registration-aware choice of a host, and the routing loop.
//! * [`mesh`]: the authenticated host-to-host gRPC transport.
//! * [`health`]: `/livez`, `/readyz`, `/startupz` and `/metrics`.
//! * [`metrics`]: the `/metrics` text: counters, gauges and latency histograms.
//! * [`host`]: wires the pieces together and runs the lifecycle.
#![forbid(unsafe_code)]

pub mod app;
pub mod clock;
pub mod config;
pub mod directory;
pub mod health;
pub mod host;
pub mod logs;
pub mod membership;
pub mod mesh;
pub mod metrics;
pub mod placement;
pub mod reminders;
pub mod runtime;
mod sqlite_open;
pub mod state;
pub mod trace;
