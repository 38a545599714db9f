//! The PROXY protocol (HAProxy's, versions 1 and 2): the header an L4 load
//! balancer puts before a connection's bytes to tell the next hop who the
//! client is.
//!
//! [`parse`] reads a header from bytes (pure, bounded, no allocation beyond
//! the result); [`read`] takes one off a socket without consuming a byte
//! past it; [`encode`] writes one for an upstream. Which sources may send a
//! header is the listener's [`ProxyProtocolListener`] rule, applied by
//! [`accept`]:
//! - a connection from a `trusted` range must start with a header when
//!   `required` (the default; like HAProxy's `accept-proxy`), and may when
//!   not;
//! - a connection from anywhere else is refused when `required`, and when
//!   not, is refused if it starts with a header (it would be claiming an
//!   address it may not claim) and served as sent otherwise.
//!
//! A v2 `LOCAL` header, a v2 header of family `UNSPEC` (or of a family
//! other than TCP over IPv4 or IPv6) and a v1 `UNKNOWN` header carry no
//! client: the connection is the sender's own, and its socket address is
//! the client's. TLVs are skipped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::metrics::ProxyStats;

/// The v2 signature, the first 12 bytes of every v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header, CRLF included (the spec's 107 bytes).
pub const V1_MAX: usize = 107;
/// The longest v2 header accepted: the 16 fixed bytes and up to 4 KiB of
/// addresses and TLVs (the spec allows 64 KiB; senders use a few hundred).
pub const V2_MAX: usize = 16 + 4096;

/// Addresses a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Addresses {
    /// The client.
    pub source: SocketAddr,
    /// The address the client connected to.
    pub destination: SocketAddr,
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A client's addresses.
    Proxied(Addresses),
    /// No client: a v2 `LOCAL` (the sender's own connection, e.g. a health
    /// check), a v2 `UNSPEC` or unsupported family, or v1 `UNKNOWN`.
    Local,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Neither signature.
    #[error("no PROXY protocol signature")]
    Signature,
    /// A v1 line that breaks the grammar (fields, addresses, ports, CRLF).
    #[error("malformed PROXY v1 line")]
    V1,
    /// A v1 line without CRLF within 107 bytes.
    #[error("PROXY v1 line longer than 107 bytes")]
    V1TooLong,
    /// A v2 version other than 2 or a command other than LOCAL or PROXY.
    #[error("unsupported PROXY v2 version or command")]
    V2Command,
    /// A v2 address block shorter than its family needs.
    #[error("PROXY v2 address block too short for its family")]
    V2Addresses,
    /// A v2 header over [`V2_MAX`] bytes.
    #[error("PROXY v2 header longer than {V2_MAX} bytes")]
    V2TooLong,
}

/// Whether `input` begins with a header: `Some(true)` for a signature,
/// `Some(false)` for bytes that cannot begin one, `None` when more bytes
/// are needed to say.
pub fn detect(input: &[u8]) -> Option<bool> {
    let starts = |sig: &[u8]| {
        let n = input.len().min(sig.len());
        (input[..n] == sig[..n]).then_some(n == sig.len())
    };
    match (starts(b"PROXY "), starts(&V2_SIGNATURE)) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (None, None) => Some(false),
        _ => None,
    }
}

/// The header at the start of `input` and its length in bytes, `Ok(None)`
/// if `input` is a prefix of one (more bytes needed), or why it is not one.
pub fn parse(input: &[u8]) -> Result<Option<(Header, usize)>, Malformed> {
    match detect(input) {
        None => Ok(None),
        Some(false) => Err(Malformed::Signature),
        Some(true) if input[0] == b'P' => parse_v1(input),
        Some(true) => parse_v2(input),
    }
}

