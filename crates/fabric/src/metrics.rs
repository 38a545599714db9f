//! Flow completion times and their summaries, computed as the seed's
//! analysis script does (ns3-ecn-sharp `examples/rtt-variations/fct_parser.py`
//! over ns-3's flow monitor):
//!
//! - A flow's FCT is the time its last forward packet was received minus the
//!   time its first packet (the SYN) was sent. The last forward packet is
//!   the sender's ACK of the receiver's FIN, one round trip after the last
//!   data byte, as ns-3's flow monitor sees it. Flows still running when the
//!   run ends count too, with the FCT they have so far; flows of which
//!   nothing arrived are left out, as the original's parser skips flow
//!   monitor entries without a received packet.
//! - *Stranded* flows are those left out: they sent their first packet but
//!   nothing of theirs arrived before the run ended (a SYN black-holed on
//!   every try, say). Leaving them out flatters a scheme that strands flows,
//!   so the summary also gives `small_p99_censored`: the small-flow p99
//!   with every stranded small flow counted at its age when the run ended
//!   (a lower bound of its FCT). A stranded flow is small when its payload
//!   and headers, sent once, come under 100 000 bytes (it sent too little
//!   to classify it by what it sent). Without stranded flows the two p99s
//!   are equal.
//! - A flow is small when it sent fewer than 100 000 IP bytes, large when it
//!   sent more than 10 000 000 (headers and retransmissions included, as the
//!   flow monitor counts them).
//! - The small-flow 99th percentile is the element at index ⌊0.99·n⌋ of the
//!   sorted small-flow FCTs.
//!
//! That is the default convention, [`Convention::Monitor`]; `monitor.fct`
//! selects another for the summary (`fct_ms`):
//!
//! - [`Convention::Parser`]: the same, less the flow-monitor entries the
//!   original's parser drops: those with a single forward packet received
//!   or sent (its receive or send span is 0) and those whose IP bytes are
//!   within 4–24 bytes above 52 per packet (its rule for the reverse, pure
//!   ACK, flows, which also catches a forward flow of a few payload bytes).
//!   ns-3's published figures are of this convention.
//! - [`Convention::LastByte`]: a flow's FCT ends when its receiver got its
//!   last new byte (late copies and the closing handshake left out);
//!   unfinished flows are left out; a flow is classed by its payload and
//!   headers sent once.
//!
//! Buckets group flows by their payload size. Slowdown is FCT divided by the
//! ideal FCT: the flow alone in the fabric (three one-way trips: SYN,
//! SYN-ACK, data; host delays included) plus its bytes at the host rate.

use serde::{Deserialize, Serialize};

use crate::packet::Nanos;

/// One flow's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FlowRecord {
    pub id: u32,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub start_ns: Nanos,
    pub fct_ns: Nanos,
    /// Whether every byte arrived before the run ended.
    pub complete: bool,
    pub tx_bytes: u64,
    pub slowdown: f64,
    /// The receiver got the last new byte this long after the first packet
    /// was sent (None if it never did).
    pub last_byte_ns: Option<Nanos>,
    /// Forward packets sent (retransmissions included).
    pub tx_packets: u64,
    /// From the first forward packet received to the last.
    pub rx_span_ns: Nanos,
    /// Payload and headers, sent once.
    pub once_bytes: u64,
}

/// Which flows a summary counts, with which FCT, classed by which bytes
/// (the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Convention {
    /// Last forward packet received − first sent; unfinished flows at the
    /// end; classed by IP bytes sent.
    #[default]
    Monitor,
    /// `Monitor`, less the entries the original's parser drops.
    Parser,
    /// Last new byte received − first sent; finished flows only; classed by
    /// payload and headers sent once.
    LastByte,
}

/// ns-3's TCP/IP header bytes per packet, in the parser's reverse-flow rule.
const PARSER_HEADER: u64 = 52;

impl Convention {
    /// The FCT and the class bytes of `f` under this convention, None if it
    /// leaves `f` out.
    fn fct_of(self, f: &FlowRecord) -> Option<(Nanos, u64)> {
        match self {
            Convention::Monitor => Some((f.fct_ns, f.tx_bytes)),
            Convention::Parser => {
                let band = PARSER_HEADER * f.tx_packets + 4..=PARSER_HEADER * f.tx_packets + 24;
                let kept = f.fct_ns > 0 && f.rx_span_ns > 0 && f.tx_packets > 1 && !band.contains(&f.tx_bytes);
                kept.then_some((f.fct_ns, f.tx_bytes))
            }
            Convention::LastByte => f.last_byte_ns.map(|t| (t, f.once_bytes)),
        }
    }
}

