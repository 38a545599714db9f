//! Workloads: the list of flows a run starts, drawn before it starts.
//!
//! Poisson arrivals follow the seed's large-scale experiment
//! (ns3-ecn-sharp `examples/rtt-variations/large-scale.cc`): every host
//! starts flows at exponential intervals from `start` until `launch_end`,
//! its first flow one interval after `start`; each flow's size is a draw of
//! the CDF and its destination is uniform over the hosts of other racks (any
//! other host when there is one rack). The rate per host is
//!
//! `λ = load × rack uplink capacity per host ÷ (8 × mean flow size)`
//!
//! — for the seed's fabric (8 hosts of 10 Gb/s per leaf, 4 × 10 Gb/s up, so
//! 5 Gb/s of uplink per host) and the web-search CDF (mean 1 711 250 B),
//! load 0.6 gives 219 flows/s per host, as the original computes it. Each
//! flow also draws a host delay class uniformly (the original's random TOS).
//!
//! The seed's queue-track experiment (`examples/rtt-variations/queue-track.cc`)
//! instead sends from chosen hosts to chosen destinations: with
//! `destinations` given, the load is relative to the destinations' links,
//! shared evenly by the sources — `λ = load × destinations × host rate ÷
//! (8 × mean flow size) ÷ sources` per source (its 16 senders toward one
//! 10 Gb/s receiver at load 0.9) — and each flow's destination is uniform
//! over the destinations other than its source.
//!
//! [`Permutation`] pairs every host with one other host (a random cyclic
//! permutation, so every host sends to one host and receives from one),
//! each pair a long-lived flow or a flow of a given size; explicit lists
//! come from a CSV file ([`crate::flowlist`]).
//!
//! [`Incast`] adds all-to-one bursts at a fixed interval, as queue-track's
//! periodic incasts: at each burst every sender starts one flow to the
//! receiver, of a fixed size or uniform in a range.

use fulcrum_balance::Rng;

use crate::packet::Nanos;
use crate::topology::Fabric;
use fulcrum_workload::Cdf;

/// One flow to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub src: u32,
    pub dst: u32,
    /// Payload bytes.
    pub bytes: u64,
    pub start: Nanos,
    /// Index into the host delay classes.
    pub class: u8,
    /// Scheduler class at switch ports (0 without a scheduler).
    pub prio: u8,
}

/// Poisson flow arrivals at a load.
#[derive(Clone, Debug)]
pub struct Poisson {
    pub cdf: Cdf,
    /// Offered load relative to the rack uplink capacity per host.
    pub load: f64,
    pub start: Nanos,
    pub launch_end: Nanos,
    /// Hosts that start flows (empty: all).
    pub sources: Vec<u32>,
    /// Hosts flows go to (empty: hosts of other racks); when given, the
    /// load is relative to their links.
    pub destinations: Vec<u32>,
}

impl Poisson {
    /// Flows per second per source host.
    pub fn rate(&self, fabric: &Fabric) -> f64 {
        if self.destinations.is_empty() {
            return self.load * fabric.uplink_bps_per_host / (8.0 * self.cdf.mean());
        }
        let sources = if self.sources.is_empty() { fabric.hosts as usize } else { self.sources.len() };
        let capacity = self.destinations.len() as f64 * fabric.host_bps as f64;
        self.load * capacity / (8.0 * self.cdf.mean()) / sources as f64
    }

