//! Hermes: end-host sensing of every path and cautious rerouting.
//!
//! Reference: Zhang, Zhang, Bai, Chen and Chowdhury, "Resilient Datacenter
//! Load Balancing in the Wild", SIGCOMM 2017, as the ns3-ecn-sharp module
//! `src/tlb` ("TLB" there) implements it, with the parameters the paper's
//! experiment program (ns3-load-balance `conga-simulation-large.cc`) sets.
//!
//! **Sensing.** Each sending host keeps, per destination leaf and path:
//! a smoothed one-way delay (each sample moves it half way; a path with no
//! sample for a window drifts 1 % per window towards 1.5 × the good-delay
//! threshold, so stale figures fade); the bytes acknowledged and those
//! acknowledged with ECN-Echo in the current window (`window`, 100 µs; a
//! window starts at 3 bytes with 1 marked, so an unsampled path is not
//! good); whether a flow timed out on it in the window; the number of its
//! flows on it; a DRE of the bytes it sends on it (the send rate); and the
//! failure evidence below. Probe replies count as samples. As in the
//! module's TCP hook, a retransmission timeout counts only when it starts a
//! loss episode (or re-sends the SYN), and it blames the path of the data
//! the flow's last ACK answered (the path the flow took, before any ACK),
//! whether or not the host still tracks the flow.
//!
//! **Path states.**
//! - *failed*: optionally (the paper's rules, off by default because the
//!   ns-3 module sets its thresholds out of reach) a flow timed out
//!   `fail_timeouts` times in a row on it, or a block of
//!   `fail_sample_bytes` sent saw more than `fail_retx` of them retransmitted while the window's ECN fraction was
//!   below `ecn_low` (losses without congestion). A failed path stays
//!   failed (the module's reset period is 100 s). With the paper's rules on,
//!   congestion losses on a 100 µs ECN window fail healthy paths for good in
//!   this model's runs, which is why they stay off.
//! - *good*: delay below `good_delay`, at least `ecn_min_bytes` sampled in
//!   the window with an ECN fraction below `ecn_low`, no timeout.
//! - *bad*: delay at or above `bad_delay`, or a timeout in the window.
//! - *gray*: anything else, and every path not yet sampled.
//!
//! **Choosing a path** (new flows, and flows being moved): the good paths
//! with the fewest of this host's flows; else the gray paths whose delay is
//! at least `better_delay` below the current path's (any gray path for a new
//! flow), fewest flows first; else the first bad path that much better;
//! ties by a uniform draw. A new flow that finds none takes a uniform
//! non-failed path; a moving flow that finds none stays.
//!
//! **Cautious rerouting**, checked at each packet a flow sends: a flow on a
//! failed path moves at once; otherwise only when its path is bad or the
//! flow paused longer than the flowlet gap, and it has had `min_bytes`
//! acknowledged on the path (so short flows never pay for a move), and its
//! path's send rate is at most `max_rate_bps`, and its last try was more
//! than `retry_gap` ago; then it tries with probability
//! `reroute_probability`. A flow with no ACK for `forget_after` is
//! forgotten: its next packet chooses afresh, as a new flow does (the
//! module's flow aging; this is how a short flow leaves a black hole after
//! its first timeout, which marked the path bad).
//!
//! **Probes** ([`Hermes::probe_plan`], [`Hermes::probe_reply`]), as the
//! module's prober does: in each rack, the host at position `j` probes the
//! first host of rack `j` (so one prober per pair of racks); every
//! `probe_interval` it sends a header-only probe (ECN-capable) on two
//! distinct paths drawn at random; the probed host replies (by ECMP) with
//! the probe's one-way delay and whether it arrived with CE; the reply is a
//! sample of that path (its 20 bytes, its mark, its delay) for the prober
//! and every other host of its rack (the prober forwards it to them; here
//! they take it at once). The module also meant to probe the best path and
//! to fail a path whose probe goes unanswered for 100 ms, but its best path
//! is never set, and its probe timeout marks the table entry keyed (path,
//! leaf) with the two swapped, not the probed path; neither is modelled.
//!
//! **Reverse-ACK routing** (`reverse_ack`, off by default as in the
//! experiment program; the module's `TLBReverseACK`): the receiving host
//! routes a flow's ACKs by its own path table toward the sender's rack in
//! ACK flowlets ([`Hermes::ack_path`]).
//!
//! Simplification: path aging is lazy (applied when a path is next looked
//! at, from the time of its last reset, rather than on a 25 µs timer);
//! silent flows are swept out when the host routes a packet at least 25 µs
//! after the last sweep.

use std::collections::HashMap;

use fulcrum_balance::Rng;
use fulcrum_des::Streams;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{max_paths, EdgeCtx, ParamError, Probe, ProbeReply, Scheme, SchemeStats, SchemeType, STREAM_ROUTING};
use crate::lb::conga::Dre;
use crate::packet::{Kind, Nanos, Packet, NO_PATH};
use crate::topology::Fabric;

/// Hermes's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HermesParams {
    /// A good path's delay is below this (`TLBMinRTT`, 40 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub good_delay: Nanos,
    /// A bad path's delay is at least this (`TLBHighRTT`, 180 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub bad_delay: Nanos,
    /// A good path's ECN fraction is below this (0.1).
    pub ecn_low: f64,
    /// Bytes a window needs before a path can be good (14 000).
    #[serde(deserialize_with = "fulcrum_config::size::deserialize")]
    pub ecn_min_bytes: u64,
    /// Sensing window (`T1`, 100 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub window: Nanos,
    /// Delay gap that makes one path better than another (1 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub better_delay: Nanos,
    /// Timeouts in a row that fail a path (0: off, as in the module; the
    /// paper suggests 3).
    pub fail_timeouts: u32,
    /// Retransmitted share of a block that fails a path (0: off, as in the
    /// module; the paper suggests 0.01).
    pub fail_retx: f64,
    /// Bytes sent per retransmission block (140 000: 100 full packets).
    #[serde(deserialize_with = "fulcrum_config::size::deserialize")]
    pub fail_sample_bytes: u64,
    /// Acknowledged bytes a flow needs on its path before it may move (`S`,
    /// 64 000).
    #[serde(deserialize_with = "fulcrum_config::size::deserialize")]
    pub min_bytes: u64,
    /// A flow moves only if its path's send rate is at most this (the
    /// module's DRE limit: 5 × 1 Gb/s).
    #[serde(rename = "max_rate_gbps", deserialize_with = "gbps", serialize_with = "write_gbps")]
    pub max_rate_bps: u64,
    /// Chance that an allowed move is tried (0.5).
    pub reroute_probability: f64,
    /// Least time between two tries of the same flow (100 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub retry_gap: Nanos,
    /// A pause this long lets a flow move (500 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub flowlet_gap: Nanos,
    /// A flow with no ACK for this long is forgotten (1 ms).
    #[serde(with = "fulcrum_config::nanos")]
    pub forget_after: Nanos,
    /// Probe period (`TLBProbingInterval`, 50 µs).
    #[serde(skip)]
    pub probe_interval: Nanos,
    /// DRE period and factor of the send-rate meter (30 µs, 0.2).
    #[serde(skip)]
    pub tdre: Nanos,
    #[serde(skip)]
    pub alpha: f64,
    /// The receiving side routes its ACKs too (the module's reverse-ACK
    /// option, `TLBReverseACK`; off in the experiment program).
    pub reverse_ack: bool,
    /// An ACK flowlet keeps its path while ACKs leave within this of each
    /// other (`AckletTimeout`, 300 µs).
    #[serde(with = "fulcrum_config::nanos")]
    pub acklet_timeout: Nanos,
}

