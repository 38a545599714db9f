//! The proxy's clock: one monotonic time origin for the whole process, so
//! that every worker's balancer, the outlier detector and slow start see one
//! timeline in integer nanoseconds ([`fulcrum_balance::Nanos`]), as the
//! algorithms and the simulator do.

use std::time::Instant;

use fulcrum_balance::Nanos;

/// The process's monotonic time origin, shared by all workers, so that
/// balancers see one timeline in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Epoch(Instant);

impl Epoch {
    /// Start the timeline now.
    pub fn new() -> Self {
        Epoch(Instant::now())
    }

    /// Nanoseconds since the epoch.
    pub fn now(&self) -> Nanos {
        self.at(Instant::now())
    }

    /// `instant` in nanoseconds since the epoch, for a caller that has read
    /// the clock already.
    pub fn at(&self, instant: Instant) -> Nanos {
        u64::try_from(instant.saturating_duration_since(self.0).as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Default for Epoch {
    fn default() -> Self {
        Epoch::new()
    }
}
