//! Per-flow ECMP, as ns-3's global routing with `PerflowEcmpRouting` and
//! every switch of the Hermes paper's baseline: each switch hashes the flow
//! (and, separately, its reverse direction) onto one port of the group, so
//! a flow keeps its path for its whole life, whatever the congestion —
//! and keeps hashing onto a failed link until the routes drop it.
//!
//! The hash is `fulcrum_balance`'s xxHash64 of (flow, direction, switch)
//! salted with the run's seed: the same function the proxy's hash policies
//! use, the per-switch salt being the switch number mixed into the key.

use fulcrum_balance::HashFunction;

use fulcrum_des::Streams;

use super::{follow, Hooks, Scheme, SchemeType, SwitchCtx};
use crate::packet::{Packet, NO_PATH};
use crate::topology::Fabric;

/// Per-flow ECMP at every switch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ecmp;

/// The group member `pkt`'s flow hashes to at `ctx.switch`.
#[inline]
pub fn hash_port(ctx: &SwitchCtx, pkt: &Packet) -> u32 {
    let g = ctx.group;
    if g.len() == 1 {
        return g[0];
    }
    let key = (pkt.flow as u64) << 1 | ctx.reverse as u64 | (ctx.switch as u64) << 40;
    g[(HashFunction::Xxhash.hash_pair(key, ctx.salt) % g.len() as u64) as usize]
}

impl SchemeType for Ecmp {
    const NAME: &'static str = "ecmp";
    type Params = fulcrum_balance::Empty;

    fn build(_: &Self::Params, _: &Fabric, _: &Streams) -> Box<dyn Scheme> {
        Box::new(Ecmp)
    }
}

impl Scheme for Ecmp {
    fn name(&self) -> &'static str {
        "ecmp"
    }

    fn hooks(&self) -> Hooks {
        Hooks { edge: false, single_port_hops: false, src: false }
    }

    fn switch_port(&mut self, ctx: &SwitchCtx, pkt: &mut Packet) -> u32 {
        if pkt.path != NO_PATH {
            return follow(ctx, pkt.path);
        }
        hash_port(ctx, pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn golden_choices_and_the_topology_agree() {
        let f = fabric();
        let loads = FixedLoads(vec![]);
        let ctx = at_leaf0(&f, &loads, 0);
        let mut e = Ecmp;
        let picks: Vec<u32> = (0..8).map(|fl| e.switch_port(&ctx, &mut data(fl, 0, 31))).collect();
        // The same hash as the topology's own route lookup (path delays).
        let expect: Vec<u32> = (0..8).map(|fl| f.next_port(0, 31, fl, false, 7)).collect();
        assert_eq!(picks, expect);
        assert_eq!(picks, [70, 70, 66, 64, 68, 70, 68, 64], "golden: 64, 66, 68, 70 are leaf 0's uplinks");
        // The flow keeps its port whatever the queues.
        let busy = FixedLoads(vec![1000; 100]);
        let ctx = at_leaf0(&f, &busy, 5_000_000);
        assert_eq!(e.switch_port(&ctx, &mut data(0, 9, 31)), picks[0]);
    }
}