impl Default for HermesParams {
    fn default() -> Self {
        HermesParams {
            good_delay: 40_000,
            bad_delay: 180_000,
            ecn_low: 0.1,
            ecn_min_bytes: 14_000,
            window: 100_000,
            better_delay: 1_000,
            fail_timeouts: 0,
            fail_retx: 0.0,
            fail_sample_bytes: 140_000,
            min_bytes: 64_000,
            max_rate_bps: 5_000_000_000,
            reroute_probability: 0.5,
            retry_gap: 100_000,
            flowlet_gap: 500_000,
            forget_after: 1_000_000,
            probe_interval: 50_000,
            tdre: 30_000,
            alpha: 0.2,
            reverse_ack: false,
            acklet_timeout: 300_000,
        }
    }
}

/// `max_rate_gbps`: Gb/s in the scenario, bits per second in the run.
fn gbps<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    f64::deserialize(d).map(|g| (g * 1e9) as u64)
}

fn write_gbps<S: Serializer>(bps: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(*bps as f64 / 1e9)
}

impl SchemeType for HermesScheme {
    const NAME: &'static str = "hermes";
    type Params = HermesParams;

    fn check(p: &HermesParams) -> Result<(), ParamError> {
        for (f, v) in [
            ("good_delay", p.good_delay),
            ("window", p.window),
            ("retry_gap", p.retry_gap),
            ("flowlet_gap", p.flowlet_gap),
            ("forget_after", p.forget_after),
            ("acklet_timeout", p.acklet_timeout),
            ("fail_sample_bytes", p.fail_sample_bytes),
            ("max_rate_gbps", p.max_rate_bps),
        ] {
            ParamError::positive(f, v as f64)?;
        }
        if p.bad_delay <= p.good_delay {
            let found = format!("must be above good_delay ({} ns) (found {} ns)", p.good_delay, p.bad_delay);
            return Err(ParamError::new("bad_delay", found));
        }
        ParamError::fraction("ecn_low", p.ecn_low)?;
        if !(0.0..1.0).contains(&p.fail_retx) {
            let found = format!("must be at least 0 (off) and below 1 (found {})", p.fail_retx);
            return Err(ParamError::new("fail_retx", found));
        }
        if !(0.0..=1.0).contains(&p.reroute_probability) {
            let found = format!("must be within 0 and 1 (found {})", p.reroute_probability);
            return Err(ParamError::new("reroute_probability", found));
        }
        Ok(())
    }

    fn build(p: &HermesParams, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(HermesScheme::new(*p, fabric, streams.stream(STREAM_ROUTING)))
    }
}

/// A path's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathState {
    Good,
    Gray,
    Bad,
    Failed,
}

/// What Hermes knows of one path, as judged now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathView {
    pub state: PathState,
    pub delay: Nanos,
    pub ecn_fraction: f64,
    pub flows: u32,
}

#[derive(Clone, Copy, Debug)]
struct Path {
    delay: Nanos,
    delay_at: Nanos,
    window_start: Nanos,
    acked: u64,
    marked: u64,
    timed_out: bool,
    block_sent: u64,
    block_retx: u64,
    failed: bool,
    flows: u32,
    rate: Dre,
}

impl Path {
    fn new(p: &HermesParams, now: Nanos) -> Self {
        Path {
            delay: p.good_delay,
            delay_at: now,
            window_start: now,
            acked: 3,
            marked: 1,
            timed_out: false,
            block_sent: 0,
            block_retx: 0,
            failed: false,
            flows: 0,
            rate: Dre::default(),
        }
    }

    /// Lazy aging: a new window once the last is over; a stale delay
    /// drifts 1 % per window towards 1.5 × `good_delay`.
    fn age(&mut self, now: Nanos, p: &HermesParams) {
        if now.saturating_sub(self.window_start) > p.window {
            self.acked = 1;
            self.marked = 0;
            self.timed_out = false;
            self.window_start = now;
        }
        let target = p.good_delay * 3 / 2;
        let mut windows = now.saturating_sub(self.delay_at) / p.window.max(1);
        if windows > 0 {
            self.delay_at = now;
        }
        while windows > 0 && self.delay != target {
            self.delay = if self.delay < target {
                target.min(self.delay * 101 / 100)
            } else {
                target.max(self.delay * 99 / 100)
            };
            windows -= 1;
        }
    }

    fn ecn_fraction(&self) -> f64 {
        self.marked as f64 / self.acked.max(1) as f64
    }

    fn state(&self, p: &HermesParams) -> PathState {
        if self.failed {
            PathState::Failed
        } else if self.delay < p.good_delay
            && self.acked > p.ecn_min_bytes
            && self.ecn_fraction() < p.ecn_low
            && !self.timed_out
        {
            PathState::Good
        } else if self.delay >= p.bad_delay || self.timed_out {
            PathState::Bad
        } else {
            PathState::Gray
        }
    }
}

/// What an ACK (or a probe reply) tells of the path its data took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Echo {
    pub dst_leaf: usize,
    pub path: usize,
    /// Bytes it acknowledges.
    pub bytes: u32,
    /// ECN-Echo: the data arrived with CE.
    pub ece: bool,
    /// One-way delay of the data (sent → received).
    pub delay: Nanos,
}

#[derive(Clone, Copy, Debug)]
struct Flow {
    dst_leaf: usize,
    path: usize,
    acked: u64,
    timeouts: u32,
    active: Nanos,
    live: Nanos,
    tried: Nanos,
}

