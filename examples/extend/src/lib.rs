//! Fulcrum extended from outside its crates, with nothing but the public
//! API: each module re-implements a built-in under a new name, and the
//! tests check that it gives the built-in's results byte for byte.
//!
//! - [`two_choices`]: least request with two choices (`"two-choices"`), an
//!   L7 algorithm for the proxy and the request simulator;
//! - [`hashed_paths`]: per-flow ECMP (`"hashed-paths"`), a load-balancing
//!   scheme of the fabric simulator;
//! - [`queue_threshold`]: DCTCP's RED marking (`"queue-threshold"`), a
//!   queue discipline of the fabric simulator;
//! - [`ecn_fraction`]: DCTCP (`"ecn-fraction"`), a congestion control of
//!   the fabric simulator.
//!
//! Call [`register`] once, before reading any configuration or scenario
//! that names them.

#![forbid(unsafe_code)]

pub mod ecn_fraction;
pub mod hashed_paths;
pub mod queue_threshold;
pub mod two_choices;

/// Register every algorithm of this crate (a second call changes nothing).
pub fn register() {
    // Already registered is the only error, and then there is nothing to do.
    let _ = fulcrum_balance::register::<two_choices::TwoChoices>();
    let _ = fulcrum_fabric::lb::register::<hashed_paths::HashedPaths>();
    let _ = fulcrum_fabric::aqm::register::<queue_threshold::QueueThreshold>();
    let _ = fulcrum_fabric::cc::register::<ecn_fraction::EcnFraction>();
}
