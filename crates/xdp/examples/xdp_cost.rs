//! Per-packet cost of the XDP program under `BPF_PROG_TEST_RUN` (the call
//! `bpftool prog run … repeat N` makes), in the namespace of
//! `fulcrum_xdp::fixture` so that FIB lookups succeed. Run by
//! `bench/xdp-cost` as root; prints one Markdown table row per case:
//!
//! - conntrack hit, hot: one flow repeated N times in one call. DSR only:
//!   the kernel does not restore the frame between repetitions, and a NAT
//!   rewrite would make every repetition after the first a different packet;
//! - new flow and conntrack hit, cold: M distinct flows, one call per packet
//!   (the first packets of the flows, then their second packets), NAT. Each
//!   call starts with cold caches; the difference between the two is what a
//!   new flow adds (hash, table read, conntrack and NAT-reply inserts);
//! - not for a service: passed to the kernel, hot.
//!
//! usage: xdp_cost [REPEAT] [FLOWS]

use std::net::Ipv4Addr;
use std::os::fd::BorrowedFd;

use fulcrum_balance::HashFunction;
use fulcrum_xdp::fixture::{FibFixture, CLIENT, CLIENT_MAC, LB1_MAC, VIP};
use fulcrum_xdp::flow::Flow;
use fulcrum_xdp::spec::{parse_endpoints, Mode, Protocol, Select, ServiceKey, ServiceSpec};
use fulcrum_xdp::{packet, testrun, Loaded};

fn frame(sport: u16, dport: u16) -> Vec<u8> {
    let flow = Flow { src: CLIENT, dst: VIP, sport, dport, proto: Protocol::Tcp };
    packet::build(&flow, CLIENT_MAC, LB1_MAC, &[0u8; 6])
}

/// Mean ns per packet of single runs over `frames`.
fn single_runs(prog: BorrowedFd<'_>, ifindex: u32, frames: &[Vec<u8>]) -> Result<f64, Box<dyn std::error::Error>> {
    let mut total = 0u64;
    for f in frames {
        total += u64::from(testrun::run(prog, f, ifindex, 1)?.duration_ns);
    }
    Ok(total as f64 / frames.len() as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let repeat: u32 = args.next().map_or(Ok(5_000_000), |a| a.parse())?;
    let flows: u16 = args.next().map_or(Ok(20_000), |a| a.parse())?;
    if let Some(why) = fulcrum_xdp::netns::bpf_unavailable() {
        return Err(why.into());
    }
    let net = FibFixture::new(&format!("xdpcost{}", std::process::id()))?;
    let mut loaded = Loaded::new()?;
    let backends = parse_endpoints("10.201.0.11,10.201.0.12,10.201.0.13")?;
    // Ports 80/81: DSR with each hash; 82/83: NAT with each hash.
    for (port, mode, hash) in [
        (80, Mode::Dsr, HashFunction::Xxhash),
        (81, Mode::Dsr, HashFunction::Murmur3),
        (82, Mode::Nat, HashFunction::Xxhash),
        (83, Mode::Nat, HashFunction::Murmur3),
    ] {
        loaded.dataplane.upsert(&ServiceSpec {
            key: ServiceKey { vip: VIP, port, proto: Protocol::Tcp },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: backends.clone(),
            mode,
            select: Select::Maglev,
            hash,
        })?;
    }
    let prog = loaded.program_fd()?;
    println!("| case | flow hash | ns per packet | method |");
    println!("|---|---|---:|---|");
    for (dsr_port, nat_port, name) in [(80, 82, "xxHash64"), (81, 83, "MurmurHash3")] {
        let hit = frame(1, dsr_port);
        testrun::run(prog, &hit, net.lb1, 1)?;
        let hot = testrun::run(prog, &hit, net.lb1, repeat)?.duration_ns;
        println!("| DSR, conntrack hit, hot | {name} | {hot} | one flow, repeat {repeat} |");
        let fresh: Vec<Vec<u8>> = (0..flows).map(|i| frame(10_000u16.wrapping_add(i), nat_port)).collect();
        let new = single_runs(prog, net.lb1, &fresh)?;
        let again = single_runs(prog, net.lb1, &fresh)?;
        println!("| NAT, new flow, cold | {name} | {new:.0} | {flows} flows, one call each |");
        println!("| NAT, conntrack hit, cold | {name} | {again:.0} | the same {flows} flows again |");
        println!("| NAT, new flow minus hit | {name} | {:.0} | difference of the two rows above |", new - again);
    }
    let other = packet::build(
        &Flow { src: CLIENT, dst: Ipv4Addr::new(10, 201, 9, 9), sport: 1, dport: 80, proto: Protocol::Tcp },
        CLIENT_MAC,
        LB1_MAC,
        &[0u8; 6],
    );
    let ns = testrun::run(prog, &other, net.lb1, repeat)?.duration_ns;
    println!("| not for a service (XDP_PASS) | - | {ns} | repeat {repeat} |");
    Ok(())
}
