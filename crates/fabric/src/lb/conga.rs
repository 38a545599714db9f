//! CONGA: congestion-aware flowlet switching with leaf-to-leaf feedback.
//!
//! Reference: Alizadeh et al., "CONGA: Distributed Congestion-Aware Load
//! Balancing for Datacenters", SIGCOMM 2014, as the ns3-ecn-sharp module
//! `src/conga-routing` implements it (the simulator of the Hermes paper).
//!
//! Every switch port that CONGA watches carries a discounting rate estimator
//! (DRE): a byte register `X` that grows by the size of each packet sent and
//! shrinks by a factor `1 − α` every `Tdre`. `X` tracks the port's rate over
//! about `Tdre/α`, so `X·8 ÷ (C·Tdre/α)` is the port's utilisation; the
//! metric carried in packets is that ratio in `Q` bits (`⌊ratio·2^Q⌋`, held
//! at `2^Q − 1`, the largest value the field holds).
//!
//! - The **source leaf** tags each packet with the uplink it chose (`LBTag`)
//!   and a CE field of 0; each **spine** raises CE to its output port's metric
//!   if that is larger; the **destination leaf** stores CE in its
//!   congestion-from-leaf table (per source leaf and `LBTag`) and
//!   piggybacks one entry per packet going back to that leaf, round robin,
//!   preferring entries that changed since they were last sent. The source
//!   leaf keeps what it hears in its congestion-to-leaf table (per
//!   destination leaf and uplink); entries not refreshed for the aging time
//!   (10 ms) count as 0, and from-leaf entries that old are no longer sent.
//! - A **new flowlet** (no packet of the flow for the flowlet gap) goes to
//!   the uplink minimising `max(local DRE metric, remote metric)`; among
//!   ties the flow's previous uplink if it is one of them, otherwise a
//!   uniform pick. Packets inside a flowlet follow it.
//!
//! Parameters and defaults as the Hermes experiment program sets them:
//! `Tdre` 30 µs, `α` 0.2, `Q` 3 bits, flowlet gap 500 µs, aging 10 ms.
//! Link capacities are per port, so a leaf knows which uplinks run slower
//! (the program's `congaAwareAsym`, on by default).
//!
//! The DRE decays lazily: a register remembers the last `Tdre` tick it was
//! brought to (ticks are multiples of `Tdre` from time 0) and applies the
//! missing multiplications, each truncated to whole bytes as the original's
//! integer register is, when it is next read or written.

use std::collections::HashMap;

use fulcrum_balance::Rng;
use fulcrum_des::Streams;
use serde::{Deserialize, Serialize};

use super::ecmp::hash_port;
use super::{follow, ParamError, Scheme, SchemeType, SwitchCtx, STREAM_ROUTING};
use crate::packet::{Nanos, Packet, NO_PATH};
use crate::topology::{End, Fabric};

/// CONGA's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CongaParams {
    /// DRE decay period.
    #[serde(with = "fulcrum_config::nanos")]
    pub tdre: Nanos,
    /// DRE decay factor per period.
    pub alpha: f64,
    /// Bits of the quantised congestion metric.
    pub q_bits: u32,
    /// Idle time after which a flow's next packet starts a new flowlet.
    #[serde(with = "fulcrum_config::nanos")]
    pub flowlet_gap: Nanos,
    /// Age after which a congestion-table entry no longer counts.
    #[serde(with = "fulcrum_config::nanos")]
    pub aging: Nanos,
}

impl Default for CongaParams {
    fn default() -> Self {
        CongaParams { tdre: 30_000, alpha: 0.2, q_bits: 3, flowlet_gap: 500_000, aging: 10_000_000 }
    }
}

impl SchemeType for CongaScheme {
    const NAME: &'static str = "conga";
    type Params = CongaParams;

