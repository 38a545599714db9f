//! Asymmetry and failures of a leaf-spine fabric, as the Hermes paper's
//! experiment program injects them (snowzjx/ns3-load-balance,
//! `examples/load-balance/`), plus links that fail at a given time.
//!
//! - **Slow links**: chosen leaf–spine links run at `slow_factor` of their
//!   rate (1/5 in the original's asymmetry option), both directions. A list
//!   of (leaf, spine) pairs slows every parallel link of each pair; a
//!   fraction slows that share of all leaf–spine links, drawn from the
//!   run's seed (the original flips a coin per link with a probability, 40 %
//!   by default; a fixed count keeps runs of one seed comparable).
//! - **Failed links**: from time `at` the link (both directions) drops every
//!   packet handed to it; packets already queued still leave. Routes keep
//!   the link until `detect` later (never, if no detection delay is given):
//!   until then every scheme keeps sending onto it — per-flow ECMP keeps
//!   hashing flows onto it, which is the baseline the papers compare
//!   against; afterwards switch schemes see groups without it and carried
//!   paths through it move to a live port ([`crate::lb::follow`]).
//! - **Random drop**: a spine drops each packet it sends toward a leaf with
//!   probability `rate` (the original: spine 0, 0.5 %, in its queue
//!   discipline's enqueue).
//! - **Black hole**: a spine silently drops every packet it sends toward a
//!   leaf whose source host is in `src_leaf`'s rack and/or whose
//!   destination is in `dst_leaf`'s rack (the original's source, destination
//!   and pair modes, by subnet). A flow between those racks hashed through
//!   that spine by ECMP never completes.

use fulcrum_balance::Rng;

use crate::packet::{Nanos, Packet};
use crate::topology::{End, Fabric};

/// A leaf–spine link that fails.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFailure {
    pub leaf: u32,
    pub spine: u32,
    pub at: Nanos,
    /// Delay until routes stop using the link; `None`: they never do.
    pub detect: Option<Nanos>,
}

/// Packets a spine drops on purpose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlackHole {
    pub spine: u32,
    pub src_leaf: Option<u32>,
    pub dst_leaf: Option<u32>,
}

/// The faults of a scenario (leaf-spine fabrics only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// (leaf, spine) pairs whose links are slow.
    pub slow_links: Vec<(u32, u32)>,
    /// Share of all leaf–spine links that are slow, drawn per run.
    pub slow_fraction: f64,
    /// Rate of a slow link relative to the others.
    pub slow_factor: f64,
    pub failures: Vec<LinkFailure>,
    /// (spine, drop probability).
    pub random_drop: Option<(u32, f64)>,
    pub black_hole: Option<BlackHole>,
}

/// What happens at one output port.
#[derive(Clone, Copy, Debug, Default)]
struct PortFault {
    /// The link drops packets from this time.
    dead_at: Option<Nanos>,
    /// Routes drop the port from this time.
    unrouted_at: Option<Nanos>,
    drop_rate: f64,
    black_hole: Option<BlackHole>,
}

/// Faults bound to the ports of one fabric, for one run.
#[derive(Debug)]
pub struct Faults {
    ports: Vec<PortFault>,
    any_drop: bool,
    any_unrouted: bool,
    rng: Rng,
    /// Packets dropped by faults so far.
    pub dropped: u64,
}

/// Ports of every link between `leaf` and `spine` (both directions).
fn links(fabric: &Fabric, leaves: u32, leaf: u32, spine: u32) -> impl Iterator<Item = usize> + '_ {
    let (a, b) = (End::Switch(leaf), End::Switch(leaves + spine));
    fabric
        .ports
        .iter()
        .enumerate()
        .filter(move |(_, p)| (p.from, p.to) == (a, b) || (p.from, p.to) == (b, a))
        .map(|(i, _)| i)
}

