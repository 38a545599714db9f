//! The consistent-hash table of a service, built by fulcrum-balance.
//!
//! There is one Maglev and one rendezvous implementation in Fulcrum and this
//! is not a second: Maglev's table is [`Maglev::table`] at
//! [`RING_SIZE`](crate::maps::RING_SIZE); for rendezvous hashing, entry `i`
//! holds the endpoint [`Rendezvous`] picks for key `i`, so a flow hashing to
//! `h` gets rendezvous' choice for `h mod RING_SIZE` and removing an
//! endpoint moves only the entries it owned. Endpoints are named `ip:port`
//! (`[ip]:port` for IPv6)
//! and sorted, so every node given the same set builds the same table.
//! A backend of weight 0 is draining: it keeps its place in the backend
//! order (so its slot and established flows stay) but owns no entry.

use fulcrum_balance::{Balancer, BuildError, Endpoint, Maglev, Rendezvous};

use std::net::{IpAddr, SocketAddr};

use crate::maps::RING_SIZE;
use crate::spec::{Backend, Select, ServiceSpec};

/// The table new flows use when the backends at `down` failed their health
/// checks: those own no entry, as if drained (their place, slot and
/// established flows stay). When that would leave no backend to take a new
/// flow, every backend keeps its entries: the service fails open, and the
/// node withdraws the VIP's announcement instead. The backends come back
/// in table order with their configured weights.
pub fn build_healthy(spec: &ServiceSpec, down: &[IpAddr]) -> Result<(Vec<Backend>, Vec<u32>), BuildError> {
    let mut healthy = spec.clone();
    for b in &mut healthy.backends {
        if down.contains(&b.ip) {
            b.weight = 0;
        }
    }
    if healthy.backends.iter().all(|b| b.weight == 0) {
        return build(spec);
    }
    let (_, table) = build(&healthy)?;
    let mut backends = spec.backends.clone();
    backends.sort_by_key(|b| b.ip);
    Ok((backends, table))
}