    fn check(p: &CongaParams) -> Result<(), ParamError> {
        ParamError::positive("tdre", p.tdre as f64)?;
        ParamError::fraction("alpha", p.alpha)?;
        if !(1..=6).contains(&p.q_bits) {
            return Err(ParamError::new("q_bits", format!("the metric field holds 1 to 6 bits (found {})", p.q_bits)));
        }
        ParamError::positive("flowlet_gap", p.flowlet_gap as f64)?;
        ParamError::positive("aging", p.aging as f64)
    }

    fn build(p: &CongaParams, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(CongaScheme::new(*p, fabric, streams.stream(STREAM_ROUTING)))
    }
}

impl CongaParams {
    /// The largest metric the `q_bits` field holds.
    pub fn max_metric(&self) -> u8 {
        ((1u32 << self.q_bits.min(8)) - 1) as u8
    }

    /// The quantised metric of a DRE register holding `bytes` on a port of
    /// `capacity_bps`: utilisation over `Tdre/α` in `q_bits` bits.
    pub fn quantise(&self, bytes: u64, capacity_bps: u64) -> u8 {
        let window_s = self.tdre as f64 * 1e-9 / self.alpha;
        let ratio = bytes as f64 * 8.0 / (capacity_bps as f64 * window_s);
        let metric = (ratio * f64::from(1u32 << self.q_bits.min(8))).floor();
        metric.min(f64::from(self.max_metric())) as u8
    }
}

/// A discounting rate estimator on one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dre {
    bytes: u64,
    /// The last `Tdre` tick the register was decayed to.
    tick: u64,
}

impl Dre {
    /// Brings the register to `now`: one truncated decay per `Tdre` tick
    /// passed (stopping early once it reaches 0).
    fn catch_up(&mut self, now: Nanos, tdre: Nanos, alpha: f64) {
        let tick = now / tdre.max(1);
        let mut steps = tick.saturating_sub(self.tick);
        self.tick = tick;
        while steps > 0 && self.bytes > 0 {
            self.bytes = (self.bytes as f64 * (1.0 - alpha)) as u64;
            steps -= 1;
        }
    }

    /// Counts a packet of `bytes` sent at `now`, with decay period `tdre`
    /// and factor `alpha`; returns the register after it.
    pub fn add(&mut self, now: Nanos, bytes: u32, tdre: Nanos, alpha: f64) -> u64 {
        self.catch_up(now, tdre, alpha);
        self.bytes += u64::from(bytes);
        self.bytes
    }

    /// The register at `now`.
    pub fn value(&mut self, now: Nanos, tdre: Nanos, alpha: f64) -> u64 {
        self.catch_up(now, tdre, alpha);
        self.bytes
    }
}

/// A spine's (or any transit switch's) part: a DRE per output port, whose
/// metric raises the CE field of the packets it forwards.
#[derive(Clone, Debug)]
pub struct CongaSpine {
    params: CongaParams,
    dres: Vec<Dre>,
    capacity_bps: Vec<u64>,
}

impl CongaSpine {
    pub fn new(params: CongaParams, capacity_bps: Vec<u64>) -> Self {
        CongaSpine { params, dres: vec![Dre::default(); capacity_bps.len()], capacity_bps }
    }

    /// A packet of `bytes` with CE field `ce` leaves by `port` at `now`:
    /// returns the CE field it leaves with.
    pub fn forward(&mut self, now: Nanos, port: usize, bytes: u32, ce: u8) -> u8 {
        let x = self.dres[port].add(now, bytes, self.params.tdre, self.params.alpha);
        ce.max(self.params.quantise(x, self.capacity_bps[port]))
    }
}

/// One piggybacked feedback entry: the metric of the path that left the
/// receiving leaf's peer by `uplink`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feedback {
    pub uplink: u8,
    pub metric: u8,
}

#[derive(Clone, Copy, Debug)]
struct FromLeaf {
    metric: u8,
    changed: bool,
    updated: Nanos,
}

#[derive(Clone, Copy, Debug)]
struct Flowlet {
    uplink: u8,
    last: Nanos,
}