impl Faults {
    /// Apply `cfg` to a leaf-spine `fabric` of `leaves` leaves: slow links
    /// get their rate now; the rest acts per packet. `rng` draws the slow
    /// links of `slow_fraction` and the random drops.
    pub fn new(cfg: &FaultConfig, fabric: &mut Fabric, leaves: u32, mut rng: Rng) -> Faults {
        let mut slow: Vec<usize> = Vec::new();
        for &(leaf, spine) in &cfg.slow_links {
            slow.extend(links(fabric, leaves, leaf, spine));
        }
        if cfg.slow_fraction > 0.0 {
            // Uplinks (leaf → spine ports) stand for their links.
            let mut up: Vec<usize> = (0..fabric.ports.len())
                .filter(|&i| matches!((fabric.ports[i].from, fabric.ports[i].to), (End::Switch(a), End::Switch(b)) if a < leaves && b >= leaves))
                .collect();
            let n = (cfg.slow_fraction * up.len() as f64).round() as usize;
            for i in 0..n {
                let j = i + rng.below((up.len() - i) as u64) as usize;
                up.swap(i, j);
                // Links are built as port pairs: a → b, then b → a.
                slow.extend([up[i], up[i] ^ 1]);
            }
        }
        slow.sort_unstable();
        slow.dedup();
        for i in slow {
            let bps = &mut fabric.ports[i].bps;
            *bps = ((*bps as f64 * cfg.slow_factor).round() as u64).max(1);
        }
        let mut ports = vec![PortFault::default(); fabric.ports.len()];
        for f in &cfg.failures {
            for i in links(fabric, leaves, f.leaf, f.spine) {
                ports[i].dead_at = Some(f.at);
                ports[i].unrouted_at = f.detect.map(|d| f.at + d);
            }
        }
        // The spine's ports toward the leaves (all its ports).
        let spine_ports = |spine: u32| -> Vec<usize> {
            let s = End::Switch(leaves + spine);
            (0..fabric.ports.len()).filter(|&i| fabric.ports[i].from == s).collect()
        };
        if let Some((spine, rate)) = cfg.random_drop {
            spine_ports(spine).into_iter().for_each(|i| ports[i].drop_rate = rate);
        }
        if let Some(bh) = cfg.black_hole {
            spine_ports(bh.spine).into_iter().for_each(|i| ports[i].black_hole = Some(bh));
        }
        let any_drop = ports.iter().any(|p| p.dead_at.is_some() || p.drop_rate > 0.0 || p.black_hole.is_some());
        let any_unrouted = ports.iter().any(|p| p.unrouted_at.is_some());
        Faults { ports, any_drop, any_unrouted, rng, dropped: 0 }
    }

    /// No faults at all.
    pub fn none() -> Faults {
        Faults { ports: Vec::new(), any_drop: false, any_unrouted: false, rng: Rng::new(0), dropped: 0 }
    }

    /// Whether any port drops packets on purpose.
    #[inline]
    pub fn any(&self) -> bool {
        self.any_drop
    }

    /// Whether routes may lose ports (some failure has a detection delay).
    #[inline]
    pub fn may_unroute(&self) -> bool {
        self.any_unrouted
    }

    /// Whether routes still use `port` at `now`.
    #[inline]
    pub fn routed(&self, port: u32, now: Nanos) -> bool {
        self.ports.get(port as usize).and_then(|p| p.unrouted_at).is_none_or(|t| now < t)
    }

