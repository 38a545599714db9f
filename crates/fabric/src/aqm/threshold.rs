//! The rules without state: drop-tail, RED with DCTCP's threshold K, TCN.
//!
//! - **Drop-tail** never marks.
//! - **RED with ECN, DCTCP style**: one threshold K in packets; a packet
//!   that arrives to find K or more packets queued is marked
//!   (instantaneous queue, min = max threshold, as DCTCP configures RED).
//! - **TCN**: marks at dequeue when the packet's sojourn time (dequeue time
//!   minus enqueue time) is strictly above the threshold.

use fulcrum_balance::Empty;
use serde::{Deserialize, Serialize};

use super::{Aqm, AqmHooks, AqmType, Arrival, Rng, Verdict};
use crate::packet::Nanos;

/// Drop-tail: never marks (`kind = "drop-tail"`, no parameters).
#[derive(Clone, Copy, Debug)]
pub struct DropTail;

impl AqmType for DropTail {
    const NAME: &'static str = "drop-tail";
    type Params = Empty;

    fn build(_: &Empty, _: Rng) -> Box<dyn Aqm> {
        Box::new(DropTail)
    }
}

impl Aqm for DropTail {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: false, empty: false, requiet: false }
    }

    fn quiet(&self) -> bool {
        true
    }
}

/// DCTCP's RED (`kind = "red"`): mark on arrival when `k` or more packets
/// are queued.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Red {
    /// The threshold K, in packets.
    pub k: u32,
}

impl AqmType for Red {
    const NAME: &'static str = "red";
    type Params = Red;

    fn build(p: &Red, _: Rng) -> Box<dyn Aqm> {
        Box::new(*p)
    }
}

impl Aqm for Red {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: true, empty: false, requiet: false }
    }

    fn on_arrival(&mut self, a: &Arrival) -> Verdict {
        Verdict::mark_if(a.queued >= self.k)
    }

    /// An arrival to an empty queue is marked only with K = 0.
    fn quiet(&self) -> bool {
        self.k > 0
    }
}

/// TCN (`kind = "tcn"`): mark at dequeue when sojourn > `threshold`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tcn {
    #[serde(with = "fulcrum_config::nanos")]
    pub threshold: Nanos,
}

impl AqmType for Tcn {
    const NAME: &'static str = "tcn";
    type Params = Tcn;

    fn build(p: &Tcn, _: Rng) -> Box<dyn Aqm> {
        Box::new(*p)
    }
}

impl Aqm for Tcn {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: false, empty: false, requiet: false }
    }

    fn on_departure(&mut self, _now: Nanos, sojourn: Nanos, _queued: u32, _bytes: u64, _ect: bool) -> Verdict {
        Verdict::mark_if(sojourn > self.threshold)
    }

    /// A sojourn of zero is never above the threshold.
    fn quiet(&self) -> bool {
        true
    }
}
