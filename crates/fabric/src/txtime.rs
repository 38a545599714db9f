//! A packet's transmission (serialisation) time, to the nanosecond ns-3
//! gives it.
//!
//! ns-3's point-to-point device (ns-3.26, the tree the seed's experiments
//! run on) takes `DataRate::CalculateBytesTxTime (bytes)`, which is
//! `Seconds (bytes · 8 ÷ bps)` computed in `double`; `Seconds (double)`
//! converts the double to ns-3's 64.64 fixed point rounding to the nearest
//! 2^-64 (`int64x64_t (long double)` adds 0.5 before truncating), multiplies
//! it exactly by 10^9, and `Time (int64x64_t)` keeps the integer part. So a
//! transmission time is rounded down — 1 454 bytes at 10 Gb/s take 1 163 ns,
//! not 1 163.2 — except that an exact number of nanoseconds may come out one
//! below when the double falls just under it (2 bytes at 1 Gb/s take 15 ns
//! in ns-3). Computing it the same way keeps Fulcrum's packet times on
//! ns-3's: rounding up instead drifts by a nanosecond per packet, which
//! moves the order of simultaneous events along a busy path.

use crate::packet::Nanos;

/// ns-3's transmission time of `bytes` at `bps` bits per second (below one
/// second; longer times saturate, which no link of a fabric reaches).
pub fn tx_ns(bps: u64, bytes: u32) -> Nanos {
    let seconds = (bytes as f64 * 8.0) / bps as f64;
    // The fractional 64.64 part, rounded to nearest as ns-3 does
    // (exact: scaling by 2^64 only moves the exponent).
    let frac = (seconds * 18_446_744_073_709_551_616.0 + 0.5) as u64;
    ((frac as u128 * 1_000_000_000) >> 64) as Nanos
}

/// Packets up to this many bytes have their time looked up.
const TABLE_BYTES: usize = 2048;

/// [`tx_ns`] of every packet size up to [`TABLE_BYTES`] at each distinct
/// link rate of a fabric: one table lookup per packet instead of a double
/// division (which cost 1.4 % of a large-scale run's instructions).
#[derive(Clone, Debug)]
pub struct TxTimes {
    /// (rate, its times by size).
    rates: Vec<(u64, Box<[u32]>)>,
}

impl TxTimes {
    /// Tables for these rates (bits per second; repeats are merged).
    pub fn new(rates: impl IntoIterator<Item = u64>) -> TxTimes {
        let mut distinct: Vec<u64> = rates.into_iter().collect();
        distinct.sort_unstable();
        distinct.dedup();
        let rates = distinct
            .into_iter()
            .map(|bps| (bps, (0..TABLE_BYTES as u32).map(|b| tx_ns(bps, b).min(u32::MAX as Nanos) as u32).collect()))
            .collect();
        TxTimes { rates }
    }

    /// The index of `bps` (one of the rates given to [`TxTimes::new`]).
    pub fn rate(&self, bps: u64) -> u32 {
        self.rates.binary_search_by_key(&bps, |r| r.0).expect("a rate given to TxTimes::new") as u32
    }

    /// ns-3's transmission time of `bytes` at rate `rate` (an index from
    /// [`TxTimes::rate`]).
    #[inline]
    pub fn get(&self, rate: u32, bytes: u32) -> Nanos {
        let (bps, table) = &self.rates[rate as usize];
        match table.get(bytes as usize) {
            Some(&ns) if ns < u32::MAX => ns as Nanos,
            _ => tx_ns(*bps, bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_down_as_ns3() {
        // A full data segment (1400 B + 52 B of headers + 2 B of PPP).
        assert_eq!(tx_ns(10_000_000_000, 1454), 1163);
        assert_eq!(tx_ns(10_000_000_000, 1000), 800);
        assert_eq!(tx_ns(10_000_000_000, 5), 4);
        assert_eq!(tx_ns(40_000_000_000, 1454), 290);
        // The double just under 16 ns falls to 15, as in ns-3.
        assert_eq!(tx_ns(1_000_000_000, 2), 15);
        assert_eq!(tx_ns(1_000_000_000, 1500), 12_000);
    }

    #[test]
    fn tables_give_the_computed_times() {
        let t = TxTimes::new([10_000_000_000, 1_000_000_000, 10_000_000_000]);
        for bps in [1_000_000_000, 10_000_000_000] {
            for bytes in [0, 2, 54, 1454, 2047, 2048, 9000] {
                assert_eq!(t.get(t.rate(bps), bytes), tx_ns(bps, bytes), "{bps} {bytes}");
            }
        }
    }

    #[test]
    fn never_above_the_exact_time() {
        for bps in [1_000_000_000u64, 10_000_000_000, 25_000_000_000, 40_000_000_000, 100_000_000_000] {
            for bytes in 1..10_000u32 {
                let exact = bytes as u128 * 8 * 1_000_000_000;
                let t = tx_ns(bps, bytes) as u128;
                assert!(t * bps as u128 <= exact && exact < (t + 2) * bps as u128, "{bps} {bytes}");
            }
        }
    }
}
