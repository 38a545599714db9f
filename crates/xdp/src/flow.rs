//! The flow hash: the Rust reference of what `bpf/lb.bpf.c` computes.
//!
//! A flow's 5-tuple is laid out in 16 bytes exactly as the program's
//! `struct flow_key` (addresses and ports in network order, protocol, three
//! zero bytes) and hashed with fulcrum-balance's xxHash64 or MurmurHash3.
//! The table entry is `hash mod RING_SIZE`, so [`entry`] and the program
//! agree on the backend of every flow; the fixture tests check that.

use std::net::{Ipv4Addr, Ipv6Addr};

use fulcrum_balance::HashFunction;

use crate::maps::{be_addr, be_port, Addr6, FlowKey, FlowKey6, RING_SIZE};
use crate::spec::Protocol;

/// A flow as the client sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Client address.
    pub src: Ipv4Addr,
    /// Destination (the VIP).
    pub dst: Ipv4Addr,
    /// Client port.
    pub sport: u16,
    /// Destination port (the service port).
    pub dport: u16,
    /// TCP or UDP.
    pub proto: Protocol,
}

impl Flow {
    /// The 16 bytes the program hashes.
    pub fn key_bytes(&self) -> [u8; 16] {
        let mut key = [0u8; 16];
        key[0..4].copy_from_slice(&self.src.octets());
        key[4..8].copy_from_slice(&self.dst.octets());
        key[8..10].copy_from_slice(&self.sport.to_be_bytes());
        key[10..12].copy_from_slice(&self.dport.to_be_bytes());
        key[12] = self.proto.number();
        key
    }

    /// Its conntrack key (the same 16 bytes).
    pub fn key(&self) -> FlowKey {
        FlowKey {
            saddr: be_addr(self.src),
            daddr: be_addr(self.dst),
            sport: be_port(self.sport),
            dport: be_port(self.dport),
            proto: self.proto.number(),
            pad: [0; 3],
        }
    }

    /// The flow hash with `hash`.
    pub fn hash(&self, hash: HashFunction) -> u64 {
        hash.hash(&self.key_bytes())
    }
}

/// An IPv6 flow as the client sent it. The program hashes its 40-byte key
/// (`struct flow_key6`: source, destination, ports in network order,
/// protocol, three zero bytes) with the same functions as IPv4's 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow6 {
    /// Client address.
    pub src: Ipv6Addr,
    /// Destination (the VIP).
    pub dst: Ipv6Addr,
    /// Client port.
    pub sport: u16,
    /// Destination port (the service port).
    pub dport: u16,
    /// TCP or UDP.
    pub proto: Protocol,
}

impl Flow6 {
    /// The 40 bytes the program hashes.
    pub fn key_bytes(&self) -> [u8; 40] {
        let mut key = [0u8; 40];
        key[0..16].copy_from_slice(&self.src.octets());
        key[16..32].copy_from_slice(&self.dst.octets());
        key[32..34].copy_from_slice(&self.sport.to_be_bytes());
        key[34..36].copy_from_slice(&self.dport.to_be_bytes());
        key[36] = self.proto.number();
        key
    }

    /// Its `conntrack6` key (the same 40 bytes).
    pub fn key(&self) -> FlowKey6 {
        FlowKey6 {
            saddr: Addr6(self.src.octets()),
            daddr: Addr6(self.dst.octets()),
            sport: be_port(self.sport),
            dport: be_port(self.dport),
            proto: self.proto.number(),
            pad: [0; 3],
        }
    }

    /// The flow hash with `hash`.
    pub fn hash(&self, hash: HashFunction) -> u64 {
        hash.hash(&self.key_bytes())
    }
}

/// The table entry a flow hashing to `hash` uses.
pub fn entry(hash: u64) -> usize {
    (hash % RING_SIZE) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bytes_are_network_order() {
        let flow = Flow {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(20, 20, 20, 1),
            sport: 0x1234,
            dport: 2020,
            proto: Protocol::Tcp,
        };
        assert_eq!(flow.key_bytes(), [10, 0, 0, 1, 20, 20, 20, 1, 0x12, 0x34, 0x07, 0xe4, 6, 0, 0, 0]);
        let key = flow.key();
        // SAFETY: FlowKey is 16 bytes of plain integers and explicit padding.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(key) };
        assert_eq!(bytes, flow.key_bytes());
    }

    #[test]
    fn v6_key_bytes_are_the_c_layout() {
        let flow = Flow6 {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8:1::1".parse().unwrap(),
            sport: 0x1234,
            dport: 2020,
            proto: Protocol::Udp,
        };
        let bytes = flow.key_bytes();
        assert_eq!((bytes[15], bytes[31], &bytes[32..40]), (1, 1, &[0x12, 0x34, 0x07, 0xe4, 17, 0, 0, 0][..]));
        // SAFETY: FlowKey6 is 40 bytes of plain integers and explicit padding.
        let key: [u8; 40] = unsafe { std::mem::transmute(flow.key()) };
        assert_eq!(key, bytes);
    }

    #[test]
    fn the_two_hashes_differ() {
        let flow = Flow {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(20, 20, 20, 1),
            sport: 40000,
            dport: 80,
            proto: Protocol::Udp,
        };
        assert_ne!(flow.hash(HashFunction::Xxhash), flow.hash(HashFunction::Murmur3));
    }
}
