//! Connection tracking by state: what the data plane's conntrack entries
//! say, how long each may stay idle, and the sweep that deletes the ones
//! that have expired.
//!
//! Every entry records its flow's state and the time of its last packet
//! (`CLOCK_MONOTONIC_COARSE`, the clock of the program's
//! `bpf_ktime_get_coarse_ns()`). The state comes from the TCP flags seen
//! ([`State`]); an entry has expired once it has been idle for longer than
//! its state's timeout ([`Timeouts`], defaults as IPVS's). The program treats
//! a packet whose forward entry has expired as a new flow (it takes the
//! table's backend, which is the same backend unless the table changed). A
//! FIN or RST in either direction of a NAT flow puts both its entries in
//! [`State::Closing`].
//!
//! The conntrack map is an LRU hash: when it is full, the kernel evicts the
//! least recently used entry, which may be a live flow that was quiet for a
//! while rather than one that closed a moment ago, and there is no way to
//! make it choose. So expired entries are deleted from userspace
//! ([`sweep`], run by `fulcrum lb conntrack --gc`): the room they free is
//! what new flows take, and a live entry is evicted only when the live
//! flows alone fill the table. A NAT flow's two entries go together, once
//! both have expired (a reply direction may be quiet while the forward
//! direction is busy, and its entry must stay); a forward entry whose
//! backend has left counts as expired.
//!
//! IPv4 flows are in the `conntrack` map, IPv6 flows in `conntrack6`; the
//! two differ only in their layouts ([`FlowKind`]), so the same [`Entry`],
//! [`sweep`] and [`Counts`] serve both.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use crate::maps::{addr_of, be_addr, be_port, Addr6, CtConfig, FlowEntry, FlowEntry6, FlowKey, FlowKey6, FLOW_REPLY};
use crate::spec::Protocol;

/// A conntrack entry's state (the program's `CT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Only SYNs so far (a client's SYN, a server's SYN-ACK): half-open.
    Syn,
    /// A TCP packet without SYN was seen.
    Established,
    /// A FIN or RST was seen, in either direction.
    Closing,
    /// UDP.
    Udp,
}

impl State {
    /// Every state, in the program's order.
    pub const ALL: [State; 4] = [State::Syn, State::Established, State::Closing, State::Udp];

    /// The state the program wrote (its two low bits).
    pub fn from_code(code: u8) -> State {
        State::ALL[usize::from(code & 3)]
    }

    /// The program's number for it.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Its name in `fulcrum lb conntrack`.
    pub fn name(self) -> &'static str {
        match self {
            State::Syn => "syn",
            State::Established => "established",
            State::Closing => "closing",
            State::Udp => "udp",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Result<State, String> {
        State::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| format!("unknown conntrack state {s:?} (syn, established, closing or udp)"))
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How long an entry in each state may stay idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts([Duration; 4]);

impl Default for Timeouts {
    /// IPVS's: SYN_RECV 60 s, ESTABLISHED 15 min, CLOSE 10 s, UDP 5 min.
    fn default() -> Self {
        Timeouts([60, 900, 10, 300].map(Duration::from_secs))
    }
}

impl Timeouts {
    /// The timeout of `state`.
    pub fn get(&self, state: State) -> Duration {
        self.0[usize::from(state.code())]
    }

    /// Set the timeout of `state`; it must be above zero.
    pub fn set(&mut self, state: State, timeout: Duration) -> Result<(), String> {
        if timeout.is_zero() {
            return Err(format!("the {state} timeout must be above zero"));
        }
        if timeout.as_nanos() > u128::from(u64::MAX) {
            return Err(format!("the {state} timeout is too long"));
        }
        self.0[usize::from(state.code())] = timeout;
        Ok(())
    }

    /// As the program reads them.
    pub fn to_config(&self) -> CtConfig {
        CtConfig { timeout_ns: self.0.map(|d| d.as_nanos() as u64) }
    }

    /// From the program's map.
    pub fn from_config(c: &CtConfig) -> Timeouts {
        Timeouts(c.timeout_ns.map(Duration::from_nanos))
    }
}

/// Which direction of a flow an entry serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to VIP: names the backend.
    Forward,
    /// Backend to client, of a NAT flow: names the VIP to put back.
    Reply,
}

impl Direction {
    /// Its name in `fulcrum lb conntrack`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Reply => "reply",
        }
    }
}

