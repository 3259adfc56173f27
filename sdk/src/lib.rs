//! The Rust SDK for sigx apps: serve actor turns, and call actors, through the local sidecar.
//!
//! An app never talks to another pod. It talks to its own sidecar over a Unix socket (path in
//! `SIGX_SOCKET`, default `/var/run/sigx/sidecar.sock`): it registers its types on a `Serve`
//! stream and answers the turns the sidecar pushes; it calls any actor in the fleet with
//! [`Client::call`]. Placement, the directory, single activation and fencing are the sidecar's
//! job; the app only holds state and runs handlers.
//!
//! * [`ActorType`]: a stateful type. Each activation holds its state `S` in memory, created on
//!   the activation's first turn and dropped after its last. One turn at a time per activation
//!   (unless declared reentrant), so a counter is just a number.
//! * [`WorkerType`]: a stateless type, run where the call lands, with a concurrency cap.
//! * [`App`]: the types, served with [`App::serve`] (reconnecting with capped backoff when the
//!   sidecar goes away) or [`App::spawn`].
//! * [`Client`]: calls, [`Client::members`], [`Client::on_change`], [`Client::worker_on`],
//!   [`Client::status`]. Errors are [`ActorError`]s with a stable [`ErrorKind`].
//!
//! ```no_run
//! use sigx_sdk::{ActorError, ActorType, App, Client, Context, WorkerType};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let counter = ActorType::new("Counter", |_ctx: Context| async { Ok(0i64) })
//!         .json_method("increment", |ctx, by: Option<i64>| async move {
//!             let mut count = ctx.state().await;
//!             *count += by.unwrap_or(1);
//!             Ok(*count)
//!         })
//!         .json_method("get", |ctx, (): ()| async move { Ok(*ctx.state().await) });
//!     let echo = WorkerType::new("Echo")
//!         .method("echo", |ctx| async move { Ok(ctx.payload().clone()) });
//!
//!     let client = Client::from_env();
//!     let serving = App::new("counter-app").actor(counter).worker(echo).spawn(&client);
//!     serving.registered(1).await?;
//!
//!     let n: i64 = client.call_json("Counter", "user-42", "increment", &5).await?;
//!     assert_eq!(n, 5);
//!     match client.call("Counter", "user-42", "no-such-method", "").await {
//!         Err(e) if e.kind == sigx_sdk::ErrorKind::Invalid => {}
//!         other => panic!("expected invalid, got {other:?}"),
//!     }
//!     serving.shutdown().await?;
//!     Ok(())
//! }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod app;
mod bound;
mod client;
mod connect;
mod context;
mod members;
pub mod payload;
mod reminders;
mod serve;
mod storage;
mod timers;
mod worker;

pub use app::{ActorType, App, Dispatcher};
pub use bound::{BootClock, WallClock};
pub use client::{ActorHandle, Client, Subscription, WorkerOn};
pub use connect::{ConnectError, DEFAULT_SOCKET, SOCKET_ENV, SidecarChannel, socket_from_env};
pub use context::{ActorContext, Context};
pub use members::{Host, HostStatus, MemberFilter, Members};
pub use reminders::{Due, Reminder, ReminderInfo};
pub use serve::{Backoff, ServeError, ServeHandle, ServeState};
pub use sigx_proto::v1::DeactivateReason;
pub use sigx_proto::{ActorError, ErrorKind};
pub use storage::Storage;
pub use timers::TimerTick;
pub use worker::WorkerType;

/// The generated wire types, for apps that need the raw messages.
pub use sigx_proto::v1 as proto;
