//! DCTCP's RED marking as an outside queue discipline
//! (`kind = "queue-threshold"` in `[aqm]`): a packet that arrives to find
//! `k` or more packets queued is marked, the same rule as the built-in
//! `red`.

use fulcrum_fabric::aqm::{Aqm, AqmHooks, AqmType, Arrival, ParamError, Rng, Verdict};
use serde::{Deserialize, Serialize};

/// The rule and its one parameter.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueThreshold {
    /// The threshold K, in packets (at least 1).
    pub k: u32,
}

impl AqmType for QueueThreshold {
    const NAME: &'static str = "queue-threshold";
    type Params = QueueThreshold;

    fn check(p: &QueueThreshold) -> Result<(), ParamError> {
        ParamError::positive("k", f64::from(p.k))
    }

    fn build(p: &QueueThreshold, _: Rng) -> Box<dyn Aqm> {
        Box::new(*p)
    }
}

impl Aqm for QueueThreshold {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Only arrivals: no dequeue state, and nothing to redo after one.
    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: true, empty: false, requiet: false }
    }

    fn on_arrival(&mut self, a: &Arrival) -> Verdict {
        Verdict::mark_if(a.queued >= self.k)
    }

    /// A packet finding the queue empty is never marked (k ≥ 1).
    fn quiet(&self) -> bool {
        true
    }
}
