//! Per-flow ECMP as an outside fabric scheme (`scheme = "hashed-paths"`):
//! each switch hashes the flow and its direction, salted with the switch
//! and the run's seed, onto one port of the equal-cost group, the same
//! hash as the built-in `ecmp`; a path an edge scheme carried is followed.

use fulcrum_balance::{Empty, HashFunction};
use fulcrum_des::Streams;
use fulcrum_fabric::lb::{follow, Hooks, Scheme, SchemeType, SwitchCtx};
use fulcrum_fabric::packet::{Packet, NO_PATH};
use fulcrum_fabric::topology::Fabric;

/// The scheme; no parameters.
#[derive(Debug)]
pub struct HashedPaths;

impl SchemeType for HashedPaths {
    const NAME: &'static str = "hashed-paths";
    type Params = Empty;

    fn build(_: &Empty, _: &Fabric, _: &Streams) -> Box<dyn Scheme> {
        Box::new(HashedPaths)
    }
}

impl Scheme for HashedPaths {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// A switch scheme that reads neither the sender nor one-port hops.
    fn hooks(&self) -> Hooks {
        Hooks { edge: false, single_port_hops: false, src: false }
    }

    fn switch_port(&mut self, ctx: &SwitchCtx, pkt: &mut Packet) -> u32 {
        if pkt.path != NO_PATH {
            return follow(ctx, pkt.path);
        }
        let group = ctx.group;
        if group.len() == 1 {
            return group[0];
        }
        let key = (pkt.flow as u64) << 1 | ctx.reverse as u64 | (ctx.switch as u64) << 40;
        group[(HashFunction::Xxhash.hash_pair(key, ctx.salt) % group.len() as u64) as usize]
    }
}
