//! Round robin and weighted round robin, as Envoy's `ROUND_ROBIN` policy.
//!
//! Equal weights: `endpoints[(offset + i) % n]`, with the offset drawn from
//! the balancer's RNG so that many balancers do not move in lockstep.
//! Unequal weights: an earliest-deadline-first rotation ([`crate::edf`]) in
//! which each endpoint starts at a random point of its period, so low-weight
//! endpoints are not starved at low traffic.

use crate::edf::Edf;
use crate::endpoints::EndpointTable;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, Nanos, Outcome, Rng, Ticket};

/// Round robin; weighted by EDF when weights differ.
#[derive(Debug, Clone)]
pub struct RoundRobin {
    table: EndpointTable<()>,
    rotation: Rotation,
    rng: Rng,
}

#[derive(Debug, Clone)]
enum Rotation {
    Plain { next: usize },
    Weighted(Edf),
}

impl RoundRobin {
    /// A balancer over `endpoints` whose rotation starts where `seed` says.
    pub fn new(endpoints: &[Endpoint], seed: u64) -> Result<Self, BuildError> {
        let table = EndpointTable::new(endpoints, |_| ())?;
        let mut rng = Rng::new(seed);
        let rotation = Self::rotation(&table, &mut rng);
        Ok(RoundRobin { table, rotation, rng })
    }

    fn rotation(table: &EndpointTable<()>, rng: &mut Rng) -> Rotation {
        if table.uniform_weights() {
            let next = if table.is_empty() { 0 } else { rng.below(table.len() as u64) as usize };
            Rotation::Plain { next }
        } else {
            Rotation::Weighted(Edf::new(table.endpoints().iter().map(|e| e.weight), rng))
        }
    }
}

impl Balancer for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn pick(&mut self, _now: Nanos, _key: Option<u64>) -> Option<Ticket> {
        if self.table.is_empty() {
            return None;
        }
        let slot = match &mut self.rotation {
            Rotation::Plain { next } => {
                let slot = *next % self.table.len();
                *next = slot + 1;
                slot
            }
            Rotation::Weighted(edf) => {
                let table = &self.table;
                edf.next(|s| table.weight(s))?
            }
        };
        Some(self.table.issue(slot))
    }

    fn on_complete(&mut self, ticket: Ticket, _now: Nanos, _outcome: Outcome) {
        self.table.settle(&ticket);
    }

    fn on_cancel(&mut self, ticket: Ticket) {
        self.table.settle(&ticket);
    }

    fn set_endpoints(&mut self, endpoints: &[Endpoint]) -> Result<(), BuildError> {
        self.table.replace(endpoints, |_| ())?;
        self.rotation = match (&self.rotation, self.table.uniform_weights()) {
            // Keep the position so that a change does not restart everyone at once.
            (Rotation::Plain { next }, true) => Rotation::Plain { next: *next },
            _ => Self::rotation(&self.table, &mut self.rng),
        };
        Ok(())
    }

    fn endpoints(&self) -> &[Endpoint] {
        self.table.endpoints()
    }

    fn loads(&self, _now: Nanos) -> Vec<EndpointLoad> {
        self.table.loads()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(n: u64) -> Vec<Endpoint> {
        (0..n).map(|i| Endpoint::new(i, format!("10.0.0.{i}:80"))).collect()
    }

    #[test]
    fn equal_weights_cycle_in_order_from_a_seeded_offset() {
        let mut rr = RoundRobin::new(&eps(4), 1).unwrap();
        let picks: Vec<u64> = (0..8)
            .map(|_| {
                let t = rr.pick(0, None).unwrap();
                let id = t.endpoint().0;
                rr.on_cancel(t);
                id
            })
            .collect();
        for w in picks.windows(2) {
            assert_eq!((w[0] + 1) % 4, w[1]);
        }
        let offsets: std::collections::HashSet<u64> =
            (0..50).map(|s| RoundRobin::new(&eps(4), s).unwrap().pick(0, None).unwrap().endpoint().0).collect();
        assert_eq!(offsets.len(), 4, "different seeds start at different offsets");
    }

    #[test]
    fn weighted_shares_are_exact_over_a_cycle() {
        let e = vec![Endpoint::new(0, "a").with_weight(1.0), Endpoint::new(1, "b").with_weight(3.0)];
        let mut rr = RoundRobin::new(&e, 5).unwrap();
        let mut counts = [0i32; 2];
        for _ in 0..4000 {
            let t = rr.pick(0, None).unwrap();
            counts[t.endpoint().0 as usize] += 1;
            rr.on_complete(t, 0, Outcome::Success { latency: 1 });
        }
        assert!((counts[0] - 1000).abs() <= 1, "{counts:?}");
    }
}