/// The layout of one conntrack map's keys: [`FlowKey`] for IPv4, [`FlowKey6`]
/// for IPv6.
pub trait FlowKind: aya::Pod + Eq + Hash + Ord + fmt::Debug {
    /// The map's value.
    type Value: aya::Pod + Eq + fmt::Debug;
    /// Source, destination (as in the packets) and protocol number.
    fn ends(&self) -> (SocketAddr, SocketAddr, u8);
    /// The key of the flow from `src` to `dst`; `None` when an address is
    /// not of this family.
    fn of(src: SocketAddr, dst: SocketAddr, proto: u8) -> Option<Self>;
    /// The value's backend slot (or [`FLOW_REPLY`]), generation, state code
    /// and time of the last packet.
    fn value(v: &Self::Value) -> (u32, u32, u8, u64);
    /// A reply entry's VIP and port, put back as source.
    fn restored(v: &Self::Value) -> SocketAddr;
}

impl FlowKind for FlowKey {
    type Value = FlowEntry;

    fn ends(&self) -> (SocketAddr, SocketAddr, u8) {
        let sock = |a, p| SocketAddr::V4(SocketAddrV4::new(addr_of(a), u16::from_be(p)));
        (sock(self.saddr, self.sport), sock(self.daddr, self.dport), self.proto)
    }

    fn of(src: SocketAddr, dst: SocketAddr, proto: u8) -> Option<Self> {
        let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else { return None };
        Some(FlowKey {
            saddr: be_addr(*s.ip()),
            daddr: be_addr(*d.ip()),
            sport: be_port(s.port()),
            dport: be_port(d.port()),
            proto,
            pad: [0; 3],
        })
    }

    fn value(v: &FlowEntry) -> (u32, u32, u8, u64) {
        (v.backend, v.gen, v.state, v.seen)
    }

    fn restored(v: &FlowEntry) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(addr_of(v.vip), u16::from_be(v.port)))
    }
}

impl FlowKind for FlowKey6 {
    type Value = FlowEntry6;

    fn ends(&self) -> (SocketAddr, SocketAddr, u8) {
        let sock = |a: Addr6, p| SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(a.0), u16::from_be(p), 0, 0));
        (sock(self.saddr, self.sport), sock(self.daddr, self.dport), self.proto)
    }

    fn of(src: SocketAddr, dst: SocketAddr, proto: u8) -> Option<Self> {
        let (SocketAddr::V6(s), SocketAddr::V6(d)) = (src, dst) else { return None };
        Some(FlowKey6 {
            saddr: Addr6(s.ip().octets()),
            daddr: Addr6(d.ip().octets()),
            sport: be_port(s.port()),
            dport: be_port(d.port()),
            proto,
            pad: [0; 3],
        })
    }

    fn value(v: &FlowEntry6) -> (u32, u32, u8, u64) {
        (v.backend, v.gen, v.state, v.seen)
    }

    fn restored(v: &FlowEntry6) -> SocketAddr {
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(v.vip.0), u16::from_be(v.port), 0, 0))
    }
}

/// A backend slot in service, as conntrack entries name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The backend's address and port.
    pub addr: SocketAddr,
    /// The slot's generation.
    pub gen: u32,
}

/// One conntrack entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<K: FlowKind = FlowKey> {
    /// The map key.
    pub key: K,
    /// The map value.
    pub value: K::Value,
    /// Forward or reply.
    pub direction: Direction,
    /// TCP or UDP (`None` for a protocol the program never writes).
    pub proto: Option<Protocol>,
    /// The IP protocol number.
    pub proto_number: u8,
    /// Source address and port, as in the packets.
    pub src: SocketAddr,
    /// Destination address and port, as in the packets.
    pub dst: SocketAddr,
    /// Forward: the backend the flow goes to, `None` when the backend has
    /// left (its slot was freed). Reply: the VIP and port put back as source.
    pub via: Option<SocketAddr>,
    /// The state.
    pub state: State,
    /// Time since the entry's last packet.
    pub idle: Duration,
    /// Idle for longer than its state's timeout.
    pub expired: bool,
}

