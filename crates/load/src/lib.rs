//! Test backends and an HTTP load generator (issue 4).
//!
//! - [`backend`]: [`Backends`] start HTTP/1.1 + h2c test upstreams in-process
//!   with a service-time distribution, a status mix and a body size, and
//!   count which of them answered.
//! - [`dist`]: the distributions they draw from ([`Dist`], shared with the
//!   simulator through `fulcrum_workload`, and [`StatusMix`]) and their
//!   command-line syntax.
//! - [`load`]: the load generator: open loop without coordinated omission,
//!   closed loop, and the clients pattern of the seed-000 experiment;
//!   [`load::run`] returns a [`Report`] ([`report`]).
//!
//! Both keep time with a sub-millisecond timer thread (`timer`) instead of
//! tokio's one-millisecond wheel, whose rounding is as large as the latencies
//! measured.

#![forbid(unsafe_code)]

pub mod backend;
mod client;
pub mod dist;
pub mod load;
pub mod report;
mod timer;

pub use backend::{Backend, BackendSpec, Backends, BackendsConfig, BACKEND_HEADER};
pub use dist::{DelayShape, ParseError, StatusMix};
pub use fulcrum_workload::{Dist, Method, Summary};
pub use load::{run, run_async, run_with, Clients, Control, LoadConfig, LoadError, Pattern};
pub use report::{ErrorCounts, ErrorKind, Report};
