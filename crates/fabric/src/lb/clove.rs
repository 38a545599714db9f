//! CLOVE-ECN: edge flowlets over source-routed paths, weighted by ECN.
//!
//! Reference: Katta et al., "Clove: Congestion-Aware Load Balancing at the
//! Virtual Edge", CoNEXT 2017, as the ns3-ecn-sharp module `src/clove`
//! implements it (run mode "ECN").
//!
//! The sending host keeps, per destination leaf, a weight for each path
//! (all 1 at start, so they sum to the number of paths `n`). A flow's
//! packets stay on their path while they come closer together than the
//! flowlet gap; a new flowlet draws a path with probability weight ÷ `n`
//! (the first path whose running sum of weights ÷ `n` reaches a uniform
//! draw). When an ACK comes back with ECN-Echo for a path, and that path's
//! weight was last cut at least half an RTT ago, its weight falls to two
//! thirds and the third it loses is shared equally among the other paths
//! to the same leaf (the sum stays `n`; with one path nothing changes).
//!
//! Parameters and defaults as the Hermes experiment program sets them:
//! flowlet gap 500 µs, half RTT 40 µs; the cut (1/3) is the original's
//! constant.

use std::collections::HashMap;

use fulcrum_balance::Rng;
use fulcrum_des::Streams;
use serde::{Deserialize, Serialize};

use super::{max_paths, EdgeCtx, ParamError, Scheme, SchemeType, STREAM_ROUTING};
use crate::packet::{Nanos, Packet, NO_PATH};
use crate::topology::Fabric;

/// Share of a path's weight moved to the other paths on an ECN echo.
const CUT: f64 = 1.0 / 3.0;

/// CLOVE-ECN's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CloveParams {
    /// Idle time after which a flow's next packet starts a new flowlet.
    #[serde(with = "fulcrum_config::nanos")]
    pub flowlet_gap: Nanos,
    /// Least time between two cuts of the same path's weight.
    #[serde(with = "fulcrum_config::nanos")]
    pub half_rtt: Nanos,
}

impl Default for CloveParams {
    fn default() -> Self {
        CloveParams { flowlet_gap: 500_000, half_rtt: 40_000 }
    }
}

impl SchemeType for CloveScheme {
    const NAME: &'static str = "clove";
    type Params = CloveParams;

    fn check(p: &CloveParams) -> Result<(), ParamError> {
        ParamError::positive("flowlet_gap", p.flowlet_gap as f64)?;
        ParamError::positive("half_rtt", p.half_rtt as f64)
    }

    fn build(p: &CloveParams, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(CloveScheme::new(*p, fabric, streams.stream(STREAM_ROUTING)))
    }
}

#[derive(Clone, Copy, Debug)]
struct Flowlet {
    path: u16,
    last: Nanos,
}

/// One host's CLOVE state.
#[derive(Clone, Debug)]
pub struct Clove {
    params: CloveParams,
    /// `[dst_leaf][path]`.
    weights: Vec<Vec<f64>>,
    /// `[dst_leaf][path]`: when the weight was last cut.
    last_cut: Vec<Vec<Option<Nanos>>>,
    flowlets: HashMap<u32, Flowlet>,
}

impl Clove {
    /// A host in a fabric of `leaves` leaves with `paths` paths between any
    /// two of them.
    pub fn new(params: CloveParams, leaves: usize, paths: usize) -> Self {
        Clove {
            params,
            weights: vec![vec![1.0; paths]; leaves],
            last_cut: vec![vec![None; paths]; leaves],
            flowlets: HashMap::new(),
        }
    }

    /// The weights towards `dst_leaf` (they sum to the number of paths).
    pub fn weights(&self, dst_leaf: usize) -> &[f64] {
        &self.weights[dst_leaf]
    }

    /// The path for a packet of `flow` to `dst_leaf` at `now`; `uniform` is
    /// a draw in [0, 1), used only when a new flowlet starts.
    pub fn choose(&mut self, now: Nanos, flow: u32, dst_leaf: usize, uniform: f64) -> usize {
        let path = match self.flowlets.get(&flow) {
            Some(f) if now.saturating_sub(f.last) < self.params.flowlet_gap => usize::from(f.path),
            _ => self.weighted(dst_leaf, uniform),
        };
        self.flowlets.insert(flow, Flowlet { path: path as u16, last: now });
        path
    }

    fn weighted(&self, dst_leaf: usize, uniform: f64) -> usize {
        let w = &self.weights[dst_leaf];
        let n = w.len() as f64;
        let mut sum = 0.0;
        for (p, weight) in w.iter().enumerate() {
            sum += weight;
            if uniform <= sum / n {
                return p;
            }
        }
        // Rounding left the sum a hair under n: the last path.
        w.len() - 1
    }

    /// An ACK for a packet that went to `dst_leaf` by `path` came back at
    /// `now`, echoing ECN or not.
    pub fn acked(&mut self, now: Nanos, dst_leaf: usize, path: usize, ece: bool) {
        if !ece {
            return;
        }
        let last = &mut self.last_cut[dst_leaf][path];
        if last.is_some_and(|t| now.saturating_sub(t) < self.params.half_rtt) {
            return;
        }
        let w = &mut self.weights[dst_leaf];
        let others = w.len() - 1;
        if others == 0 {
            return;
        }
        *last = Some(now);
        let moved = w[path] * CUT;
        w[path] -= moved;
        for (p, weight) in w.iter_mut().enumerate() {
            if p != path {
                *weight += moved / others as f64;
            }
        }
    }

    /// The flow is over: forget its flowlet.
    pub fn finished(&mut self, flow: u32) {
        self.flowlets.remove(&flow);
    }
}

