//! The configuration layer shared by the proxy's configuration file and the
//! two simulators' scenario files, so that they read alike:
//!
//! - [`units`]: one syntax of durations (`"250us"`, `"1.5s"`) and sizes
//!   (`65536`, `"64KiB"`), with serde adapters ([`duration`], [`size`],
//!   [`Dur`]);
//! - [`document`]: a TOML file with `--set KEY=VALUE` overrides applied to
//!   its document before deserialization, every value keeping its
//!   position ([`toml::Spanned`]), and a [`Source`] that locates fields;
//! - [`registry`]: extension points by name (algorithms, fabric schemes);
//! - [`csv`]: the comma-separated input files, cell by cell, located;
//! - [`Error`]: one error, `file:line:column: field: message`.
//!
//! Each format keeps its raw (deserialized) types apart from its validated
//! ones; validation is per section and reports through [`Source`].

#![forbid(unsafe_code)]

pub mod csv;
pub mod document;
mod error;
pub mod registry;
pub mod units;

pub use document::{digest, parse, read_input, Inputs, Source, SYNTAX};
pub use error::Error;
pub use toml::Spanned;
pub use units::{duration, nanos, parse_duration, parse_nanos, parse_size, size, Dur};