/// What Hermes did in a run, to explain its figures: returned by
/// [`Scheme::stats`] into the run's outcome and its JSON report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// New flows (and forgotten flows choosing afresh) placed on a good,
    /// gray or bad path, or at random (no path qualified), in that order.
    pub placed: [u64; 4],
    /// Of those, flows that had been forgotten (no ACK for `forget_after`).
    pub restarted: u64,
    /// Placements per path index.
    pub per_path: Vec<u64>,
    /// Packets routed for a known flow whose path was judged good, gray,
    /// bad or failed at that moment.
    pub judged: [u64; 4],
    /// Moves allowed by the cautious conditions, by trigger: the path bad,
    /// the flow paused (flowlet), the path failed.
    pub allowed_bad: u64,
    pub allowed_idle: u64,
    pub allowed_failed: u64,
    /// Allowed moves the coin refused, and those that found no better path.
    pub refused: u64,
    pub no_target: u64,
    /// Flows moved, by trigger (bad path, pause, failed path).
    pub moved_bad: u64,
    pub moved_idle: u64,
    pub moved_failed: u64,
    /// Segments in flight (sent, not acknowledged) when a flow moved.
    pub in_flight_at_move: u64,
    /// Sums over the moves off a bad path, to compare with the module's
    /// path-change trace: the old path's smoothed delay (ns) and its send
    /// rate quantised as the module's DRE (⌊8 × rate ÷ 1 Gb/s⌋, moves
    /// allowed up to 40).
    pub old_delay_at_move: u64,
    pub dre_at_move: u64,
    /// Timeouts blamed on a path.
    pub timeouts: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        for i in 0..4 {
            self.placed[i] += o.placed[i];
            self.judged[i] += o.judged[i];
        }
        if self.per_path.len() < o.per_path.len() {
            self.per_path.resize(o.per_path.len(), 0);
        }
        for (a, b) in self.per_path.iter_mut().zip(&o.per_path) {
            *a += b;
        }
        self.restarted += o.restarted;
        self.allowed_bad += o.allowed_bad;
        self.allowed_idle += o.allowed_idle;
        self.allowed_failed += o.allowed_failed;
        self.refused += o.refused;
        self.no_target += o.no_target;
        self.moved_bad += o.moved_bad;
        self.moved_idle += o.moved_idle;
        self.moved_failed += o.moved_failed;
        self.in_flight_at_move += o.in_flight_at_move;
        self.old_delay_at_move += o.old_delay_at_move;
        self.dre_at_move += o.dre_at_move;
        self.timeouts += o.timeouts;
    }
}

fn state_index(s: PathState) -> usize {
    match s {
        PathState::Good => 0,
        PathState::Gray => 1,
        PathState::Bad => 2,
        PathState::Failed => 3,
    }
}

/// One host's Hermes state.
#[derive(Clone, Debug)]
pub struct Hermes {
    params: HermesParams,
    paths: usize,
    /// `[dst_leaf * paths + path]`.
    table: Vec<Option<Path>>,
    flows: HashMap<u32, Flow>,
    /// Reverse-ACK routing: each received flow's ACK path and when it last
    /// carried an ACK.
    acklets: HashMap<u32, (usize, Nanos)>,
    /// When silent flows were last swept out.
    swept: Nanos,
    stats: Stats,
}

/// Period of the sweep that forgets silent flows (the module's aging
/// check, 25 µs).
const SWEEP: Nanos = 25_000;

/// An ACK flowlet silent this long moves to another path (the module's
/// fix for ACKs stuck in a black hole, 1 ms).
const ACKLET_STALE: Nanos = 1_000_000;

/// Splits one uniform 64-bit draw into a probability and an index draw.
fn split(draw: u64) -> (f64, u64) {
    ((draw >> 11) as f64 / (1u64 << 53) as f64, draw.rotate_left(32))
}

impl Hermes {
    /// A host in a fabric of `leaves` leaves with `paths` paths between any
    /// two of them.
    pub fn new(params: HermesParams, leaves: usize, paths: usize) -> Self {
        Hermes {
            params,
            paths,
            table: vec![None; leaves * paths],
            flows: HashMap::new(),
            acklets: HashMap::new(),
            swept: 0,
            stats: Stats { per_path: vec![0; paths], ..Stats::default() },
        }
    }

    fn path(&mut self, now: Nanos, dst_leaf: usize, path: usize) -> &mut Path {
        let p = self.params;
        let slot = &mut self.table[dst_leaf * self.paths + path];
        let entry = slot.get_or_insert_with(|| Path::new(&p, now));
        entry.age(now, &p);
        entry
    }

    /// How Hermes judges `path` to `dst_leaf` at `now`.
    pub fn view(&mut self, now: Nanos, dst_leaf: usize, path: usize) -> PathView {
        let p = self.params;
        match self.table[dst_leaf * self.paths + path] {
            None => PathView { state: PathState::Gray, delay: p.good_delay, ecn_fraction: 0.3, flows: 0 },
            Some(_) => {
                let e = self.path(now, dst_leaf, path);
                PathView { state: e.state(&p), delay: e.delay, ecn_fraction: e.ecn_fraction(), flows: e.flows }
            }
        }
    }

    /// The path for the next packet of `flow` to `dst_leaf` at `now`; `draw`
    /// is a uniform random value.
    pub fn route(&mut self, now: Nanos, flow: u32, dst_leaf: usize, draw: u64) -> usize {
        if now.saturating_sub(self.swept) >= SWEEP {
            self.sweep(now);
        }
        let Some(mut f) = self.flows.get(&flow).copied() else {
            return self.start(now, flow, dst_leaf, draw);
        };
        if now.saturating_sub(f.live) >= self.params.forget_after {
            self.release(now, f);
            self.stats.restarted += 1;
            return self.start(now, flow, dst_leaf, draw);
        }
        let idle = now.saturating_sub(f.active) > self.params.flowlet_gap;
        f.active = now;
        let target = self.reroute_target(now, &mut f, idle, draw);
        self.flows.insert(flow, f);
        match target {
            Some(path) if path != f.path => {
                self.release(now, f);
                self.assign(now, flow, dst_leaf, path);
                path
            }
            _ => f.path,
        }
    }

    /// Whether and where an existing flow moves (the cautious conditions).
    fn reroute_target(&mut self, now: Nanos, f: &mut Flow, idle: bool, draw: u64) -> Option<usize> {
        let p = self.params;
        let old = self.view(now, f.dst_leaf, f.path);
        self.stats.judged[state_index(old.state)] += 1;
        if old.state == PathState::Failed {
            let to = self.select(now, f.dst_leaf, Some(f.path), draw).map(|(q, _)| q);
            self.stats.allowed_failed += 1;
            self.stats.moved_failed += u64::from(to.is_some_and(|t| t != f.path));
            return to;
        }
        let rate = self.path(now, f.dst_leaf, f.path).rate.value(now, p.tdre, p.alpha);
        let rate_bps = rate as f64 * 8.0 * p.alpha / (p.tdre as f64 * 1e-9);
        let allowed = (old.state == PathState::Bad || idle)
            && f.acked >= p.min_bytes
            && rate_bps <= p.max_rate_bps as f64
            && now.saturating_sub(f.tried) > p.retry_gap;
        if !allowed {
            return None;
        }
        let bad = old.state == PathState::Bad;
        if bad {
            self.stats.allowed_bad += 1;
        } else {
            self.stats.allowed_idle += 1;
        }
        let (chance, pick) = split(draw);
        if chance >= p.reroute_probability {
            f.tried = now;
            self.stats.refused += 1;
            return None;
        }
        let to = self.select(now, f.dst_leaf, Some(f.path), pick).map(|(q, _)| q);
        match to {
            Some(t) if t != f.path => {
                if bad {
                    self.stats.moved_bad += 1;
                    self.stats.old_delay_at_move += old.delay;
                    self.stats.dre_at_move += (rate_bps * 8.0 / 1e9) as u64;
                } else {
                    self.stats.moved_idle += 1;
                }
            }
            _ => self.stats.no_target += 1,
        }
        to
    }

