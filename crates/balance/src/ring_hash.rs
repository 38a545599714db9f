//! Ring hash, Ketama style (Karger et al., 1997; Envoy's `RING_HASH`).
//!
//! Each endpoint places points on a 64-bit ring, hashed from
//! `"<name>_<i>"`, in proportion to its weight. A lookup is the first point
//! at or after the key's hash, wrapping around. With bounded load, a key whose
//! endpoint is full walks on to the next points of other endpoints.
//!
//! Ring size: like Envoy, every endpoint gets at least its weighted share of
//! `min_ring_size` points and the ring never exceeds `max_ring_size`
//! (defaults 1024 and 8,388,608). Unlike Envoy, the number of points per unit
//! of weight is rounded up to a power of two. Envoy rescales the whole ring
//! whenever the total weight changes, so removing one of five hosts gives every
//! survivor 25 % more points, which steal keys from the other survivors: about
//! 30 % of keys move instead of 20 %. Rounding to a power of two keeps every
//! endpoint's points unchanged unless the total weight crosses a power of two
//! (e.g. 4 → 3 equal endpoints at the default minimum), so a change moves only
//! the keys of the endpoints that changed.

use crate::bounded_load::BoundedLoad;
use crate::endpoints::EndpointTable;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, HashFunction, Nanos, Outcome, Rng, Ticket};

/// Default smallest ring.
pub const DEFAULT_MIN_RING_SIZE: u64 = 1024;
/// Default and absolute largest ring.
pub const MAX_RING_SIZE: u64 = 8 * 1024 * 1024;

/// A Ketama ring over the endpoints.
#[derive(Debug, Clone)]
pub struct RingHash {
    table: EndpointTable<()>,
    min_ring_size: u64,
    max_ring_size: u64,
    hash: HashFunction,
    /// Sorted ring point hashes, with `owners[i]` the slot of point `i`.
    points: Vec<u64>,
    owners: Vec<u32>,
    /// `buckets[b]` is the first point whose top `bucket_bits` bits are ≥ b,
    /// with one extra entry at the end: a lookup searches only its bucket
    /// (about one point) instead of binary-searching the whole ring.
    buckets: Vec<u32>,
    bucket_bits: u32,
    bound: Option<BoundedLoad>,
    total_weight: f64,
    rng: Rng,
}

/// Build the sorted ring for `endpoints`: (point hashes, owning slots).
pub(crate) fn build_ring(endpoints: &[Endpoint], min: u64, max: u64, hash: HashFunction) -> (Vec<u64>, Vec<u32>) {
    if endpoints.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Weights are first divided by a power of two near the largest, which
    // changes no result but keeps `min / total` finite: with tiny weights
    // (1e-320) it was infinite and the ring had 2^64 points.
    let largest = endpoints.iter().map(|e| e.weight).fold(f64::MIN_POSITIVE, f64::max);
    let unit = largest.log2().floor().exp2();
    let total: f64 = endpoints.iter().map(|e| e.weight / unit).sum();
    let per_weight = (min as f64 / total).log2().ceil().exp2().min(max as f64 / total);
    let counts: Vec<u64> =
        endpoints.iter().map(|e| ((per_weight * (e.weight / unit)).round() as u64).clamp(1, max.max(1))).collect();
    let mut ring: Vec<(u64, u32)> = Vec::with_capacity(counts.iter().sum::<u64>() as usize);
    let mut key = String::new();
    for (slot, (e, &count)) in endpoints.iter().zip(&counts).enumerate() {
        for i in 0..count {
            use std::fmt::Write;
            key.clear();
            write!(key, "{}_{}", e.name, i).expect("writing to a String");
            ring.push((hash.hash(key.as_bytes()), slot as u32));
        }
    }
    ring.sort_unstable();
    ring.into_iter().unzip()
}

impl RingHash {
    /// A ring of at least `min_ring_size` and at most `max_ring_size`
    /// points (1..=8,388,608), hashed with `hash`, with an optional
    /// bounded-load factor; `seed` draws keys for requests that have none.
    pub fn new(
        endpoints: &[Endpoint],
        min_ring_size: u64,
        max_ring_size: u64,
        hash: HashFunction,
        bounded_load: Option<f64>,
        seed: u64,
    ) -> Result<Self, BuildError> {
        for (field, value) in [("min_ring_size", min_ring_size), ("max_ring_size", max_ring_size)] {
            if !(1..=MAX_RING_SIZE).contains(&value) || min_ring_size > max_ring_size {
                return Err(BuildError::RingSizeOutOfRange { field, value, min: 1, max: MAX_RING_SIZE });
            }
        }
        let bound = BoundedLoad::new(bounded_load)?;
        let mut r = RingHash {
            table: EndpointTable::new(&[], |_| ())?,
            min_ring_size,
            max_ring_size,
            hash,
            points: Vec::new(),
            owners: Vec::new(),
            buckets: Vec::new(),
            bucket_bits: 0,
            bound,
            total_weight: 0.0,
            rng: Rng::new(seed),
        };
        r.set_endpoints(endpoints)?;
        Ok(r)
    }

    /// Number of points on the ring.
    pub fn ring_size(&self) -> usize {
        self.points.len()
    }

