//! Why a balancer could not be built.

use thiserror::Error;

/// A configuration or endpoint set that a balancer rejects at build time.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BuildError {
    /// A weight that is zero, negative, infinite or NaN.
    #[error("endpoint {name:?}: weight {weight} is invalid (must be a finite number greater than 0)")]
    InvalidWeight {
        /// The endpoint's name.
        name: String,
        /// The rejected weight.
        weight: f64,
    },
    /// Two endpoints with the same id.
    #[error("endpoint id {id} appears more than once (second time as {name:?})")]
    DuplicateId {
        /// The repeated id.
        id: u64,
        /// The name of its second occurrence.
        name: String,
    },
    /// A Maglev table size that is not a prime.
    #[error("maglev table_size {0} is not a prime number (65537 is the usual choice)")]
    TableSizeNotPrime(u64),
    /// A Maglev table too small for the endpoint set.
    #[error("maglev table_size {size} is smaller than the {endpoints} endpoints it must hold")]
    TableTooSmall {
        /// The configured size.
        size: u64,
        /// How many endpoints there are.
        endpoints: usize,
    },
    /// A ring size outside the allowed range or with min > max.
    #[error("ring hash {field} = {value} is out of range (allowed {min}..={max}, and min_ring_size ≤ max_ring_size)")]
    RingSizeOutOfRange {
        /// `min_ring_size` or `max_ring_size`.
        field: &'static str,
        /// The rejected value.
        value: u64,
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// Any other numeric parameter out of its range.
    #[error("{field} = {value} is invalid: {expected}")]
    InvalidParameter {
        /// The parameter's name as written in configuration.
        field: &'static str,
        /// The rejected value, printed.
        value: String,
        /// What would be accepted.
        expected: &'static str,
    },
}
