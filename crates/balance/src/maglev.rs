//! Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, §3.4; Envoy's `MaglevTable`).
//!
//! Each endpoint has a permutation of the table given by
//! `offset = xxh64(name, 0) mod M` and `skip = xxh64(name, 1) mod (M − 1) + 1`.
//! Endpoints take turns claiming their next preferred empty slot until the
//! table is full; an endpoint of weight `w` takes a turn in `w / w_max` of
//! the rounds (Envoy's weighted fill), so with weights 1:2 and M = 65537 the
//! table holds 21,846 and 43,691 entries. A lookup is `table[key mod M]`.
//!
//! The table is built once per endpoint change (a few milliseconds for 100
//! endpoints at M = 65537); a pick is one array read. With bounded load, a
//! key whose endpoint is full moves on to the next table entries.

use crate::bounded_load::BoundedLoad;
use crate::endpoints::EndpointTable;
use crate::hash::xxh64;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, Nanos, Outcome, Rng, Ticket};

/// The default (prime) table size.
pub const DEFAULT_TABLE_SIZE: u64 = 65537;

/// A Maglev lookup table over the endpoints.
#[derive(Debug, Clone)]
pub struct Maglev {
    table: EndpointTable<()>,
    size: u64,
    lookup: Vec<u32>,
    bound: Option<BoundedLoad>,
    total_weight: f64,
    rng: Rng,
}

/// True when `n` is prime (trial division; table sizes are small).
pub(crate) fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// Build the lookup table for `endpoints` (slot numbers), `size` prime.
pub(crate) fn build_table(endpoints: &[Endpoint], size: u64) -> Vec<u32> {
    if endpoints.is_empty() {
        return Vec::new();
    }
    struct Entry {
        offset: u64,
        skip: u64,
        next: u64,
        weight: f64,
        target: f64,
    }
    let max_weight = endpoints.iter().map(|e| e.weight).fold(0.0, f64::max);
    let mut entries: Vec<Entry> = endpoints
        .iter()
        .map(|e| Entry {
            offset: xxh64(e.name.as_bytes(), 0) % size,
            skip: xxh64(e.name.as_bytes(), 1) % (size - 1) + 1,
            next: 0,
            weight: e.weight / max_weight,
            target: 0.0,
        })
        .collect();
    const EMPTY: u32 = u32::MAX;
    let mut table = vec![EMPTY; size as usize];
    let mut filled = 0u64;
    let mut round = 1u64;
    while filled < size {
        for (slot, entry) in entries.iter_mut().enumerate() {
            if filled == size {
                break;
            }
            // An endpoint of relative weight w takes a turn when the rounds so
            // far entitle it to one more entry than it has claimed.
            if (round as f64) * entry.weight < entry.target {
                continue;
            }
            entry.target += 1.0;
            let mut c = (entry.offset + entry.skip * entry.next) % size;
            while table[c as usize] != EMPTY {
                entry.next += 1;
                c = (entry.offset + entry.skip * entry.next) % size;
            }
            table[c as usize] = slot as u32;
            entry.next += 1;
            filled += 1;
        }
        round += 1;
    }
    table
}

impl Maglev {
    /// A Maglev balancer with a prime `table_size` and an optional
    /// bounded-load factor; `seed` draws keys for requests that have none.
    pub fn new(
        endpoints: &[Endpoint],
        table_size: u64,
        bounded_load: Option<f64>,
        seed: u64,
    ) -> Result<Self, BuildError> {
        if !is_prime(table_size) {
            return Err(BuildError::TableSizeNotPrime(table_size));
        }
        let bound = BoundedLoad::new(bounded_load)?;
        let mut m = Maglev {
            table: EndpointTable::new(&[], |_| ())?,
            size: table_size,
            lookup: Vec::new(),
            bound,
            total_weight: 0.0,
            rng: Rng::new(seed),
        };
        m.set_endpoints(endpoints)?;
        Ok(m)
    }

    /// The endpoint slot each table entry points at (for tests and tools).
    pub fn table(&self) -> &[u32] {
        &self.lookup
    }
}

impl Balancer for Maglev {
    fn name(&self) -> &'static str {
        "maglev"
    }

    fn pick(&mut self, _now: Nanos, key: Option<u64>) -> Option<Ticket> {
        if self.table.is_empty() {
            return None;
        }
        let key = key.unwrap_or_else(|| self.rng.next_u64());
        let home = (key % self.size) as usize;
        let mut slot = self.lookup[home] as usize;
        if let Some(bound) = self.bound {
            let mut probe = home;
            // Some endpoint is always at or below the mean, so this ends; the
            // cap on steps only guards against a table that lacks it.
            for _ in 0..self.lookup.len() {
                if bound.admits(&self.table, slot, self.total_weight) {
                    break;
                }
                probe = if probe + 1 == self.lookup.len() { 0 } else { probe + 1 };
                slot = self.lookup[probe] as usize;
            }
        }
        Some(self.table.issue(slot))
    }

    fn on_complete(&mut self, ticket: Ticket, _now: Nanos, _outcome: Outcome) {
        self.table.settle(&ticket);
    }

    fn on_cancel(&mut self, ticket: Ticket) {
        self.table.settle(&ticket);
    }

    fn set_endpoints(&mut self, endpoints: &[Endpoint]) -> Result<(), BuildError> {
        if endpoints.len() as u64 > self.size {
            return Err(BuildError::TableTooSmall { size: self.size, endpoints: endpoints.len() });
        }
        self.table.replace(endpoints, |_| ())?;
        self.lookup = build_table(self.table.endpoints(), self.size);
        self.total_weight = endpoints.iter().map(|e| e.weight).sum();
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
    fn primality() {
        assert!(is_prime(65537));
        assert!(is_prime(2));
        assert!(!is_prime(65536));
        assert!(!is_prime(1));
        assert!(!is_prime(0));
    }

    #[test]
    fn weights_one_to_two_fill_as_envoy_does() {
        let eps = [Endpoint::new(0, "a").with_weight(1.0), Endpoint::new(1, "b").with_weight(2.0)];
        let table = build_table(&eps, DEFAULT_TABLE_SIZE);
        let a = table.iter().filter(|&&s| s == 0).count();
        assert_eq!((a, table.len() - a), (21_846, 43_691));
    }

    #[test]
    fn non_prime_size_is_rejected_with_its_value() {
        let err = Maglev::new(&[Endpoint::new(0, "a")], 65536, None, 0).unwrap_err();
        assert_eq!(err, BuildError::TableSizeNotPrime(65536));
        assert!(err.to_string().contains("65536"));
    }

    #[test]
    fn more_endpoints_than_entries_is_rejected() {
        let eps: Vec<Endpoint> = (0..8).map(|i| Endpoint::new(i, format!("e{i}"))).collect();
        let err = Maglev::new(&eps, 7, None, 0).unwrap_err();
        assert_eq!(err, BuildError::TableTooSmall { size: 7, endpoints: 8 });
    }
}