    /// Whether `port` drops `p`, handed to it at `now`; `src` is the
    /// packet's sending host and `rack` maps hosts to racks.
    #[inline]
    pub fn drops(&mut self, port: u32, now: Nanos, p: &Packet, src: u32, rack: &[u32]) -> bool {
        if !self.any_drop {
            return false;
        }
        let Some(f) = self.ports.get(port as usize) else { return false };
        let hit = f.dead_at.is_some_and(|t| now >= t)
            || f.black_hole.is_some_and(|bh| {
                bh.src_leaf.is_none_or(|l| rack[src as usize] == l)
                    && bh.dst_leaf.is_none_or(|l| rack[p.dst as usize] == l)
            })
            || (f.drop_rate > 0.0 && self.rng.unit() < f.drop_rate);
        self.dropped += hit as u64;
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::testing::{data, fabric};

    fn port(f: &Fabric, from: u32, to: u32) -> u32 {
        f.ports.iter().position(|p| p.from == End::Switch(from) && p.to == End::Switch(to)).unwrap() as u32
    }

    #[test]
    fn slow_links_by_list_and_by_fraction() {
        let mut f = fabric();
        let cfg = FaultConfig { slow_links: vec![(1, 2)], slow_factor: 0.2, ..Default::default() };
        Faults::new(&cfg, &mut f, 4, Rng::new(1));
        assert_eq!(f.ports[port(&f, 1, 6) as usize].bps, 2_000_000_000);
        assert_eq!(f.ports[port(&f, 6, 1) as usize].bps, 2_000_000_000);
        assert_eq!(f.ports[port(&f, 1, 5) as usize].bps, 10_000_000_000);
        let mut f = fabric();
        let cfg = FaultConfig { slow_fraction: 0.25, slow_factor: 0.2, ..Default::default() };
        Faults::new(&cfg, &mut f, 4, Rng::new(1));
        let slow = f.ports.iter().filter(|p| p.bps == 2_000_000_000).count();
        assert_eq!(slow, 8, "4 of 16 links, both directions");
    }

    #[test]
    fn failures_drop_then_leave_the_routes() {
        let mut f = fabric();
        let fail = LinkFailure { leaf: 0, spine: 1, at: 1000, detect: Some(500) };
        let cfg = FaultConfig { failures: vec![fail], ..Default::default() };
        let mut faults = Faults::new(&cfg, &mut f, 4, Rng::new(1));
        let (up, down) = (port(&f, 0, 5), port(&f, 5, 0));
        let p = data(0, 0, 31);
        assert!(!faults.drops(up, 999, &p, 0, &f.rack));
        assert!(faults.drops(up, 1000, &p, 0, &f.rack) && faults.drops(down, 1000, &p, 0, &f.rack));
        assert!(faults.routed(up, 1499) && !faults.routed(up, 1500) && faults.may_unroute());
        assert_eq!(faults.dropped, 2);
        // Without a detection delay the routes keep the dead link.
        let cfg = FaultConfig { failures: vec![LinkFailure { detect: None, ..fail }], ..Default::default() };
        let faults = Faults::new(&cfg, &mut fabric(), 4, Rng::new(1));
        assert!(faults.routed(up, u64::MAX - 1) && !faults.may_unroute());
    }

    #[test]
    fn random_drop_and_black_hole_at_a_spine() {
        let mut f = fabric();
        let cfg = FaultConfig { random_drop: Some((0, 0.25)), ..Default::default() };
        let mut faults = Faults::new(&cfg, &mut f, 4, Rng::new(1));
        let down = port(&f, 4, 3);
        let n = (0..10_000).filter(|_| faults.drops(down, 0, &data(0, 0, 31), 0, &f.rack)).count();
        assert!((2300..2700).contains(&n), "{n}");
        assert!(!faults.drops(port(&f, 5, 3), 0, &data(0, 0, 31), 0, &f.rack), "other spines are fine");
        let bh = BlackHole { spine: 0, src_leaf: Some(0), dst_leaf: Some(3) };
        let mut faults =
            Faults::new(&FaultConfig { black_hole: Some(bh), ..Default::default() }, &mut f, 4, Rng::new(1));
        assert!(faults.drops(down, 0, &data(0, 0, 31), 0, &f.rack), "rack 0 → rack 3");
        assert!(!faults.drops(down, 0, &data(0, 0, 31), 8, &f.rack), "rack 1 → rack 3");
        assert!(!faults.drops(port(&f, 4, 2), 0, &data(0, 0, 16), 0, &f.rack), "rack 0 → rack 2");
    }
}
