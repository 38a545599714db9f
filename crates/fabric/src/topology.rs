//! Topologies: which output port leads where, and the equal-cost choices a
//! switch has toward each host.
//!
//! Every directed link is one output port at its sending end (a host NIC or
//! a switch port). Routing is shortest-path with per-flow ECMP: at each
//! switch a flow (and, separately, its reverse direction) hashes onto one
//! port of the equal-cost group toward its destination, as ns-3's global
//! routing does with `PerflowEcmpRouting`.
//!
//! - **Leaf-spine** (the seed's large-scale fabric): `leaves × hosts_per_leaf`
//!   hosts, each leaf joined to every spine by `links` parallel links. The
//!   oversubscription is `hosts_per_leaf · host_rate ÷ (spines · links ·
//!   fabric_rate)`. Hosts in one leaf form a rack.
//! - **Star**: hosts around one switch (incast, queue-track); each host's
//!   link may add its own propagation delay on top of the common one.
//! - **Dumbbell**: two switches joined by one bottleneck link, hosts split
//!   between them (each side a rack).
//!
//! Faults act on ports: every link is addressable by its port index, and
//! groups list ports, so a detected failure removes one (`crate::faults`).
//! Which member of a group a packet takes is the routing scheme's choice
//! (`crate::lb`); [`Fabric::next_port`] is per-flow ECMP's, used for the
//! ideal (lone-flow) path delay.

use fulcrum_balance::HashFunction;

use crate::packet::Nanos;

/// A fabric's shape, as a scenario describes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    LeafSpine { spines: u32, leaves: u32, hosts_per_leaf: u32, links: u32, host_gbps: f64, fabric_gbps: f64 },
    Star { hosts: u32, gbps: f64, extra_delay: Vec<Nanos> },
    Dumbbell { left: u32, right: u32, host_gbps: f64, bottleneck_gbps: f64 },
}

impl Shape {
    /// Number of hosts.
    pub fn hosts(&self) -> u32 {
        match self {
            Shape::LeafSpine { leaves, hosts_per_leaf, .. } => leaves * hosts_per_leaf,
            Shape::Star { hosts, .. } => *hosts,
            Shape::Dumbbell { left, right, .. } => left + right,
        }
    }
}

/// Where a port's link ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Host(u32),
    Switch(u32),
}

/// One output port and the link it drives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortSpec {
    pub from: End,
    pub to: End,
    pub bps: u64,
    pub delay: Nanos,
}

/// A built topology.
#[derive(Clone, Debug)]
pub struct Fabric {
    pub hosts: u32,
    pub switches: u32,
    pub ports: Vec<PortSpec>,
    /// Each host's NIC port.
    pub host_port: Vec<u32>,
    /// Rack (leaf, or side) of each host.
    pub rack: Vec<u32>,
    /// The ports of every equal-cost group, one group after the other (one
    /// allocation: the few groups of a fabric stay on a few cache lines).
    members: Vec<u32>,
    /// The group of (switch, destination host), `switch * hosts + host`:
    /// where it starts in `members` and how many ports it has.
    route: Vec<(u32, u32)>,
    /// Rate of the hosts' links (bits/s), for load and ideal FCT.
    pub host_bps: u64,
    /// What each host's rack can send out of the rack (bits/s per host).
    pub uplink_bps_per_host: f64,
}

fn bps(gbps: f64) -> u64 {
    (gbps * 1e9).round() as u64
}

struct Builder {
    f: Fabric,
    groups: std::collections::HashMap<Vec<u32>, (u32, u32)>,
}

impl Builder {
    fn new(hosts: u32, switches: u32, host_bps: u64) -> Builder {
        let f = Fabric {
            hosts,
            switches,
            ports: Vec::new(),
            host_port: vec![u32::MAX; hosts as usize],
            rack: vec![0; hosts as usize],
            members: Vec::new(),
            route: vec![(u32::MAX, 0); (switches * hosts) as usize],
            host_bps,
            uplink_bps_per_host: host_bps as f64,
        };
        Builder { f, groups: Default::default() }
    }

    fn port(&mut self, from: End, to: End, bps: u64, delay: Nanos) -> u32 {
        self.f.ports.push(PortSpec { from, to, bps, delay });
        (self.f.ports.len() - 1) as u32
    }

    /// A bidirectional link; returns (port a→b, port b→a).
    fn link(&mut self, a: End, b: End, bps: u64, delay: Nanos) -> (u32, u32) {
        (self.port(a, b, bps, delay), self.port(b, a, bps, delay))
    }

    fn set_route(&mut self, switch: u32, host: u32, ports: Vec<u32>) {
        let members = &mut self.f.members;
        let g = *self.groups.entry(ports).or_insert_with_key(|ports| {
            members.extend(ports);
            ((members.len() - ports.len()) as u32, ports.len() as u32)
        });
        self.f.route[(switch * self.f.hosts + host) as usize] = g;
    }
}

