//! Random choice, uniform or weighted.
//!
//! Envoy's `RANDOM` policy draws `hosts[random % n]` and ignores weights.
//! Here equal weights give exactly that; unequal weights draw in proportion
//! to weight (binary search over cumulative weights).

use crate::endpoints::EndpointTable;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, Nanos, Outcome, Rng, Ticket};

/// Uniform random choice, weighted when weights differ.
#[derive(Debug, Clone)]
pub struct Random {
    table: EndpointTable<()>,
    /// Cumulative weights, empty when all weights are equal.
    cumulative: Vec<f64>,
    rng: Rng,
}

impl Random {
    /// A balancer over `endpoints` drawing from a generator seeded with `seed`.
    pub fn new(endpoints: &[Endpoint], seed: u64) -> Result<Self, BuildError> {
        let table = EndpointTable::new(endpoints, |_| ())?;
        let mut r = Random { table, cumulative: Vec::new(), rng: Rng::new(seed) };
        r.rebuild();
        Ok(r)
    }

    fn rebuild(&mut self) {
        self.cumulative.clear();
        if !self.table.uniform_weights() {
            let mut sum = 0.0;
            for e in self.table.endpoints() {
                sum += e.weight;
                self.cumulative.push(sum);
            }
        }
    }
}

/// The slot a draw `u` in [0, total) falls into.
pub(crate) fn weighted_slot(cumulative: &[f64], u: f64) -> usize {
    cumulative.partition_point(|&c| c <= u).min(cumulative.len() - 1)
}

impl Balancer for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn pick(&mut self, _now: Nanos, _key: Option<u64>) -> Option<Ticket> {
        if self.table.is_empty() {
            return None;
        }
        let slot = match self.cumulative.last() {
            None => self.rng.below(self.table.len() as u64) as usize,
            Some(&total) => weighted_slot(&self.cumulative, self.rng.unit() * total),
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
        self.rebuild();
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

    #[test]
    fn weighted_slot_boundaries() {
        let c = [1.0, 3.0, 6.0];
        assert_eq!(weighted_slot(&c, 0.0), 0);
        assert_eq!(weighted_slot(&c, 0.999), 0);
        assert_eq!(weighted_slot(&c, 1.0), 1);
        assert_eq!(weighted_slot(&c, 5.999), 2);
    }
}
