//! Round robin over paths at the sending host: DRB and Presto.
//!
//! - **DRB** (Cao et al., "Per-packet load-balanced, low-latency routing
//!   for Clos-based data center networks", CoNEXT 2013): every packet a
//!   host sends to a destination takes the next path, starting from a
//!   random one. The original's `Ipv4Drb` keys the rotation by destination
//!   (its DRB mode 0), so it does here.
//! - **Presto** (He et al., "Presto: edge-based load balancing for fast
//!   datacenter networks", SIGCOMM 2015): the sender cuts each flow (each
//!   direction separately) into flowcells of at most `flowcell` bytes
//!   (64 KB, the paper's TSO size) and sends successive flowcells round
//!   robin over the paths, from a random first path. The original's
//!   program approximates a flowcell by ten packets per path. **Weighted
//!   Presto** (the original's variant for asymmetric fabrics) shrinks a
//!   path's flowcell in proportion to the capacity of its slowest link, so
//!   a path at 1/5 capacity carries 1/5 of the bytes of a full one.
//!
//! Both leave the packet's path to the switches within a rack (one path).

use fulcrum_balance::Rng;
use fulcrum_des::Streams;
use serde::{Deserialize, Serialize};

use super::{EdgeCtx, Hooks, ParamError, Scheme, SchemeType, STREAM_ROUTING};
use crate::packet::Packet;
use crate::topology::Fabric;

/// DRB, as a scheme a scenario names (`scheme = "drb"`, no parameters).
pub struct Drb;

impl SchemeType for Drb {
    const NAME: &'static str = "drb";
    type Params = fulcrum_balance::Empty;

    fn build(_: &Self::Params, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(RoundRobinPaths::drb(fabric, streams.stream(STREAM_ROUTING)))
    }
}

/// Presto, as a scheme a scenario names (`scheme = "presto"`).
pub struct Presto;

/// Presto's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrestoParams {
    /// Bytes per flowcell (a size; 64 KiB).
    #[serde(deserialize_with = "fulcrum_config::size::deserialize")]
    pub flowcell: u64,
    /// Shrink each path's flowcell with its capacity.
    pub weighted: bool,
}

impl Default for PrestoParams {
    fn default() -> Self {
        PrestoParams { flowcell: 65_536, weighted: false }
    }
}

impl SchemeType for Presto {
    const NAME: &'static str = "presto";
    type Params = PrestoParams;

    fn check(p: &PrestoParams) -> Result<(), ParamError> {
        ParamError::positive("flowcell", p.flowcell as f64)
    }

    fn build(p: &PrestoParams, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(RoundRobinPaths::presto(p.flowcell, p.weighted, fabric, streams.stream(STREAM_ROUTING)))
    }
}

/// Where a rotation stands: its current path and the bytes it has sent.
#[derive(Clone, Copy, Debug, Default)]
struct Turn {
    started: bool,
    path: u16,
    bytes: u64,
}

/// DRB or Presto (see the module documentation).
#[derive(Debug)]
pub struct RoundRobinPaths {
    name: &'static str,
    /// Bytes per flowcell; 0: one packet per path (DRB).
    flowcell: u64,
    weighted: bool,
    /// Rotations, by destination (DRB: `host · hosts + peer`) or by flow
    /// direction (Presto: `flow · 2 + reverse`).
    turns: Vec<Turn>,
    hosts: u32,
    rng: Rng,
}

impl RoundRobinPaths {
    /// DRB: one packet per path, per destination.
    pub fn drb(fabric: &Fabric, rng: Rng) -> Self {
        RoundRobinPaths { name: "drb", flowcell: 0, weighted: false, turns: Vec::new(), hosts: fabric.hosts, rng }
    }

    /// Presto with `flowcell`-byte cells (weighted by path capacity if
    /// `weighted`).
    pub fn presto(flowcell: u64, weighted: bool, fabric: &Fabric, rng: Rng) -> Self {
        RoundRobinPaths { name: "presto", flowcell, weighted, turns: Vec::new(), hosts: fabric.hosts, rng }
    }

    /// Flowcell of `path` between the two hosts of `ctx`.
    fn cell(&self, ctx: &EdgeCtx, path: u16) -> u64 {
        if !self.weighted {
            return self.flowcell;
        }
        let f = ctx.fabric;
        let cap = |p: u16| f.path_bps(ctx.host, ctx.peer, p);
        let best = (0..ctx.paths as u16).map(cap).max().unwrap_or(1).max(1);
        (self.flowcell as u128 * cap(path) as u128 / best as u128).max(1) as u64
    }
}