    /// Forgets every flow with no ACK for `forget_after` (finished flows
    /// among them), so path flow counts stay current.
    fn sweep(&mut self, now: Nanos) {
        self.swept = now;
        let limit = self.params.forget_after;
        // Releasing only decrements counts, so the map's order is harmless.
        let gone: Vec<(u32, Flow)> =
            self.flows.iter().filter(|(_, f)| now.saturating_sub(f.live) >= limit).map(|(&k, &f)| (k, f)).collect();
        for (k, f) in gone {
            self.flows.remove(&k);
            self.release(now, f);
        }
    }

    fn start(&mut self, now: Nanos, flow: u32, dst_leaf: usize, draw: u64) -> usize {
        let chosen = self.select(now, dst_leaf, None, draw);
        // A placement at random counts in the last slot (that of a failed
        // path, which a placement never chooses).
        self.stats.placed[chosen.map_or(3, |(_, state)| state_index(state))] += 1;
        let path = chosen.map_or_else(|| self.random_path(now, dst_leaf, None, draw), |(q, _)| q);
        self.assign(now, flow, dst_leaf, path);
        self.stats.per_path[path] += 1;
        path
    }

    /// A uniform non-failed path other than `not` (any path other than
    /// `not` if all have failed): the module's random choice.
    fn random_path(&mut self, now: Nanos, dst_leaf: usize, not: Option<usize>, draw: u64) -> usize {
        let open: Vec<usize> = (0..self.paths)
            .filter(|&q| Some(q) != not && self.view(now, dst_leaf, q).state != PathState::Failed)
            .collect();
        if open.is_empty() {
            let any: Vec<usize> = (0..self.paths).filter(|&q| Some(q) != not).collect();
            any.get((draw % any.len().max(1) as u64) as usize).copied().unwrap_or(0)
        } else {
            open[(draw % open.len() as u64) as usize]
        }
    }

    /// The path of an ACK of `flow` (received here) going back to
    /// `dst_leaf`, with reverse-ACK routing (the module's `GetAckPath`): an
    /// ACK within `acklet_timeout` of the flow's last one keeps its path; one
    /// after a silence of [`ACKLET_STALE`] or more takes a uniform path other
    /// than the last (how the module lets ACKs leave a black hole); otherwise
    /// the path a new flow would take.
    pub fn ack_path(&mut self, now: Nanos, flow: u32, dst_leaf: usize, draw: u64) -> usize {
        let path = match self.acklets.get(&flow) {
            Some(&(path, active)) if now.saturating_sub(active) <= self.params.acklet_timeout => path,
            Some(&(path, active)) if now.saturating_sub(active) >= ACKLET_STALE && self.paths > 1 => {
                self.random_path(now, dst_leaf, Some(path), draw)
            }
            _ => self
                .select(now, dst_leaf, None, draw)
                .map_or_else(|| self.random_path(now, dst_leaf, None, draw), |(q, _)| q),
        };
        self.acklets.insert(flow, (path, now));
        path
    }

    /// The path a flow should take, and its state: good (fewest flows),
    /// else gray and better than `from`, else the first bad one better
    /// than `from`.
    fn select(&mut self, now: Nanos, dst_leaf: usize, from: Option<usize>, draw: u64) -> Option<(usize, PathState)> {
        let views: Vec<PathView> = (0..self.paths).map(|q| self.view(now, dst_leaf, q)).collect();
        // A failed current path compares as infinitely slow.
        let from_delay = match from {
            Some(q) if views[q].state != PathState::Failed => views[q].delay,
            _ => Nanos::MAX,
        };
        let better = |v: &PathView| from_delay.saturating_sub(v.delay) >= self.params.better_delay;
        let fewest = |state: PathState, need_better: bool| -> Vec<usize> {
            let ok: Vec<usize> =
                (0..self.paths).filter(|&q| views[q].state == state && (!need_better || better(&views[q]))).collect();
            let least = ok.iter().map(|&q| views[q].flows).min();
            ok.into_iter().filter(|&q| Some(views[q].flows) == least).collect()
        };
        for (state, candidates) in
            [(PathState::Good, fewest(PathState::Good, false)), (PathState::Gray, fewest(PathState::Gray, true))]
        {
            if !candidates.is_empty() {
                return Some((candidates[(draw % candidates.len() as u64) as usize], state));
            }
        }
        (0..self.paths).find(|&q| views[q].state == PathState::Bad && better(&views[q])).map(|q| (q, PathState::Bad))
    }

    fn assign(&mut self, now: Nanos, flow: u32, dst_leaf: usize, path: usize) {
        self.path(now, dst_leaf, path).flows += 1;
        let f = Flow { dst_leaf, path, acked: 0, timeouts: 0, active: now, live: now, tried: now };
        self.flows.insert(flow, f);
    }

    fn release(&mut self, now: Nanos, f: Flow) {
        let e = self.path(now, f.dst_leaf, f.path);
        e.flows = e.flows.saturating_sub(1);
    }

    /// `flow` sent `bytes` on its path at `now` (a retransmission or not).
    pub fn sent(&mut self, now: Nanos, flow: u32, bytes: u32, retransmission: bool) {
        let Some(f) = self.flows.get(&flow).copied() else { return };
        let p = self.params;
        let e = self.path(now, f.dst_leaf, f.path);
        e.rate.add(now, bytes, p.tdre, p.alpha);
        e.block_sent += u64::from(bytes);
        if retransmission {
            e.block_retx += u64::from(bytes);
        }
        if p.fail_retx > 0.0 && e.block_sent >= p.fail_sample_bytes {
            let lossy = e.block_retx as f64 > p.fail_retx * e.block_sent as f64;
            if lossy && e.ecn_fraction() < p.ecn_low {
                e.failed = true;
            }
            e.block_sent = 0;
            e.block_retx = 0;
        }
    }

    /// An ACK of `flow` came back at `now` carrying `echo`.
    pub fn acked(&mut self, now: Nanos, flow: u32, echo: Echo) {
        self.sample(now, echo);
        if let Some(f) = self.flows.get_mut(&flow) {
            if f.path == echo.path {
                f.acked += u64::from(echo.bytes);
                f.timeouts = 0;
                f.live = now;
            }
        }
    }

    fn sample(&mut self, now: Nanos, echo: Echo) {
        let e = self.path(now, echo.dst_leaf, echo.path);
        e.acked += u64::from(echo.bytes);
        if echo.ece {
            e.marked += u64::from(echo.bytes);
        }
        e.delay = e.delay / 2 + echo.delay / 2;
        e.delay_at = now;
    }

    /// `flow`'s retransmission timer fired at `now`, blaming `path` to
    /// `dst_leaf` (the module's sender blames the path its last ACK
    /// answered). The path is marked even when the flow was forgotten; the
    /// flow's count of timeouts in a row grows only if it is on that path.
    pub fn timed_out(&mut self, now: Nanos, flow: u32, dst_leaf: usize, path: usize) {
        let timeouts = match self.flows.get_mut(&flow) {
            Some(f) if f.dst_leaf == dst_leaf && f.path == path => {
                f.timeouts += 1;
                f.timeouts
            }
            _ => 0,
        };
        let limit = self.params.fail_timeouts;
        self.stats.timeouts += 1;
        let e = self.path(now, dst_leaf, path);
        e.timed_out = true;
        if limit > 0 && timeouts >= limit {
            e.failed = true;
        }
    }