fn parse_v1(input: &[u8]) -> Result<Option<(Header, usize)>, Malformed> {
    let window = &input[..input.len().min(V1_MAX)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        return if input.len() >= V1_MAX { Err(Malformed::V1TooLong) } else { Ok(None) };
    };
    let line = window[..lf].strip_suffix(b"\r").ok_or(Malformed::V1)?;
    let line = std::str::from_utf8(line).map_err(|_| Malformed::V1)?;
    let fields: Vec<&str> = line.split(' ').collect();
    let header = match fields.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Header::Local,
        ["PROXY", family @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let ip = |s: &str| -> Result<IpAddr, Malformed> {
                let ip = match *family {
                    "TCP4" => IpAddr::V4(s.parse::<Ipv4Addr>().map_err(|_| Malformed::V1)?),
                    _ => IpAddr::V6(s.parse::<Ipv6Addr>().map_err(|_| Malformed::V1)?),
                };
                Ok(ip)
            };
            // Ports are decimal without sign or leading zero (the spec's 0..65535).
            let port = |s: &str| -> Result<u16, Malformed> {
                let ok = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
                if ok {
                    s.parse().map_err(|_| Malformed::V1)
                } else {
                    Err(Malformed::V1)
                }
            };
            Header::Proxied(Addresses {
                source: SocketAddr::new(ip(src)?, port(sport)?),
                destination: SocketAddr::new(ip(dst)?, port(dport)?),
            })
        }
        _ => return Err(Malformed::V1),
    };
    Ok(Some((header, lf + 1)))
}

fn parse_v2(input: &[u8]) -> Result<Option<(Header, usize)>, Malformed> {
    let Some(fixed) = input.get(..16) else { return Ok(None) };
    let length = 16 + usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if length > V2_MAX {
        return Err(Malformed::V2TooLong);
    }
    let (version, command) = (fixed[12] >> 4, fixed[12] & 0x0f);
    if version != 2 || command > 1 {
        return Err(Malformed::V2Command);
    }
    let Some(block) = input.get(16..length) else { return Ok(None) };
    if command == 0 {
        return Ok(Some((Header::Local, length)));
    }
    let (family, transport) = (fixed[13] >> 4, fixed[13] & 0x0f);
    // STREAM over INET or INET6; anything else (UNSPEC, UDP, UNIX) carries
    // no address the proxy can use. The rest of the block is TLVs, skipped.
    let addresses = match (family, transport) {
        (1, 1) => {
            let b: &[u8; 12] = block.get(..12).and_then(|b| b.try_into().ok()).ok_or(Malformed::V2Addresses)?;
            let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]));
            let port = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
            Addresses { source: SocketAddr::new(ip(0), port(8)), destination: SocketAddr::new(ip(4), port(10)) }
        }
        (2, 1) => {
            let b: &[u8; 36] = block.get(..36).and_then(|b| b.try_into().ok()).ok_or(Malformed::V2Addresses)?;
            let ip = |at: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&b[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            let port = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
            Addresses { source: SocketAddr::new(ip(0), port(32)), destination: SocketAddr::new(ip(16), port(34)) }
        }
        _ => return Ok(Some((Header::Local, length))),
    };
    Ok(Some((Header::Proxied(addresses), length)))
}

/// Which header a cluster sends to its endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    /// The text line.
    V1,
    /// The binary header.
    V2,
}

