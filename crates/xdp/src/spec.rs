//! What a service is: VIP, port and protocol, backends with weights, and how
//! it forwards, selects and hashes; parsed from loxicmd-style arguments
//! (`--tcp=2020:5001 --endpoints=31.31.31.1:1,32.32.32.1:2`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use fulcrum_balance::HashFunction;

/// A service's transport protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
}

impl Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }

    /// The protocol with IP protocol number `n`.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// How packets reach a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Destination rewritten to the backend; replies come back through the
    /// LB, which restores the VIP as their source.
    #[default]
    Nat,
    /// Only the MAC addresses change; the backend has the VIP on its
    /// loopback and answers the client directly.
    Dsr,
}

/// Which fulcrum-balance algorithm builds the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Select {
    /// Maglev (table size [`crate::maps::RING_SIZE`]).
    #[default]
    Maglev,
    /// Rendezvous hashing, evaluated for every table entry.
    Rendezvous,
}

/// A service's identity: what clients address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// The virtual IP (IPv4 or IPv6; its backends are of the same family).
    pub vip: IpAddr,
    /// The service port.
    pub port: u16,
    /// TCP or UDP.
    pub proto: Protocol,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", std::net::SocketAddr::new(self.vip, self.port), self.proto)
    }
}

/// One backend of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Its address.
    pub ip: IpAddr,
    /// Its relative weight; 0 drains it (no new flows, established ones stay).
    pub weight: u32,
}

/// A whole service, as `fulcrum lb create` sets it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSpec {
    /// VIP, port and protocol.
    pub key: ServiceKey,
    /// The port backends listen on.
    pub backend_port: u16,
    /// The backends.
    pub backends: Vec<Backend>,
    /// NAT or DSR.
    pub mode: Mode,
    /// Maglev or rendezvous.
    pub select: Select,
    /// The flow hash (xxHash64 or MurmurHash3).
    pub hash: HashFunction,
}

/// A service description that cannot be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// Parse `PORT[:BACKEND_PORT]` (`2020:5001`); one port means the same on both sides.
pub fn parse_ports(s: &str) -> Result<(u16, u16), SpecError> {
    let port = |p: &str| {
        p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| SpecError(format!("bad port {p:?} in {s:?}")))
    };
    match s.split_once(':') {
        Some((front, back)) => Ok((port(front)?, port(back)?)),
        None => port(s).map(|p| (p, p)),
    }
}

/// Parse `IP[:WEIGHT],…` (`31.31.31.1:1,32.32.32.1:2`); the weight defaults
/// to 1, and 0 drains the endpoint. An IPv6 address with a weight is in
/// brackets (`[2001:db8::11]:2`); without one, brackets are optional.
pub fn parse_endpoints(s: &str) -> Result<Vec<Backend>, SpecError> {
    s.split(',')
        .map(|item| {
            let item = item.trim();
            let (ip, weight) = if let Some(rest) = item.strip_prefix('[') {
                let (ip, after) = rest.split_once(']').unwrap_or((rest, ""));
                (ip, after.strip_prefix(':').unwrap_or(if after.is_empty() { "1" } else { after }))
            } else if item.matches(':').count() > 1 {
                ambiguous_weight(item)?;
                (item, "1")
            } else {
                item.split_once(':').unwrap_or((item, "1"))
            };
            let ip = parse_ip(ip).map_err(|_| SpecError(format!("bad endpoint address {ip:?}")))?;
            let weight = weight
                .parse::<u32>()
                .ok()
                .ok_or_else(|| SpecError(format!("bad weight {weight:?} for {ip} (a whole number; 0 drains)")))?;
            Ok(Backend { ip, weight })
        })
        .collect()
}

/// Refuse an unbracketed IPv6 endpoint whose last group could be a weight
/// (`fd00::11:1`: the address `fd00::11:1`, or `fd00::11` with weight 1?).
fn ambiguous_weight(item: &str) -> Result<(), SpecError> {
    let Some((ip, last)) = item.rsplit_once(':') else { return Ok(()) };
    if last.is_empty() || !last.bytes().all(|b| b.is_ascii_digit()) || ip.parse::<std::net::Ipv6Addr>().is_err() {
        return Ok(());
    }
    Err(SpecError(format!(
        "ambiguous endpoint {item:?}: the address {item} (weight 1), or {ip} with weight {last}? \
         Write [{item}] or [{ip}]:{last}"
    )))
}