    /// `flow` is over.
    pub fn finished(&mut self, now: Nanos, flow: u32) {
        if let Some(f) = self.flows.remove(&flow) {
            self.release(now, f);
        }
    }

    /// The paths to probe towards `dst_leaf` now: two distinct paths drawn
    /// with `draw` (the module's prober: at most ten draws, two probes).
    pub fn probe_plan(&self, draw: u64) -> Vec<usize> {
        let mut plan = Vec::with_capacity(2);
        let mut d = draw;
        for _ in 0..10 {
            if plan.len() == 2.min(self.paths) {
                break;
            }
            let q = (d % self.paths as u64) as usize;
            d = d.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15;
            if !plan.contains(&q) {
                plan.push(q);
            }
        }
        plan
    }

    /// A probe reply came back at `now` (its `bytes` are the probe's).
    pub fn probe_reply(&mut self, now: Nanos, echo: Echo) {
        self.sample(now, echo);
    }
}

/// Hermes at every sending host, as a routing scheme: a flow's forward
/// packets carry the path Hermes chooses; ACKs go by ECMP, or with
/// `reverse_ack` on the path the receiver's Hermes chooses
/// ([`Hermes::ack_path`]). Each ACK reports
/// the one-way delay of the data it answers in [`Packet::lb`] (the
/// receiver writes it), the ECN echo and the path ([`Packet::echo_path`]).
#[derive(Debug)]
pub struct HermesScheme {
    hosts: Vec<Hermes>,
    flows: HashMap<u32, Sending>,
    rng: Rng,
    /// Each rack's hosts, in order.
    racks: Vec<Vec<u32>>,
    /// `(prober, probed host)`: the host at position `j` of a rack probes
    /// the first host of rack `j`.
    probers: Vec<(u32, u32)>,
    probe_interval: Nanos,
    /// Each host's rack.
    rack_of: Vec<usize>,
    /// Receivers route their ACKs too.
    reverse_ack: bool,
}

/// Bytes a probe counts for at its prober: the module adds the reply's
/// size, an empty IPv4 packet.
const PROBE_BYTES: u32 = 20;

/// What the adapter tracks of a flow it routes.
#[derive(Clone, Copy, Debug)]
struct Sending {
    /// Destination rack.
    rack: usize,
    /// Next segment after the highest sent (lower ones are retransmissions).
    next_seq: u32,
    /// Highest cumulative ACK seen.
    acked: u32,
    /// Wire size of the flow's full segments.
    segment: u32,
    /// Path of the flow's last packet.
    path: usize,
    /// Path of the data its last ACK answered (`None`: no ACK yet).
    acked_path: Option<usize>,
}

impl HermesScheme {
    pub fn new(params: HermesParams, fabric: &Fabric, rng: Rng) -> Self {
        let count = fabric.racks().max(1) as usize;
        let paths = max_paths(fabric);
        let mut racks = vec![Vec::new(); count];
        for h in 0..fabric.hosts {
            racks[fabric.rack[h as usize] as usize].push(h);
        }
        let mut probers = Vec::new();
        for (r, hosts) in racks.iter().enumerate() {
            for (j, &h) in hosts.iter().enumerate() {
                if let Some(&target) = racks.get(j).filter(|_| j != r).and_then(|t| t.first()) {
                    probers.push((h, target));
                }
            }
        }
        HermesScheme {
            hosts: (0..fabric.hosts).map(|_| Hermes::new(params, count, paths)).collect(),
            flows: HashMap::new(),
            rng,
            racks,
            probers,
            probe_interval: params.probe_interval,
            rack_of: fabric.rack.iter().map(|&r| r as usize).collect(),
            reverse_ack: params.reverse_ack,
        }
    }
}

