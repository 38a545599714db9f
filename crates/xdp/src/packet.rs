//! Ethernet/IPv4-or-IPv6/TCP-or-UDP frames for fixtures and benchmarks: built with
//! correct checksums, parsed back, and checked from scratch, so that the
//! program's incremental checksum updates are verified against a full sum.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::flow::{Flow, Flow6};
use crate::spec::Protocol;

/// A MAC address.
pub type Mac = [u8; 6];

const ETH_LEN: usize = 14;
const IP_LEN: usize = 20;

/// One's-complement sum of `bytes` as big-endian 16-bit words, folded.
fn sum16(bytes: &[u8], mut acc: u32) -> u32 {
    for chunk in bytes.chunks(2) {
        acc += u32::from(u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// Checksum of the IPv4 header plus L4 segment of `ip` (the L3 packet).
fn l4_sum(ip: &[u8]) -> u32 {
    let seg = &ip[IP_LEN..];
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&ip[12..20]);
    pseudo[9] = ip[9];
    pseudo[10..].copy_from_slice(&(seg.len() as u16).to_be_bytes());
    sum16(seg, sum16(&pseudo, 0))
}

/// TCP flags, for [`build_tcp`].
pub mod tcp {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// A frame carrying `flow` with `payload`, from `src_mac` to `dst_mac`; a
/// TCP segment is a SYN.
pub fn build(flow: &Flow, src_mac: Mac, dst_mac: Mac, payload: &[u8]) -> Vec<u8> {
    build_tcp(flow, tcp::SYN, src_mac, dst_mac, payload)
}

/// As [`build`], with the TCP flags `flags` (ignored for UDP).
pub fn build_tcp(flow: &Flow, flags: u8, src_mac: Mac, dst_mac: Mac, payload: &[u8]) -> Vec<u8> {
    let l4_len = match flow.proto {
        Protocol::Tcp => 20,
        Protocol::Udp => 8,
    };
    let total = IP_LEN + l4_len + payload.len();
    let mut f = Vec::with_capacity(ETH_LEN + total);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, flow.proto.number(), 0, 0]);
    f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&(total as u16).to_be_bytes());
    f.extend_from_slice(&flow.src.octets());
    f.extend_from_slice(&flow.dst.octets());
    f.extend_from_slice(&flow.sport.to_be_bytes());
    f.extend_from_slice(&flow.dport.to_be_bytes());
    match flow.proto {
        // seq 1, ack 0, data offset 5, flags, window 64240, checksum, urgent.
        Protocol::Tcp => f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xfa, 0xf0, 0, 0, 0, 0]),
        // Length, checksum.
        Protocol::Udp => {
            f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
    }
    f.extend_from_slice(payload);
    let ip_sum = !(sum16(&f[ETH_LEN..ETH_LEN + IP_LEN], 0) as u16);
    f[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&ip_sum.to_be_bytes());
    let at = ETH_LEN + IP_LEN + if flow.proto == Protocol::Tcp { 16 } else { 6 };
    let mut l4 = !(l4_sum(&f[ETH_LEN..]) as u16);
    if flow.proto == Protocol::Udp && l4 == 0 {
        l4 = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&l4.to_be_bytes());
    f
}

/// The fields of a frame the fixtures look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// The 5-tuple.
    pub flow: Flow,
    /// The IPv4 header checksum verifies.
    pub ip_checksum_ok: bool,
    /// The TCP/UDP checksum verifies (a UDP checksum of 0 counts as valid).
    pub l4_checksum_ok: bool,
    /// The TCP flags (0 for UDP).
    pub tcp_flags: u8,
}