impl Fabric {
    /// Build `shape` with `delay` of propagation on every link.
    pub fn build(shape: &Shape, delay: Nanos) -> Fabric {
        match *shape {
            Shape::LeafSpine { spines, leaves, hosts_per_leaf, links, host_gbps, fabric_gbps } => {
                Self::leaf_spine(spines, leaves, hosts_per_leaf, links, bps(host_gbps), bps(fabric_gbps), delay)
            }
            Shape::Star { hosts, gbps, ref extra_delay } => Self::star(hosts, bps(gbps), delay, extra_delay),
            Shape::Dumbbell { left, right, host_gbps, bottleneck_gbps } => {
                Self::dumbbell(left, right, bps(host_gbps), bps(bottleneck_gbps), delay)
            }
        }
    }

    fn leaf_spine(spines: u32, leaves: u32, per_leaf: u32, links: u32, host: u64, fabric: u64, delay: Nanos) -> Fabric {
        let hosts = leaves * per_leaf;
        // Switches: leaves 0..L, spines L..L+S.
        let mut b = Builder::new(hosts, leaves + spines, host);
        let mut down = vec![0; hosts as usize];
        for h in 0..hosts {
            let leaf = h / per_leaf;
            let (up, dn) = b.link(End::Host(h), End::Switch(leaf), host, delay);
            b.f.host_port[h as usize] = up;
            b.f.rack[h as usize] = leaf;
            down[h as usize] = dn;
        }
        // up[leaf] lists its uplinks; to_leaf[spine][leaf] the spine's links.
        let mut up = vec![Vec::new(); leaves as usize];
        let mut to_leaf = vec![vec![Vec::new(); leaves as usize]; spines as usize];
        for leaf in 0..leaves {
            for s in 0..spines {
                for _ in 0..links {
                    let (u, d) = b.link(End::Switch(leaf), End::Switch(leaves + s), fabric, delay);
                    up[leaf as usize].push(u);
                    to_leaf[s as usize][leaf as usize].push(d);
                }
            }
        }
        for h in 0..hosts {
            let dest_leaf = h / per_leaf;
            for leaf in 0..leaves {
                let ports = if leaf == dest_leaf { vec![down[h as usize]] } else { up[leaf as usize].clone() };
                b.set_route(leaf, h, ports);
            }
            for s in 0..spines {
                b.set_route(leaves + s, h, to_leaf[s as usize][dest_leaf as usize].clone());
            }
        }
        b.f.uplink_bps_per_host = (spines * links) as f64 * fabric as f64 / per_leaf as f64;
        b.f.uplink_bps_per_host = b.f.uplink_bps_per_host.min(host as f64);
        b.f
    }

    fn star(hosts: u32, rate: u64, delay: Nanos, extra: &[Nanos]) -> Fabric {
        let mut b = Builder::new(hosts, 1, rate);
        for h in 0..hosts {
            let d = delay + extra.get(h as usize).copied().unwrap_or(0);
            let (up, dn) = b.link(End::Host(h), End::Switch(0), rate, d);
            b.f.host_port[h as usize] = up;
            b.set_route(0, h, vec![dn]);
        }
        b.f
    }

    fn dumbbell(left: u32, right: u32, host: u64, bottleneck: u64, delay: Nanos) -> Fabric {
        let hosts = left + right;
        let mut b = Builder::new(hosts, 2, host);
        let (l2r, r2l) = b.link(End::Switch(0), End::Switch(1), bottleneck, delay);
        for h in 0..hosts {
            let side = u32::from(h >= left);
            let (up, dn) = b.link(End::Host(h), End::Switch(side), host, delay);
            b.f.host_port[h as usize] = up;
            b.f.rack[h as usize] = side;
            b.set_route(side, h, vec![dn]);
            b.set_route(1 - side, h, vec![if side == 1 { l2r } else { r2l }]);
        }
        b.f.uplink_bps_per_host = (bottleneck as f64 / left.max(right) as f64).min(host as f64);
        b.f
    }

    /// The equal-cost output ports of `switch` toward host `dst`.
    #[inline]
    pub fn group(&self, switch: u32, dst: u32) -> &[u32] {
        let (start, len) = self.route[(switch * self.hosts + dst) as usize];
        &self.members[start as usize..(start + len) as usize]
    }

    /// The output port switch `switch` uses for a packet of `flow` (its
    /// reverse direction hashing separately) toward `dst` under per-flow
    /// ECMP; `salt` is the run's hashing seed. The same hash as the ECMP
    /// scheme's (`lb::Ecmp`).
    #[inline]
    pub fn next_port(&self, switch: u32, dst: u32, flow: u32, reverse: bool, salt: u64) -> u32 {
        let g = self.group(switch, dst);
        if g.len() == 1 {
            return g[0];
        }
        let key = (flow as u64) << 1 | reverse as u64 | (switch as u64) << 40;
        g[(HashFunction::Xxhash.hash_pair(key, salt) % g.len() as u64) as usize]
    }