impl<K: FlowKind> Entry<K> {
    /// Decode an entry at `now_ns` (`CLOCK_MONOTONIC_COARSE`), given the
    /// backend slots in service (`None` for a free slot), by slot.
    pub fn decode(key: K, value: K::Value, slots: &[Option<Slot>], now_ns: u64, t: &Timeouts) -> Entry<K> {
        let (backend, gen, code, seen) = K::value(&value);
        let (direction, via) = if backend == FLOW_REPLY {
            (Direction::Reply, Some(K::restored(&value)))
        } else {
            let b = slots.get(backend as usize).copied().flatten().filter(|b| b.gen == gen);
            (Direction::Forward, b.map(|b| b.addr))
        };
        let state = State::from_code(code);
        let idle = Duration::from_nanos(now_ns.saturating_sub(seen));
        let (src, dst, proto) = key.ends();
        Entry {
            key,
            value,
            direction,
            proto: Protocol::from_number(proto),
            proto_number: proto,
            src,
            dst,
            via,
            state,
            idle,
            expired: idle > t.get(state),
        }
    }

    /// Of no more use on its own: expired, or a forward entry whose backend
    /// has left.
    pub fn dead(&self) -> bool {
        self.expired || (self.direction == Direction::Forward && self.via.is_none())
    }

    /// The key of the other direction's entry of a NAT flow, when this
    /// entry can name it: a reply entry always, a forward entry while its
    /// backend is there (only NAT flows have that entry).
    fn partner(&self) -> Option<K> {
        match (self.direction, self.via) {
            (Direction::Reply, Some(vip)) => K::of(self.dst, vip, self.proto_number),
            (Direction::Forward, Some(backend)) => K::of(backend, self.src, self.proto_number),
            (_, None) => None,
        }
    }
}

/// The entries to delete: each dead entry whose flow's other entry (a NAT
/// flow's other direction) is dead too or missing. A live entry protects
/// its partner; a dead one cannot, so a dead entry goes unless a live one
/// names it.
pub fn sweep<K: FlowKind>(entries: &[Entry<K>]) -> Vec<&Entry<K>> {
    if !entries.iter().any(Entry::dead) {
        return Vec::new();
    }
    let protected: HashSet<K> = entries.iter().filter(|e| !e.dead()).filter_map(Entry::partner).collect();
    entries.iter().filter(|e| e.dead() && !protected.contains(&e.key)).collect()
}

/// What the table holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries.
    pub total: usize,
    /// Forward entries (one per flow).
    pub forward: usize,
    /// Reply entries (one per NAT flow).
    pub reply: usize,
    /// Entries by [`State`], in [`State::ALL`] order.
    pub by_state: [usize; 4],
    /// Entries idle for longer than their state's timeout.
    pub expired: usize,
}

