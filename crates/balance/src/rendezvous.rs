//! Rendezvous (highest random weight) hashing (Thaler & Ravishankar, 1998),
//! weighted by the logarithmic method (Schindelhauer & Schomaker, 2005).
//!
//! For a key `k`, every endpoint `b` scores `−w_b / ln(h(k, b))`, where
//! `h(k, b)` is the hash of the key and the endpoint's name hash mapped into
//! (0, 1); the highest score wins. Removing an endpoint moves only the keys
//! it owned. MurmurHash3 or xxHash is selectable, as seed 003 compares them.
//! A pick is O(n) in the number of endpoints; with bounded load, a key whose
//! winner is full goes to the best-scoring endpoint that has room.

use crate::bounded_load::BoundedLoad;
use crate::endpoints::EndpointTable;
use crate::hash::unit_open;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, HashFunction, Nanos, Outcome, Rng, Ticket};

/// Highest-random-weight hashing over the endpoints.
#[derive(Debug, Clone)]
pub struct Rendezvous {
    table: EndpointTable<()>,
    /// The hash of each endpoint's name, the salt of its scores.
    salts: Vec<u64>,
    hash: HashFunction,
    bound: Option<BoundedLoad>,
    total_weight: f64,
    /// All weights equal: `−w / ln(u)` grows with `u`, so ranking by `u`
    /// picks the same endpoint without a logarithm per endpoint.
    uniform: bool,
    rng: Rng,
}

/// The score of an endpoint of `weight` and name hash `salt` for `key`.
#[inline]
pub(crate) fn score(hash: HashFunction, key: u64, salt: u64, weight: f64) -> f64 {
    -weight / unit_open(hash.hash_pair(key, salt)).ln()
}

impl Rendezvous {
    /// A rendezvous balancer hashing with `hash`, with an optional
    /// bounded-load factor; `seed` draws keys for requests that have none.
    pub fn new(
        endpoints: &[Endpoint],
        hash: HashFunction,
        bounded_load: Option<f64>,
        seed: u64,
    ) -> Result<Self, BuildError> {
        let bound = BoundedLoad::new(bounded_load)?;
        let table = EndpointTable::new(&[], |_| ())?;
        let mut r =
            Rendezvous { table, salts: Vec::new(), hash, bound, total_weight: 0.0, uniform: true, rng: Rng::new(seed) };
        r.set_endpoints(endpoints)?;
        Ok(r)
    }
}

impl Balancer for Rendezvous {
    fn name(&self) -> &'static str {
        "rendezvous"
    }

    fn pick(&mut self, _now: Nanos, key: Option<u64>) -> Option<Ticket> {
        if self.table.is_empty() {
            return None;
        }
        let key = key.unwrap_or_else(|| self.rng.next_u64());
        let mut best: Option<(f64, usize)> = None;
        let mut best_open: Option<(f64, usize)> = None;
        for slot in 0..self.table.len() {
            let s = if self.uniform {
                unit_open(self.hash.hash_pair(key, self.salts[slot]))
            } else {
                score(self.hash, key, self.salts[slot], self.table.weight(slot))
            };
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, slot));
            }
            if let Some(bound) = self.bound {
                if best_open.is_none_or(|(b, _)| s > b) && bound.admits(&self.table, slot, self.total_weight) {
                    best_open = Some((s, slot));
                }
            }
        }
        let (_, slot) = best_open.or(best)?;
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
        self.salts = endpoints.iter().map(|e| self.hash.hash(e.name.as_bytes())).collect();
        self.total_weight = endpoints.iter().map(|e| e.weight).sum();
        self.uniform = self.table.uniform_weights();
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
    fn heavier_endpoint_scores_higher_for_the_same_hash() {
        assert!(score(HashFunction::Xxhash, 1, 2, 2.0) > score(HashFunction::Xxhash, 1, 2, 1.0));
        assert!(score(HashFunction::Murmur3, 1, 2, 1.0) > 0.0);
    }
}
