//! Test backends and an HTTP load generator.
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
//!
//! ```no_run
//! use std::time::Duration;
//! use fulcrum_load::{Backends, BackendsConfig, Clients, Control, Dist, LoadConfig, Pattern};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Ten loopback backends on free ports: nine at 5 ms, one at 50 ms.
//! let delays: Vec<Duration> = [5; 9].iter().chain(&[50]).map(|&ms| Duration::from_millis(ms)).collect();
//! let backends = Backends::start(BackendsConfig::fixed_delays(&delays))?;
//! backends.backends()[9].set_delay(Dist::fixed(Duration::from_millis(200))); // at run time
//! backends.backends()[3].set_status("503".parse()?);
//! backends.backends()[0].pause(Duration::from_millis(200)); // hold arrivals for 200 ms
//!
//! // The seed-000 clients pattern against the first backend.
//! let mut load = LoadConfig::new(format!("http://{}/", backends.addrs()[0]));
//! load.pattern = Pattern::Clients(Clients::seed_000());
//! let report = fulcrum_load::run_with(&load, &Control::new())?; // or run(), or run_async().await
//! println!("{}", report.table()); // or report.json()
//! let served: Vec<u64> = backends.served(); // responses per backend
//! backends.shutdown(); // also on drop
//! # let _ = served;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod backend;
mod client;
pub mod dist;
pub mod load;
pub mod report;
mod timer;

pub use backend::{Backend, BackendSpec, Backends, BackendsConfig, BACKEND_HEADER};
pub use client::Protocol;
pub use dist::{DelayShape, ParseError, StatusMix};
pub use fulcrum_workload::{Dist, Method, Summary};
pub use load::{run, run_async, run_with, Clients, Control, LoadConfig, LoadError, Pattern};
pub use report::{ErrorCounts, ErrorKind, Report};