/// The header `version` for a connection from `source` to `destination`,
/// or for one of the proxy's own (a health check) when `None`.
pub fn encode(version: Version, addresses: Option<Addresses>) -> Vec<u8> {
    // Families must agree; a mixed pair is sent with both as IPv6.
    let pair = addresses.map(|a| match (a.source.ip(), a.destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (IpAddr::V4(s), IpAddr::V4(d), a),
        (s, d) => (IpAddr::V6(to_v6(s)), IpAddr::V6(to_v6(d)), a),
    });
    match version {
        Version::V1 => match pair {
            None => b"PROXY UNKNOWN\r\n".to_vec(),
            Some((s, d, a)) => {
                let family = if s.is_ipv4() { "TCP4" } else { "TCP6" };
                let (sp, dp) = (a.source.port(), a.destination.port());
                format!("PROXY {family} {s} {d} {sp} {dp}\r\n").into_bytes()
            }
        },
        Version::V2 => {
            let mut out = V2_SIGNATURE.to_vec();
            let mut block = Vec::with_capacity(36);
            let (command, family) = match pair {
                None => (0x20, 0x00),
                Some((s, d, a)) => {
                    let family = match (s, d) {
                        (IpAddr::V4(s), IpAddr::V4(d)) => {
                            block.extend_from_slice(&s.octets());
                            block.extend_from_slice(&d.octets());
                            0x11
                        }
                        _ => {
                            block.extend_from_slice(&to_v6(s).octets());
                            block.extend_from_slice(&to_v6(d).octets());
                            0x21
                        }
                    };
                    block.extend_from_slice(&a.source.port().to_be_bytes());
                    block.extend_from_slice(&a.destination.port().to_be_bytes());
                    (0x21, family)
                }
            };
            out.extend_from_slice(&[command, family]);
            // At most 36 bytes: always fits.
            out.extend_from_slice(&u16::try_from(block.len()).unwrap_or(0).to_be_bytes());
            out.extend_from_slice(&block);
            out
        }
    }
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// An IP address range, `10.0.0.0/8` or `2001:db8::/32` (a bare address is
/// a range of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an address range such as 10.0.0.0/8 or 2001:db8::/32");
        let (ip, prefix) = s.split_once('/').unwrap_or((s, ""));
        let network: IpAddr = ip.parse().map_err(|_| bad())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() { max } else { prefix.parse::<u8>().map_err(|_| bad())? };
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr { network, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (net, addr, bits) = match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (u128::from(u32::from(n)) << 96, u128::from(u32::from(a)) << 96, 32),
            (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128),
            _ => return false,
        };
        let prefix = u32::from(self.prefix.min(bits));
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        net & mask == addr & mask
    }
}

/// A listener's rule for PROXY protocol headers (the `proxy_protocol`
/// table of a listener).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyProtocolListener {
    /// Sources allowed to send a header.
    pub trusted: Vec<Cidr>,
    /// Whether a connection must start with a header.
    pub required: bool,
    /// The header must arrive within this long.
    pub timeout: Duration,
}

/// Why a connection was refused before it was served.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A header from, or a required header expected of, an untrusted source.
    #[error("source not in proxy_protocol.trusted")]
    Untrusted,
    /// A trusted source without the required header.
    #[error("no PROXY protocol header")]
    Missing,
    /// A header that does not parse.
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// No complete header within the timeout.
    #[error("no complete PROXY protocol header in time")]
    Timeout,
    /// The client closed or reset the connection.
    #[error("connection closed: {0}")]
    Closed(std::io::Error),
}

/// The client's address for a connection accepted from `peer` on a
/// listener with `rule`: the carried source (with the carried destination)
/// when a trusted header says so, `peer` otherwise, or why the connection
/// is refused. Consumes the header and not a byte more.
pub async fn accept(
    stream: &mut TcpStream,
    peer: SocketAddr,
    rule: &ProxyProtocolListener,
) -> Result<Option<Addresses>, Refused> {
    let trusted = rule.trusted.iter().any(|c| c.contains(peer.ip()));
    if !trusted && rule.required {
        return Err(Refused::Untrusted);
    }
    let header = match tokio::time::timeout(rule.timeout, read(stream)).await {
        Err(_) => return Err(Refused::Timeout),
        Ok(header) => header?,
    };
    match header {
        Some(_) if !trusted => Err(Refused::Untrusted),
        None if rule.required => Err(Refused::Missing),
        Some(Header::Proxied(addresses)) => Ok(Some(addresses)),
        Some(Header::Local) | None => Ok(None),
    }
}

/// The addresses of a connection accepted from `peer` on a listener with
/// `rule`: the client's (a trusted header's, else the socket's) and the one
/// it connected to, or `None` when the rule refuses it (counted in
/// `fulcrum_proxy_protocol_refused_total`, and logged unless the client left).
pub async fn client_of(
    stream: &mut TcpStream,
    peer: SocketAddr,
    rule: Option<&ProxyProtocolListener>,
    stats: &ProxyStats,
) -> Option<Addresses> {
    let local = stream.local_addr().unwrap_or(peer);
    let socket = Addresses { source: peer, destination: local };
    let Some(rule) = rule else { return Some(socket) };
    // Boxed: a connection's task is as large as its largest state, and it
    // spends its life idle, not reading this header.
    match Box::pin(accept(stream, peer, rule)).await {
        Ok(carried) => Some(carried.unwrap_or(socket)),
        Err(e) => {
            let reason = match e {
                Refused::Untrusted => 0,
                Refused::Missing => 1,
                Refused::Malformed(_) => 2,
                Refused::Timeout => 3,
                Refused::Closed(_) => 4,
            };
            stats.proxy_protocol_refused[reason].fetch_add(1, Relaxed);
            // A client that leaves first (a load balancer's TCP health check) is not news.
            if !matches!(e, Refused::Closed(_)) {
                eprintln!("fulcrum: listener {local}: refused a connection from {peer}: {e}");
            }
            None
        }
    }
}