/// A leaf's part: uplink DREs, both congestion tables and the flowlet table.
#[derive(Clone, Debug)]
pub struct CongaLeaf {
    params: CongaParams,
    uplink_dres: Vec<Dre>,
    uplink_bps: Vec<u64>,
    /// `[dst_leaf][uplink]`: metric heard and when.
    to_leaf: Vec<Vec<Option<(u8, Nanos)>>>,
    /// `[src_leaf][uplink]`: metric seen arriving, to send back.
    from_leaf: Vec<Vec<Option<FromLeaf>>>,
    /// Round-robin position of the feedback, per peer leaf.
    feedback_next: Vec<usize>,
    flowlets: HashMap<u32, Flowlet>,
}

impl CongaLeaf {
    /// A leaf with one uplink per entry of `uplink_bps`, in a fabric of
    /// `leaves` leaves.
    pub fn new(params: CongaParams, uplink_bps: Vec<u64>, leaves: usize) -> Self {
        let n = uplink_bps.len();
        CongaLeaf {
            params,
            uplink_dres: vec![Dre::default(); n],
            uplink_bps,
            to_leaf: vec![vec![None; n]; leaves],
            from_leaf: vec![vec![None; n]; leaves],
            feedback_next: vec![0; leaves],
            flowlets: HashMap::new(),
        }
    }

    /// The remote metric of `uplink` towards `dst_leaf`, 0 once aged.
    fn remote(&self, now: Nanos, dst_leaf: usize, uplink: usize) -> u8 {
        match self.to_leaf[dst_leaf][uplink] {
            Some((m, at)) if now.saturating_sub(at) <= self.params.aging => m,
            _ => 0,
        }
    }

    /// The uplink for a packet of `flow` to `dst_leaf` at `now`. `draw` is a
    /// uniform random value, used only to break ties between equally good
    /// uplinks of a new flowlet.
    pub fn choose(&mut self, now: Nanos, flow: u32, dst_leaf: usize, draw: u64) -> usize {
        let previous = self.flowlets.get(&flow).copied();
        if let Some(f) = previous {
            if now.saturating_sub(f.last) <= self.params.flowlet_gap {
                self.flowlets.insert(flow, Flowlet { uplink: f.uplink, last: now });
                return usize::from(f.uplink);
            }
        }
        let mut best = u8::MAX;
        let mut ties: Vec<usize> = Vec::with_capacity(self.uplink_dres.len());
        for u in 0..self.uplink_dres.len() {
            let x = self.uplink_dres[u].value(now, self.params.tdre, self.params.alpha);
            let local = self.params.quantise(x, self.uplink_bps[u]);
            let degree = local.max(self.remote(now, dst_leaf, u));
            if degree < best {
                best = degree;
                ties.clear();
            }
            if degree == best {
                ties.push(u);
            }
        }
        let uplink = match previous {
            Some(f) if ties.contains(&usize::from(f.uplink)) => usize::from(f.uplink),
            _ => ties[(draw % ties.len() as u64) as usize],
        };
        self.flowlets.insert(flow, Flowlet { uplink: uplink as u8, last: now });
        uplink
    }

    /// A packet of `bytes` leaves by `uplink` at `now` (source leaf).
    pub fn sent(&mut self, now: Nanos, uplink: usize, bytes: u32) {
        self.uplink_dres[uplink].add(now, bytes, self.params.tdre, self.params.alpha);
    }