/// The backends in table order (sorted by address) and, for every entry,
/// the index into that order (never one of weight 0).
pub fn build(spec: &ServiceSpec) -> Result<(Vec<Backend>, Vec<u32>), BuildError> {
    let mut backends = spec.backends.clone();
    backends.sort_by_key(|b| b.ip);
    let endpoints: Vec<Endpoint> = backends
        .iter()
        .enumerate()
        .filter(|(_, b)| b.weight > 0)
        .map(|(i, b)| {
            Endpoint::new(i as u64, SocketAddr::new(b.ip, spec.backend_port).to_string()).with_weight(b.weight as f64)
        })
        .collect();
    let table = match spec.select {
        Select::Maglev => {
            let maglev = Maglev::new(&endpoints, RING_SIZE, None, 0)?;
            let ids: Vec<u32> = maglev.endpoints().iter().map(|e| e.id.0 as u32).collect();
            maglev.table().iter().map(|&slot| ids[slot as usize]).collect()
        }
        Select::Rendezvous => {
            let mut hrw = Rendezvous::new(&endpoints, spec.hash, None, 0)?;
            (0..RING_SIZE)
                .map(|key| {
                    let ticket = hrw.pick(0, Some(key)).expect("the endpoint set is not empty");
                    let slot = ticket.endpoint().0 as u32;
                    hrw.on_cancel(ticket);
                    slot
                })
                .collect()
        }
    };
    Ok((backends, table))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use fulcrum_balance::HashFunction;

    use super::*;
    use crate::flow::{entry, Flow};
    use crate::spec::{parse_endpoints, Mode, Protocol, ServiceKey};

    fn spec(select: Select, backends: &str) -> ServiceSpec {
        ServiceSpec {
            key: ServiceKey { vip: Ipv4Addr::new(20, 20, 20, 1).into(), port: 2020, proto: Protocol::Tcp },
            backend_port: 5001,
            backends: parse_endpoints(backends).unwrap(),
            mode: Mode::Nat,
            select,
            hash: HashFunction::Murmur3,
        }
    }

    fn share(table: &[u32], slot: u32) -> f64 {
        table.iter().filter(|&&s| s == slot).count() as f64 / table.len() as f64
    }

    #[test]
    fn weights_set_the_shares() {
        for select in [Select::Maglev, Select::Rendezvous] {
            let (backends, table) = build(&spec(select, "10.0.0.3:1,10.0.0.1:2,10.0.0.2:1")).unwrap();
            assert_eq!(backends[0].ip, Ipv4Addr::new(10, 0, 0, 1), "sorted by address");
            assert!((share(&table, 0) - 0.5).abs() < 0.01, "{select:?}: {}", share(&table, 0));
            assert!((share(&table, 1) - 0.25).abs() < 0.01, "{select:?}: {}", share(&table, 1));
        }
    }

    #[test]
    fn the_order_given_does_not_matter() {
        let a = build(&spec(Select::Maglev, "10.0.0.1,10.0.0.2,10.0.0.3")).unwrap();
        let b = build(&spec(Select::Maglev, "10.0.0.3,10.0.0.1,10.0.0.2")).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn maglev_entries_are_fulcrum_balance_picks() {
        let s = spec(Select::Maglev, "10.0.0.1,10.0.0.2,10.0.0.3");
        let (backends, table) = build(&s).unwrap();
        let endpoints: Vec<Endpoint> =
            backends.iter().enumerate().map(|(i, b)| Endpoint::new(i as u64, format!("{}:5001", b.ip))).collect();
        let mut maglev = Maglev::new(&endpoints, RING_SIZE, None, 0).unwrap();
        for sport in 1000..1200 {
            let flow = Flow {
                src: Ipv4Addr::new(10, 9, 0, 1),
                dst: Ipv4Addr::new(20, 20, 20, 1),
                sport,
                dport: 2020,
                proto: Protocol::Tcp,
            };
            let h = flow.hash(s.hash);
            let ticket = maglev.pick(0, Some(h)).unwrap();
            assert_eq!(ticket.endpoint().0 as u32, table[entry(h)]);
            maglev.on_cancel(ticket);
        }
    }

    #[test]
    fn a_draining_backend_keeps_its_place_and_owns_no_entry() {
        for select in [Select::Maglev, Select::Rendezvous] {
            let (drain_b, drain) = build(&spec(select, "10.0.0.1,10.0.0.2:0,10.0.0.3")).unwrap();
            let (gone_b, gone) = build(&spec(select, "10.0.0.1,10.0.0.3")).unwrap();
            assert_eq!(drain_b.len(), 3, "{select:?}: the draining backend keeps its place");
            assert_eq!(share(&drain, 1), 0.0, "{select:?}");
            // Draining picks exactly what removing would.
            let ips = |bs: &[Backend], t: &[u32]| t.iter().map(|&s| bs[s as usize].ip).collect::<Vec<_>>();
            assert_eq!(ips(&drain_b, &drain), ips(&gone_b, &gone), "{select:?}");
        }
    }

    #[test]
    fn a_down_backend_is_drained_unless_all_are() {
        let s = spec(Select::Maglev, "10.0.0.1,10.0.0.2,10.0.0.3:0");
        let down = [Ipv4Addr::new(10, 0, 0, 2).into()];
        let drained = build(&spec(Select::Maglev, "10.0.0.1,10.0.0.2:0,10.0.0.3:0")).unwrap();
        let (backends, table) = build_healthy(&s, &down).unwrap();
        assert_eq!(table, drained.1);
        assert_eq!(backends, build(&s).unwrap().0, "configured weights");
        // The two that could take flows are both down: all keep their entries.
        let all = [Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into()];
        assert_eq!(build_healthy(&s, &all).unwrap(), build(&s).unwrap());
        assert_eq!(build_healthy(&s, &[]).unwrap(), build(&s).unwrap());
    }

    #[test]
    fn removing_a_backend_moves_only_its_entries() {
        for select in [Select::Maglev, Select::Rendezvous] {
            let (before_b, before) = build(&spec(select, "10.0.0.1,10.0.0.2,10.0.0.3")).unwrap();
            let (after_b, after) = build(&spec(select, "10.0.0.1,10.0.0.3")).unwrap();
            let ip = |bs: &[Backend], s: u32| bs[s as usize].ip;
            let moved = (0..before.len())
                .filter(|&i| ip(&before_b, before[i]) != Ipv4Addr::new(10, 0, 0, 2))
                .filter(|&i| ip(&before_b, before[i]) != ip(&after_b, after[i]))
                .count();
            // Rendezvous moves none; Maglev a few percent at most.
            assert!(moved as f64 / before.len() as f64 <= 0.03, "{select:?}: {moved}");
        }
    }
}