    /// Draw every flow, host by host, into `out`.
    pub fn generate(&self, fabric: &Fabric, classes: usize, rng: &mut Rng, out: &mut Vec<FlowSpec>) {
        let rate = self.rate(fabric);
        if rate <= 0.0 {
            return;
        }
        let others = |src: u32| -> Vec<u32> {
            if !self.destinations.is_empty() {
                return self.destinations.iter().copied().filter(|&h| h != src).collect();
            }
            let rack = fabric.rack[src as usize];
            let racks = fabric.racks();
            (0..fabric.hosts).filter(|&h| h != src && (racks == 1 || fabric.rack[h as usize] != rack)).collect()
        };
        let sources: Vec<u32> =
            if self.sources.is_empty() { (0..fabric.hosts).collect() } else { self.sources.clone() };
        for src in sources {
            let dests = others(src);
            if dests.is_empty() {
                continue;
            }
            let mut t = self.start as f64 + exp_ns(rng, rate);
            while t < self.launch_end as f64 {
                let dst = dests[rng.below(dests.len() as u64) as usize];
                let bytes = self.cdf.sample(rng);
                let class = rng.below(classes.max(1) as u64) as u8;
                out.push(FlowSpec { src, dst, bytes, start: t as Nanos, class, prio: 0 });
                t += exp_ns(rng, rate);
            }
        }
    }
}

/// A long-lived flow: it sends from `start` until the run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongFlow {
    pub src: u32,
    pub dst: u32,
    pub start: Nanos,
    /// Scheduler class of its packets.
    pub prio: u8,
}

/// `count` short flows of `bytes` each, as the seed's mq program draws them:
/// flow i leaves from `sources[i % len]`, starts at a uniform time in
/// `[start, end)` and takes a uniform scheduler class below `classes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShortFlows {
    pub count: u32,
    pub bytes: u64,
    pub sources: Vec<u32>,
    pub dst: u32,
    pub start: Nanos,
    pub end: Nanos,
    pub classes: u32,
}

/// Long-lived flows joining at given times, then short flows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixed {
    pub long: Vec<LongFlow>,
    pub short: Option<ShortFlows>,
}

impl Fixed {
    /// Every flow into `out`: the long ones first (flow i is long flow i),
    /// each sized to outlast a run ending at `end` on `fabric`'s host links.
    pub fn generate(&self, fabric: &Fabric, end: Nanos, rng: &mut Rng, out: &mut Vec<FlowSpec>) {
        // More than the host link can carry before the end: never completes.
        let endless = (fabric.host_bps as u128 * end as u128 / 8_000_000_000) as u64 + 1_000_000;
        for l in &self.long {
            out.push(FlowSpec { src: l.src, dst: l.dst, bytes: endless, start: l.start, class: 0, prio: l.prio });
        }
        let Some(s) = &self.short else { return };
        for i in 0..s.count as usize {
            let start = s.start + (rng.unit() * (s.end - s.start) as f64) as Nanos;
            let prio = rng.below(s.classes.max(1) as u64) as u8;
            let src = s.sources[i % s.sources.len()];
            out.push(FlowSpec { src, dst: s.dst, bytes: s.bytes, start, class: 0, prio });
        }
    }
}

/// All-to-one bursts: every `interval` from `start`, `bursts` times, each
/// of the first `fan_in` hosts other than `receiver` starts a flow to it of
/// `bytes` (uniform in `[bytes, bytes_max]` when `bytes_max` is larger).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incast {
    pub fan_in: u32,
    pub receiver: u32,
    pub bytes: u64,
    pub bytes_max: u64,
    pub start: Nanos,
    pub interval: Nanos,
    pub bursts: u32,
}

impl Incast {
    /// The senders: the first `fan_in` hosts other than the receiver.
    pub fn senders(&self) -> impl Iterator<Item = u32> + '_ {
        (0..).filter(|&h| h != self.receiver).take(self.fan_in as usize)
    }

    /// Every burst's flows into `out`, burst by burst; each flow draws a
    /// delay class uniformly below `classes`.
    pub fn generate(&self, classes: usize, rng: &mut Rng, out: &mut Vec<FlowSpec>) {
        for b in 0..self.bursts as u64 {
            let start = self.start + b * self.interval;
            for src in self.senders() {
                let spread = self.bytes_max.saturating_sub(self.bytes);
                let bytes = self.bytes + if spread > 0 { rng.below(spread + 1) } else { 0 };
                let class = rng.below(classes.max(1) as u64) as u8;
                out.push(FlowSpec { src, dst: self.receiver, bytes, start, class, prio: 0 });
            }
        }
    }
}

