//! Per-packet cost of the XDP program under `BPF_PROG_TEST_RUN` (the call
//! `bpftool prog run … repeat N` makes), in the namespace of
//! `fulcrum_xdp::fixture` so that FIB lookups succeed. Run by
//! `bench/xdp-cost` as root; prints a Markdown table:
//!
//! - hot rows: one call of N repetitions, ROUNDS times, cases interleaved;
//!   the median of the rounds. The kernel does not restore the frame between
//!   repetitions: the production program can repeat a DSR conntrack hit
//!   (only MACs change) and a packet for no service, nothing else. The other
//!   cases run on the benchmark variant (`bpf/bench.h`): the same program
//!   behind a prologue that restores the frame (NAT hit), also empties the
//!   flow's entry in the per-CPU flow cache (a hit through the conntrack
//!   map), or gives each repetition an unused source address and port (new
//!   flow). The prologue's own cost, measured by running the variant on a
//!   frame that is not IPv4 (the program proper returns after the Ethernet
//!   header, whatever the prologue wrote) against the production program on
//!   the same frame, is subtracted. After every call the counters confirm
//!   that each repetition took the path it is named for (hit, new flow,
//!   pass) and the action is checked;
//! - new flows into a table that is not full: the same, on a freshly loaded
//!   variant for each case and round, with at most 50,000 flows;
//! - IPv6 (DSR and NAT, xxHash64): conntrack hits (from the flow cache and
//!   not) and new flows, as for IPv4; the prologue restores more of an IPv6 frame,
//!   so its cost is measured on an IPv6 frame the program passes at once
//!   (ICMPv6);
//! - cold rows: M distinct flows, one call per packet (the first packets of
//!   the flows, then their second packets), NAT, production program. Each
//!   call starts with cold caches and carries the syscall's own overhead;
//! - the conntrack sweep (`fulcrum lb conntrack --gc`) over the table the
//!   new-flow cases filled: per entry examined when none has expired, and
//!   when every one has and is deleted.
//!
//! A TCP flow's first packet is a SYN and the packets of known flows are
//! ACKs, as on the wire: conntrack's state follows the flags, and only
//! established flows enter the flow cache.
//!
//! usage: xdp_cost [REPEAT] [FLOWS] [ROUNDS]

use std::net::Ipv4Addr;

use fulcrum_balance::HashFunction;
use fulcrum_xdp::conntrack::{State, Timeouts};
use fulcrum_xdp::dataplane::{BenchMode, EmptyProgram};
use fulcrum_xdp::fixture::{FibFixture, CLIENT, CLIENT6, CLIENT_MAC, LB0_MAC, LB1_MAC, VIP, VIP6};
use fulcrum_xdp::flow::{Flow, Flow6};
use fulcrum_xdp::maps::Counters;
use fulcrum_xdp::packet::tcp;
use fulcrum_xdp::spec::{parse_endpoints, Mode, Protocol, Select, ServiceKey, ServiceSpec};
use fulcrum_xdp::testrun::{self, action};
use fulcrum_xdp::{packet, Loaded};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A packet of a known flow (an ACK) from the client to the VIP.
fn frame(sport: u16, dport: u16) -> Vec<u8> {
    frame_to(VIP, sport, dport, tcp::ACK)
}

/// A flow's first packet (a SYN) from the client to the VIP.
fn syn(sport: u16, dport: u16) -> Vec<u8> {
    frame_to(VIP, sport, dport, tcp::SYN)
}

fn frame_to(dst: Ipv4Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let flow = Flow { src: CLIENT, dst, sport, dport, proto: Protocol::Tcp };
    packet::build_tcp(&flow, flags, CLIENT_MAC, LB1_MAC, &[0u8; 6])
}

/// An IPv6 packet with TCP flags `flags` from the client to the IPv6 VIP.
fn frame6(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let flow = Flow6 { src: CLIENT6, dst: VIP6, sport, dport, proto: Protocol::Tcp };
    packet::build6(&flow, flags, CLIENT_MAC, LB1_MAC, &[0u8; 6])
}

/// The IPv6 services' ports (xxHash64): DSR, NAT.
const PORT6: u16 = 84;
const PORT6_NAT: u16 = 85;