impl Scheme for RoundRobinPaths {
    fn name(&self) -> &'static str {
        self.name
    }

    fn hooks(&self) -> Hooks {
        Hooks { edge: true, single_port_hops: false, src: false }
    }

    fn edge_path(&mut self, ctx: &EdgeCtx, pkt: &Packet) -> Option<u16> {
        if ctx.paths <= 1 {
            return None;
        }
        let key = if self.flowcell == 0 {
            (ctx.host * self.hosts + ctx.peer) as usize
        } else {
            pkt.flow as usize * 2 + ctx.reverse as usize
        };
        if key >= self.turns.len() {
            self.turns.resize(key + 1, Turn::default());
        }
        let mut t = self.turns[key];
        if !t.started {
            t = Turn { started: true, path: self.rng.below(ctx.paths as u64) as u16, bytes: 0 };
        } else if self.flowcell == 0 || t.bytes + u64::from(pkt.wire) > self.cell(ctx, t.path) {
            t.path = ((t.path as u32 + 1) % ctx.paths) as u16;
            t.bytes = 0;
        }
        t.bytes += u64::from(pkt.wire);
        self.turns[key] = t;
        Some(t.path)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::topology::{End, Shape};

    fn edge(f: &Fabric, host: u32, peer: u32) -> EdgeCtx<'_> {
        EdgeCtx { now: 0, host, peer, reverse: false, paths: f.paths(host, peer), fabric: f }
    }

    #[test]
    fn drb_rotates_every_packet_per_destination() {
        let f = fabric();
        let mut drb = RoundRobinPaths::drb(&f, Rng::new(1));
        let to31: Vec<_> = (0..6).map(|s| drb.edge_path(&edge(&f, 0, 31), &data(0, s, 31)).unwrap()).collect();
        assert_eq!(to31, [2, 3, 0, 1, 2, 3], "golden: random start, then round robin");
        // Another flow to the same destination continues the rotation.
        assert_eq!(drb.edge_path(&edge(&f, 0, 31), &data(5, 0, 31)), Some(0));
        assert_eq!(drb.edge_path(&edge(&f, 0, 1), &data(6, 0, 1)), None, "one path within a rack");
    }

    #[test]
    fn presto_moves_on_every_flowcell() {
        let f = fabric();
        let mut presto = RoundRobinPaths::presto(64 * 1024, false, &f, Rng::new(1));
        let ctx = edge(&f, 0, 31);
        let paths: Vec<_> = (0..100).map(|s| presto.edge_path(&ctx, &data(0, s, 31)).unwrap()).collect();
        // 1454-byte packets: 45 fit in 64 KiB.
        assert!(paths[..45].iter().all(|&p| p == paths[0]), "{paths:?}");
        assert_eq!(paths[45], (paths[0] + 1) % 4);
        assert_eq!(paths[90], (paths[0] + 2) % 4);
        assert_eq!(paths[0], 2, "golden first path");
    }

    #[test]
    fn weighted_presto_shrinks_the_flowcell_of_a_slow_path() {
        let shape =
            Shape::LeafSpine { spines: 2, leaves: 2, hosts_per_leaf: 1, links: 1, host_gbps: 10.0, fabric_gbps: 10.0 };
        let mut f = Fabric::build(&shape, 1000);
        // Slow the link from spine 1 down to leaf 1 to 2 Gb/s.
        let slow = f.ports.iter().position(|p| p.from == End::Switch(3) && p.to == End::Switch(1)).unwrap();
        f.ports[slow].bps = 2_000_000_000;
        let mut presto = RoundRobinPaths::presto(14_540, true, &f, Rng::new(3));
        let ctx = edge(&f, 0, 1);
        assert_eq!(presto.cell(&ctx, 0), 14_540);
        assert_eq!(presto.cell(&ctx, 1), 2_908);
        let paths: Vec<_> = (0..24).map(|s| presto.edge_path(&ctx, &data(0, s, 1)).unwrap()).collect();
        let on_slow = paths.iter().filter(|&&p| p == 1).count();
        assert_eq!(on_slow, 4, "10 packets per fast cell, 2 per slow one: {paths:?}");
    }
}