    /// Number of paths from host `src` to host `dst`: the size of the first
    /// equal-cost group on the way with more than one port (1 if none).
    pub fn paths(&self, src: u32, dst: u32) -> u32 {
        let mut port = self.host_port[src as usize];
        while let End::Switch(s) = self.ports[port as usize].to {
            let g = self.group(s, dst);
            if g.len() > 1 {
                return g.len() as u32;
            }
            port = g[0];
        }
        1
    }

    /// The ports path `path` crosses from host `src` to host `dst`: member
    /// `path mod n` of each `n`-port group on the way.
    pub fn path_ports(&self, src: u32, dst: u32, path: u16) -> impl Iterator<Item = u32> + '_ {
        let first = self.host_port[src as usize];
        std::iter::successors(Some(first), move |&port| match self.ports[port as usize].to {
            End::Switch(s) => {
                let g = self.group(s, dst);
                Some(g[path as usize % g.len()])
            }
            End::Host(_) => None,
        })
    }

    /// Rate of the slowest link on path `path` from `src` to `dst` (bits/s).
    pub fn path_bps(&self, src: u32, dst: u32, path: u16) -> u64 {
        self.path_ports(src, dst, path).map(|p| self.ports[p as usize].bps).min().unwrap_or(0)
    }

    /// Propagation delay from `src` to `dst` along the path `flow` takes.
    pub fn path_delay(&self, src: u32, dst: u32, flow: u32, salt: u64) -> Nanos {
        let mut port = self.host_port[src as usize];
        let mut total = self.ports[port as usize].delay;
        while let End::Switch(s) = self.ports[port as usize].to {
            port = self.next_port(s, dst, flow, false, salt);
            total += self.ports[port as usize].delay;
        }
        total
    }

    /// Number of racks.
    pub fn racks(&self) -> u32 {
        self.rack.iter().max().map_or(0, |r| r + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_fabric() -> Fabric {
        let shape =
            Shape::LeafSpine { spines: 4, leaves: 4, hosts_per_leaf: 8, links: 1, host_gbps: 10.0, fabric_gbps: 10.0 };
        Fabric::build(&shape, 10_000)
    }

    /// Follow a packet from `src` to `dst`, returning the ports it crosses.
    fn path(f: &Fabric, src: u32, dst: u32, flow: u32) -> Vec<u32> {
        let mut port = f.host_port[src as usize];
        let mut hops = vec![port];
        while let End::Switch(s) = f.ports[port as usize].to {
            port = f.next_port(s, dst, flow, false, 7);
            hops.push(port);
        }
        assert_eq!(f.ports[port as usize].to, End::Host(dst));
        hops
    }

    #[test]
    fn leaf_spine_paths_and_oversubscription() {
        let f = seed_fabric();
        assert_eq!((f.hosts, f.switches, f.ports.len()), (32, 8, 2 * 32 + 2 * 16));
        assert_eq!(f.uplink_bps_per_host, 5e9, "2:1 oversubscribed");
        assert_eq!(path(&f, 0, 1, 0).len(), 2, "same rack: host → leaf → host");
        assert_eq!(path(&f, 0, 31, 0).len(), 4, "across: host → leaf → spine → leaf → host");
        // ECMP spreads flows over all four spines.
        let spines: std::collections::BTreeSet<u32> = (0..64).map(|fl| path(&f, 0, 31, fl)[1]).collect();
        assert_eq!(spines.len(), 4);
        assert_eq!(f.racks(), 4);
        assert_eq!(f.path_delay(0, 31, 5, 7), 40_000);
        assert_eq!((f.paths(0, 31), f.paths(0, 1)), (4, 1));
        let via: Vec<u32> = f.path_ports(0, 31, 2).collect();
        assert_eq!(via.len(), 4);
        assert_eq!(f.ports[via[1] as usize].to, End::Switch(4 + 2), "path 2 climbs to spine 2");
        assert_eq!(f.path_bps(0, 31, 2), 10_000_000_000);
    }

    #[test]
    fn star_and_dumbbell_reach_every_host() {
        let star = Fabric::build(&Shape::Star { hosts: 5, gbps: 10.0, extra_delay: vec![0, 10_000] }, 10_000);
        assert_eq!(star.ports[star.host_port[1] as usize].delay, 20_000);
        assert_eq!(path(&star, 0, 4, 3).len(), 2);
        let db = Fabric::build(&Shape::Dumbbell { left: 2, right: 3, host_gbps: 10.0, bottleneck_gbps: 1.0 }, 1000);
        assert_eq!(path(&db, 0, 4, 1).len(), 3);
        assert_eq!(path(&db, 4, 1, 1).len(), 3);
        assert_eq!(db.racks(), 2);
    }
}