/// Ports 80/81: DSR with each hash; 82/83: NAT with each hash.
const SERVICES: [(u16, Mode, HashFunction); 4] = [
    (80, Mode::Dsr, HashFunction::Xxhash),
    (81, Mode::Dsr, HashFunction::Murmur3),
    (82, Mode::Nat, HashFunction::Xxhash),
    (83, Mode::Nat, HashFunction::Murmur3),
];

fn setup(loaded: &mut Loaded) -> Res<()> {
    let backends = parse_endpoints("10.201.0.11,10.201.0.12,10.201.0.13")?;
    for (port, mode, hash) in SERVICES {
        loaded.dataplane.upsert(&ServiceSpec {
            key: ServiceKey { vip: VIP.into(), port, proto: Protocol::Tcp },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: backends.clone(),
            mode,
            select: Select::Maglev,
            hash,
        })?;
    }
    let backends6: Vec<_> = (0x11..=0x13).map(|last| format!("[fd00:201::{last:x}]")).collect();
    for (port, mode) in [(PORT6, Mode::Dsr), (PORT6_NAT, Mode::Nat)] {
        loaded.dataplane.upsert(&ServiceSpec {
            key: ServiceKey { vip: VIP6.into(), port, proto: Protocol::Tcp },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: parse_endpoints(&backends6.join(","))?,
            mode,
            select: Select::Maglev,
            hash: HashFunction::Xxhash,
        })?;
    }
    Ok(())
}

/// Counters of the service on `port`.
fn counters(loaded: &Loaded, port: u16) -> Res<Counters> {
    let stats = loaded.dataplane.stats()?;
    Ok(stats.iter().find(|s| s.info.spec.key.port == port).ok_or("service missing")?.total)
}

/// Mean ns per packet of single runs over `frames`.
fn single_runs(loaded: &Loaded, ifindex: u32, frames: &[Vec<u8>]) -> Res<f64> {
    let prog = loaded.program_fd()?;
    let mut total = 0u64;
    for f in frames {
        total += u64::from(testrun::run(prog, f, ifindex, 1)?.duration_ns);
    }
    Ok(total as f64 / frames.len() as f64)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Prog {
    /// `bpf/peer_pass.bpf.c`: XDP_PASS, nothing else.
    Empty,
    Production,
    Bench(BenchMode),
}

/// One hot case: which program, frame, and what the counters must show
/// afterwards.
struct Case {
    name: &'static str,
    prog: Prog,
    ifindex: u32,
    frame: Vec<u8>,
    /// The service port whose counters must grow by `repeat` packets and
    /// `repeat × new` flows, or None for a packet that must pass.
    port: Option<u16>,
    new: bool,
    want: u32,
    samples: Vec<u32>,
}

fn median(v: &[u32]) -> f64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    let n = s.len();
    if n % 2 == 1 {
        f64::from(s[n / 2])
    } else {
        (f64::from(s[n / 2 - 1]) + f64::from(s[n / 2])) / 2.0
    }
}

struct Runner {
    prod: Loaded,
    empty: EmptyProgram,
    call: u32,
}

