//! A namespace in which the program's FIB lookups give known answers, for
//! the packet fixtures and the per-packet cost benchmark. `lb0`
//! (10.201.0.1/24) faces backends 10.201.0.11–.15, with permanent neighbour
//! entries except for .14; `lb1` (10.201.2.1/24) faces the client
//! 10.201.2.100. The calling thread enters it. The same over IPv6: `lb0`
//! fd00:201::1/64 faces fd00:201::11–::15 (no neighbour for ::14), `lb1`
//! fd00:201:2::1/64 the client fd00:201:2::100.
//!
//! Once entered, the namespace's name is deleted: the calling thread is
//! then what keeps it alive, so the kernel frees it when that thread ends,
//! even if the process panics, aborts or is killed (a named namespace would
//! outlive all of those).

use std::ffi::CString;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::netns::{run, Netns};
use crate::packet::Mac;

/// MAC of `lb0`.
pub const LB0_MAC: Mac = [2, 0, 0, 0, 0, 1];
/// MAC of `lb1`.
pub const LB1_MAC: Mac = [2, 0, 0, 0, 1, 1];
/// The client's MAC.
pub const CLIENT_MAC: Mac = [2, 0, 0, 0, 1, 0x64];
/// The client.
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 100);
/// The VIP services use.
pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 1);

/// The IPv6 client.
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 2, 0, 0, 0, 0, 0x100);
/// The IPv6 VIP services use.
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 1, 0, 0, 0, 0, 1);

/// IPv6 backend `last` (fd00:201::LAST, LAST in hex digits as written: 0x11 is ::11).
pub fn backend6(last: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, u16::from(last))
}

/// The MAC of IPv6 backend `ip` (its last octet, as [`backend_mac`]).
pub fn backend_mac6(ip: Ipv6Addr) -> Mac {
    [2, 0, 0, 0, 0, ip.octets()[15]]
}

/// The MAC of backend `ip` (its last octet).
pub fn backend_mac(ip: Ipv4Addr) -> Mac {
    [2, 0, 0, 0, 0, ip.octets()[3]]
}

/// The namespace, entered, with its interfaces' indexes.
pub struct FibFixture {
    /// Index of `lb0` (backends).
    pub lb0: u32,
    /// Index of `lb1` (client).
    pub lb1: u32,
}

fn mac_str(m: Mac) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl FibFixture {
    /// `ip args…` inside the namespace. Call it from the thread that made
    /// the fixture: the command inherits that thread's namespace.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        run("ip", args).map(|_| ())
    }

    /// Create namespace `name`, set it up, move the calling thread into it
    /// and delete its name (see the module doc).
    pub fn new(name: &str) -> io::Result<Self> {
        let ns = Netns::new(name)?;
        for (i, mac, addr) in [(0, LB0_MAC, "10.201.0.1/24"), (1, LB1_MAC, "10.201.2.1/24")] {
            let (lb, peer) = (format!("lb{i}"), format!("peer{i}"));
            ns.ip(&["link", "add", &lb, "type", "veth", "peer", "name", &peer])?;
            ns.ip(&["link", "set", &lb, "address", &mac_str(mac), "up"])?;
            ns.ip(&["link", "set", &peer, "up"])?;
            ns.ip(&["addr", "add", addr, "dev", &lb])?;
        }
        let neighbours = [11u8, 12, 13, 15].map(|last| (Ipv4Addr::new(10, 201, 0, last), "lb0"));
        for (ip, dev) in neighbours.into_iter().chain([(CLIENT, "lb1")]) {
            let mac = if dev == "lb1" { CLIENT_MAC } else { backend_mac(ip) };
            ns.ip(&["neigh", "add", &ip.to_string(), "lladdr", &mac_str(mac), "dev", dev, "nud", "permanent"])?;
        }
        for (dev, addr) in [("lb0", "fd00:201::1/64"), ("lb1", "fd00:201:2::1/64")] {
            ns.ip(&["-6", "addr", "add", addr, "dev", dev, "nodad"])?;
        }
        let neighbours6 = [0x11u8, 0x12, 0x13, 0x15].map(|last| (backend6(last), backend_mac6(backend6(last)), "lb0"));
        for (ip, mac, dev) in neighbours6.into_iter().chain([(CLIENT6, CLIENT_MAC, "lb1")]) {
            ns.ip(&["-6", "neigh", "add", &ip.to_string(), "lladdr", &mac_str(mac), "dev", dev, "nud", "permanent"])?;
        }
        ns.sysctl("net.ipv4.ip_forward", "1")?;
        ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        ns.enter()?;
        let index = |name: &str| {
            let c = CString::new(name).expect("no NUL");
            // SAFETY: a valid C string.
            match unsafe { libc::if_nametoindex(c.as_ptr()) } {
                0 => Err(io::Error::last_os_error()),
                i => Ok(i),
            }
        };
        let fixture = FibFixture { lb0: index("lb0")?, lb1: index("lb1")? };
        ns.delete()?;
        Ok(fixture)
    }
}