/// Parse a frame built like [`build`]'s; `None` if it is not IPv4 TCP/UDP.
pub fn parse(f: &[u8]) -> Option<Parsed> {
    if f.len() < ETH_LEN + IP_LEN + 8 || f[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &f[ETH_LEN..];
    let proto = Protocol::from_number(ip[9])?;
    let addr = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
    let port = |at: usize| u16::from_be_bytes([ip[at], ip[at + 1]]);
    let udp_unchecked = proto == Protocol::Udp && ip[IP_LEN + 6..IP_LEN + 8] == [0, 0];
    Some(Parsed {
        dst_mac: f[0..6].try_into().ok()?,
        src_mac: f[6..12].try_into().ok()?,
        flow: Flow { src: addr(12), dst: addr(16), sport: port(IP_LEN), dport: port(IP_LEN + 2), proto },
        ip_checksum_ok: sum16(&ip[..IP_LEN], 0) == 0xffff,
        l4_checksum_ok: udp_unchecked || l4_sum(ip) == 0xffff,
        tcp_flags: if proto == Protocol::Tcp { ip[IP_LEN + 13] } else { 0 },
    })
}

const IP6_LEN: usize = 40;

/// Checksum of the IPv6 pseudo-header plus L4 segment of `ip` (the L3 packet).
fn l4_sum6(ip: &[u8]) -> u32 {
    let seg = &ip[IP6_LEN..];
    let mut pseudo = [0u8; 40];
    pseudo[..32].copy_from_slice(&ip[8..40]);
    pseudo[32..36].copy_from_slice(&(seg.len() as u32).to_be_bytes());
    pseudo[39] = ip[6];
    sum16(seg, sum16(&pseudo, 0))
}

/// An IPv6 frame carrying `flow` with TCP flags `flags` (ignored for UDP).
pub fn build6(flow: &Flow6, flags: u8, src_mac: Mac, dst_mac: Mac, payload: &[u8]) -> Vec<u8> {
    let l4_len = if flow.proto == Protocol::Tcp { 20 } else { 8 };
    let mut f = Vec::with_capacity(ETH_LEN + IP6_LEN + l4_len + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((l4_len + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[flow.proto.number(), 64]);
    f.extend_from_slice(&flow.src.octets());
    f.extend_from_slice(&flow.dst.octets());
    f.extend_from_slice(&flow.sport.to_be_bytes());
    f.extend_from_slice(&flow.dport.to_be_bytes());
    match flow.proto {
        Protocol::Tcp => f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xfa, 0xf0, 0, 0, 0, 0]),
        Protocol::Udp => {
            f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
    }
    f.extend_from_slice(payload);
    let at = ETH_LEN + IP6_LEN + if flow.proto == Protocol::Tcp { 16 } else { 6 };
    let mut l4 = !(l4_sum6(&f[ETH_LEN..]) as u16);
    if flow.proto == Protocol::Udp && l4 == 0 {
        l4 = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&l4.to_be_bytes());
    f
}

/// The fields of an IPv6 frame the fixtures look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed6 {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// The 5-tuple.
    pub flow: Flow6,
    /// The TCP/UDP checksum verifies over the IPv6 pseudo-header.
    pub l4_checksum_ok: bool,
}

/// Parse a frame built like [`build6`]'s; `None` if it is not IPv6 TCP/UDP.
pub fn parse6(f: &[u8]) -> Option<Parsed6> {
    if f.len() < ETH_LEN + IP6_LEN + 8 || f[12..14] != [0x86, 0xdd] {
        return None;
    }
    let ip = &f[ETH_LEN..];
    let proto = Protocol::from_number(ip[6])?;
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&ip[at..at + 16]).expect("16 bytes"));
    let port = |at: usize| u16::from_be_bytes([ip[at], ip[at + 1]]);
    Some(Parsed6 {
        dst_mac: f[0..6].try_into().ok()?,
        src_mac: f[6..12].try_into().ok()?,
        flow: Flow6 { src: addr(8), dst: addr(24), sport: port(IP6_LEN), dport: port(IP6_LEN + 2), proto },
        l4_checksum_ok: l4_sum6(ip) == 0xffff,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_frames_parse_back_with_valid_checksums() {
        for proto in [Protocol::Tcp, Protocol::Udp] {
            let flow = Flow {
                src: Ipv4Addr::new(10, 1, 2, 3),
                dst: Ipv4Addr::new(20, 20, 20, 1),
                sport: 4242,
                dport: 80,
                proto,
            };
            let frame = build(&flow, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], b"hello");
            let p = parse(&frame).unwrap();
            assert_eq!(p.flow, flow);
            assert!(p.ip_checksum_ok && p.l4_checksum_ok, "{proto}");
            let fin = parse(&build_tcp(&flow, tcp::FIN | tcp::ACK, [2; 6], [3; 6], b"")).unwrap();
            assert!(fin.l4_checksum_ok);
            assert_eq!(fin.tcp_flags, if proto == Protocol::Tcp { tcp::FIN | tcp::ACK } else { 0 });
            let mut bad = frame.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert!(!parse(&bad).unwrap().l4_checksum_ok);
            let flow6 = Flow6 {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8:1::1".parse().unwrap(),
                sport: 4242,
                dport: 80,
                proto,
            };
            let frame6 = build6(&flow6, tcp::SYN, [2; 6], [3; 6], b"hello");
            let p6 = parse6(&frame6).unwrap();
            assert_eq!(p6.flow, flow6);
            assert!(p6.l4_checksum_ok, "{proto} over IPv6");
            let mut bad6 = frame6.clone();
            bad6[14 + 8] ^= 1;
            assert!(!parse6(&bad6).unwrap().l4_checksum_ok);
        }
    }
}