impl Runner {
    /// Run `c` once with `repeat` repetitions on `bench` (for `Bench` cases)
    /// and check the action and counters; the mean ns per repetition.
    fn run(&mut self, bench: &mut Loaded, c: &Case, repeat: u32) -> Res<u32> {
        if c.prog == Prog::Empty {
            return Ok(testrun::run(self.empty.fd()?, &c.frame, c.ifindex, repeat)?.duration_ns);
        }
        let l = if let Prog::Bench(_) = c.prog { bench } else { &mut self.prod };
        let mode = if let Prog::Bench(m) = c.prog { m } else { BenchMode::Off };
        if !c.new {
            // New-flow runs may have evicted the flow a hit case repeats.
            if c.prog != Prog::Production {
                self.call += 1;
                l.bench_mode(mode, self.call)?;
            }
            testrun::run(l.program_fd()?, &c.frame, c.ifindex, 1)?;
        }
        if c.prog != Prog::Production {
            self.call += 1;
            l.bench_mode(mode, self.call)?;
        }
        let before = match c.port {
            Some(p) => counters(l, p)?,
            None => Counters::default(),
        };
        let passed_before = l.dataplane.totals()?[0].1;
        let out = testrun::run(l.program_fd()?, &c.frame, c.ifindex, repeat)?;
        if out.action != c.want {
            let totals = l.dataplane.totals()?;
            return Err(format!(
                "port {:?} new {}: action {} instead of {}; {totals:?}",
                c.port, c.new, out.action, c.want
            )
            .into());
        }
        let n = u64::from(repeat);
        match c.port {
            Some(p) => {
                let after = counters(l, p)?;
                let want = (before.packets + n, before.flows + if c.new { n } else { 0 });
                if (after.packets, after.flows) != want {
                    let totals = l.dataplane.totals()?;
                    return Err(format!("port {p}: counters {after:?}, want packets/flows {want:?}; {totals:?}").into());
                }
            }
            None => {
                if l.dataplane.totals()?[0].1 != passed_before + n {
                    return Err("the packet for no service did not pass every time".into());
                }
            }
        }
        Ok(out.duration_ns)
    }
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let repeat: u32 = args.next().map_or(Ok(5_000_000), |a| a.parse())?;
    let flows: u16 = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    if let Some(why) = fulcrum_xdp::netns::bpf_unavailable() {
        return Err(why.into());
    }
    let net = FibFixture::new(&format!("xdpcost{}", std::process::id()))?;
    let mut prod = Loaded::new()?;
    let mut bench = Loaded::bench()?;
    setup(&mut prod)?;
    setup(&mut bench)?;
    let mut runner = Runner { prod, empty: EmptyProgram::new()?, call: 0 };

    let other = frame_to(Ipv4Addr::new(10, 201, 9, 9), 1, 80, tcp::ACK);
    let mut arp = other.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    // An IPv6 frame for no service that the program passes after reading
    // the IPv6 header's next header (ICMPv6), as long as a TCP one.
    let mut icmp6 = frame6(1, PORT6, tcp::ACK);
    icmp6[20] = 58;
    // A client on the backends' segment: in and out through lb0 (XDP_TX),
    // as in scripts/xdp-topology's one-armed LB.
    let same_segment = Flow { src: Ipv4Addr::new(10, 201, 0, 15), dst: VIP, sport: 1, dport: 80, proto: Protocol::Tcp };
    let tx = packet::build_tcp(&same_segment, tcp::ACK, [2, 0, 0, 0, 0, 15], LB0_MAC, &[0u8; 6]);
    let (lb0, lb1) = (net.lb0, net.lb1);
    let case = |name, prog, frame: Vec<u8>, port, new, want| Case {
        name,
        prog,
        ifindex: lb1,
        frame,
        port,
        new,
        want,
        samples: Vec::new(),
    };
    use BenchMode::{NewFlows, Restore, Uncached};
    use Prog::{Bench, Empty, Production};
    let mut cases = vec![
        // The floor; the prologue's cost on a frame that is not IPv4 (the
        // program proper returns after reading the Ethernet header, so the
        // prologue's changes do not change its path); a packet for no service.
        case("empty", Empty, other.clone(), None, false, action::PASS),
        case("non-IP", Production, arp.clone(), None, false, action::PASS),
        case("non-IP restore", Bench(Restore), arp.clone(), None, false, action::PASS),
        case("non-IP new", Bench(NewFlows), arp.clone(), None, false, action::PASS),
        case("non-IP uncached", Bench(Uncached), arp, None, false, action::PASS),
        case("ICMPv6", Production, icmp6.clone(), None, false, action::PASS),
        case("ICMPv6 restore", Bench(Restore), icmp6.clone(), None, false, action::PASS),
        case("ICMPv6 new", Bench(NewFlows), icmp6.clone(), None, false, action::PASS),
        case("ICMPv6 uncached", Bench(Uncached), icmp6, None, false, action::PASS),
        case("pass", Production, other, None, false, action::PASS),
        Case { ifindex: lb0, ..case("DSR hit TX", Production, tx, Some(80), false, action::TX) },
    ];
    for (dsr, nat) in [(80, 82), (81, 83)] {
        let h = if dsr == 80 { "xx" } else { "mm" };
        let n = |what: &str| -> &'static str { format!("{what} {h}").leak() };
        cases.push(case(n("DSR hit"), Production, frame(1, dsr), Some(dsr), false, action::REDIRECT));
        cases.push(case(n("DSR hit uncached"), Bench(Uncached), frame(1, dsr), Some(dsr), false, action::REDIRECT));
        cases.push(case(n("NAT hit"), Bench(Restore), frame(1, nat), Some(nat), false, action::REDIRECT));
        cases.push(case(n("DSR new"), Bench(NewFlows), syn(2, dsr), Some(dsr), true, action::REDIRECT));
        cases.push(case(n("NAT new"), Bench(NewFlows), syn(2, nat), Some(nat), true, action::REDIRECT));
    }
    cases.push(case("DSR6 hit", Production, frame6(1, PORT6, tcp::ACK), Some(PORT6), false, action::REDIRECT));
    let uncached6 =
        case("DSR6 hit uncached", Bench(Uncached), frame6(1, PORT6, tcp::ACK), Some(PORT6), false, action::REDIRECT);
    cases.push(uncached6);
    cases.push(case("DSR6 new", Bench(NewFlows), frame6(2, PORT6, tcp::SYN), Some(PORT6), true, action::REDIRECT));
    let nat6 = PORT6_NAT;
    cases.push(case("NAT6 hit", Bench(Restore), frame6(1, nat6, tcp::ACK), Some(nat6), false, action::REDIRECT));
    cases.push(case("NAT6 new", Bench(NewFlows), frame6(2, nat6, tcp::SYN), Some(nat6), true, action::REDIRECT));
    // New flows into a table that is not full: a fresh load for each case
    // and round, and few enough flows that no insert evicts (NAT takes two
    // entries a flow).
    let filling = repeat.min(50_000);
    let mut filled: std::collections::HashMap<&str, Vec<u32>> = Default::default();
    for _ in 0..rounds {
        for c in cases.iter_mut() {
            let ns = runner.run(&mut bench, c, repeat)?;
            c.samples.push(ns);
        }
        for c in cases.iter().filter(|c| c.new) {
            let mut fresh = Loaded::bench()?;
            setup(&mut fresh)?;
            let ns = runner.run(&mut fresh, c, filling)?;
            filled.entry(c.name).or_default().push(ns);
        }
    }