/// Parse an IPv4 or IPv6 address, the latter with or without brackets.
pub fn parse_ip(s: &str) -> Result<IpAddr, SpecError> {
    let t = s.trim();
    let t = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(t);
    IpAddr::from_str(t).map_err(|_| SpecError(format!("bad address {s:?}")))
}

/// Parse `nat` or `dsr`.
pub fn parse_mode(s: &str) -> Result<Mode, SpecError> {
    match s {
        "nat" => Ok(Mode::Nat),
        "dsr" => Ok(Mode::Dsr),
        _ => Err(SpecError(format!("unknown mode {s:?} (nat or dsr)"))),
    }
}

/// Parse `maglev` or `rendezvous`.
pub fn parse_select(s: &str) -> Result<Select, SpecError> {
    match s {
        "maglev" => Ok(Select::Maglev),
        "rendezvous" | "hrw" => Ok(Select::Rendezvous),
        _ => Err(SpecError(format!("unknown selection {s:?} (maglev or rendezvous)"))),
    }
}

/// Parse `xxhash` or `murmur3`.
pub fn parse_hash(s: &str) -> Result<HashFunction, SpecError> {
    match s {
        "xxhash" | "xxhash64" => Ok(HashFunction::Xxhash),
        "murmur3" | "murmur" => Ok(HashFunction::Murmur3),
        _ => Err(SpecError(format!("unknown flow hash {s:?} (xxhash or murmur3)"))),
    }
}

