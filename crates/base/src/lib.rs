//! What every Fulcrum crate shares, and nothing else: time as integer
//! nanoseconds ([`Nanos`]), the seedable generator every random draw comes
//! from ([`Rng`]) with its independent per-component [`Streams`], and the
//! stable identity of an endpoint ([`EndpointId`]).
//!
//! The balancers (`fulcrum-balance`), the event core (`fulcrum-des`), both
//! simulators, the proxy and the load tool depend on this crate rather than
//! on each other for these values. It has no dependency.

#![forbid(unsafe_code)]

pub mod loghist;
mod rng;
mod streams;

pub use rng::{splitmix64, Rng};
pub use streams::Streams;

/// A point in time or a duration, in nanoseconds. The driver decides the epoch.
pub type Nanos = u64;

/// Nanoseconds in a microsecond, for readable constants.
pub const MICROSECOND: Nanos = 1_000;
/// Nanoseconds in a millisecond.
pub const MILLISECOND: Nanos = 1_000_000;
/// Nanoseconds in a second.
pub const SECOND: Nanos = 1_000_000_000;

/// A [`std::time::Duration`] in integer nanoseconds, saturating past 584 years.
pub fn nanos(d: std::time::Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Stable identity of an endpoint across endpoint-set changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanos_saturates() {
        assert_eq!(nanos(std::time::Duration::from_millis(5)), 5 * MILLISECOND);
        assert_eq!(nanos(std::time::Duration::MAX), u64::MAX);
    }
}
