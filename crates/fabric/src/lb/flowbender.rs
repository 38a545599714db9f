//! FlowBender: a flow moves to another ECMP path when it sees congestion.
//!
//! Reference: Kabbani, Vamanan, Hasan and Duchene, "FlowBender: Flow-level
//! Adaptive Routing for Improved Latency and Throughput in Datacenter
//! Networks", CoNEXT 2014; the ns3-ecn-sharp sender (`src/internet/model/
//! tcp-flow-bender.cc`) is the version the Hermes paper compared against.
//!
//! The sender counts, over each round trip, the bytes acknowledged and the
//! bytes acknowledged with ECN-Echo. A round trip ends when an ACK covers
//! the highest segment sent when the previous round ended. If the marked
//! fraction of the round exceeded `T`, the round is congested; after `N`
//! congested rounds in a row the flow increments its path value `V`, which
//! the switches hash together with the flow's 5-tuple, so the flow lands on
//! another (random) ECMP path. A clean round resets the count.
//!
//! The paper also reroutes a flow when its retransmission timer fires, which
//! is how FlowBender escapes a failed path; the ns-3 sender does not (its
//! flows stay on a black hole until they end). `reroute_on_timeout` chooses,
//! and follows the paper by default.
//!
//! Parameters and defaults as the Hermes experiment program sets them:
//! `T` = 0.05, `N` = 1.

use std::collections::HashMap;

use fulcrum_balance::{HashFunction, Rng};
use fulcrum_des::Streams;
use serde::{Deserialize, Serialize};

use super::{EdgeCtx, ParamError, Scheme, SchemeType, STREAM_ROUTING};
use crate::packet::{Kind, Nanos, Packet};
use crate::topology::Fabric;

/// FlowBender's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowBenderParams {
    /// Marked fraction of a round trip above which it is congested.
    pub threshold: f64,
    /// Congested round trips in a row that move the flow.
    pub rounds: u32,
    /// Whether a retransmission timeout also moves the flow.
    pub reroute_on_timeout: bool,
}

impl Default for FlowBenderParams {
    fn default() -> Self {
        FlowBenderParams { threshold: 0.05, rounds: 1, reroute_on_timeout: true }
    }
}

impl SchemeType for FlowBenderScheme {
    const NAME: &'static str = "flowbender";
    type Params = FlowBenderParams;

    fn check(p: &FlowBenderParams) -> Result<(), ParamError> {
        ParamError::fraction("threshold", p.threshold)?;
        ParamError::positive("rounds", f64::from(p.rounds))
    }

    fn build(p: &FlowBenderParams, _: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(FlowBenderScheme::new(*p, streams.stream(STREAM_ROUTING)))
    }
}

/// One flow's FlowBender state (kept by its sender).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowBender {
    params: FlowBenderParams,
    acked: u64,
    marked: u64,
    congested: u32,
    /// The path value hashed with the flow.
    v: u32,
    /// The round ends when an ACK reaches this segment.
    round_end: u32,
}

impl FlowBender {
    pub fn new(params: FlowBenderParams) -> Self {
        FlowBender { params, acked: 0, marked: 0, congested: 0, v: 0, round_end: 0 }
    }

    /// The path value: hash it with the flow to pick the ECMP path.
    pub fn v(&self) -> u32 {
        self.v
    }

    /// An ACK acknowledging `bytes` new bytes, up to segment `ack` (the next
    /// expected), echoing ECN or not; `next_seq` is the next segment the
    /// sender would send. Returns whether the flow moves.
    pub fn acked(&mut self, bytes: u32, ece: bool, ack: u32, next_seq: u32) -> bool {
        self.acked += u64::from(bytes);
        if ece {
            self.marked += u64::from(bytes);
        }
        if ack < self.round_end {
            return false;
        }
        self.round_end = next_seq;
        let fraction = self.marked as f64 / self.acked.max(1) as f64;
        self.acked = 0;
        self.marked = 0;
        if fraction <= self.params.threshold {
            self.congested = 0;
            return false;
        }
        self.congested += 1;
        if self.congested < self.params.rounds {
            return false;
        }
        self.congested = 0;
        self.v = self.v.wrapping_add(1);
        true
    }

    /// The retransmission timer fired. Returns whether the flow moves.
    pub fn timed_out(&mut self) -> bool {
        if self.params.reroute_on_timeout {
            self.v = self.v.wrapping_add(1);
        }
        self.params.reroute_on_timeout
    }
}

/// FlowBender at every sender, as a routing scheme: a flow's data packets
/// carry the path its (flow, `V`) hash gives; ACKs go by ECMP.
#[derive(Debug)]
pub struct FlowBenderScheme {
    params: FlowBenderParams,
    flows: HashMap<u32, Tracked>,
    salt: u64,
}

/// A flow's FlowBender state and the sequence numbers it needs.
#[derive(Debug)]
struct Tracked {
    fb: FlowBender,
    /// Next segment after the highest sent.
    next_seq: u32,
    /// Highest cumulative ACK seen.
    acked: u32,
}

impl FlowBenderScheme {
    pub fn new(params: FlowBenderParams, mut rng: Rng) -> Self {
        FlowBenderScheme { params, flows: HashMap::new(), salt: rng.next_u64() }
    }
}