/// How long to wait before looking again at a beginning too short to tell
/// (rare: a signature split across TCP segments).
const PEEK_AGAIN: Duration = Duration::from_millis(2);

/// The header at the start of `stream`, or `None` if it does not start with
/// one (nothing is consumed then). Only the header's bytes are consumed.
pub async fn read(stream: &mut TcpStream) -> Result<Option<Header>, Refused> {
    let mut first = [0u8; 16];
    loop {
        let n = stream.peek(&mut first).await.map_err(Refused::Closed)?;
        if n == 0 {
            return Err(Refused::Closed(std::io::ErrorKind::UnexpectedEof.into()));
        }
        match detect(&first[..n]) {
            Some(false) => return Ok(None),
            Some(true) => break,
            None => tokio::time::sleep(PEEK_AGAIN).await,
        }
    }
    let mut header = Vec::with_capacity(V1_MAX);
    loop {
        // Every byte read here belongs to the header: what v2's length
        // announces, or for v1 the bytes up to and including the LF.
        let want = match parse(&header)? {
            Some((parsed, _)) => return Ok(Some(parsed)),
            None => header_bytes_ahead(stream, &header).await?,
        };
        let at = header.len();
        header.resize(at + want, 0);
        stream.read_exact(&mut header[at..]).await.map_err(Refused::Closed)?;
    }
}

