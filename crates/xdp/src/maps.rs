//! The BPF maps' key and value layouts, mirrored from `bpf/lb.bpf.c`.
//!
//! Addresses and ports are kept in network byte order, as the program reads
//! them from packets; [`be_addr`] and [`be_port`] convert.

use std::net::Ipv4Addr;

/// Services the data plane can hold (`services` map, one ring each).
pub const MAX_SERVICES: u32 = 64;
/// Entries per service in the consistent-hash table (prime; Maglev's default).
pub const RING_SIZE: u64 = 65_537;
/// Backend slots shared by all services.
pub const MAX_BACKENDS: u32 = 1024;
/// A ring entry that points at no backend.
pub const NO_BACKEND: u32 = u32::MAX;
/// Flows the data plane tracks unless told otherwise; the conntrack map holds
/// twice as many entries (a NAT flow takes one per direction).
pub const MAX_FLOWS: u32 = 262_144;
/// The `backend` of a conntrack entry for the reply direction of a NAT flow.
pub const FLOW_REPLY: u32 = 0xffff_fffe;

/// Service flag: direct server return (L2 rewrite) instead of NAT.
pub const SVC_DSR: u32 = 1;
/// Service flag: MurmurHash3 flow hash instead of xxHash64.
pub const SVC_MURMUR3: u32 = 2;
/// Service flag, control plane only: the ring was built by rendezvous hashing.
pub const SVC_RENDEZVOUS: u32 = 4;
/// Backend flag: the slot is in service.
pub const BACKEND_ACTIVE: u32 = 1;
/// Backend flag: its service is in DSR mode (a copy of [`SVC_DSR`], so that
/// a packet of a known flow needs no service lookup).
pub const BACKEND_DSR: u32 = 2;
/// Backend flag, control plane only: health checks found it down, so it
/// owns no table entry (new flows avoid it; its established flows stay).
pub const BACKEND_DOWN: u32 = 4;
/// Backend flag: an IPv6 backend, whose address is in the `backends6` map.
pub const BACKEND_V6: u32 = 8;
/// IPv6 flows the data plane tracks (compiled in); `conntrack6` holds twice as many entries.
pub const MAX_FLOWS6: u32 = 65_536;

/// The `totals` counters, in map order, with the names `lb stats` prints.
pub const TOTALS: [&str; 6] = ["passed", "malformed", "no_backend", "nat_replies", "kernel_forwarded", "unsupported"];

/// Key of the `services` map: `struct svc_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SvcKey {
    /// VIP, network order.
    pub vip: u32,
    /// Port, network order.
    pub port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Zero.
    pub pad: u8,
}

/// An IPv6 address as the program keeps it (`struct in6`): the octets in
/// network order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Addr6(pub [u8; 16]);

/// Key of the `services6` map: `struct svc_key6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SvcKey6 {
    /// VIP.
    pub vip: Addr6,
    /// Port, network order.
    pub port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Zero.
    pub pad: u8,
}

/// Key of the `conntrack6` map: `struct flow_key6`, also the v6 flow hash's input.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowKey6 {
    /// Source address.
    pub saddr: Addr6,
    /// Destination address.
    pub daddr: Addr6,
    /// Source port, network order.
    pub sport: u16,
    /// Destination port, network order.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Zero.
    pub pad: [u8; 3],
}

/// Value of the `conntrack6` map: `struct flow6` (as [`FlowEntry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FlowEntry6 {
    /// The backend slot, or [`FLOW_REPLY`].
    pub backend: u32,
    /// The slot's generation when the flow was assigned.
    pub gen: u32,
    /// Reply direction: the VIP to put back as source.
    pub vip: Addr6,
    /// Reply direction: the service port (network order).
    pub port: u16,
    /// `CT_*` state.
    pub state: u8,
    /// Zero.
    pub pad: u8,
    /// `CLOCK_MONOTONIC_COARSE` nanoseconds of the last packet.
    pub seen: u64,
}

/// Value of the `services` map: `struct svc_value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SvcValue {
    /// Index of the service's ring segment and counters.
    pub id: u32,
    /// `SVC_*` flags.
    pub flags: u32,
}

