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