/// FCT figures in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FctSummary {
    pub avg: f64,
    pub small_avg: f64,
    pub small_p99: f64,
    pub large_avg: f64,
    /// The small-flow p99 counting stranded small flows at their age when
    /// the run ended.
    pub small_p99_censored: f64,
}

/// A flow of which nothing arrived before the run ended.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stranded {
    pub id: u32,
    /// Payload bytes.
    pub bytes: u64,
    /// Its first packet left this long before the run ended.
    pub age_ns: Nanos,
    /// Its payload and headers, sent once, come under [`SMALL_BYTES`].
    pub small: bool,
}

/// FCTs of flows within a payload-size range.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Label, e.g. "10K-100K".
    pub size: String,
    pub flows: usize,
    pub avg_ms: f64,
    pub p99_ms: f64,
    pub avg_slowdown: f64,
}

/// Small flows sent fewer IP bytes than this.
pub const SMALL_BYTES: u64 = 100_000;
/// Large flows sent more IP bytes than this.
pub const LARGE_BYTES: u64 = 10_000_000;

/// Upper edges (payload bytes, exclusive) of the size buckets.
const EDGES: [u64; 5] = [10_000, 100_000, 1_000_000, 10_000_000, u64::MAX];

/// Labels of the size buckets.
pub const BUCKET_LABELS: [&str; 5] = ["<10K", "10K-100K", "100K-1M", "1M-10M", ">10M"];