/// Value of the `backends` map: `struct backend`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BackendEntry {
    /// Address, network order.
    pub ip: u32,
    /// Port, network order.
    pub port: u16,
    /// Zero.
    pub pad: u16,
    /// The owning service's id.
    pub svc_id: u32,
    /// Weight (read by the control plane only).
    pub weight: u32,
    /// Generation: bumped when the slot is freed, so conntrack entries that
    /// name the old occupant are not followed.
    pub gen: u32,
    /// `BACKEND_*` flags.
    pub flags: u32,
}

/// Key of the `conntrack` map: `struct flow_key`, the 5-tuple as in the
/// packet (network order).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowKey {
    /// Source address.
    pub saddr: u32,
    /// Destination address.
    pub daddr: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Zero.
    pub pad: [u8; 3],
}

/// Value of the `conntrack` map: `struct flow`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FlowEntry {
    /// The backend slot, or [`FLOW_REPLY`].
    pub backend: u32,
    /// The slot's generation when the flow was assigned.
    pub gen: u32,
    /// Reply direction: the VIP to put back as source (network order).
    pub vip: u32,
    /// Reply direction: the service port to put back (network order).
    pub port: u16,
    /// `CT_*` state ([`crate::conntrack::State`]).
    pub state: u8,
    /// Zero.
    pub pad: u8,
    /// `CLOCK_MONOTONIC_COARSE` nanoseconds of the last packet.
    pub seen: u64,
}

/// Value of the `ct_config` map: `struct ct_config`, the idle timeout of
/// each conntrack state in nanoseconds, indexed by state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CtConfig {
    /// Nanoseconds, by `CT_*` state.
    pub timeout_ns: [u64; 4],
}

/// Per-CPU counters of a service or backend: `struct counters`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Counters {
    /// Packets forwarded.
    pub packets: u64,
    /// Bytes forwarded (frame length).
    pub bytes: u64,
    /// New flows assigned (conntrack misses).
    pub flows: u64,
}

impl Counters {
    /// The sum of per-CPU values.
    pub fn sum<'a>(values: impl IntoIterator<Item = &'a Counters>) -> Counters {
        values.into_iter().fold(Counters::default(), |a, c| Counters {
            packets: a.packets + c.packets,
            bytes: a.bytes + c.bytes,
            flows: a.flows + c.flows,
        })
    }
}

// SAFETY: plain `repr(C)` integers whose padding is explicit, matching the C
// structs byte for byte.
unsafe impl aya::Pod for SvcKey {}
// SAFETY: as above.
unsafe impl aya::Pod for SvcValue {}
// SAFETY: as above.
unsafe impl aya::Pod for BackendEntry {}
// SAFETY: as above.
unsafe impl aya::Pod for Counters {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowEntry {}
// SAFETY: as above.
unsafe impl aya::Pod for CtConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for Addr6 {}
// SAFETY: as above.
unsafe impl aya::Pod for SvcKey6 {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowKey6 {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowEntry6 {}

/// An address as the program sees it: the octets in memory order.
pub fn be_addr(ip: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(ip.octets())
}

/// The address behind a network-order value.
pub fn addr_of(be: u32) -> Ipv4Addr {
    Ipv4Addr::from(be.to_ne_bytes())
}

/// A port as the program sees it.
pub fn be_port(port: u16) -> u16 {
    port.to_be()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<SvcKey>(), 8);
        assert_eq!(std::mem::size_of::<SvcValue>(), 8);
        assert_eq!(std::mem::size_of::<BackendEntry>(), 24);
        assert_eq!(std::mem::size_of::<Counters>(), 24);
        assert_eq!(std::mem::size_of::<FlowKey>(), 16);
        assert_eq!(std::mem::size_of::<FlowEntry>(), 24);
        assert_eq!(std::mem::size_of::<CtConfig>(), 32);
        assert_eq!(std::mem::size_of::<SvcKey6>(), 20);
        assert_eq!(std::mem::size_of::<FlowKey6>(), 40);
        assert_eq!(std::mem::size_of::<FlowEntry6>(), 40);
    }

    #[test]
    fn network_order_round_trips() {
        let ip = Ipv4Addr::new(20, 20, 20, 1);
        assert_eq!(be_addr(ip).to_ne_bytes(), [20, 20, 20, 1]);
        assert_eq!(addr_of(be_addr(ip)), ip);
        assert_eq!(be_port(2020).to_ne_bytes(), [0x07, 0xe4]);
    }
}