    /// The feedback to piggyback on a packet going to `dst_leaf`: round
    /// robin over the entries this leaf holds for it, preferring one that
    /// changed since it was last sent. `None` when it holds none.
    pub fn feedback_for(&mut self, now: Nanos, dst_leaf: usize) -> Option<Feedback> {
        let aging = self.params.aging;
        let row = &mut self.from_leaf[dst_leaf];
        let live = |e: &Option<FromLeaf>| e.is_some_and(|e| now.saturating_sub(e.updated) <= aging);
        let count = row.iter().filter(|e| live(e)).count();
        if count == 0 {
            return None;
        }
        // The turn's entry: the k-th live one; then the first changed live
        // entry from there on (cyclically), if any. No allocation: this runs
        // for every packet leaving a leaf.
        let k = self.feedback_next[dst_leaf] % count;
        self.feedback_next[dst_leaf] += 1;
        let n = row.len();
        let start = (0..n).filter(|&u| live(&row[u])).nth(k).expect("k < count");
        let pick = (0..n)
            .map(|i| (start + i) % n)
            .find(|&u| live(&row[u]) && row[u].is_some_and(|e| e.changed))
            .unwrap_or(start);
        let entry = row[pick].as_mut().expect("live entry");
        entry.changed = false;
        Some(Feedback { uplink: pick as u8, metric: entry.metric })
    }

    /// A packet from `src_leaf` arrives at this (destination) leaf: it left
    /// its leaf by `lb_tag`, crossed the fabric with CE field `ce`, and may
    /// carry feedback about this leaf's own uplinks towards `src_leaf`.
    pub fn arrived(&mut self, now: Nanos, src_leaf: usize, lb_tag: usize, ce: u8, fb: Option<Feedback>) {
        self.from_leaf[src_leaf][lb_tag] = Some(FromLeaf { metric: ce, changed: true, updated: now });
        if let Some(f) = fb {
            self.to_leaf[src_leaf][usize::from(f.uplink)] = Some((f.metric, now));
        }
    }
}

/// CONGA at every switch of a leaf-spine fabric, as a routing scheme.
///
/// The CONGA header rides in [`Packet::lb`]: bit 31 says the packet is
/// tagged, bits 0–7 hold `LBTag` (the uplink's index in the source leaf's
/// group), bits 8–15 CE, and bit 30 with bits 16–23 (uplink) and 24–29
/// (metric) the piggybacked feedback.
#[derive(Debug)]
pub struct CongaScheme {
    /// Leaf state by switch number (`None` for spines).
    leaves: Vec<Option<CongaLeaf>>,
    /// DREs of every port, for the switches that only mark (spines).
    spine: CongaSpine,
    rng: Rng,
}

const TAGGED: u32 = 1 << 31;
const HAS_FB: u32 = 1 << 30;

fn encode(lb_tag: usize, ce: u8, fb: Option<Feedback>) -> u32 {
    let mut v = TAGGED | lb_tag as u32 | u32::from(ce) << 8;
    if let Some(f) = fb {
        v |= HAS_FB | u32::from(f.uplink) << 16 | u32::from(f.metric & 0x3f) << 24;
    }
    v
}

impl CongaScheme {
    pub fn new(params: CongaParams, fabric: &Fabric, rng: Rng) -> Self {
        let n = fabric.switches as usize;
        let mut rack_of_switch = vec![usize::MAX; n];
        for h in 0..fabric.hosts as usize {
            if let End::Switch(s) = fabric.ports[fabric.host_port[h] as usize].to {
                rack_of_switch[s as usize] = fabric.rack[h] as usize;
            }
        }
        let racks = fabric.racks().max(1) as usize;
        let leaves = (0..n)
            .map(|s| {
                let rack = rack_of_switch[s];
                if rack == usize::MAX {
                    return None;
                }
                // Uplinks: the group toward any host of another rack.
                let remote = (0..fabric.hosts).find(|&h| fabric.rack[h as usize] as usize != rack);
                let ups = remote.map(|h| fabric.group(s as u32, h).to_vec()).unwrap_or_default();
                let bps = ups.iter().map(|&p| fabric.ports[p as usize].bps).collect();
                Some(CongaLeaf::new(params, bps, racks))
            })
            .collect();
        let all_bps = fabric.ports.iter().map(|p| p.bps).collect();
        CongaScheme { leaves, spine: CongaSpine::new(params, all_bps), rng }
    }
}