/// The bucket of a flow of `bytes` payload bytes.
pub fn bucket_of(bytes: u64) -> usize {
    EDGES.iter().position(|&hi| bytes < hi).unwrap_or(EDGES.len() - 1)
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

/// The element at ⌊0.99·n⌋ of `sorted` (the original's rank), 0 if empty.
fn p99(sorted: &[Nanos]) -> f64 {
    sorted.get(sorted.len() * 99 / 100).map_or(0.0, |&x| x as f64)
}

/// The summary figures of `flows` under `convention`, and of the
/// `stranded` ones for `small_p99_censored`.
pub fn summarise(flows: &[FlowRecord], stranded: &[Stranded], convention: Convention) -> FctSummary {
    let counted: Vec<(Nanos, u64)> = flows.iter().filter_map(|f| convention.fct_of(f)).collect();
    let mut small: Vec<Nanos> = counted.iter().filter(|&&(_, b)| b < SMALL_BYTES).map(|&(t, _)| t).collect();
    small.sort_unstable();
    let mut censored = small.clone();
    censored.extend(stranded.iter().filter(|f| f.small).map(|f| f.age_ns));
    censored.sort_unstable();
    FctSummary {
        small_p99_censored: ms(p99(&censored)),
        avg: ms(mean(counted.iter().map(|&(t, _)| t as f64))),
        small_avg: ms(mean(small.iter().map(|&x| x as f64))),
        small_p99: ms(p99(&small)),
        large_avg: ms(mean(counted.iter().filter(|&&(_, b)| b > LARGE_BYTES).map(|&(t, _)| t as f64))),
    }
}

/// FCT by payload-size bucket.
pub fn buckets(flows: &[FlowRecord]) -> Vec<Bucket> {
    BUCKET_LABELS
        .iter()
        .enumerate()
        .map(|(b, label)| {
            let inside: Vec<&FlowRecord> = flows.iter().filter(|f| bucket_of(f.bytes) == b).collect();
            let mut fct: Vec<Nanos> = inside.iter().map(|f| f.fct_ns).collect();
            fct.sort_unstable();
            Bucket {
                size: label.to_string(),
                flows: inside.len(),
                avg_ms: ms(mean(fct.iter().map(|&x| x as f64))),
                p99_ms: ms(p99(&fct)),
                avg_slowdown: mean(inside.iter().map(|f| f.slowdown)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(bytes: u64, fct_ms: u64) -> FlowRecord {
        FlowRecord {
            id: 0,
            src: 0,
            dst: 1,
            bytes,
            start_ns: 0,
            fct_ns: fct_ms * 1_000_000,
            complete: true,
            tx_bytes: bytes + bytes / 1400 * 52 + 52,
            slowdown: 1.0,
            last_byte_ns: Some(fct_ms * 1_000_000),
            tx_packets: bytes / 1400 + 2,
            rx_span_ns: fct_ms * 1_000_000,
            once_bytes: bytes + bytes.div_ceil(1400) * 52,
        }
    }

    fn monitor(flows: &[FlowRecord]) -> FctSummary {
        summarise(flows, &[], Convention::Monitor)
    }

    #[test]
    fn summary_classes_and_rank() {
        let mut flows: Vec<FlowRecord> = (1..=200).map(|i| flow(1000, i)).collect();
        flows.push(flow(20_000_000, 100));
        flows.push(flow(5_000_000, 50));
        let s = monitor(&flows);
        assert_eq!(s.small_avg, 100.5);
        assert_eq!(s.small_p99, 199.0, "index ⌊0.99·200⌋ = 198");
        assert_eq!(s.small_p99_censored, s.small_p99, "nothing stranded");
        assert_eq!(s.large_avg, 100.0);
        assert!((s.avg - (20100.0 + 150.0) / 202.0).abs() < 1e-9);
        let b = buckets(&flows);
        assert_eq!(b.iter().map(|b| b.flows).collect::<Vec<_>>(), [200, 0, 0, 1, 1]);
    }

    #[test]
    fn header_bytes_decide_the_class() {
        // 99 000 payload bytes: 71 packets of headers push it over 100 000.
        let f = flow(99_000, 1);
        assert!(f.tx_bytes >= SMALL_BYTES);
        assert_eq!(monitor(&[f]).small_avg, 0.0);
    }

    #[test]
    fn stranded_small_flows_count_only_in_the_censored_p99() {
        let flows: Vec<FlowRecord> = (1..=98).map(|i| flow(1000, i)).collect();
        let stranded = |id, small| Stranded { id, bytes: 1000, age_ns: 500_000_000, small };
        // Two stranded small flows (500 ms old) and a stranded large one.
        let s = summarise(&flows, &[stranded(98, true), stranded(99, true), stranded(100, false)], Convention::Monitor);
        assert_eq!(s.small_p99, 98.0, "index ⌊0.99·98⌋ = 97: the stranded are left out");
        assert_eq!(s.small_p99_censored, 500.0, "index ⌊0.99·100⌋ = 99: a stranded flow");
        assert_eq!(s.avg, monitor(&flows).avg, "the other figures leave them out");
        // One stranded small flow after 97 finished ones: index 97 of 98.
        let one = summarise(&flows[..97], &[stranded(98, true)], Convention::Monitor);
        assert_eq!((one.small_p99, one.small_p99_censored), (97.0, 500.0));
    }

    #[test]
    fn the_parser_drops_single_packet_spans_and_the_reverse_flow_band() {
        let mut flows: Vec<FlowRecord> = (1..=4).map(|i| flow(1000, i)).collect();
        flows[0].rx_span_ns = 0; // only its SYN arrived
        flows[1].tx_packets = 1; // only its SYN left
        flows[2].tx_bytes = 52 * flows[2].tx_packets + 10; // ten payload bytes
        let kept = summarise(&flows, &[], Convention::Parser);
        assert_eq!(kept.avg, 4.0, "only the fourth flow is left");
        assert_eq!(monitor(&flows).avg, 2.5, "the default counts all four");
    }

    #[test]
    fn last_byte_leaves_unfinished_flows_out_and_classes_by_bytes_sent_once() {
        // A finished flow whose last copy came 9 ms after its last new
        // byte, an unfinished one counted at the cut-off by the monitor,
        // and a 90 000-byte flow whose resends took it over 100 000 bytes.
        let mut late = flow(1000, 10);
        late.last_byte_ns = Some(1_000_000);
        let mut unfinished = flow(1000, 300);
        (unfinished.complete, unfinished.last_byte_ns) = (false, None);
        let mut resent = flow(90_000, 5);
        resent.tx_bytes = 130_000;
        let flows = [late, unfinished, resent];
        let m = monitor(&flows);
        assert_eq!((m.avg, m.small_avg), (105.0, 155.0), "the resent flow is not small by bytes sent");
        let l = summarise(&flows, &[], Convention::LastByte);
        assert_eq!((l.avg, l.small_avg), (3.0, 3.0), "1 and 5 ms: both small, sent once");
        assert_eq!(l.small_p99, 5.0);
    }

    #[test]
    fn conventions_are_named_in_kebab_case() {
        #[derive(Deserialize)]
        struct T {
            fct: Convention,
        }
        let t: T = toml::from_str("fct = \"last-byte\"").unwrap();
        assert_eq!(t.fct, Convention::LastByte);
        assert!(toml::from_str::<T>("fct = \"lastbyte\"").is_err());
    }
}