/// Every host sends one flow to another, all starting at `start`: the
/// destinations form a random cyclic permutation of the hosts (Sattolo's
/// algorithm), so no host sends to itself and each receives one flow.
/// `bytes` None: long-lived flows, sized to outlast the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permutation {
    pub bytes: Option<u64>,
    pub start: Nanos,
}

impl Permutation {
    /// The flows into `out`, flow i from host i; each draws a delay class
    /// uniformly below `classes`.
    pub fn generate(&self, fabric: &Fabric, end: Nanos, classes: usize, rng: &mut Rng, out: &mut Vec<FlowSpec>) {
        let n = fabric.hosts as usize;
        let mut dst: Vec<u32> = (0..fabric.hosts).collect();
        for i in (1..n).rev() {
            let j = rng.below(i as u64) as usize;
            dst.swap(i, j);
        }
        let endless = (fabric.host_bps as u128 * end as u128 / 8_000_000_000) as u64 + 1_000_000;
        for (src, &dst) in dst.iter().enumerate() {
            let class = rng.below(classes.max(1) as u64) as u8;
            let bytes = self.bytes.unwrap_or(endless);
            out.push(FlowSpec { src: src as u32, dst, bytes, start: self.start, class, prio: 0 });
        }
    }
}

/// An exponential interval (ns) at `rate` per second.
fn exp_ns(rng: &mut Rng, rate: f64) -> f64 {
    -(1.0 - rng.unit()).ln() / rate * 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Shape;

    #[test]
    fn seed_rate_and_destinations() {
        let shape =
            Shape::LeafSpine { spines: 4, leaves: 4, hosts_per_leaf: 8, links: 1, host_gbps: 10.0, fabric_gbps: 10.0 };
        let fabric = Fabric::build(&shape, 10_000);
        let cdf = Cdf::parse(include_str!("../../../scenarios/fabric/cdf/web-search.txt")).unwrap();
        let w = Poisson { cdf, load: 0.6, start: 0, launch_end: 200_000_000, sources: vec![], destinations: vec![] };
        assert!((w.rate(&fabric) - 219.14).abs() < 0.01, "{}", w.rate(&fabric));
        let mut flows = Vec::new();
        w.generate(&fabric, 5, &mut Rng::new(3), &mut flows);
        // 32 hosts × 219/s × 0.2 s ≈ 1402 flows.
        assert!((1300..1500).contains(&flows.len()), "{}", flows.len());
        assert!(flows.iter().all(|f| fabric.rack[f.src as usize] != fabric.rack[f.dst as usize]));
        assert!(flows.iter().all(|f| f.start < 200_000_000 && f.class < 5));
    }

    #[test]
    fn fixed_flows_put_long_ones_first_and_draw_the_short_ones() {
        let fabric = Fabric::build(&Shape::Star { hosts: 4, gbps: 10.0, extra_delay: vec![] }, 10_000);
        let w = Fixed {
            long: vec![LongFlow { src: 0, dst: 3, start: 0, prio: 0 }, LongFlow { src: 1, dst: 3, start: 5, prio: 1 }],
            short: Some(ShortFlows {
                count: 50,
                bytes: 28_000,
                sources: vec![1, 2],
                dst: 3,
                start: 100,
                end: 1_000_000,
                classes: 3,
            }),
        };
        let mut flows = Vec::new();
        w.generate(&fabric, 400_000_000, &mut Rng::new(1), &mut flows);
        assert_eq!(flows.len(), 52);
        // 10 Gb/s for 0.4 s is 500 MB: the long flows cannot finish.
        assert!(flows[..2].iter().all(|f| f.bytes > 500_000_000));
        assert_eq!((flows[1].start, flows[1].prio), (5, 1));
        let short = &flows[2..];
        assert!(short.iter().all(|f| f.bytes == 28_000 && (100..1_000_000).contains(&f.start) && f.prio < 3));
        assert_eq!(short.iter().filter(|f| f.src == 1).count(), 25);
        assert!((0..3).all(|c| short.iter().any(|f| f.prio == c)));
    }

    #[test]
    fn poisson_toward_chosen_destinations_shares_their_links() {
        // queue-track: 16 senders to one 10 Gb/s receiver at load 0.9.
        let fabric = Fabric::build(&Shape::Star { hosts: 17, gbps: 10.0, extra_delay: vec![] }, 10_000);
        let cdf = Cdf::parse("1000 0.5\n3000 1\n").unwrap();
        let mean = cdf.mean();
        let w = Poisson {
            cdf,
            load: 0.9,
            start: 0,
            launch_end: 1_000_000_000,
            sources: (0..16).collect(),
            destinations: vec![16],
        };
        let per_source = 0.9 * 10e9 / (8.0 * mean) / 16.0;
        assert!((w.rate(&fabric) - per_source).abs() < 1e-6, "{}", w.rate(&fabric));
        let mut flows = Vec::new();
        w.generate(&fabric, 1, &mut Rng::new(5), &mut flows);
        assert!(flows.iter().all(|f| f.dst == 16 && f.src < 16));
        let expected = per_source * 16.0;
        assert!((flows.len() as f64 - expected).abs() < 4.0 * expected.sqrt(), "{} flows", flows.len());
    }

    #[test]
    fn incast_bursts_fan_in_to_the_receiver() {
        let w =
            Incast { fan_in: 3, receiver: 1, bytes: 3000, bytes_max: 60_000, start: 100, interval: 1000, bursts: 4 };
        assert_eq!(w.senders().collect::<Vec<_>>(), [0, 2, 3]);
        let mut flows = Vec::new();
        w.generate(1, &mut Rng::new(2), &mut flows);
        assert_eq!(flows.len(), 12);
        assert_eq!(flows.iter().map(|f| f.start).collect::<Vec<_>>()[..4], [100, 100, 100, 1100]);
        assert!(flows.iter().all(|f| f.dst == 1 && (3000..=60_000).contains(&f.bytes)));
        assert!(flows.windows(2).any(|p| p[0].bytes != p[1].bytes), "sizes are drawn");
        let fixed = Incast { bytes_max: 0, ..w };
        let mut flows = Vec::new();
        fixed.generate(1, &mut Rng::new(2), &mut flows);
        assert!(flows.iter().all(|f| f.bytes == 3000));
    }

    #[test]
    fn permutation_pairs_every_host_with_another() {
        let fabric = Fabric::build(&Shape::Star { hosts: 9, gbps: 10.0, extra_delay: vec![] }, 10_000);
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..20 {
            let mut flows = Vec::new();
            Permutation { bytes: Some(5000), start: 7 }.generate(
                &fabric,
                1_000_000,
                1,
                &mut Rng::new(seed),
                &mut flows,
            );
            assert_eq!(flows.len(), 9);
            assert!(flows.iter().enumerate().all(|(i, f)| f.src == i as u32 && f.dst != f.src));
            assert!(flows.iter().all(|f| f.bytes == 5000 && f.start == 7));
            let mut dsts: Vec<u32> = flows.iter().map(|f| f.dst).collect();
            seen.insert(dsts.clone());
            dsts.sort_unstable();
            assert_eq!(dsts, (0..9).collect::<Vec<_>>(), "each host receives one flow");
        }
        assert!(seen.len() > 15, "seeds draw different permutations");
        let mut flows = Vec::new();
        Permutation { bytes: None, start: 0 }.generate(&fabric, 400_000_000, 1, &mut Rng::new(1), &mut flows);
        assert!(flows.iter().all(|f| f.bytes > 500_000_000), "long-lived flows outlast the run");
    }
}