impl Scheme for FlowBenderScheme {
    fn name(&self) -> &'static str {
        "flowbender"
    }

    fn edge_path(&mut self, ctx: &EdgeCtx, pkt: &Packet) -> Option<u16> {
        if ctx.reverse || ctx.paths <= 1 {
            return None;
        }
        let params = self.params;
        let t = self.flows.entry(pkt.flow).or_insert_with(|| Tracked {
            fb: FlowBender::new(params),
            next_seq: 0,
            acked: 0,
        });
        if pkt.kind == Kind::Data {
            t.next_seq = t.next_seq.max(pkt.seq + 1);
        }
        let key = u64::from(pkt.flow) << 32 | u64::from(t.fb.v());
        Some((HashFunction::Xxhash.hash_pair(key, self.salt) % u64::from(ctx.paths)) as u16)
    }

    fn on_ack(&mut self, _now: Nanos, _host: u32, ack: &Packet) {
        if ack.kind != Kind::Ack {
            return;
        }
        let Some(t) = self.flows.get_mut(&ack.flow) else { return };
        // Segments newly acknowledged (a duplicate ACK counts one, as the
        // original counts one segment for it).
        let segments = ack.seq.saturating_sub(t.acked).max(1);
        t.acked = t.acked.max(ack.seq);
        t.fb.acked(segments, ack.ece(), ack.seq, t.next_seq);
    }

    fn on_timeout(&mut self, _now: Nanos, _host: u32, flow: u32, _fresh: bool) {
        if let Some(t) = self.flows.get_mut(&flow) {
            t.fb.timed_out();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_above_the_threshold_moves_the_flow() {
        let mut f = FlowBender::new(FlowBenderParams::default());
        // Round 1 ends at once (round_end 0): 10 segments out, none marked.
        assert!(!f.acked(1400, false, 1, 10));
        // Round 2 (until ack 10): 9 ACKs, 1 marked → 1/9 > 5 %; V moves at
        // the ACK that closes the round, not before.
        for ack in 2..10 {
            assert!(!f.acked(1400, ack == 5, ack, 20), "ack {ack}");
        }
        assert_eq!(f.v(), 0);
        assert!(f.acked(1400, false, 10, 20));
        assert_eq!(f.v(), 1);
    }

    #[test]
    fn a_fraction_at_the_threshold_is_not_congested() {
        let mut f = FlowBender::new(FlowBenderParams::default());
        f.acked(0, false, 0, 20); // opens a round ending at 20
                                  // 20 ACKs, exactly 1 marked: 5 % is not above T.
        for ack in 1..=20 {
            f.acked(1000, ack == 3, ack, 40);
        }
        assert_eq!(f.v(), 0);
    }

    #[test]
    fn n_rounds_in_a_row_are_needed() {
        let p = FlowBenderParams { rounds: 2, ..FlowBenderParams::default() };
        let mut f = FlowBender::new(p);
        // Congested, clean, congested, congested: moves once, at the end.
        let rounds = [true, false, true, true];
        let mut moved = vec![];
        for (i, &marked) in rounds.iter().enumerate() {
            let ack = i as u32 * 10;
            moved.push(f.acked(1400, marked, ack, ack + 10));
        }
        assert_eq!(moved, [false, false, false, true]);
        assert_eq!(f.v(), 1);
    }

    #[test]
    fn a_timeout_moves_the_flow_unless_disabled() {
        let mut f = FlowBender::new(FlowBenderParams::default());
        assert!(f.timed_out());
        assert_eq!(f.v(), 1);
        let p = FlowBenderParams { reroute_on_timeout: false, ..FlowBenderParams::default() };
        let mut g = FlowBender::new(p);
        assert!(!g.timed_out());
        assert_eq!(g.v(), 0);
    }

    mod scheme {
        use super::super::super::testing::*;
        use super::*;
        use crate::topology::Fabric;

        fn edge(f: &Fabric, now: Nanos, host: u32, peer: u32) -> EdgeCtx<'_> {
            EdgeCtx { now, host, peer, reverse: false, paths: f.paths(host, peer), fabric: f }
        }

        #[test]
        fn marked_rounds_rehash_the_flow_and_timeouts_too() {
            let f = fabric();
            let mut s = FlowBenderScheme::new(FlowBenderParams::default(), Rng::new(5));
            let path = |s: &mut FlowBenderScheme, seq| s.edge_path(&edge(&f, 0, 0, 31), &data(1, seq, 31)).unwrap();
            let first: Vec<u16> = (0..10).map(|q| path(&mut s, q)).collect();
            assert!(first.iter().all(|&p| p == first[0]), "one flow, one path: {first:?}");
            // ACKs 1..=10 close rounds; the ACK for segment 1 closes the first
            // (clean) round, the rest are marked: V moves when 10 arrives.
            let mut ack = data(1, 0, 0);
            ack.kind = Kind::Ack;
            for seq in 1..=10 {
                ack.seq = seq;
                ack.set_ece(seq > 1);
                s.on_ack(0, 0, &ack);
            }
            let v: Vec<u16> = (10..20).map(|q| path(&mut s, q)).collect();
            assert!(v.iter().all(|&p| p == v[0]));
            s.on_timeout(0, 0, 1, true);
            s.on_timeout(0, 0, 1, true);
            let w = path(&mut s, 20);
            // Golden: paths for V = 0, 1 and 3 under this salt.
            assert_eq!((first[0], v[0], w), (2, 3, 3));
        }
    }
}