    /// Index of the first point at or after `key`, wrapping.
    #[inline]
    fn position(&self, key: u64) -> usize {
        let bucket = (key >> (63 - self.bucket_bits) >> 1) as usize;
        let (start, end) = (self.buckets[bucket] as usize, self.buckets[bucket + 1] as usize);
        let i = start + self.points[start..end].partition_point(|&p| p < key);
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    /// Index the sorted points by their top bits, one bucket per point
    /// (rounded up to a power of two, at most 2^20 buckets).
    fn index_buckets(&mut self) {
        self.bucket_bits = self.points.len().next_power_of_two().trailing_zeros().min(20);
        let count = 1usize << self.bucket_bits;
        self.buckets.clear();
        self.buckets.reserve(count + 1);
        let mut at = 0usize;
        for bucket in 0..count as u64 {
            while at < self.points.len() && (self.points[at] >> (63 - self.bucket_bits) >> 1) < bucket {
                at += 1;
            }
            self.buckets.push(at as u32);
        }
        self.buckets.push(self.points.len() as u32);
    }
}

impl Balancer for RingHash {
    fn name(&self) -> &'static str {
        "ring-hash"
    }

    fn pick(&mut self, _now: Nanos, key: Option<u64>) -> Option<Ticket> {
        if self.table.is_empty() {
            return None;
        }
        let key = key.unwrap_or_else(|| self.rng.next_u64());
        let mut at = self.position(key);
        let mut slot = self.owners[at] as usize;
        if let Some(bound) = self.bound {
            for _ in 0..self.points.len() {
                if bound.admits(&self.table, slot, self.total_weight) {
                    break;
                }
                at = if at + 1 == self.points.len() { 0 } else { at + 1 };
                slot = self.owners[at] as usize;
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
        self.table.replace(endpoints, |_| ())?;
        (self.points, self.owners) =
            build_ring(self.table.endpoints(), self.min_ring_size, self.max_ring_size, self.hash);
        self.index_buckets();
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

    fn eps(n: u64) -> Vec<Endpoint> {
        (0..n).map(|i| Endpoint::new(i, format!("10.0.0.{i}:80"))).collect()
    }

    #[test]
    fn ring_size_rounds_points_per_weight_up_to_a_power_of_two() {
        let r = RingHash::new(&eps(10), 1024, MAX_RING_SIZE, HashFunction::Xxhash, None, 0).unwrap();
        assert_eq!(r.ring_size(), 1280, "1024 / 10 = 102.4 → 128 points per host");
        let r = RingHash::new(&eps(8), 1024, MAX_RING_SIZE, HashFunction::Xxhash, None, 0).unwrap();
        assert_eq!(r.ring_size(), 1024, "exactly 128 per host");
        let weighted = vec![Endpoint::new(0, "a").with_weight(1.0), Endpoint::new(1, "b").with_weight(3.0)];
        let r = RingHash::new(&weighted, 1024, MAX_RING_SIZE, HashFunction::Xxhash, None, 0).unwrap();
        let a = r.owners.iter().filter(|&&s| s == 0).count();
        assert_eq!((a, r.ring_size() - a), (256, 768));
        let r = RingHash::new(&eps(10), 1024, 1000, HashFunction::Xxhash, None, 0);
        assert!(r.is_err(), "min above max is rejected");
        let r = RingHash::new(&eps(10), 128, 150, HashFunction::Xxhash, None, 0).unwrap();
        assert_eq!(r.ring_size(), 150, "16 per host would exceed max_ring_size");
    }

    /// Found by the `operations` fuzz target: a tiny weight made `min / total`
    /// infinite, so every endpoint got 2^64 points (an overflow, or an
    /// allocation of the whole memory).
    #[test]
    fn tiny_and_huge_weights_keep_the_ring_within_max() {
        for weights in [[5e-324, 5e-324], [5e-324, 1.0], [1e300, 1.0], [1e-300, 1e300]] {
            let endpoints: Vec<Endpoint> = eps(2).into_iter().zip(weights).map(|(e, w)| e.with_weight(w)).collect();
            let r = RingHash::new(&endpoints, 1024, 4096, HashFunction::Xxhash, None, 0).unwrap();
            assert!((2..=4096 + 2).contains(&r.ring_size()), "{weights:?}: {} points", r.ring_size());
        }
    }

    #[test]
    fn out_of_range_sizes_name_the_field() {
        let err = RingHash::new(&eps(2), 0, MAX_RING_SIZE, HashFunction::Xxhash, None, 0).unwrap_err();
        assert!(err.to_string().contains("min_ring_size = 0"), "{err}");
        let err = RingHash::new(&eps(2), 1024, MAX_RING_SIZE + 1, HashFunction::Xxhash, None, 0).unwrap_err();
        assert!(err.to_string().contains("max_ring_size = 8388609"), "{err}");
    }

    #[test]
    fn lookup_wraps_around() {
        let r = RingHash::new(&eps(3), 16, 16, HashFunction::Xxhash, None, 0).unwrap();
        assert_eq!(r.position(u64::MAX), if *r.points.last().unwrap() == u64::MAX { r.points.len() - 1 } else { 0 });
        assert_eq!(r.position(0), 0);
    }

    #[test]
    fn bucket_index_agrees_with_a_binary_search_of_the_whole_ring() {
        let mut rng = Rng::new(3);
        for n in [1, 3, 100] {
            let r = RingHash::new(&eps(n), 1024, MAX_RING_SIZE, HashFunction::Xxhash, None, 0).unwrap();
            let mut keys: Vec<u64> = (0..10_000).map(|_| rng.next_u64()).collect();
            keys.extend(r.points.iter().flat_map(|&p| [p, p.wrapping_add(1), p.wrapping_sub(1)]));
            keys.extend([0, u64::MAX]);
            for key in keys {
                let i = r.points.partition_point(|&p| p < key);
                assert_eq!(r.position(key), if i == r.points.len() { 0 } else { i }, "key {key:#x}");
            }
        }
    }
}