impl ServiceSpec {
    /// Check what the data plane cannot express.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.backends.is_empty() {
            return Err(SpecError(format!("{}: no endpoints", self.key)));
        }
        if self.backends.iter().all(|b| b.weight == 0) {
            return Err(SpecError(format!("{}: every endpoint has weight 0: none could take a new flow", self.key)));
        }
        if let Some(b) = self.backends.iter().find(|b| b.ip.is_ipv4() != self.key.vip.is_ipv4()) {
            return Err(SpecError(format!(
                "{}: endpoint {} is not of the VIP's address family (IPv4 and IPv6 backends need a service each: \
                 one with an IPv4 VIP, one with an IPv6 VIP)",
                self.key, b.ip
            )));
        }
        let mut ips: Vec<IpAddr> = self.backends.iter().map(|b| b.ip).collect();
        ips.sort();
        if let Some(w) = ips.windows(2).find(|w| w[0] == w[1]) {
            return Err(SpecError(format!("{}: endpoint {} given twice", self.key, w[0])));
        }
        if self.backends.len() > crate::maps::MAX_BACKENDS as usize {
            return Err(SpecError(format!("{}: more than {} endpoints", self.key, crate::maps::MAX_BACKENDS)));
        }
        if self.mode == Mode::Dsr && self.backend_port != self.key.port {
            return Err(SpecError(format!(
                "{}: DSR cannot translate ports (backends answer from the VIP's port): use --{}={}",
                self.key, self.key.proto, self.key.port
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn loxicmd_arguments_parse() {
        assert_eq!(parse_ports("2020:5001"), Ok((2020, 5001)));
        assert_eq!(parse_ports("80"), Ok((80, 80)));
        let eps = parse_endpoints("31.31.31.1:1,32.32.32.1:2,17.17.17.1").unwrap();
        assert_eq!(eps.iter().map(|b| b.weight).collect::<Vec<_>>(), [1, 2, 1]);
        assert_eq!(eps[1].ip, Ipv4Addr::new(32, 32, 32, 1));
        let v6 = parse_endpoints("[2001:db8::11]:2,2001:db8::12,[2001:db8::13]").unwrap();
        assert_eq!(v6.iter().map(|b| b.weight).collect::<Vec<_>>(), [2, 1, 1]);
        assert_eq!(v6[1].ip, "2001:db8::12".parse::<IpAddr>().unwrap());
        assert!(parse_endpoints("[2001:db8::11]:x").unwrap_err().0.contains("weight"));
    }

    #[test]
    fn an_ipv6_endpoint_whose_last_group_could_be_a_weight_needs_brackets() {
        let e = parse_endpoints("fd00:202::11:1").unwrap_err().0;
        assert!(e.contains("[fd00:202::11:1]") && e.contains("[fd00:202::11]:1"), "{e}");
        assert!(parse_endpoints("10.0.0.1,fe80::2:30").unwrap_err().0.contains("[fe80::2]:30"));
        let one = |s: &str| parse_endpoints(s).unwrap()[0];
        assert_eq!(one("[fd00:202::11:1]").ip, "fd00:202::11:1".parse::<IpAddr>().unwrap());
        assert_eq!(one("[fd00:202::11]:1").ip, "fd00:202::11".parse::<IpAddr>().unwrap());
        // Not ambiguous: the part before the last colon is no address, or
        // the last group is not a number.
        assert_eq!(one("2001:db8::12").weight, 1);
        assert_eq!(one("2001:db8:0:0:0:0:0:1").ip, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(one("fd00::11:ab").ip, "fd00::11:ab".parse::<IpAddr>().unwrap());
        assert_eq!(one("::1").ip, "::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        assert!(parse_ports("0:80").unwrap_err().0.contains("bad port"));
        assert!(parse_ports("80:x").unwrap_err().0.contains("\"x\""));
        assert!(parse_endpoints("1.2.3:1").unwrap_err().0.contains("1.2.3"));
        assert!(parse_endpoints("1.2.3.4:-1").unwrap_err().0.contains("weight"));
        assert_eq!(parse_endpoints("1.2.3.4:0").unwrap()[0].weight, 0);
        assert!(parse_mode("tunnel").unwrap_err().0.contains("nat or dsr"));
    }

    fn spec(mode: Mode, backend_port: u16, backends: &str) -> ServiceSpec {
        ServiceSpec {
            key: ServiceKey { vip: Ipv4Addr::new(20, 20, 20, 1).into(), port: 2020, proto: Protocol::Tcp },
            backend_port,
            backends: parse_endpoints(backends).unwrap(),
            mode,
            select: Select::Maglev,
            hash: HashFunction::Xxhash,
        }
    }

    #[test]
    fn dsr_refuses_port_translation() {
        assert!(spec(Mode::Dsr, 2020, "1.1.1.1").validate().is_ok());
        assert!(spec(Mode::Dsr, 5001, "1.1.1.1").validate().unwrap_err().0.contains("--tcp=2020"));
        assert!(spec(Mode::Nat, 5001, "1.1.1.1").validate().is_ok());
    }

    #[test]
    fn all_draining_is_refused() {
        assert!(spec(Mode::Nat, 1, "1.1.1.1:0,1.1.1.2:0").validate().unwrap_err().0.contains("weight 0"));
        assert!(spec(Mode::Nat, 1, "1.1.1.1:0,1.1.1.2:1").validate().is_ok());
    }

    #[test]
    fn an_ipv4_vip_with_ipv6_endpoints_is_refused() {
        let err = spec(Mode::Nat, 1, "1.1.1.1,2001:db8::1").validate().unwrap_err().0;
        assert!(err.contains("2001:db8::1") && err.contains("family"), "{err}");
        let mut v6 = spec(Mode::Nat, 1, "[2001:db8::1]:1,2001:db8::2");
        v6.key.vip = parse_ip("[2001:db8::100]").unwrap();
        assert!(v6.validate().is_ok());
        assert_eq!(v6.key.to_string(), "[2001:db8::100]:2020/tcp");
    }

    #[test]
    fn duplicate_endpoints_are_refused() {
        assert!(spec(Mode::Nat, 1, "1.1.1.1,1.1.1.1:2").validate().unwrap_err().0.contains("twice"));
    }
}