impl Counts {
    /// Count `entries`.
    pub fn of<K: FlowKind>(entries: &[Entry<K>]) -> Counts {
        let mut c = Counts { total: entries.len(), ..Counts::default() };
        for e in entries {
            match e.direction {
                Direction::Forward => c.forward += 1,
                Direction::Reply => c.reply += 1,
            }
            c.by_state[usize::from(e.state.code())] += 1;
            c.expired += usize::from(e.expired);
        }
        c
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the clock of the entries' times.
pub fn now_ns() -> u64 {
    // SAFETY: `ts` is plain data the call fills in.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and out pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_MONOTONIC_COARSE is always there on Linux");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const S: u64 = 1_000_000_000;
    const NOW: u64 = 10_000;

    fn key(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> FlowKey {
        FlowKey {
            saddr: be_addr(Ipv4Addr::from(src)),
            daddr: be_addr(Ipv4Addr::from(dst)),
            sport: be_port(sport),
            dport: be_port(dport),
            proto: 6,
            pad: [0; 3],
        }
    }

    /// Slot 0 in service, slot 1 freed.
    fn backends() -> Vec<Option<Slot>> {
        vec![Some(Slot { addr: "10.0.0.11:8080".parse().unwrap(), gen: 1 }), None]
    }

    /// A NAT flow client:4000 → VIP:80 on backend slot `slot`, each
    /// direction seen `ago` seconds before now in `state`.
    fn nat_flow(sport: u16, slot: u32, fwd: (State, u64), rep: (State, u64)) -> [Entry; 2] {
        let t = Timeouts::default();
        let (client, vip, backend) = ([10, 9, 0, 1], [10, 1, 1, 1], [10, 0, 0, 11 + slot as u8]);
        let fwd_v =
            FlowEntry { backend: slot, gen: 1, state: fwd.0.code(), seen: (NOW - fwd.1) * S, ..Default::default() };
        let rep_v = FlowEntry {
            backend: FLOW_REPLY,
            vip: be_addr(Ipv4Addr::from(vip)),
            port: be_port(80),
            state: rep.0.code(),
            seen: (NOW - rep.1) * S,
            ..Default::default()
        };
        [
            Entry::decode(key(client, sport, vip, 80), fwd_v, &backends(), NOW * S, &t),
            Entry::decode(key(backend, 8080, client, sport), rep_v, &backends(), NOW * S, &t),
        ]
    }

    #[test]
    fn entries_decode_with_their_backend_and_expiry() {
        let stale = Entry::decode(
            key([10, 9, 0, 1], 1, [10, 1, 1, 1], 80),
            FlowEntry { backend: 0, gen: 2, ..Default::default() },
            &backends(),
            NOW * S,
            &Timeouts::default(),
        );
        assert_eq!(stale.via, None, "a slot's later occupant is not the flow's backend");
        let [f, r] = nat_flow(4000, 0, (State::Closing, 11), (State::Established, 5));
        assert_eq!(f.direction, Direction::Forward);
        assert_eq!(f.via, Some("10.0.0.11:8080".parse().unwrap()));
        assert_eq!((f.state, f.idle, f.expired), (State::Closing, Duration::from_secs(11), true));
        assert_eq!(r.direction, Direction::Reply);
        assert_eq!(r.src, "10.0.0.11:8080".parse().unwrap());
        assert_eq!(r.via, Some("10.1.1.1:80".parse().unwrap()));
        assert!(!r.expired);
        // Slot 1 was freed: its flows have no backend.
        let [gone, _] = nat_flow(4001, 1, (State::Established, 0), (State::Established, 0));
        assert_eq!(gone.via, None);
        assert!(gone.dead() && !gone.expired);
    }

    #[test]
    fn the_sweep_deletes_a_nat_flow_when_both_directions_are_dead() {
        let both = nat_flow(4000, 0, (State::Closing, 11), (State::Closing, 11));
        let quiet_reply = nat_flow(4001, 0, (State::Udp, 1), (State::Udp, 400));
        let quiet_forward = nat_flow(4002, 0, (State::Established, 1000), (State::Established, 3));
        let live = nat_flow(4003, 0, (State::Established, 899), (State::Syn, 59));
        let gone = nat_flow(4004, 1, (State::Established, 0), (State::Established, 1000));
        let all: Vec<Entry> = [both, quiet_reply, quiet_forward, live, gone].concat();
        let mut deleted: Vec<FlowKey> = sweep(&all).into_iter().map(|e| e.key).collect();
        deleted.sort_by_key(|k| (u16::from_be(k.sport), u16::from_be(k.dport)));
        let mut want = vec![both[0].key, both[1].key, gone[0].key, gone[1].key];
        want.sort_by_key(|k| (u16::from_be(k.sport), u16::from_be(k.dport)));
        assert_eq!(deleted, want);
    }

    #[test]
    fn lone_entries_go_when_dead() {
        let [f, r] = nat_flow(4000, 0, (State::Syn, 61), (State::Closing, 11));
        assert_eq!(sweep(&[f]), [&f], "a DSR flow (no reply entry)");
        assert_eq!(sweep(&[r]), [&r], "a reply whose forward entry went");
        let [f, _] = nat_flow(4000, 0, (State::Syn, 59), (State::Closing, 11));
        assert!(sweep(&[f]).is_empty());
    }

    /// As [`nat_flow`], over IPv6: client [fd00::100]:sport → [fd00:1::1]:80
    /// on backend [fd00::11]:8080 (slot 0 of `slots`).
    fn nat_flow6(sport: u16, slots: &[Option<Slot>], fwd: (State, u64), rep: (State, u64)) -> [Entry<FlowKey6>; 2] {
        let t = Timeouts::default();
        let (client, vip, backend): (SocketAddr, SocketAddr, SocketAddr) = (
            format!("[fd00::100]:{sport}").parse().unwrap(),
            "[fd00:1::1]:80".parse().unwrap(),
            "[fd00::11]:8080".parse().unwrap(),
        );
        let fwd_v =
            FlowEntry6 { backend: 0, gen: 1, state: fwd.0.code(), seen: (NOW - fwd.1) * S, ..Default::default() };
        let rep_v = FlowEntry6 {
            backend: FLOW_REPLY,
            vip: Addr6("fd00:1::1".parse::<Ipv6Addr>().unwrap().octets()),
            port: be_port(80),
            state: rep.0.code(),
            seen: (NOW - rep.1) * S,
            ..Default::default()
        };
        [
            Entry::decode(FlowKey6::of(client, vip, 6).unwrap(), fwd_v, slots, NOW * S, &t),
            Entry::decode(FlowKey6::of(backend, client, 6).unwrap(), rep_v, slots, NOW * S, &t),
        ]
    }

    #[test]
    fn ipv6_entries_decode_and_sweep_as_ipv4_ones() {
        let slots = vec![Some(Slot { addr: "[fd00::11]:8080".parse().unwrap(), gen: 1 })];
        let [f, r] = nat_flow6(4000, &slots, (State::Established, 1), (State::Closing, 11));
        assert_eq!((f.src.to_string(), f.dst.to_string()), ("[fd00::100]:4000".into(), "[fd00:1::1]:80".into()));
        assert_eq!(f.via, Some("[fd00::11]:8080".parse().unwrap()));
        assert_eq!((r.direction, r.via), (Direction::Reply, Some("[fd00:1::1]:80".parse().unwrap())));
        assert_eq!((f.proto, f.proto_number), (Some(Protocol::Tcp), 6));
        assert!(r.expired && !f.expired);
        assert_eq!(f.partner(), Some(r.key));
        assert_eq!(r.partner(), Some(f.key));
        assert!(sweep(&[f, r]).is_empty(), "the live forward entry keeps its reply");
        let dead = nat_flow6(4001, &slots, (State::Closing, 11), (State::Closing, 11));
        let mut deleted: Vec<FlowKey6> = sweep(&[f, r, dead[0], dead[1]]).into_iter().map(|e| e.key).collect();
        deleted.sort();
        let mut want = vec![dead[0].key, dead[1].key];
        want.sort();
        assert_eq!(deleted, want);
        let gone = nat_flow6(4002, &[None], (State::Established, 0), (State::Established, 1000));
        assert_eq!(gone[0].via, None);
        assert_eq!(sweep(&gone).len(), 2, "a flow whose backend left goes once its reply is idle too");
        let c = Counts::of(&[f, r, dead[0], dead[1]]);
        assert_eq!((c.total, c.forward, c.reply, c.expired), (4, 2, 2, 3));
        assert_eq!(FlowKey6::of("10.0.0.1:1".parse().unwrap(), "[fd00::1]:2".parse().unwrap(), 6), None);
    }

    #[test]
    fn counts_add_up() {
        let all: Vec<Entry> = [
            nat_flow(1, 0, (State::Closing, 11), (State::Closing, 1)),
            nat_flow(2, 0, (State::Syn, 1), (State::Syn, 1)),
            nat_flow(3, 0, (State::Established, 1), (State::Closing, 1)),
        ]
        .concat();
        let c = Counts::of(&all);
        assert_eq!((c.total, c.forward, c.reply, c.expired), (6, 3, 3, 1));
        assert_eq!(c.by_state, [2, 1, 3, 0]);
    }

    #[test]
    fn timeouts_round_trip_and_refuse_zero() {
        let mut t = Timeouts::default();
        assert_eq!(t.get(State::Closing), Duration::from_secs(10));
        t.set(State::Udp, Duration::from_millis(1500)).unwrap();
        assert_eq!(Timeouts::from_config(&t.to_config()), t);
        assert_eq!(t.to_config().timeout_ns[3], 1_500_000_000);
        assert!(t.set(State::Syn, Duration::ZERO).unwrap_err().contains("above zero"));
        assert_eq!(State::parse("established"), Ok(State::Established));
        assert!(State::parse("fin").unwrap_err().contains("closing"));
        for s in State::ALL {
            assert_eq!(State::from_code(s.code()), s);
        }
    }

    #[test]
    fn the_clock_moves() {
        let a = now_ns();
        std::thread::sleep(Duration::from_millis(30));
        assert!(now_ns() > a);
    }
}