/// CLOVE-ECN at every host, as a routing scheme: data packets carry the
/// path their flowlet chose; ACKs (and the receiver's other packets) go by
/// ECMP, as in the original, where only the sending side runs CLOVE.
#[derive(Debug)]
pub struct CloveScheme {
    hosts: Vec<Clove>,
    /// Destination rack of each flow seen, for its ACKs' feedback.
    dst_rack: HashMap<u32, usize>,
    rng: Rng,
}

impl CloveScheme {
    pub fn new(params: CloveParams, fabric: &Fabric, rng: Rng) -> Self {
        let racks = fabric.racks().max(1) as usize;
        let paths = max_paths(fabric);
        CloveScheme {
            hosts: (0..fabric.hosts).map(|_| Clove::new(params, racks, paths)).collect(),
            dst_rack: HashMap::new(),
            rng,
        }
    }
}

impl Scheme for CloveScheme {
    fn name(&self) -> &'static str {
        "clove"
    }

    fn edge_path(&mut self, ctx: &EdgeCtx, pkt: &Packet) -> Option<u16> {
        if ctx.reverse || ctx.paths <= 1 {
            return None;
        }
        let rack = ctx.fabric.rack[ctx.peer as usize] as usize;
        self.dst_rack.insert(pkt.flow, rack);
        let u = self.rng.unit();
        let path = self.hosts[ctx.host as usize].choose(ctx.now, pkt.flow, rack, u);
        Some(path as u16)
    }

    fn on_ack(&mut self, now: Nanos, host: u32, ack: &Packet) {
        if ack.echo_path == NO_PATH {
            return;
        }
        if let Some(&rack) = self.dst_rack.get(&ack.flow) {
            self.hosts[host as usize].acked(now, rack, usize::from(ack.echo_path), ack.ece());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn equal_weights_split_the_unit_interval() {
        let mut c = Clove::new(CloveParams::default(), 2, 4);
        let picks: Vec<usize> =
            [0.0, 0.25, 0.26, 0.5, 0.51, 0.99].iter().enumerate().map(|(i, &u)| c.choose(0, i as u32, 1, u)).collect();
        assert_eq!(picks, [0, 0, 1, 1, 2, 3]);
    }

    #[test]
    fn an_ecn_echo_moves_a_third_of_the_weight() {
        let mut c = Clove::new(CloveParams::default(), 2, 4);
        c.acked(0, 1, 0, false);
        assert!(close(c.weights(1), &[1.0; 4]));
        c.acked(100, 1, 0, true);
        let third = 1.0 / 9.0;
        assert!(close(c.weights(1), &[2.0 / 3.0, 1.0 + third, 1.0 + third, 1.0 + third]));
        // A second echo within half an RTT (40 µs) changes nothing.
        c.acked(30_000, 1, 0, true);
        assert!(close(c.weights(1), &[2.0 / 3.0, 1.0 + third, 1.0 + third, 1.0 + third]));
        // After it: 2/3 → 4/9, the others gain 2/27 each.
        c.acked(40_100, 1, 0, true);
        let w = c.weights(1);
        assert!((w[0] - 4.0 / 9.0).abs() < 1e-9, "{w:?}");
        assert!((w.iter().sum::<f64>() - 4.0).abs() < 1e-9);
        // Other destination leaves are untouched.
        assert!(close(c.weights(0), &[1.0; 4]));
        // Path 0 now owns [0, 1/9) of the draw: 0.12 goes to path 1.
        assert_eq!(c.choose(50_000, 1, 1, 0.12), 1);
        assert_eq!(c.choose(50_000, 2, 1, 0.11), 0);
    }

    #[test]
    fn flowlets_hold_their_path_until_the_gap() {
        let mut c = Clove::new(CloveParams::default(), 2, 4);
        assert_eq!(c.choose(0, 5, 1, 0.9), 3);
        assert_eq!(c.choose(499_999, 5, 1, 0.0), 3);
        assert_eq!(c.choose(999_998, 5, 1, 0.0), 3);
        assert_eq!(c.choose(1_499_998, 5, 1, 0.0), 0);
        c.finished(5);
        assert_eq!(c.choose(1_500_000, 5, 1, 0.6), 2);
    }

    #[test]
    fn a_single_path_keeps_its_weight() {
        let mut c = Clove::new(CloveParams::default(), 1, 1);
        c.acked(0, 0, 0, true);
        assert!(close(c.weights(0), &[1.0]));
        assert_eq!(c.choose(0, 0, 0, 0.999), 0);
    }

    mod scheme {
        use super::super::super::testing::*;
        use super::*;
        use crate::packet::Kind;

        fn edge(f: &Fabric, now: Nanos, host: u32, peer: u32) -> EdgeCtx<'_> {
            EdgeCtx { now, host, peer, reverse: false, paths: f.paths(host, peer), fabric: f }
        }

        #[test]
        fn echoes_on_acks_reweight_the_senders_paths() {
            let f = fabric();
            let mut s = CloveScheme::new(CloveParams::default(), &f, Rng::new(5));
            let p = s.edge_path(&edge(&f, 0, 0, 31), &data(1, 0, 31)).unwrap();
            let mut ack = data(1, 1, 0);
            ack.kind = Kind::Ack;
            ack.echo_path = p;
            ack.set_ece(true);
            s.on_ack(1_000, 0, &ack);
            let w = s.hosts[0].weights(f.rack[31] as usize);
            assert!((w[usize::from(p)] - 2.0 / 3.0).abs() < 1e-9, "{w:?}");
            // ACKs and packets inside a rack are not CLOVE's.
            assert_eq!(s.edge_path(&edge(&f, 0, 0, 1), &data(2, 0, 1)), None);
            let back = EdgeCtx { reverse: true, ..edge(&f, 0, 31, 0) };
            assert_eq!(s.edge_path(&back, &ack), None);
        }
    }
}
