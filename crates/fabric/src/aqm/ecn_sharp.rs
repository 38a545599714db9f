//! ECN# (`kind = "ecn-sharp"`; Zhang, Bai and Chen, CoNEXT 2019, as
//! ns3-ecn-sharp's `ecn-sharp-queue-disc.cc` implements it): marks at
//! dequeue when either
//!
//! 1. the sojourn time is strictly above the instantaneous threshold, or
//! 2. CoDel-style persistent marking says so: a packet is "ok to mark" once
//!    sojourn has stayed at or above `target` (not below it) for longer
//!    than one `interval` — the first packet at or above target arms a
//!    deadline `now + interval`, a later one past that deadline is ok to
//!    mark, and any packet below target disarms it. On entering the
//!    marking state the packet is marked, the count is 1 and the next mark
//!    is due one interval later; while marking, a packet that is not ok to
//!    mark leaves the state, and one at or after the due time is marked,
//!    the count grows by one and the next mark is due `interval / √count`
//!    later.

use serde::{Deserialize, Serialize};

use super::{Aqm, AqmHooks, AqmType, Rng, Verdict};
use crate::packet::Nanos;

/// ECN#'s parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EcnSharpParams {
    /// The instantaneous sojourn threshold.
    #[serde(with = "fulcrum_config::nanos")]
    pub threshold: Nanos,
    /// The persistent-marking target sojourn.
    #[serde(with = "fulcrum_config::nanos")]
    pub target: Nanos,
    /// How long the sojourn must stay at or above target.
    #[serde(with = "fulcrum_config::nanos")]
    pub interval: Nanos,
}

/// One queue's ECN#: its parameters and persistent-marking state.
#[derive(Clone, Copy, Debug)]
pub struct EcnSharp {
    params: EcnSharpParams,
    /// Deadline after which a packet above target is ok to mark (0: unarmed).
    first_above: Nanos,
    marking: bool,
    count: u32,
    next_mark: Nanos,
}

impl EcnSharp {
    pub fn new(params: EcnSharpParams) -> Self {
        EcnSharp { params, first_above: 0, marking: false, count: 0, next_mark: 0 }
    }

    /// The persistent rule: whether this dequeue marks.
    fn persistent(&mut self, now: Nanos, sojourn: Nanos) -> bool {
        let EcnSharpParams { target, interval, .. } = self.params;
        let ok = if sojourn < target {
            self.first_above = 0;
            false
        } else if self.first_above == 0 {
            self.first_above = now + interval;
            false
        } else {
            now > self.first_above
        };
        if self.marking {
            if !ok {
                self.marking = false;
                false
            } else if now >= self.next_mark {
                self.count += 1;
                self.next_mark = now + (interval as f64 / (self.count as f64).sqrt()) as Nanos;
                true
            } else {
                false
            }
        } else if ok {
            self.marking = true;
            self.count = 1;
            self.next_mark = now + interval;
            true
        } else {
            false
        }
    }
}

impl AqmType for EcnSharp {
    const NAME: &'static str = "ecn-sharp";
    type Params = EcnSharpParams;

    fn build(p: &EcnSharpParams, _: Rng) -> Box<dyn Aqm> {
        Box::new(EcnSharp::new(*p))
    }
}

impl Aqm for EcnSharp {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: false, empty: false, requiet: true }
    }

    fn on_departure(&mut self, now: Nanos, sojourn: Nanos, _queued: u32, _bytes: u64, _ect: bool) -> Verdict {
        let persistent = self.persistent(now, sojourn);
        Verdict::mark_if(sojourn > self.params.threshold || persistent)
    }

    /// A sojourn of zero leaves the state alone only with a target above
    /// zero while the state is idle (unarmed, not marking).
    fn quiet(&self) -> bool {
        self.params.target > 0 && self.first_above == 0 && !self.marking
    }
}
