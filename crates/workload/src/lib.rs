//! What Fulcrum's drivers share about a workload and its measurement, so
//! that each idea exists once: the simulator (`fulcrum sim`), the load
//! generator and test backends (`fulcrum load`, `fulcrum backend`) and the
//! demo that prints both side by side.
//!
//! - [`dist`]: [`Dist`], the distributions of durations (service times,
//!   network delays), their scenario (serde) and command-line syntaxes, and
//!   their seeded sampler.
//! - [`summary`]: [`Summary`], the latency figures, computed exactly or from
//!   an HDR histogram ([`Method`]), and the [`Recorder`] drivers feed
//!   latencies into, with bounded memory past [`EXACT_LIMIT`] samples.
//! - [`plot`]: SVG primitives and a line [`plot::Chart`] (lines over an x/y
//!   frame with a legend) that the drivers' figures are built from.
//! - [`progress`]: the progress line long runs draw on stderr.
//! - [`cdf`]: [`Cdf`], sizes interpolated from a CDF file (flow sizes).
//! - [`interval`]: the mean and 95 % interval of a figure over runs.
//! - [`runs`]: runs over seeds spread over threads, seeds checked.
//! - [`report`]: the JSON and the CSV files the simulators write.
//!
//! No clocks, sockets or async runtimes here: values (and the pool of
//! threads independent runs share), so that a simulator and a live driver
//! compute the same figures the same way.

#![forbid(unsafe_code)]

pub mod cdf;
pub mod dist;
pub mod interval;
pub mod plot;
pub mod progress;
pub mod report;
pub mod runs;
pub mod summary;

pub use cdf::Cdf;
pub use dist::{Dist, ParseError};
pub use summary::{Method, Recorder, Summary, EXACT_LIMIT, FIGURES};