/// How many more bytes surely belong to the header whose first bytes are
/// `so_far` (at least one): the rest of v2's fixed part or of the length it
/// announces; for v1, what has arrived up to and including the LF.
async fn header_bytes_ahead(stream: &mut TcpStream, so_far: &[u8]) -> Result<usize, Refused> {
    let v2 = match so_far.first() {
        Some(&b) => b != b'P',
        None => {
            let mut first = [0u8; 1];
            stream.peek(&mut first).await.map_err(Refused::Closed)? == 1 && first[0] == b'\r'
        }
    };
    if v2 {
        let length = match so_far.get(14..16) {
            Some(l) => 16 + usize::from(u16::from_be_bytes([l[0], l[1]])),
            None => 16,
        };
        return Ok(length.saturating_sub(so_far.len()).max(1));
    }
    let mut peeked = [0u8; V1_MAX];
    let room = V1_MAX.saturating_sub(so_far.len()).max(1);
    let n = stream.peek(&mut peeked[..room]).await.map_err(Refused::Closed)?;
    let lf = peeked[..n].iter().position(|&b| b == b'\n');
    Ok(lf.map_or(n, |i| i + 1).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(s: &str, d: &str) -> Header {
        Header::Proxied(Addresses { source: s.parse().unwrap(), destination: d.parse().unwrap() })
    }

    #[test]
    fn v1_golden_lines_from_the_spec() {
        let line = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(parse(line), Ok(Some((addrs("192.168.0.1:56324", "192.168.0.11:443"), 47))));
        let line = b"PROXY TCP6 ffff:f...f:ffff ::1 1 2\r\n";
        assert_eq!(parse(line), Err(Malformed::V1));
        let line = b"PROXY TCP6 2001:db8::1 ::1 65535 0\r\n";
        assert_eq!(parse(line), Ok(Some((addrs("[2001:db8::1]:65535", "[::1]:0"), line.len()))));
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Ok(Some((Header::Local, 15))));
        assert_eq!(parse(b"PROXY UNKNOWN ffff::1 ::1 1 2\r\n"), Ok(Some((Header::Local, 31))));
    }

    #[test]
    fn v1_mistakes_are_refused() {
        for bad in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"[..],  // LF without CR
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",    // leading zero
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", // port out of range
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",         // family mismatch
            b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",    // two spaces
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",       // missing field
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",     // unknown family
        ] {
            assert_eq!(parse(bad), Err(Malformed::V1), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse(&[b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat()), Err(Malformed::V1TooLong));
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(Malformed::Signature));
        assert_eq!(parse(b"PROXZ"), Err(Malformed::Signature));
    }

    #[test]
    fn v2_golden_headers() {
        // The spec's example layout: PROXY, TCP over IPv4, 12 address bytes.
        let mut v4 = V2_SIGNATURE.to_vec();
        v4.extend_from_slice(&[0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x1f, 0x90, 0x01, 0xbb]);
        assert_eq!(parse(&v4), Ok(Some((addrs("10.0.0.1:8080", "10.0.0.2:443"), 28))));
        assert_eq!(
            encode(
                Version::V2,
                Some(Addresses {
                    source: "10.0.0.1:8080".parse().unwrap(),
                    destination: "10.0.0.2:443".parse().unwrap()
                })
            ),
            v4
        );
        // TLVs after the addresses (AWS's VPC endpoint id, type 0xEA) are skipped.
        let mut tlv = v4.clone();
        tlv[15] = 12 + 7;
        tlv.extend_from_slice(&[0xea, 0, 4, b'v', b'p', b'c', b'e', b'X']);
        assert_eq!(parse(&tlv), Ok(Some((addrs("10.0.0.1:8080", "10.0.0.2:443"), 35))));
        // LOCAL, and UNSPEC under PROXY: no client address.
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(parse(&local), Ok(Some((Header::Local, 16))));
        assert_eq!(encode(Version::V2, None), local);
        let mut unspec = V2_SIGNATURE.to_vec();
        unspec.extend_from_slice(&[0x21, 0x00, 0, 3, 1, 2, 3]);
        assert_eq!(parse(&unspec), Ok(Some((Header::Local, 19))));
    }

    #[test]
    fn v2_mistakes_truncation_and_size() {
        let mut v4 = V2_SIGNATURE.to_vec();
        v4.extend_from_slice(&[0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x1f, 0x90, 0x01, 0xbb]);
        for n in 0..v4.len() {
            assert_eq!(parse(&v4[..n]), Ok(None), "a prefix of {n} bytes");
        }
        let mut bad = v4.clone();
        bad[12] = 0x11; // version 1
        assert_eq!(parse(&bad), Err(Malformed::V2Command));
        bad[12] = 0x22; // command 2
        assert_eq!(parse(&bad), Err(Malformed::V2Command));
        let mut short = v4[..16].to_vec();
        short[15] = 4; // INET needs 12 bytes
        short.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(parse(&short), Err(Malformed::V2Addresses));
        let mut huge = v4[..16].to_vec();
        huge[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(parse(&huge), Err(Malformed::V2TooLong));
        let mut sig = v4.clone();
        sig[5] = b'X';
        assert_eq!(parse(&sig), Err(Malformed::Signature));
    }

    #[test]
    fn encoding_round_trips() {
        let pairs =
            [("192.0.2.1:1", "198.51.100.2:80"), ("[2001:db8::1]:5", "[2001:db8::2]:443"), ("192.0.2.1:9", "[::1]:80")];
        for (s, d) in pairs {
            let a = Addresses { source: s.parse().unwrap(), destination: d.parse().unwrap() };
            for v in [Version::V1, Version::V2] {
                let bytes = encode(v, Some(a));
                let (Header::Proxied(got), n) = parse(&bytes).unwrap().unwrap() else { panic!("{v:?} {s}") };
                assert_eq!(n, bytes.len());
                assert_eq!((to_v6(got.source.ip()), got.source.port()), (to_v6(a.source.ip()), a.source.port()));
                assert_eq!(
                    (to_v6(got.destination.ip()), got.destination.port()),
                    (to_v6(a.destination.ip()), a.destination.port())
                );
            }
        }
        assert_eq!(parse(&encode(Version::V1, None)), Ok(Some((Header::Local, 15))));
    }

    #[test]
    fn ranges() {
        let r: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(r.contains("10.255.0.1".parse().unwrap()));
        assert!(r.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!r.contains("11.0.0.1".parse().unwrap()));
        assert!(!r.contains("::1".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()) && !one.contains("127.0.0.2".parse().unwrap()));
        let all: Cidr = "::/0".parse().unwrap();
        assert!(all.contains("2001:db8::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "10.0.0/8", "example.com/8", "::/129", "1.2.3.4/-1"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    /// A connected pair on loopback: what `send` writes (in pieces, 5 ms
    /// apart) arrives on the returned server side.
    async fn pair(pieces: Vec<Vec<u8>>) -> (TcpStream, SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut client = TcpStream::connect(addr).await.unwrap();
            for p in pieces {
                tokio::io::AsyncWriteExt::write_all(&mut client, &p).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
        let (server, peer) = listener.accept().await.unwrap();
        (server, peer)
    }

    fn rule(trusted: &str, required: bool) -> ProxyProtocolListener {
        ProxyProtocolListener { trusted: vec![trusted.parse().unwrap()], required, timeout: Duration::from_secs(1) }
    }

    #[tokio::test]
    async fn a_header_in_pieces_is_read_and_nothing_after_it() {
        let v2 = encode(
            Version::V2,
            Some(Addresses { source: "192.0.2.9:4000".parse().unwrap(), destination: "192.0.2.1:80".parse().unwrap() }),
        );
        let v1 = b"PROXY TCP4 192.0.2.9 192.0.2.1 4000 80\r\n".to_vec();
        for header in [v1, v2] {
            let pieces = vec![header[..3].to_vec(), header[3..20].to_vec(), [&header[20..], b"GET /"].concat()];
            let (mut server, peer) = pair(pieces).await;
            let got = accept(&mut server, peer, &rule("127.0.0.0/8", true)).await.unwrap();
            assert_eq!(got.unwrap().source, "192.0.2.9:4000".parse().unwrap());
            let mut rest = [0u8; 5];
            server.read_exact(&mut rest).await.unwrap();
            assert_eq!(&rest, b"GET /");
        }
    }

    #[tokio::test]
    async fn the_listener_rule_refuses_what_it_should() {
        let header = b"PROXY TCP4 192.0.2.9 192.0.2.1 4000 80\r\nGET /".to_vec();
        // Untrusted and required: refused before reading.
        let (mut s, peer) = pair(vec![header.clone()]).await;
        assert!(matches!(accept(&mut s, peer, &rule("10.0.0.0/8", true)).await, Err(Refused::Untrusted)));
        // Untrusted, optional, with a header: refused; without: served as sent.
        let (mut s, peer) = pair(vec![header.clone()]).await;
        assert!(matches!(accept(&mut s, peer, &rule("10.0.0.0/8", false)).await, Err(Refused::Untrusted)));
        let (mut s, peer) = pair(vec![b"GET / HTTP/1.1\r\n".to_vec()]).await;
        assert!(matches!(accept(&mut s, peer, &rule("10.0.0.0/8", false)).await, Ok(None)));
        let mut first = [0u8; 3];
        s.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"GET");
        // Trusted, required, without a header; malformed; too slow.
        let (mut s, peer) = pair(vec![b"GET / HTTP/1.1\r\n".to_vec()]).await;
        assert!(matches!(accept(&mut s, peer, &rule("127.0.0.1", true)).await, Err(Refused::Missing)));
        let (mut s, peer) = pair(vec![b"PROXY TCP4 nonsense\r\n".to_vec()]).await;
        assert!(matches!(accept(&mut s, peer, &rule("127.0.0.1", true)).await, Err(Refused::Malformed(Malformed::V1))));
        let (mut s, peer) = pair(vec![b"PROXY TCP4 1.2.3.4".to_vec()]).await;
        let slow = ProxyProtocolListener { timeout: Duration::from_millis(50), ..rule("127.0.0.1", true) };
        assert!(matches!(accept(&mut s, peer, &slow).await, Err(Refused::Timeout)));
        // LOCAL from a trusted source: the socket's own address.
        let (mut s, peer) = pair(vec![encode(Version::V2, None)]).await;
        assert!(matches!(accept(&mut s, peer, &rule("127.0.0.1", true)).await, Ok(None)));
    }
}