impl Scheme for HermesScheme {
    fn name(&self) -> &'static str {
        "hermes"
    }

    /// The counters of every host, summed.
    fn stats(&self) -> Option<SchemeStats> {
        let mut all = Stats::default();
        for h in &self.hosts {
            all.add(&h.stats);
        }
        Some(SchemeStats::Hermes(all))
    }

    fn edge_path(&mut self, ctx: &EdgeCtx, pkt: &Packet) -> Option<u16> {
        if ctx.paths <= 1 || (ctx.reverse && !self.reverse_ack) {
            return None;
        }
        let rack = ctx.fabric.rack[ctx.peer as usize] as usize;
        if ctx.reverse {
            let path = self.hosts[ctx.host as usize].ack_path(ctx.now, pkt.flow, rack, self.rng.next_u64());
            return Some(path as u16);
        }
        let s = self.flows.entry(pkt.flow).or_insert(Sending {
            rack,
            next_seq: 0,
            acked: 0,
            segment: 0,
            path: 0,
            acked_path: None,
        });
        let retransmission = pkt.kind == Kind::Data && pkt.seq < s.next_seq;
        if pkt.kind == Kind::Data {
            s.next_seq = s.next_seq.max(pkt.seq + 1);
            s.segment = s.segment.max(u32::from(pkt.wire));
        }
        let h = &mut self.hosts[ctx.host as usize];
        let path = h.route(ctx.now, pkt.flow, rack, self.rng.next_u64());
        h.sent(ctx.now, pkt.flow, u32::from(pkt.wire), retransmission);
        if path != s.path && s.next_seq > 0 {
            h.stats.in_flight_at_move += u64::from(s.next_seq.saturating_sub(s.acked + 1));
        }
        s.path = path;
        Some(path as u16)
    }

    fn on_ack(&mut self, now: Nanos, host: u32, ack: &Packet) {
        if ack.echo_path == NO_PATH {
            return;
        }
        let Some(s) = self.flows.get_mut(&ack.flow) else { return };
        // Bytes newly acknowledged: new segments at the flow's segment size.
        let bytes = ack.seq.saturating_sub(s.acked) * s.segment;
        s.acked = s.acked.max(ack.seq);
        s.acked_path = Some(usize::from(ack.echo_path));
        let echo = Echo {
            dst_leaf: s.rack,
            path: usize::from(ack.echo_path),
            bytes,
            ece: ack.ece(),
            delay: Nanos::from(ack.lb),
        };
        self.hosts[host as usize].acked(now, ack.flow, echo);
    }

    /// As the module's sender: only a timeout that starts a loss episode
    /// (or re-sends the SYN) counts, and it blames the path the last ACK
    /// answered (before any ACK, the path the flow took).
    fn on_timeout(&mut self, now: Nanos, host: u32, flow: u32, fresh: bool) {
        let Some(s) = self.flows.get(&flow).filter(|_| fresh) else { return };
        let path = s.acked_path.unwrap_or(s.path);
        self.hosts[host as usize].timed_out(now, flow, s.rack, path);
    }

    fn probe_interval(&self) -> Option<Nanos> {
        (self.probe_interval > 0 && !self.probers.is_empty()).then_some(self.probe_interval)
    }

    fn probes(&mut self, _now: Nanos, out: &mut Vec<Probe>) {
        for &(from, to) in &self.probers {
            for path in self.hosts[from as usize].probe_plan(self.rng.next_u64()) {
                out.push(Probe { from, to, path: path as u16 });
            }
        }
    }

    /// The prober takes the reply as a sample of the probed path and
    /// forwards it to every other host of its rack, which take it too.
    fn on_probe_reply(&mut self, now: Nanos, reply: &ProbeReply) {
        let echo = Echo {
            dst_leaf: self.rack_of[reply.probe.to as usize],
            path: usize::from(reply.probe.path),
            bytes: PROBE_BYTES,
            ece: reply.ce,
            delay: reply.delay,
        };
        for &h in &self.racks[self.rack_of[reply.probe.from as usize]] {
            self.hosts[h as usize].probe_reply(now, echo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Nanos = 1_000;

    fn echo(dst_leaf: usize, path: usize, bytes: u32, ece: bool, delay: Nanos) -> Echo {
        Echo { dst_leaf, path, bytes, ece, delay }
    }

    fn hermes() -> Hermes {
        Hermes::new(HermesParams::default(), 2, 4)
    }

    /// Marks `path` to `dst_leaf` failed (as the paper's rules would).
    fn fail(h: &mut Hermes, now: Nanos, dst_leaf: usize, path: usize) {
        h.path(now, dst_leaf, path).failed = true;
    }

    /// The paper's failure rules switched on.
    fn paper() -> HermesParams {
        HermesParams { fail_timeouts: 3, fail_retx: 0.01, ..HermesParams::default() }
    }

    /// Feeds `path` a window's worth of ACKs: 20 × 1000 bytes, `marked` of
    /// them with ECN-Echo, each with one-way `delay`.
    fn feed(h: &mut Hermes, now: Nanos, path: usize, marked: usize, delay: Nanos) {
        for i in 0..20 {
            h.acked(now, 999, echo(1, path, 1000, i < marked, delay));
        }
    }

    #[test]
    fn path_states_from_delay_ecn_and_timeouts() {
        let mut h = hermes();
        assert_eq!(h.view(0, 1, 0).state, PathState::Gray);
        // Delay samples 30 µs from a 40 µs start: 35, 32.5, … → below 40.
        feed(&mut h, 10 * US, 0, 1, 30 * US);
        let v = h.view(10 * US, 1, 0);
        assert_eq!(v.state, PathState::Good, "{v:?}");
        assert!((v.ecn_fraction - 1001.0 / 20_003.0).abs() < 1e-9);
        // Same delay, 3 of 20 marked (15 %): gray.
        feed(&mut h, 10 * US, 1, 3, 30 * US);
        assert_eq!(h.view(10 * US, 1, 1).state, PathState::Gray);
        // Too few bytes sampled: gray even when clean and fast.
        h.acked(10 * US, 999, echo(1, 2, 1000, false, 30 * US));
        assert_eq!(h.view(10 * US, 1, 2).state, PathState::Gray);
        // Delay at 180 µs or more: bad.
        for _ in 0..12 {
            h.acked(10 * US, 999, echo(1, 3, 1000, false, 400 * US));
        }
        assert_eq!(h.view(10 * US, 1, 3).state, PathState::Bad);
        // A timeout makes a good path bad for the rest of its window.
        h.route(20 * US, 7, 1, 0); // lands on good path 0
        h.timed_out(30 * US, 7, 1, 0);
        assert_eq!(h.view(30 * US, 1, 0).state, PathState::Bad);
        // The window (100 µs) ends: counters reset, too few bytes: gray.
        assert_eq!(h.view(120 * US, 1, 0).state, PathState::Gray);
    }

    #[test]
    fn failure_by_timeouts_and_by_losses() {
        // Off by default: three timeouts leave the path bad, not failed.
        let mut off = hermes();
        off.route(0, 1, 1, 2);
        for t in [5_000, 15_000, 35_000] {
            off.timed_out(t * US, 1, 1, 2);
        }
        assert_eq!(off.view(35_000 * US, 1, 2).state, PathState::Bad);
        let mut h = Hermes::new(paper(), 2, 4);
        let path = h.route(0, 1, 1, 2);
        assert_eq!(path, 2);
        h.timed_out(5_000 * US, 1, 1, 2);
        h.timed_out(15_000 * US, 1, 1, 2);
        assert_ne!(h.view(15_000 * US, 1, 2).state, PathState::Failed);
        h.timed_out(35_000 * US, 1, 1, 2);
        assert_eq!(h.view(35_000 * US, 1, 2).state, PathState::Failed);
        // Losses without marks: 2 retransmitted of 100 packets (> 1 %).
        let q = h.route(0, 2, 0, 3);
        // (From 200 µs: the path's first window, 1 marked of 3 bytes, is over.)
        for i in 200..300 {
            h.sent(i * US, 2, 1400, i == 210 || i == 250);
        }
        assert_eq!(h.view(300 * US, 0, q).state, PathState::Failed);
        // 1 of 100 is not above 1 %.
        let r = h.route(0, 3, 0, 1);
        for i in 200..300 {
            h.sent(i * US, 3, 1400, i == 210);
        }
        assert_ne!(h.view(300 * US, 0, r).state, PathState::Failed);
        // Losses with marks are congestion, not failure.
        let c = h.route(0, 4, 1, 0);
        for i in 200..300 {
            h.acked(i * US, 4, echo(1, c, 1000, i % 2 == 0, 50 * US));
            h.sent(i * US, 4, 1400, i % 10 == 0);
        }
        assert_ne!(h.view(300 * US, 1, c).state, PathState::Failed);
    }

    #[test]
    fn no_path_is_good_at_the_fabrics_least_one_way_delays() {
        // On the 4 × 4 × 8 fabric (four 10 µs links) a probe's one-way
        // delay is at least 40 072 ns and a full segment's about 44 700:
        // the smoothed figure, starting at 40 µs, never goes below the
        // 40 µs threshold, so no path is ever good (as in the original,
        // whose links have the same 10 µs).
        let mut h = hermes();
        for i in 0..1_000u64 {
            let now = i * US;
            h.probe_reply(now, echo(1, 0, 20, false, 40_072));
            h.acked(now, 999, echo(1, 0, 1454, false, 44_700));
            let v = h.view(now, 1, 0);
            assert!(v.delay >= 40_000 && v.state == PathState::Gray, "{v:?}");
        }
        // One microsecond less on every hop would make it good.
        let mut h = hermes();
        for _ in 0..20 {
            h.acked(0, 999, echo(1, 0, 1454, false, 39_000));
        }
        assert_eq!(h.view(0, 1, 0).state, PathState::Good);
    }

    #[test]
    fn new_flows_prefer_good_paths_with_fewest_flows() {
        let mut h = hermes();
        feed(&mut h, 0, 1, 0, 30 * US);
        feed(&mut h, 0, 3, 0, 30 * US);
        // Good paths 1 and 3: the draw picks among them (5 % 2 = 1 → 3).
        assert_eq!(h.route(US, 10, 1, 5), 3);
        // Path 3 now holds a flow: the next goes to 1 whatever the draw.
        assert_eq!(h.route(US, 11, 1, 5), 1);
        assert_eq!(h.route(US, 12, 1, 4), 1);
        // No good path (the window passes): gray paths with fewest flows
        // (0 and 2, no flow yet), drawn.
        assert_eq!(h.route(200 * US, 13, 1, 1), 2);
        // Failed paths are never chosen: all fail but 0.
        for q in 1..4 {
            fail(&mut h, 300 * US, 0, q);
        }
        for f in 20..25 {
            assert_eq!(h.route(300 * US, f, 0, f as u64), 0);
        }
    }

    #[test]
    fn cautious_rerouting_needs_every_condition() {
        let mut h = hermes();
        let p = HermesParams::default();
        feed(&mut h, 0, 1, 0, 30 * US);
        assert_eq!(h.route(0, 1, 1, 0), 1);
        // The flow's path turns bad: 400 µs delays (each ACK also counts
        // for the flow, 1000 bytes).
        for _ in 0..20 {
            h.acked(10 * US, 1, echo(1, 1, 1000, false, 400 * US));
        }
        assert_eq!(h.view(10 * US, 1, 1).state, PathState::Bad);
        // Fewer than S = 64 000 bytes acknowledged: it stays.
        let heads = 0; // chance 0 < 0.5: would try
        assert_eq!(h.route(20 * US, 1, 1, heads), 1);
        for _ in 0..50 {
            h.acked(30 * US, 1, echo(1, 1, 1000, false, 400 * US));
        }
        // Enough bytes, but the last try (when it was assigned, t = 0) is
        // less than 100 µs ago: stays.
        assert_eq!(h.route(40 * US, 1, 1, heads), 1);
        // After the retry gap, a losing coin toss (chance ≥ 0.5) stays and
        // restarts the retry gap.
        let tails = u64::MAX;
        for _ in 0..20 {
            h.acked(110 * US, 1, echo(1, 1, 1000, false, 400 * US));
        }
        assert_eq!(h.route(120 * US, 1, 1, tails), 1);
        assert_eq!(h.route(150 * US, 1, 1, heads), 1);
        // At 230 µs it wins the toss: moves to a gray path (not sampled,
        // delay 40 µs, far better than 400): the pick draw chooses.
        for _ in 0..20 {
            h.acked(225 * US, 1, echo(1, 1, 1000, false, 400 * US));
        }
        let moved = h.route(230 * US, 1, 1, heads);
        assert_ne!(moved, 1);
        assert_eq!(h.view(230 * US, 1, 1).flows, 0);
        assert_eq!(h.view(230 * US, 1, moved).flows, 1);
        assert!(p.reroute_probability == 0.5);
    }

    #[test]
    fn a_fast_sender_is_not_moved_and_a_failed_path_is_left_at_once() {
        let mut h = hermes();
        assert_eq!(h.route(0, 1, 1, 0), 0);
        for t in 0..200 {
            h.acked(t * US, 1, echo(1, 0, 1500, false, 400 * US));
            // 3000 bytes a microsecond is 24 Gb/s: above the 5 Gb/s limit.
            for k in 0..2 {
                h.sent(t * US + k * 500, 1, 1500, false);
            }
        }
        assert_eq!(h.view(200 * US, 1, 0).state, PathState::Bad);
        // Bad path, enough bytes, retry gap passed, winning toss: the rate
        // alone keeps it.
        assert_eq!(h.route(200 * US, 1, 1, 0), 0);
        // A failed path: the flow leaves whatever its size or rate.
        fail(&mut h, 201 * US, 1, 0);
        assert_ne!(h.route(202 * US, 1, 1, 0), 0);
    }

    #[test]
    fn forgotten_flows_choose_afresh_away_from_a_timed_out_path() {
        let mut h = hermes();
        assert_eq!(h.route(0, 1, 1, 0), 0);
        // No ACK for 5 ms, then the timer fires: the path is bad for its
        // window, and the flow (silent for over 1 ms) is forgotten, so its
        // retransmission chooses again, among the gray paths 1..3.
        h.timed_out(5_000 * US, 1, 1, 0);
        let again = h.route(5_000 * US, 1, 1, 0);
        assert_eq!(again, 1);
        assert_eq!(h.view(5_000 * US, 1, 0).flows, 0);
    }

    #[test]
    fn silent_flows_are_swept_out_of_the_counts() {
        let mut h = hermes();
        assert_eq!(h.route(0, 1, 1, 0), 0);
        assert_eq!(h.route(0, 2, 1, 0), 1);
        assert_eq!(h.view(0, 1, 0).flows, 1);
        // Flow 2 keeps hearing ACKs; flow 1 went silent (finished).
        h.acked(900 * US, 2, echo(1, 1, 1000, false, 50 * US));
        h.route(1_000 * US, 3, 0, 0);
        assert_eq!((h.view(1_000 * US, 1, 0).flows, h.view(1_000 * US, 1, 1).flows), (0, 1));
        h.finished(1_000 * US, 2);
        assert_eq!(h.view(1_000 * US, 1, 1).flows, 0);
    }

    #[test]
    fn probes_go_to_two_distinct_random_paths_and_replies_are_samples() {
        let h = hermes();
        // Draw 6 over 4 paths: 6 % 4 = 2, then the next draw's.
        let plan = h.probe_plan(6);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0], 2);
        assert_ne!(plan[0], plan[1]);
        // Every draw gives two distinct paths; one path gives one probe.
        for draw in 0..200u64 {
            let p = h.probe_plan(draw.wrapping_mul(0x2545_f491_4f6c_dd1d));
            assert!(p.len() == 2 && p[0] != p[1] && p.iter().all(|&q| q < 4), "{p:?}");
        }
        assert_eq!(Hermes::new(HermesParams::default(), 2, 1).probe_plan(7), vec![0]);
        // A reply is a path sample: 20 bytes, its mark, its delay (each
        // sample moves the delay half way: 40 → 42 µs).
        let mut h = hermes();
        h.probe_reply(0, echo(1, 2, 20, true, 44 * US));
        let v = h.view(0, 1, 2);
        assert_eq!((v.state, v.delay), (PathState::Gray, 42 * US));
        assert!((v.ecn_fraction - 21.0 / 23.0).abs() < 1e-9, "{v:?}");
    }

    #[test]
    fn acks_keep_their_path_within_an_acklet_and_leave_it_after_a_silence() {
        let mut h = hermes();
        // A first ACK takes the path a new flow would: every path gray
        // with no flows, so the draw picks (2 of 4).
        assert_eq!(h.ack_path(0, 9, 1, 2), 2);
        // Within 300 µs of the last ACK the path holds, whatever the draw
        // and even when the path turns bad.
        assert_eq!(h.ack_path(250 * US, 9, 1, 0), 2);
        h.timed_out(500 * US, 4, 1, 2);
        assert_eq!(h.view(550 * US, 1, 2).state, PathState::Bad);
        assert_eq!(h.ack_path(550 * US, 9, 1, 1), 2);
        // After 300 µs to 1 ms of silence it is chosen afresh: gray paths
        // only (2 timed out again in this window), draw 2 of [0, 1, 3].
        h.timed_out(880 * US, 4, 1, 2);
        assert_eq!(h.view(900 * US, 1, 2).state, PathState::Bad);
        assert_eq!(h.ack_path(900 * US, 9, 1, 2), 3);
        // After a silence of 1 ms or more: a uniform path other than the
        // last (draw 0 of [0, 1, 2]), good, gray or bad alike.
        assert_eq!(h.ack_path(1_900 * US, 9, 1, 0), 0);
        assert_eq!(h.ack_path(2_900 * US, 9, 1, 0), 1);
        // Other flows keep their own acklets.
        assert_eq!(h.ack_path(2_900 * US, 8, 1, 1), 1);
    }

    mod scheme {
        use super::super::super::testing::*;
        use super::*;

        fn edge(f: &Fabric, now: Nanos, host: u32, peer: u32) -> EdgeCtx<'_> {
            EdgeCtx { now, host, peer, reverse: false, paths: f.paths(host, peer), fabric: f }
        }

        #[test]
        fn one_prober_per_pair_of_racks_and_its_rack_shares_the_replies() {
            let f = fabric();
            let mut s = HermesScheme::new(HermesParams::default(), &f, Rng::new(5));
            // Host j of rack r (j < 4, j ≠ r) probes host 0 of rack j.
            let mut expect = Vec::new();
            for r in 0..4u32 {
                for j in (0..4u32).filter(|&j| j != r) {
                    expect.push((8 * r + j, 8 * j));
                }
            }
            assert_eq!(s.probers, expect);
            assert_eq!(s.probe_interval(), Some(50_000));
            let mut out = Vec::new();
            s.probes(0, &mut out);
            assert_eq!(out.len(), 24);
            for pair in out.chunks(2) {
                assert_eq!((pair[0].from, pair[0].to), (pair[1].from, pair[1].to));
                assert!(pair[0].path != pair[1].path && pair[0].path < 4 && pair[1].path < 4, "{pair:?}");
            }
            // Host 8 (rack 1) probed host 0 (rack 0) on path 3: every host of
            // rack 1 takes the sample, no other host does.
            let probe = Probe { from: 8, to: 0, path: 3 };
            s.on_probe_reply(10_000, &ProbeReply { probe, delay: 44_000, ce: false });
            for h in 0..32 {
                let v = s.hosts[h].view(10_000, 0, 3);
                let expected = if (8..16).contains(&h) { 42_000 } else { 40_000 };
                assert_eq!(v.delay, expected, "host {h}");
            }
        }

        #[test]
        fn acks_go_by_ecmp_unless_reverse_ack_routing_is_on() {
            let f = fabric();
            let back = |now| EdgeCtx { reverse: true, ..edge(&f, now, 31, 0) };
            let mut ack = data(1, 1, 0);
            ack.kind = Kind::Ack;
            let mut off = HermesScheme::new(HermesParams::default(), &f, Rng::new(5));
            assert_eq!(off.edge_path(&back(0), &ack), None);
            let on = HermesParams { reverse_ack: true, ..HermesParams::default() };
            let mut s = HermesScheme::new(on, &f, Rng::new(5));
            let first = s.edge_path(&back(0), &ack).expect("a path for the ACK");
            assert!(first < 4);
            // The next ACKs of the flow keep it (one acklet) …
            for t in 1..10 {
                assert_eq!(s.edge_path(&back(t * 100_000), &ack), Some(first));
            }
            // … until 1 ms of silence, after which another path is taken.
            let later = s.edge_path(&back(2_000_000), &ack).unwrap();
            assert_ne!(later, first);
            // The receiver's choice is its own: host 31 now counts no flow.
            assert!(s.flows.is_empty());
        }

        #[test]
        fn a_timeout_blames_the_last_acked_path_once_per_loss_episode() {
            let f = fabric();
            let rack = f.rack[31] as usize;
            let mut s = HermesScheme::new(HermesParams::default(), &f, Rng::new(5));
            let p0 = s.edge_path(&edge(&f, 0, 0, 31), &data(1, 0, 31)).unwrap();
            let q = (p0 + 1) % 4;
            // Before any ACK, a timeout blames the path the flow took.
            s.on_timeout(1_000, 0, 1, true);
            assert_eq!(s.hosts[0].view(1_000, rack, usize::from(p0)).state, PathState::Bad);
            // The last ACK answered data sent on q (before a move, say).
            let mut ack = data(1, 1, 0);
            ack.kind = Kind::Ack;
            ack.echo_path = q;
            s.on_ack(200_000, 0, &ack);
            // A backoff inside the loss episode blames nothing.
            s.on_timeout(300_000, 0, 1, false);
            assert_ne!(s.hosts[0].view(300_000, rack, usize::from(q)).state, PathState::Bad);
            // The next episode's timeout blames q, not the flow's path,
            // even after the host forgot the flow (no ACK for 1 ms).
            s.edge_path(&edge(&f, 5_000_000, 0, 30), &data(2, 0, 30));
            s.on_timeout(5_000_000, 0, 1, true);
            assert_eq!(s.hosts[0].view(5_000_000, rack, usize::from(q)).state, PathState::Bad);
            assert_ne!(s.hosts[0].view(5_000_000, rack, usize::from(p0)).state, PathState::Bad);
        }

        #[test]
        fn acks_report_delay_and_bytes_and_retransmissions_are_seen() {
            let f = fabric();
            let mut s = HermesScheme::new(paper(), &f, Rng::new(5));
            let p0 = s.edge_path(&edge(&f, 0, 0, 31), &data(1, 0, 31)).unwrap();
            for seq in 1..20 {
                assert_eq!(s.edge_path(&edge(&f, 0, 0, 31), &data(1, seq, 31)), Some(p0));
            }
            // 19 ACKs of one segment each, 30 µs one-way, clean: the path
            // turns good (19 × 1454 bytes > 14 000, delay 40 → 30 µs).
            let mut ack = data(1, 0, 0);
            ack.kind = Kind::Ack;
            ack.echo_path = p0;
            for seq in 1..20 {
                (ack.seq, ack.lb) = (seq, 30_000);
                s.on_ack(10_000, 0, &ack);
            }
            let rack = f.rack[31] as usize;
            let v = s.hosts[0].view(10_000, rack, usize::from(p0));
            assert_eq!((v.state, v.delay), (PathState::Good, 30_000), "{v:?}");
            // Within the rack there is one path: no choice is made.
            assert_eq!(s.edge_path(&edge(&f, 0, 0, 1), &data(2, 0, 1)), None);
            // Retransmitting 2 of a block of 97 segments (141 038 bytes)
            // without marks fails the path.
            for seq in 20..95 {
                s.edge_path(&edge(&f, 300_000, 0, 31), &data(1, seq, 31));
            }
            s.edge_path(&edge(&f, 300_000, 0, 31), &data(1, 30, 31));
            s.edge_path(&edge(&f, 300_000, 0, 31), &data(1, 31, 31));
            assert_eq!(s.hosts[0].view(300_000, rack, usize::from(p0)).state, PathState::Failed);
        }
    }
}