    let m = |name: &str| median(&cases.iter().find(|c| c.name == name).expect("case").samples);
    let (restore, fresh, uncached) =
        (m("non-IP restore") - m("non-IP"), m("non-IP new") - m("non-IP"), m("non-IP uncached") - m("non-IP"));
    let hot = format!("repeat {repeat}, median of {rounds}");
    let fill = format!("repeat {filling} into an empty table, median of {rounds}");
    println!("| case | flow hash | ns per packet | method |");
    println!("|---|---|---:|---|");
    println!("| DSR, conntrack hit, flow cache, XDP_TX | xxHash64 | {:.0} | one flow, {hot} |", m("DSR hit TX"));
    for (h, name) in [("xx", "xxHash64"), ("mm", "MurmurHash3")] {
        let k = |what: &str| format!("{what} {h}");
        let f = |what: &str| median(&filled[k(what).as_str()]);
        let one_flow = format!("one flow, {hot}");
        let variant = format!("one flow, {hot}; variant − prologue");
        let fill_variant = format!("{fill}; variant − prologue");
        let hot_variant = format!("{hot}; variant − prologue");
        let rows = [
            ("DSR, conntrack hit, flow cache, redirect", m(&k("DSR hit")), &one_flow),
            ("DSR, conntrack hit, not in the flow cache", m(&k("DSR hit uncached")) - uncached, &variant),
            ("NAT, conntrack hit, flow cache", m(&k("NAT hit")) - restore, &variant),
            ("DSR, new flow, table not full", f("DSR new") - fresh, &fill_variant),
            ("NAT, new flow, table not full", f("NAT new") - fresh, &fill_variant),
            ("DSR, new flow, table full", m(&k("DSR new")) - fresh, &hot_variant),
            ("NAT, new flow, table full", m(&k("NAT new")) - fresh, &hot_variant),
        ];
        for (case, ns, method) in rows {
            println!("| {case} | {name} | {ns:.0} | {method} |");
        }
    }
    let (restore6, fresh6, uncached6) =
        (m("ICMPv6 restore") - m("ICMPv6"), m("ICMPv6 new") - m("ICMPv6"), m("ICMPv6 uncached") - m("ICMPv6"));
    let f6 = |name: &str| median(&filled[name]);
    let rows6 = [
        ("DSR, conntrack hit, flow cache", m("DSR6 hit"), format!("one flow, {hot}")),
        (
            "DSR, conntrack hit, not in the flow cache",
            m("DSR6 hit uncached") - uncached6,
            format!("one flow, {hot}; variant − prologue"),
        ),
        ("NAT, conntrack hit, flow cache", m("NAT6 hit") - restore6, format!("one flow, {hot}; variant − prologue")),
        ("DSR, new flow, table not full", f6("DSR6 new") - fresh6, format!("{fill}; variant − prologue")),
        ("NAT, new flow, table not full", f6("NAT6 new") - fresh6, format!("{fill}; variant − prologue")),
        ("DSR, new flow, table full", m("DSR6 new") - fresh6, format!("{hot}; variant − prologue")),
        ("NAT, new flow, table full", m("NAT6 new") - fresh6, format!("{hot}; variant − prologue")),
    ];
    for (case, ns, method) in rows6 {
        println!("| IPv6 {case} | xxHash64 | {ns:.0} | {method} |");
    }
    println!("| not for a service (XDP_PASS) | - | {:.0} | {hot} |", m("pass"));
    println!("| empty program (XDP_PASS): the harness's own cost | - | {:.0} | {hot} |", m("empty"));
    for (what, ns) in [("restore the frame", restore), ("restore, uncache", uncached), ("restore, new source", fresh)] {
        println!("| benchmark prologue: {what} | - | {ns:.0} | variant − production, non-IP frame |");
    }
    for (what, ns) in
        [("restore the frame", restore6), ("restore, uncache", uncached6), ("restore, new source", fresh6)]
    {
        println!("| benchmark prologue, IPv6: {what} | - | {ns:.0} | variant − production, ICMPv6 frame |");
    }
    for (nat_port, name) in [(82, "xxHash64"), (83, "MurmurHash3")] {
        let first: Vec<Vec<u8>> = (0..flows).map(|i| syn(10_000u16.wrapping_add(i), nat_port)).collect();
        let second: Vec<Vec<u8>> = (0..flows).map(|i| frame(10_000u16.wrapping_add(i), nat_port)).collect();
        let new = single_runs(&runner.prod, net.lb1, &first)?;
        let again = single_runs(&runner.prod, net.lb1, &second)?;
        println!("| NAT, new flow, cold | {name} | {new:.0} | {flows} flows, one call each |");
        println!("| NAT, conntrack hit, cold | {name} | {again:.0} | the same {flows} flows again |");
    }
    // The sweep, over the table the new-flow cases left full: nothing has
    // expired (timeouts of an hour), then everything has (of a nanosecond).
    let full = bench.dataplane.conntrack_capacity()?;
    let timeouts = |d: std::time::Duration| -> Res<Timeouts> {
        let mut t = Timeouts::default();
        for state in State::ALL {
            t.set(state, d)?;
        }
        Ok(t)
    };
    bench.dataplane.set_timeouts(&timeouts(std::time::Duration::from_secs(3600))?)?;
    let sweep = |bench: &mut Loaded| -> Res<(f64, usize)> {
        let start = std::time::Instant::now();
        let s = bench.dataplane.conntrack_gc()?;
        Ok((start.elapsed().as_nanos() as f64 / s.examined.max(1) as f64, s.deleted))
    };
    let (kept_ns, none) = sweep(&mut bench)?;
    bench.dataplane.set_timeouts(&timeouts(std::time::Duration::from_nanos(1))?)?;
    let (gone_ns, all) = sweep(&mut bench)?;
    if none != 0 || all == 0 {
        return Err(format!("the sweep deleted {none} entries of a live table and {all} of an expired one").into());
    }
    println!("| conntrack sweep, nothing expired, per entry | - | {kept_ns:.0} | a full table of {full} entries |");
    println!("| conntrack sweep, all expired, per entry deleted | - | {gone_ns:.0} | {all} entries, each deleted |");
    Ok(())
}
