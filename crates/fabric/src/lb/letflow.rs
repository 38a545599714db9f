//! LetFlow (Vanini et al., "Let it flow: resilient asymmetric load
//! balancing with flowlet switching", NSDI 2017): each switch sends a new
//! flowlet of a flow down a port drawn uniformly from the group, and keeps
//! the flowlet on that port while the flow's packets come closer together
//! than the flowlet gap. Flowlets adapt to asymmetry by themselves: on a
//! congested path packets slow down, gaps open sooner and the flow moves.
//!
//! As the original's `Ipv4LetFlowRouting`: a table per switch keyed by
//! flow (here each direction separately), a packet arriving within the gap
//! of the flowlet's last packet (`now − last ≤ gap`) reuses its port and
//! refreshes the time; otherwise a uniform draw. The gap defaults to
//! 500 µs, the value of the original's experiment program.

use std::collections::HashMap;

use fulcrum_balance::Rng;
use fulcrum_des::Streams;
use serde::{Deserialize, Serialize};

use super::{forced, Hooks, ParamError, Scheme, SchemeType, SwitchCtx, STREAM_ROUTING};
use crate::packet::{Nanos, Packet};
use crate::topology::Fabric;

/// A flow's current flowlet at one switch.
#[derive(Clone, Copy, Debug)]
struct Flowlet {
    port: u32,
    last: Nanos,
}

/// LetFlow at every switch.
#[derive(Debug)]
pub struct LetFlow {
    gap: Nanos,
    /// Keyed by `switch << 33 | flow << 1 | reverse`.
    table: HashMap<u64, Flowlet>,
    rng: Rng,
}

/// LetFlow's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LetFlowParams {
    /// Idle time after which a flow's next packet starts a new flowlet (500 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub flowlet_gap: Nanos,
}

impl Default for LetFlowParams {
    fn default() -> Self {
        LetFlowParams { flowlet_gap: 500_000 }
    }
}

impl SchemeType for LetFlow {
    const NAME: &'static str = "letflow";
    type Params = LetFlowParams;

    fn check(p: &LetFlowParams) -> Result<(), ParamError> {
        ParamError::positive("flowlet_gap", p.flowlet_gap as f64)
    }

    fn build(p: &LetFlowParams, _: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(LetFlow::new(p.flowlet_gap, streams.stream(STREAM_ROUTING)))
    }
}

impl LetFlow {
    pub fn new(gap: Nanos, rng: Rng) -> Self {
        LetFlow { gap, table: HashMap::new(), rng }
    }
}

impl Scheme for LetFlow {
    fn name(&self) -> &'static str {
        "letflow"
    }

    fn hooks(&self) -> Hooks {
        Hooks { edge: false, single_port_hops: false, src: false }
    }

    fn switch_port(&mut self, ctx: &SwitchCtx, pkt: &mut Packet) -> u32 {
        if let Some(port) = forced(ctx, pkt) {
            return port;
        }
        let g = ctx.group;
        let key = (ctx.switch as u64) << 33 | (pkt.flow as u64) << 1 | ctx.reverse as u64;
        let now = ctx.now;
        if let Some(f) = self.table.get_mut(&key) {
            // A port that failure detection removed starts a new flowlet.
            if now - f.last <= self.gap && g.contains(&f.port) {
                f.last = now;
                return f.port;
            }
        }
        let port = g[self.rng.below(g.len() as u64) as usize];
        self.table.insert(key, Flowlet { port, last: now });
        port
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn a_flowlet_keeps_its_port_until_a_gap() {
        let f = fabric();
        let loads = FixedLoads(vec![]);
        let mut lf = LetFlow::new(500_000, Rng::new(1));
        let at = |t| at_leaf0(&f, &loads, t);
        let mut pick = |t, flow| lf.switch_port(&at(t), &mut data(flow, 0, 31));
        let first = pick(0, 0);
        // Packets 400 µs apart stay on the flowlet's port (each refreshes it).
        assert_eq!(pick(400_000, 0), first);
        assert_eq!(pick(800_000, 0), first);
        assert_eq!(pick(1_300_000, 0), first, "exactly the gap still counts");
        // A gap over 500 µs: a new draw (golden sequence for seed 1).
        let later: Vec<u32> = (0..4).map(|i| pick(2_000_000 + i * 600_000, 0)).collect();
        assert_eq!((first, later), (68, vec![68, 68, 66, 68]));
        // Within a rack the one port is used without a table entry.
        let mut ctx = at(0);
        ctx.dst = 1;
        ctx.group = f.group(0, 1);
        assert_eq!(lf.switch_port(&ctx, &mut data(9, 0, 1)), f.group(0, 1)[0]);
    }
}
