//! Per-packet cost of the XDP program under `BPF_PROG_TEST_RUN` (the call
//! `bpftool prog run … repeat N` makes), in the namespace of
//! `fulcrum_xdp::fixture` so that FIB lookups succeed. Run by
//! `bench/xdp-cost` as root; prints a Markdown table:
//!
//! - hot rows: one call of N repetitions, ROUNDS times, cases interleaved;
//!   the median of the rounds. The kernel does not restore the frame between
//!   repetitions: the production program can repeat a DSR conntrack hit
//!   (only MACs change) and a packet for no service, nothing else. NAT hits
//!   and new flows run on the benchmark variant (`bpf/bench.h`): the same
//!   program behind a prologue that restores the frame (NAT hit) or also
//!   gives each repetition an unused source address and port (new flow). The
//!   prologue's own cost, measured by running the variant on a packet for
//!   no service (a path the prologue does not change) against the
//!   production program on the same packet, is subtracted; the counters
//!   confirm that every repetition took the path it is named for;
//! - cold rows: M distinct flows, one call per packet (the first packets of
//!   the flows, then their second packets), NAT, production program. Each
//!   call starts with cold caches and carries the syscall's own overhead.
//!
//! usage: xdp_cost [REPEAT] [FLOWS] [ROUNDS]

use std::net::Ipv4Addr;

use fulcrum_balance::HashFunction;
use fulcrum_xdp::dataplane::{BenchMode, EmptyProgram};
use fulcrum_xdp::fixture::{FibFixture, CLIENT, CLIENT_MAC, LB1_MAC, VIP};
use fulcrum_xdp::flow::Flow;
use fulcrum_xdp::maps::Counters;
use fulcrum_xdp::spec::{parse_endpoints, Mode, Protocol, Select, ServiceKey, ServiceSpec};
use fulcrum_xdp::testrun::{self, action};
use fulcrum_xdp::{packet, Loaded};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn frame(sport: u16, dport: u16) -> Vec<u8> {
    frame_to(VIP, sport, dport)
}

fn frame_to(dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    let flow = Flow { src: CLIENT, dst, sport, dport, proto: Protocol::Tcp };
    packet::build(&flow, CLIENT_MAC, LB1_MAC, &[0u8; 6])
}

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
            key: ServiceKey { vip: VIP, port, proto: Protocol::Tcp },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: backends.clone(),
            mode,
            select: Select::Maglev,
            hash,
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
    prog: Prog,
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
    ifindex: u32,
    call: u32,
}