impl Scheme for CongaScheme {
    fn name(&self) -> &'static str {
        "conga"
    }

    fn switch_port(&mut self, ctx: &SwitchCtx, pkt: &mut Packet) -> u32 {
        if pkt.path != NO_PATH {
            return follow(ctx, pkt.path);
        }
        let now = ctx.now;
        let from_host = matches!(ctx.fabric.ports[ctx.in_port as usize].from, End::Host(_));
        let Some(leaf) = self.leaves[ctx.switch as usize].as_mut() else {
            // A spine: ECMP onward, CE raised to this port's metric.
            let port = hash_port(ctx, pkt);
            if pkt.lb & TAGGED != 0 {
                let ce = self.spine.forward(now, port as usize, u32::from(pkt.wire), (pkt.lb >> 8) as u8);
                pkt.lb = pkt.lb & !0xff00 | u32::from(ce) << 8;
            }
            return port;
        };
        if from_host && ctx.group.len() > 1 {
            // Source leaf: flowlet and uplink choice, header, feedback.
            let dst_leaf = ctx.fabric.rack[ctx.dst as usize] as usize;
            let key = pkt.flow << 1 | u32::from(ctx.reverse);
            let uplink = leaf.choose(now, key, dst_leaf, self.rng.next_u64());
            leaf.sent(now, uplink, u32::from(pkt.wire));
            pkt.lb = encode(uplink, 0, leaf.feedback_for(now, dst_leaf));
            return ctx.group[uplink];
        }
        if pkt.lb & TAGGED != 0 && !from_host {
            // Destination leaf: read the header, then drop it.
            let src_leaf = ctx.fabric.rack[ctx.src as usize] as usize;
            let fb = (pkt.lb & HAS_FB != 0)
                .then_some(Feedback { uplink: (pkt.lb >> 16) as u8, metric: (pkt.lb >> 24 & 0x3f) as u8 });
            leaf.arrived(now, src_leaf, (pkt.lb & 0xff) as usize, (pkt.lb >> 8) as u8, fb);
            pkt.lb = 0;
        }
        hash_port(ctx, pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G10: u64 = 10_000_000_000;

    #[test]
    fn dre_decays_by_alpha_each_period_and_truncates() {
        let p = CongaParams::default();
        let mut d = Dre::default();
        assert_eq!(d.add(0, 1500, p.tdre, p.alpha), 1500);
        assert_eq!(d.add(10_000, 1500, p.tdre, p.alpha), 3000);
        // Two ticks (30 µs, 60 µs): 3000 → 2400 → 1920, then + 1000.
        assert_eq!(d.add(65_000, 1000, p.tdre, p.alpha), 2920);
        // 90 µs: 2920·0.8 = 2336.
        assert_eq!(d.value(90_000, p.tdre, p.alpha), 2336);
        // A byte sequence: 1 byte decays to 0 and stays there.
        let mut one = Dre::default();
        one.add(0, 1, p.tdre, p.alpha);
        assert_eq!(one.value(30_000, p.tdre, p.alpha), 0);
        assert_eq!(one.value(10_000_000, p.tdre, p.alpha), 0);
    }

    #[test]
    fn quantised_metric_is_utilisation_in_three_bits() {
        let p = CongaParams::default();
        // Window Tdre/α = 150 µs; at 10 Gb/s it holds 187 500 bytes.
        assert_eq!(p.quantise(0, G10), 0);
        assert_eq!(p.quantise(23_437, G10), 0); // just under 1/8
        assert_eq!(p.quantise(23_438, G10), 1);
        assert_eq!(p.quantise(93_751, G10), 4); // half utilised
        assert_eq!(p.quantise(187_499, G10), 7);
        assert_eq!(p.quantise(10_000_000, G10), 7); // held at 2^3 − 1
                                                    // The same bytes on a 2 Gb/s link weigh five times more.
        assert_eq!(p.quantise(23_438, G10 / 5), 5);
    }

    #[test]
    fn dre_of_a_saturated_port_settles_near_the_window() {
        // A 10 Gb/s port sending a 1500-byte packet every 1.2 µs: X → C·Tdre/α
        // less the last period's decay, metric 6 or 7 (near full).
        let p = CongaParams::default();
        let mut d = Dre::default();
        let mut t = 0;
        while t < 2_000_000 {
            d.add(t, 1500, p.tdre, p.alpha);
            t += 1_200;
        }
        let m = p.quantise(d.value(t, p.tdre, p.alpha), G10);
        assert!((6..=7).contains(&m), "{m}");
    }

    #[test]
    fn new_flowlet_takes_the_least_congested_uplink() {
        let p = CongaParams::default();
        let mut leaf = CongaLeaf::new(p, vec![G10; 4], 4);
        // Remote metrics heard from leaf 2 about uplinks 0..3: 5, 1, 3, 6.
        for (u, m) in [5u8, 1, 3, 6].into_iter().enumerate() {
            leaf.arrived(0, 2, 0, 0, Some(Feedback { uplink: u as u8, metric: m }));
        }
        assert_eq!(leaf.choose(1_000, 7, 2, 0), 1);
        // Local load on uplink 1 (metric 4 > 3) moves the next new flowlet to 2.
        leaf.sent(1_000, 1, 93_751);
        assert_eq!(leaf.choose(1_000, 8, 2, 0), 2);
        // Flow 7 is inside its flowlet: it stays on uplink 1.
        assert_eq!(leaf.choose(400_000, 7, 2, 0), 1);
        // After a gap longer than 500 µs it is a new flowlet: uplink 1 now
        // holds a decayed DRE (metric 0) and remote 1: max 1 is the minimum.
        assert_eq!(leaf.choose(901_000, 7, 2, 3), 1);
    }

    #[test]
    fn ties_prefer_the_previous_uplink_then_the_draw() {
        let p = CongaParams::default();
        let mut leaf = CongaLeaf::new(p, vec![G10; 4], 2);
        // All uplinks equal (no information): the draw picks, 6 % 4 = 2.
        assert_eq!(leaf.choose(0, 1, 1, 6), 2);
        // A new flowlet of the same flow, still all tied: keeps uplink 2.
        assert_eq!(leaf.choose(1_000_000, 1, 1, 1), 2);
        // Remote metrics age out after 10 ms and count as 0 again.
        leaf.arrived(2_000_000, 1, 0, 0, Some(Feedback { uplink: 2, metric: 7 }));
        assert_eq!(leaf.choose(3_000_000, 1, 1, 1), 1);
        assert_eq!(leaf.choose(13_000_001, 1, 1, 1), 1);
        assert_eq!(leaf.choose(14_000_000, 9, 1, 2), 2);
    }

    #[test]
    fn feedback_round_robin_prefers_changed_entries() {
        let p = CongaParams::default();
        let mut leaf = CongaLeaf::new(p, vec![G10; 4], 2);
        assert_eq!(leaf.feedback_for(0, 1), None);
        leaf.arrived(0, 1, 0, 3, None);
        leaf.arrived(0, 1, 2, 5, None);
        let a = leaf.feedback_for(10, 1).unwrap();
        let b = leaf.feedback_for(20, 1).unwrap();
        assert_eq!((a.uplink, a.metric, b.uplink, b.metric), (0, 3, 2, 5));
        // Nothing changed: plain round robin.
        assert_eq!(leaf.feedback_for(30, 1).unwrap().uplink, 0);
        // Uplink 2 is next in turn, but uplink 0 changed: 0 is sent.
        leaf.arrived(40, 1, 0, 6, None);
        assert_eq!(leaf.feedback_for(50, 1), Some(Feedback { uplink: 0, metric: 6 }));
        // Entries older than the aging time are no longer sent.
        assert_eq!(leaf.feedback_for(20_000_000, 1), None);
    }

    #[test]
    fn spine_raises_ce_to_its_port_metric() {
        let p = CongaParams::default();
        let mut s = CongaSpine::new(p, vec![G10, G10 / 5]);
        assert_eq!(s.forward(0, 0, 1500, 0), 0);
        assert_eq!(s.forward(0, 0, 1500, 3), 3);
        // 23 438 bytes on the 2 Gb/s port: metric 5.
        assert_eq!(s.forward(0, 1, 23_438, 2), 5);
    }

    mod scheme {
        use super::super::super::testing::*;
        use super::*;
        use crate::lb::{Loads, SwitchCtx};

        /// The context of `switch` forwarding `pkt`, which came in on `in_port`.
        fn at<'a>(
            f: &'a Fabric,
            loads: &'a dyn Loads,
            now: Nanos,
            switch: u32,
            in_port: u32,
            src: u32,
            dst: u32,
        ) -> SwitchCtx<'a> {
            SwitchCtx {
                now,
                switch,
                in_port,
                src,
                dst,
                reverse: src > dst,
                group: f.group(switch, dst),
                fabric: f,
                loads,
                salt: 7,
            }
        }

        /// Carries `pkt` from host `src` to host `dst` through the fabric,
        /// switch by switch; returns the ports taken.
        fn cross(c: &mut CongaScheme, f: &Fabric, now: Nanos, src: u32, dst: u32, pkt: &mut Packet) -> Vec<u32> {
            let loads = FixedLoads(vec![]);
            let mut port = f.host_port[src as usize];
            let mut taken = vec![];
            while let End::Switch(s) = f.ports[port as usize].to {
                port = c.switch_port(&at(f, &loads, now, s, port, src, dst), pkt);
                taken.push(port);
            }
            taken
        }

        #[test]
        fn congestion_travels_back_and_steers_the_next_flowlet() {
            let f = fabric();
            let mut c = CongaScheme::new(CongaParams::default(), &f, Rng::new(3));
            // A burst of flow 1 from host 0 to host 31 (leaf 0 → leaf 3): one
            // flowlet, one uplink; the spine's port fills its DRE.
            let mut first = vec![];
            for seq in 0..100 {
                let mut p = data(1, seq, 31);
                first = cross(&mut c, &f, 0, 0, 31, &mut p);
                assert_eq!(p.lb, 0, "the destination leaf drops the header");
            }
            let up = f.group(0, 31).iter().position(|&p| p == first[0]).unwrap();
            // An ACK back from host 31 carries leaf 3's feedback for leaf 0:
            // the uplink the data took and the spine's metric (100 × 1454
            // bytes in one 150 µs window: 6 of 7).
            let mut ack = data(1, 100, 0);
            ack.kind = crate::packet::Kind::Ack;
            let mut at_leaf3 = ack;
            let loads = FixedLoads(vec![]);
            let leaf3 = match f.ports[f.host_port[31] as usize].to {
                End::Switch(s) => s,
                End::Host(_) => unreachable!(),
            };
            c.switch_port(&at(&f, &loads, 10_000, leaf3, f.host_port[31], 31, 0), &mut at_leaf3);
            assert_eq!(at_leaf3.lb & HAS_FB, HAS_FB);
            assert_eq!(((at_leaf3.lb >> 16) & 0xff) as usize, up);
            assert_eq!((at_leaf3.lb >> 24) & 0x3f, 6);
            cross(&mut c, &f, 10_000, 31, 0, &mut ack);
            // 2 ms later leaf 0's own DRE has decayed to nothing, but the
            // remote metric is fresh: new flowlets (new flows) avoid `up`.
            for flow in 2..40 {
                let taken = cross(&mut c, &f, 2_000_000, 0, 31, &mut data(flow, 0, 31));
                assert_ne!(taken[0], first[0], "flow {flow}");
            }
            // After the 10 ms aging it counts as 0 again and is chosen.
            let later: Vec<u32> =
                (40..80).map(|fl| cross(&mut c, &f, 13_000_000, 0, 31, &mut data(fl, 0, 31))[0]).collect();
            assert!(later.contains(&first[0]), "{later:?}");
        }
    }
}