impl Runner {
    /// Run `c` once with `repeat` repetitions on `bench` (for `Bench` cases)
    /// and check the action and counters; the mean ns per repetition.
    fn run(&mut self, bench: &mut Loaded, c: &Case, repeat: u32) -> Res<u32> {
        if c.prog == Prog::Empty {
            return Ok(testrun::run(self.empty.fd()?, &c.frame, self.ifindex, repeat)?.duration_ns);
        }
        let l = if let Prog::Bench(_) = c.prog { bench } else { &mut self.prod };
        let mode = if let Prog::Bench(m) = c.prog { m } else { BenchMode::Off };
        if !c.new {
            // New-flow runs may have evicted the flow a hit case repeats.
            if c.prog != Prog::Production {
                self.call += 1;
                l.bench_mode(mode, self.call)?;
            }
            testrun::run(l.program_fd()?, &c.frame, self.ifindex, 1)?;
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
        let out = testrun::run(l.program_fd()?, &c.frame, self.ifindex, repeat)?;
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
    let mut runner = Runner { prod, empty: EmptyProgram::new()?, ifindex: net.lb1, call: 0 };

    let other = frame_to(Ipv4Addr::new(10, 201, 9, 9), 1, 80);
    let mut arp = other.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let case = |prog, frame: Vec<u8>, port, new, want| Case { prog, frame, port, new, want, samples: Vec::new() };
    use BenchMode::{NewFlows, Restore};
    use Prog::{Bench, Empty, Production};
    let mut cases = vec![
        // 0: the floor. 1-3: the prologue's cost, on a frame that is not IPv4
        // (the program proper returns after reading the Ethernet header, so
        // the new source addresses do not change its path). 4: for no service.
        case(Empty, other.clone(), None, false, action::PASS),
        case(Production, arp.clone(), None, false, action::PASS),
        case(Bench(Restore), arp.clone(), None, false, action::PASS),
        case(Bench(NewFlows), arp, None, false, action::PASS),
        case(Production, other, None, false, action::PASS),
    ];
    for (dsr, nat) in [(80, 82), (81, 83)] {
        cases.push(case(Production, frame(1, dsr), Some(dsr), false, action::REDIRECT));
        cases.push(case(Bench(Restore), frame(1, nat), Some(nat), false, action::REDIRECT));
        cases.push(case(Bench(NewFlows), frame(2, dsr), Some(dsr), true, action::REDIRECT));
        cases.push(case(Bench(NewFlows), frame(2, nat), Some(nat), true, action::REDIRECT));
    }
    // New flows into a table that is not full: a fresh load each round, and
    // few enough flows that no insert evicts (NAT takes two entries a flow).
    let filling = repeat.min(50_000);
    let mut filling_samples = vec![Vec::new(); 4];
    for _ in 0..rounds {
        for c in cases.iter_mut() {
            let ns = runner.run(&mut bench, c, repeat)?;
            c.samples.push(ns);
        }
        let mut fresh = Loaded::bench()?;
        setup(&mut fresh)?;
        for (i, c) in cases[5..].iter().filter(|c| c.new).enumerate() {
            let ns = runner.run(&mut fresh, c, filling)?;
            filling_samples[i].push(ns);
        }
    }

    let m: Vec<f64> = cases.iter().map(|c| median(&c.samples)).collect();
    let (restore, fresh) = (m[2] - m[1], m[3] - m[1]);
    let hot = format!("repeat {repeat}, median of {rounds}");
    let fill = format!("repeat {filling} into an empty table, median of {rounds}");
    println!("| case | flow hash | ns per packet | method |");
    println!("|---|---|---:|---|");
    for (i, name) in ["xxHash64", "MurmurHash3"].iter().enumerate() {
        let b = 5 + 4 * i;
        let (dsr_fill, nat_fill) = (median(&filling_samples[2 * i]), median(&filling_samples[2 * i + 1]));
        println!("| DSR, conntrack hit, hot | {name} | {:.0} | one flow, {hot} |", m[b]);
        println!(
            "| NAT, conntrack hit, hot | {name} | {:.0} | one flow, {hot}; variant − prologue |",
            m[b + 1] - restore
        );
        println!(
            "| DSR, new flow, hot, table not full | {name} | {:.0} | {fill}; variant − prologue |",
            dsr_fill - fresh
        );
        println!(
            "| NAT, new flow, hot, table not full | {name} | {:.0} | {fill}; variant − prologue |",
            nat_fill - fresh
        );
        println!("| DSR, new flow, hot, table full | {name} | {:.0} | {hot}; variant − prologue |", m[b + 2] - fresh);
        println!("| NAT, new flow, hot, table full | {name} | {:.0} | {hot}; variant − prologue |", m[b + 3] - fresh);
    }
    println!("| not for a service (XDP_PASS), hot | - | {:.0} | {hot} |", m[4]);
    println!("| empty program (XDP_PASS): the harness's own cost | - | {:.0} | {hot} |", m[0]);
    println!("| benchmark prologue: restore the frame | - | {restore:.0} | variant − production, non-IP frame |");
    println!("| benchmark prologue: restore, new source | - | {fresh:.0} | variant − production, non-IP frame |");
    for (nat_port, name) in [(82, "xxHash64"), (83, "MurmurHash3")] {
        let fresh: Vec<Vec<u8>> = (0..flows).map(|i| frame(10_000u16.wrapping_add(i), nat_port)).collect();
        let new = single_runs(&runner.prod, net.lb1, &fresh)?;
        let again = single_runs(&runner.prod, net.lb1, &fresh)?;
        println!("| NAT, new flow, cold | {name} | {new:.0} | {flows} flows, one call each |");
        println!("| NAT, conntrack hit, cold | {name} | {again:.0} | the same {flows} flows again |");
    }
    Ok(())
}
