//! Packet fixtures: crafted frames run through the XDP program with
//! `BPF_PROG_TEST_RUN` (no attachment), checking the action and the frame
//! that comes out. Each test makes its own namespace with two interfaces
//! and fixed neighbours so that the program's FIB lookups give known
//! results (see `fulcrum_xdp::fixture`).
//! Needs root and the program (built with clang): the tests are ignored
//! unless asked for, and fail where they cannot run.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IPv4 address of an IPv4 service's backend.
fn v4(ip: IpAddr) -> Ipv4Addr {
    match ip {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(ip) => panic!("{ip} in an IPv4 service"),
    }
}

use fulcrum_balance::HashFunction;
use fulcrum_xdp::fixture::{
    backend_mac, backend_mac6, FibFixture, CLIENT, CLIENT6, CLIENT_MAC, LB0_MAC, LB1_MAC, VIP, VIP6,
};
use fulcrum_xdp::flow::{entry, Flow, Flow6};
use fulcrum_xdp::netns::require_bpf;
use fulcrum_xdp::packet;
use fulcrum_xdp::spec::{parse_endpoints, Mode, Protocol, Select, ServiceKey, ServiceSpec};
use fulcrum_xdp::testrun::{self, action, RunResult};
use fulcrum_xdp::Loaded;

struct Fixture {
    loaded: Loaded,
    lb0: u32,
    lb1: u32,
    net: FibFixture,
}

impl Fixture {
    fn new(test: &str) -> Fixture {
        Self::load(test, Loaded::new)
    }

    /// With conntrack maps of `entries` entries each.
    fn sized(test: &str, entries: u32) -> Fixture {
        Self::load(test, || Loaded::with_conntrack_entries(entries))
    }

    fn load(test: &str, load: impl FnOnce() -> Result<Loaded, fulcrum_xdp::Error>) -> Fixture {
        require_bpf(test);
        let net = FibFixture::new(&format!("fx{}-{}", std::process::id(), &test[..test.len().min(8)])).unwrap();
        Fixture { loaded: load().unwrap(), lb0: net.lb0, lb1: net.lb1, net }
    }

    fn service(&mut self, port: u16, proto: Protocol, backends: &str, mode: Mode, hash: HashFunction) -> ServiceSpec {
        self.service_with(port, proto, backends, mode, Select::Maglev, hash)
    }

    fn service_with(
        &mut self,
        port: u16,
        proto: Protocol,
        backends: &str,
        mode: Mode,
        select: Select,
        hash: HashFunction,
    ) -> ServiceSpec {
        let spec = ServiceSpec {
            key: ServiceKey { vip: VIP.into(), port, proto },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: parse_endpoints(backends).unwrap(),
            mode,
            select,
            hash,
        };
        self.loaded.dataplane.upsert(&spec).unwrap();
        spec
    }

    fn run_on(&self, ifindex: u32, frame: &[u8]) -> RunResult {
        testrun::run(self.loaded.program_fd().unwrap(), frame, ifindex, 1).unwrap()
    }

    /// A client frame arriving on lb1.
    fn client_sends(&self, flow: &Flow) -> RunResult {
        self.run_on(self.lb1, &packet::build(flow, CLIENT_MAC, LB1_MAC, b"fixture"))
    }
}

fn flow(sport: u16, dport: u16, proto: Protocol) -> Flow {
    Flow { src: CLIENT, dst: VIP, sport, dport, proto }
}

/// The backend the Rust reference (fulcrum-balance's table, the Rust flow
/// hash) gives `flow`.
fn reference_backend(spec: &ServiceSpec, flow: &Flow) -> Ipv4Addr {
    let (backends, table) = fulcrum_xdp::table::build(spec).unwrap();
    v4(backends[table[entry(flow.hash(spec.hash))] as usize].ip)
}

/// Send `f` from the client and check that it left for its reference
/// backend's port 8080 through lb0, with valid checksums.
fn assert_nat_forwarded(fx: &Fixture, spec: &ServiceSpec, f: &Flow) -> packet::Parsed {
    let out = fx.client_sends(f);
    assert_eq!(out.action, action::REDIRECT, "lb1 → lb0 is a redirect");
    let p = packet::parse(&out.packet).unwrap();
    assert_eq!(p.flow, Flow { dst: reference_backend(spec, f), dport: 8080, ..*f });
    assert!(p.ip_checksum_ok && p.l4_checksum_ok);
    p
}

/// `#[ignore]`d: run by `cargo test -- --ignored` as root (scripts/test),
/// failing, not passing, where they cannot run; `--skip needs_root::` leaves
/// them out.
mod needs_root {
    use super::*;

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn nat_tcp_rewrites_destination_macs_and_checksums() {
        let mut fx = Fixture::new("nat_tcp");
        let spec =
            fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.12,10.201.0.13", Mode::Nat, HashFunction::Xxhash);
        let p = assert_nat_forwarded(&fx, &spec, &flow(40000, 80, Protocol::Tcp));
        assert_eq!((p.dst_mac, p.src_mac), (backend_mac(p.flow.dst), LB0_MAC));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn nat_udp_murmur3_rewrites_and_keeps_a_zero_checksum() {
        let mut fx = Fixture::new("nat_udp");
        let spec = fx.service(53, Protocol::Udp, "10.201.0.11,10.201.0.12", Mode::Nat, HashFunction::Murmur3);
        assert_nat_forwarded(&fx, &spec, &flow(5353, 53, Protocol::Udp));
        // A UDP datagram without checksum keeps none.
        let mut frame = packet::build(&flow(5354, 53, Protocol::Udp), CLIENT_MAC, LB1_MAC, b"x");
        frame[14 + 20 + 6..14 + 20 + 8].copy_from_slice(&[0, 0]);
        let out = fx.run_on(fx.lb1, &frame);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(&out.packet[14 + 20 + 6..14 + 20 + 8], &[0, 0]);
        assert!(packet::parse(&out.packet).unwrap().ip_checksum_ok);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn dsr_rewrites_only_the_macs() {
        let mut fx = Fixture::new("dsr");
        let spec =
            fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.12,10.201.0.13", Mode::Dsr, HashFunction::Murmur3);
        let f = flow(41000, 80, Protocol::Tcp);
        let frame = packet::build(&f, CLIENT_MAC, LB1_MAC, b"dsr");
        let out = fx.run_on(fx.lb1, &frame);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(&out.packet[12..], &frame[12..], "IP and TCP untouched");
        let p = packet::parse(&out.packet).unwrap();
        assert_eq!((p.dst_mac, p.src_mac), (backend_mac(reference_backend(&spec, &f)), LB0_MAC));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn same_interface_is_xdp_tx() {
        let mut fx = Fixture::new("xdp_tx");
        fx.service(80, Protocol::Tcp, "10.201.0.11", Mode::Dsr, HashFunction::Xxhash);
        // A client on the backends' segment: in and out through lb0.
        let f = Flow { src: Ipv4Addr::new(10, 201, 0, 15), ..flow(42000, 80, Protocol::Tcp) };
        let out = fx.run_on(fx.lb0, &packet::build(&f, [2, 0, 0, 0, 0, 15], LB0_MAC, b""));
        assert_eq!(out.action, action::TX);
        assert_eq!(packet::parse(&out.packet).unwrap().dst_mac, backend_mac(Ipv4Addr::new(10, 201, 0, 11)));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn flow_hash_and_table_agree_with_fulcrum_balance() {
        let mut fx = Fixture::new("agree");
        let backends = "10.201.0.11:1,10.201.0.12:2,10.201.0.13:1";
        for (port, select, hash) in [
            (1001, Select::Maglev, HashFunction::Xxhash),
            (1002, Select::Maglev, HashFunction::Murmur3),
            (1003, Select::Rendezvous, HashFunction::Xxhash),
            (1004, Select::Rendezvous, HashFunction::Murmur3),
        ] {
            let spec = fx.service_with(port, Protocol::Tcp, backends, Mode::Nat, select, hash);
            for sport in 20000..20300 {
                let f = flow(sport, port, Protocol::Tcp);
                let got = packet::parse(&fx.client_sends(&f).packet).unwrap().flow.dst;
                assert_eq!(got, reference_backend(&spec, &f), "{select:?} {hash:?} sport {sport}");
            }
        }
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn nat_replies_get_the_vip_back_as_source() {
        let mut fx = Fixture::new("reply");
        fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.12", Mode::Nat, HashFunction::Xxhash);
        let f = flow(43000, 80, Protocol::Tcp);
        let backend = packet::parse(&fx.client_sends(&f).packet).unwrap().flow.dst;
        let reply = Flow { src: backend, dst: CLIENT, sport: 8080, dport: 43000, proto: Protocol::Tcp };
        let out = fx.run_on(fx.lb0, &packet::build(&reply, backend_mac(backend), LB0_MAC, b"answer"));
        assert_eq!(out.action, action::REDIRECT);
        let p = packet::parse(&out.packet).unwrap();
        assert_eq!(p.flow, Flow { src: VIP, sport: 80, ..reply });
        assert_eq!((p.dst_mac, p.src_mac), (CLIENT_MAC, LB1_MAC));
        assert!(p.ip_checksum_ok && p.l4_checksum_ok);
        // A reply of a flow the LB never saw is not rewritten.
        let stranger = Flow { dport: 43001, ..reply };
        let out = fx.run_on(fx.lb0, &packet::build(&stranger, backend_mac(backend), LB0_MAC, b""));
        assert_eq!(out.action, action::PASS);
        assert_eq!(packet::parse(&out.packet).unwrap().flow, stranger);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn conntrack_keeps_established_flows_when_backends_change() {
        let mut fx = Fixture::new("conntrack");
        let three = "10.201.0.11,10.201.0.12,10.201.0.13";
        let spec = fx.service(80, Protocol::Tcp, three, Mode::Nat, HashFunction::Xxhash);
        let flows: Vec<Flow> = (30000..30600).map(|p| flow(p, 80, Protocol::Tcp)).collect();
        let backend_of = |fx: &Fixture, f: &Flow| packet::parse(&fx.client_sends(f).packet).unwrap().flow.dst;
        let before: Vec<Ipv4Addr> = flows.iter().map(|f| backend_of(&fx, f)).collect();

        // Adding a backend: every established flow stays; the table (fresh
        // flows) now sends some to the new one.
        let four =
            fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.12,10.201.0.13,10.201.0.15", Mode::Nat, spec.hash);
        assert_eq!(flows.iter().map(|f| backend_of(&fx, f)).collect::<Vec<_>>(), before);
        let fresh: Vec<Ipv4Addr> = (50000..50400).map(|p| backend_of(&fx, &flow(p, 80, Protocol::Tcp))).collect();
        assert!(fresh.contains(&Ipv4Addr::new(10, 201, 0, 15)));
        for (p, got) in (50000..50400).zip(&fresh) {
            assert_eq!(*got, reference_backend(&four, &flow(p, 80, Protocol::Tcp)));
        }

        // Removing one: only its flows move.
        let gone = Ipv4Addr::new(10, 201, 0, 12);
        fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.13,10.201.0.15", Mode::Nat, spec.hash);
        for (f, was) in flows.iter().zip(&before) {
            let now = backend_of(&fx, f);
            if *was == gone {
                assert_ne!(now, gone);
            } else {
                assert_eq!(now, *was, "{f:?} moved");
            }
        }
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn weights_set_the_spread_and_counters_count() {
        let mut fx = Fixture::new("weights");
        fx.service(80, Protocol::Tcp, "10.201.0.11:1,10.201.0.12:2,10.201.0.13:1", Mode::Nat, HashFunction::Murmur3);
        let n = 4000u16;
        for p in 0..n {
            fx.client_sends(&flow(10000 + p, 80, Protocol::Tcp));
        }
        let stats = &fx.loaded.dataplane.stats().unwrap()[0];
        assert_eq!(stats.total.flows, n as u64);
        assert_eq!(stats.total.packets, n as u64);
        let share: Vec<f64> = stats.backends.iter().map(|c| c.flows as f64 / n as f64).collect();
        for (s, want) in share.iter().zip([0.25, 0.5, 0.25]) {
            assert!((s - want).abs() < 0.04, "{share:?}");
        }
        // A conntrack hit counts a packet, not a flow.
        fx.client_sends(&flow(10000, 80, Protocol::Tcp));
        let stats = &fx.loaded.dataplane.stats().unwrap()[0];
        assert_eq!((stats.total.packets, stats.total.flows), (n as u64 + 1, n as u64));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn traffic_for_no_service_passes_untouched() {
        let mut fx = Fixture::new("nomatch");
        fx.service(80, Protocol::Tcp, "10.201.0.11", Mode::Nat, HashFunction::Xxhash);
        let frames = [
            packet::build(&flow(40000, 81, Protocol::Tcp), CLIENT_MAC, LB1_MAC, b""),
            packet::build(&flow(40000, 80, Protocol::Udp), CLIENT_MAC, LB1_MAC, b""),
            packet::build(
                &Flow { dst: Ipv4Addr::new(10, 201, 1, 2), ..flow(40000, 80, Protocol::Tcp) },
                CLIENT_MAC,
                LB1_MAC,
                b"",
            ),
        ];
        let mut icmp = frames[0].clone();
        icmp[14 + 9] = 1;
        let mut arp = frames[0].clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        // IPv6 to an address with no IPv6 service.
        let v6 = Flow6 { src: CLIENT6, dst: VIP6, sport: 40000, dport: 80, proto: Protocol::Tcp };
        let ipv6 = packet::build6(&v6, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"");
        for frame in frames.iter().chain([&icmp, &arp, &ipv6]) {
            let out = fx.run_on(fx.lb1, frame);
            assert_eq!((out.action, &out.packet), (action::PASS, frame));
        }
        let totals = fx.loaded.dataplane.totals().unwrap();
        assert_eq!(totals[0], ("passed", 6));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn malformed_packets_are_dropped_or_passed_never_forwarded() {
        let mut fx = Fixture::new("malformed");
        fx.service(80, Protocol::Tcp, "10.201.0.11", Mode::Nat, HashFunction::Xxhash);
        let good = packet::build(&flow(40000, 80, Protocol::Tcp), CLIENT_MAC, LB1_MAC, b"");
        let mut cases: Vec<(&str, Vec<u8>, u32)> = vec![
            ("truncated TCP header", good[..14 + 20 + 10].to_vec(), action::DROP),
            ("truncated IP header", good[..14 + 12].to_vec(), action::DROP),
            // (BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header.)
            ("IPv4 ethertype, no IP header", good[..14].to_vec(), action::DROP),
        ];
        let mut long = good.clone();
        long[14 + 2..14 + 4].copy_from_slice(&200u16.to_be_bytes());
        cases.push(("IP length beyond the frame", long, action::DROP));
        let mut ihl = good.clone();
        ihl[14] = 0x44;
        cases.push(("IHL below 5", ihl, action::DROP));
        let mut v6 = good.clone();
        v6[14] = 0x65;
        cases.push(("version 6 in an IPv4 frame", v6, action::DROP));
        let mut frag = good.clone();
        frag[14 + 6] = 0x20; // more fragments
        cases.push(("fragment", frag, action::PASS));
        let mut options = packet::build(&flow(40000, 80, Protocol::Tcp), CLIENT_MAC, LB1_MAC, b"....");
        options[14] = 0x46;
        cases.push(("IP options", options, action::PASS));
        for (what, frame, want) in &cases {
            let out = fx.run_on(fx.lb1, frame);
            assert_eq!(out.action, *want, "{what}");
            assert_eq!(&out.packet, frame, "{what}: not rewritten");
        }
        assert_eq!(fx.loaded.dataplane.stats().unwrap()[0].total.packets, 0);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn unresolved_next_hop_goes_to_the_kernel_rewritten() {
        let mut fx = Fixture::new("noneigh");
        fx.service(80, Protocol::Tcp, "10.201.0.14", Mode::Nat, HashFunction::Xxhash);
        let out = fx.client_sends(&flow(40000, 80, Protocol::Tcp));
        assert_eq!(out.action, action::PASS);
        let p = packet::parse(&out.packet).unwrap();
        assert_eq!((p.flow.dst, p.flow.dport), (Ipv4Addr::new(10, 201, 0, 14), 8080));
        assert!(p.ip_checksum_ok && p.l4_checksum_ok);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn deleted_service_passes_and_list_shows_the_rest() {
        let mut fx = Fixture::new("delete");
        let a = fx.service(80, Protocol::Tcp, "10.201.0.11:3,10.201.0.12", Mode::Nat, HashFunction::Xxhash);
        let b = fx.service(443, Protocol::Tcp, "10.201.0.13", Mode::Dsr, HashFunction::Murmur3);
        let listed = fx.loaded.dataplane.services().unwrap();
        assert_eq!(listed.iter().map(|s| &s.spec).collect::<Vec<_>>(), [&a, &b]);
        // An established flow of the deleted service passes too (its conntrack
        // entry names a freed backend slot).
        assert_eq!(fx.client_sends(&flow(40001, 80, Protocol::Tcp)).action, action::REDIRECT);
        assert!(fx.loaded.dataplane.delete(&a.key).unwrap());
        assert!(!fx.loaded.dataplane.delete(&a.key).unwrap());
        assert_eq!(fx.client_sends(&flow(40000, 80, Protocol::Tcp)).action, action::PASS);
        assert_eq!(fx.client_sends(&flow(40001, 80, Protocol::Tcp)).action, action::PASS);
        assert_eq!(fx.loaded.dataplane.services().unwrap().len(), 1);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn cached_next_hop_follows_a_neighbour_change_within_the_ttl() {
        let mut fx = Fixture::new("nexthop");
        let backend = Ipv4Addr::new(10, 201, 0, 11);
        fx.service(80, Protocol::Tcp, "10.201.0.11", Mode::Dsr, HashFunction::Xxhash);
        let dst_mac =
            |fx: &Fixture| packet::parse(&fx.client_sends(&flow(40000, 80, Protocol::Tcp)).packet).unwrap().dst_mac;
        assert_eq!(dst_mac(&fx), backend_mac(backend));
        fx.net.ip(&["neigh", "replace", "10.201.0.11", "lladdr", "02:00:00:00:00:99", "dev", "lb0"]).unwrap();
        // The TTL is 250 jiffies: 2.5 s at CONFIG_HZ=100, the slowest.
        std::thread::sleep(std::time::Duration::from_millis(2600));
        assert_eq!(dst_mac(&fx), [2, 0, 0, 0, 0, 0x99]);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn a_mode_change_applies_to_established_flows() {
        let mut fx = Fixture::new("modechange");
        let f = flow(44000, 80, Protocol::Tcp);
        // NAT without port translation, so that the backend stays the same
        // backend (same address and port) when the mode changes.
        let mut spec = ServiceSpec {
            key: ServiceKey { vip: VIP.into(), port: 80, proto: Protocol::Tcp },
            backend_port: 80,
            backends: parse_endpoints("10.201.0.11").unwrap(),
            mode: Mode::Nat,
            select: Select::Maglev,
            hash: HashFunction::Xxhash,
        };
        fx.loaded.dataplane.upsert(&spec).unwrap();
        let out = fx.client_sends(&f);
        assert_eq!(packet::parse(&out.packet).unwrap().flow.dst, Ipv4Addr::new(10, 201, 0, 11));
        // Now DSR: the flow's conntrack entry still holds (one flow counted),
        // and the packet leaves with only its MACs changed.
        spec.mode = Mode::Dsr;
        assert_eq!(fx.loaded.dataplane.upsert(&spec).unwrap().added, 0);
        let out = fx.client_sends(&f);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(packet::parse(&out.packet).unwrap().flow, f);
        let stats = &fx.loaded.dataplane.stats().unwrap()[0];
        assert_eq!((stats.total.packets, stats.total.flows), (2, 1));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn benchmark_variant_repeats_nat_hits_and_makes_new_flows() {
        use fulcrum_xdp::dataplane::BenchMode;
        require_bpf("bench_variant");
        let net = FibFixture::new(&format!("fx{}-benchvar", std::process::id())).unwrap();
        let mut bench = Loaded::bench().unwrap();
        let spec = ServiceSpec {
            key: ServiceKey { vip: VIP.into(), port: 80, proto: Protocol::Tcp },
            backend_port: 8080,
            backends: parse_endpoints("10.201.0.11,10.201.0.12").unwrap(),
            mode: Mode::Nat,
            select: Select::Maglev,
            hash: HashFunction::Xxhash,
        };
        bench.dataplane.upsert(&spec).unwrap();
        let frame = packet::build(&flow(45000, 80, Protocol::Tcp), CLIENT_MAC, LB1_MAC, b"bench");
        let run = |bench: &Loaded, repeat| testrun::run(bench.program_fd().unwrap(), &frame, net.lb1, repeat).unwrap();
        // Off: the production program; a NAT rewrite makes the second
        // repetition a packet for no service.
        bench.bench_mode(BenchMode::Off, 1).unwrap();
        run(&bench, 10);
        let total = |bench: &Loaded| bench.dataplane.stats().unwrap()[0].total;
        assert_eq!((total(&bench).packets, total(&bench).flows), (1, 1));
        // Restore: every repetition is the client's packet, a conntrack hit.
        bench.bench_mode(BenchMode::Restore, 2).unwrap();
        let out = run(&bench, 1000);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(packet::parse(&out.packet).unwrap().flow.dport, 8080);
        assert_eq!((total(&bench).packets, total(&bench).flows), (1001, 1));
        // Uncached: still the same flow, through the conntrack map.
        bench.bench_mode(BenchMode::Uncached, 3).unwrap();
        let out = run(&bench, 1000);
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!((total(&bench).packets, total(&bench).flows), (2001, 1));
        // NewFlows: every repetition a new flow.
        bench.bench_mode(BenchMode::NewFlows, 4).unwrap();
        run(&bench, 1000);
        assert_eq!((total(&bench).packets, total(&bench).flows), (3001, 1001));
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn a_down_backend_takes_no_new_flows_and_keeps_its_established_ones() {
        let mut fx = Fixture::new("down");
        let three = "10.201.0.11,10.201.0.12,10.201.0.13";
        let spec = fx.service(80, Protocol::Tcp, three, Mode::Nat, HashFunction::Xxhash);
        let backend_of = |fx: &Fixture, f: &Flow| packet::parse(&fx.client_sends(f).packet).unwrap().flow.dst;
        let flows: Vec<Flow> = (30000..30300).map(|p| flow(p, 80, Protocol::Tcp)).collect();
        let before: Vec<Ipv4Addr> = flows.iter().map(|f| backend_of(&fx, f)).collect();
        let sick = Ipv4Addr::new(10, 201, 0, 12);
        assert!(before.contains(&sick));
        let dp = &mut fx.loaded.dataplane;
        assert!(dp.set_down(&spec.key, sick.into(), true).unwrap());
        assert!(!dp.set_down(&spec.key, sick.into(), true).unwrap(), "down already");
        assert_eq!(dp.services().unwrap()[0].down, [false, true, false]);
        let drained =
            ServiceSpec { backends: parse_endpoints("10.201.0.11,10.201.0.12:0,10.201.0.13").unwrap(), ..spec.clone() };
        let check = |fx: &Fixture, want: &ServiceSpec| {
            // Established flows stay, the sick backend's included.
            assert_eq!(flows.iter().map(|f| backend_of(fx, f)).collect::<Vec<_>>(), before);
            // New flows follow the table without it.
            for p in 50000..50300 {
                let f = flow(p, 80, Protocol::Tcp);
                assert_eq!(backend_of(fx, &f), reference_backend(want, &f));
            }
        };
        check(&fx, &drained);
        // `lb create` again with the same endpoints: it stays down.
        fx.loaded.dataplane.upsert(&spec).unwrap();
        assert_eq!(fx.loaded.dataplane.services().unwrap()[0].down, [false, true, false]);
        // All down: the table is the whole set again (fail open).
        for ip in [[10, 201, 0, 11], [10, 201, 0, 13]] {
            assert!(fx.loaded.dataplane.set_down(&spec.key, Ipv4Addr::from(ip).into(), true).unwrap());
        }
        let f = flow(60000, 80, Protocol::Tcp);
        assert_eq!(backend_of(&fx, &f), reference_backend(&spec, &f));
        // Back up.
        for ip in [[10, 201, 0, 11], [10, 201, 0, 12], [10, 201, 0, 13]] {
            assert!(fx.loaded.dataplane.set_down(&spec.key, Ipv4Addr::from(ip).into(), false).unwrap());
        }
        assert_eq!(fx.loaded.dataplane.services().unwrap()[0].down, [false; 3]);
        assert_eq!(fx.loaded.dataplane.services().unwrap()[0].spec, spec, "the weights are the configured ones");
        let f = flow(60001, 80, Protocol::Tcp);
        assert_eq!(backend_of(&fx, &f), reference_backend(&spec, &f));
        assert!(fx.loaded.dataplane.set_down(&spec.key, Ipv4Addr::new(10, 201, 0, 99).into(), true).is_err());
    }

    // IPv6: the same paths, with golden output frames (built from scratch,
    // full checksums) that the program's output must equal byte for byte.

    fn service6(fx: &mut Fixture, port: u16, proto: Protocol, mode: Mode, hash: HashFunction) -> ServiceSpec {
        let spec = ServiceSpec {
            key: ServiceKey { vip: VIP6.into(), port, proto },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: parse_endpoints("[fd00:201::11]:1,fd00:201::12,[fd00:201::13]").unwrap(),
            mode,
            select: Select::Maglev,
            hash,
        };
        fx.loaded.dataplane.upsert(&spec).unwrap();
        spec
    }

    fn flow6(sport: u16, dport: u16, proto: Protocol) -> Flow6 {
        Flow6 { src: CLIENT6, dst: VIP6, sport, dport, proto }
    }

    fn reference_backend6(spec: &ServiceSpec, f: &Flow6) -> Ipv6Addr {
        let (backends, table) = fulcrum_xdp::table::build(spec).unwrap();
        match backends[table[entry(f.hash(spec.hash))] as usize].ip {
            IpAddr::V6(ip) => ip,
            IpAddr::V4(ip) => panic!("{ip} in an IPv6 service"),
        }
    }

    fn total(fx: &Fixture, name: &str) -> u64 {
        fx.loaded.dataplane.totals().unwrap().into_iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn v6_nat_forward_and_reply_are_golden() {
        let mut fx = Fixture::new("v6_nat");
        for (port, proto, hash) in
            [(80, Protocol::Tcp, HashFunction::Xxhash), (53, Protocol::Udp, HashFunction::Murmur3)]
        {
            let spec = service6(&mut fx, port, proto, Mode::Nat, hash);
            let f = flow6(40000, port, proto);
            let out = fx.run_on(fx.lb1, &packet::build6(&f, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"fixture6"));
            assert_eq!(out.action, action::REDIRECT, "{proto}: lb1 → lb0");
            let backend = reference_backend6(&spec, &f);
            let fwd = Flow6 { dst: backend, dport: 8080, ..f };
            let golden = packet::build6(&fwd, packet::tcp::SYN, LB0_MAC, backend_mac6(backend), b"fixture6");
            assert_eq!(out.packet, golden, "{proto}: NAT forward");
            // The backend's reply gets the VIP and service port back.
            let reply = Flow6 { src: backend, dst: CLIENT6, sport: 8080, dport: 40000, proto };
            let frame =
                packet::build6(&reply, packet::tcp::SYN | packet::tcp::ACK, backend_mac6(backend), LB0_MAC, b"r");
            let replies = total(&fx, "nat_replies");
            let out = fx.run_on(fx.lb0, &frame);
            assert_eq!(out.action, action::REDIRECT, "{proto}: lb0 → lb1");
            let back = Flow6 { src: VIP6, sport: port, ..reply };
            let golden = packet::build6(&back, packet::tcp::SYN | packet::tcp::ACK, LB1_MAC, CLIENT_MAC, b"r");
            assert_eq!(out.packet, golden, "{proto}: NAT reply");
            assert_eq!(total(&fx, "nat_replies"), replies + 1);
        }
        let stats = fx.loaded.dataplane.stats().unwrap();
        assert_eq!(stats.iter().map(|s| s.total.flows).sum::<u64>(), 2, "one new flow per service");
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn v6_dsr_rewrites_only_the_macs_and_hashes_as_the_reference() {
        let mut fx = Fixture::new("v6_dsr");
        for (port, hash) in [(80, HashFunction::Xxhash), (81, HashFunction::Murmur3)] {
            let spec = service6(&mut fx, port, Protocol::Tcp, Mode::Dsr, hash);
            let mut seen = std::collections::HashSet::new();
            for sport in 41000..41100 {
                let f = flow6(sport, port, Protocol::Tcp);
                let frame = packet::build6(&f, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"dsr6");
                let out = fx.run_on(fx.lb1, &frame);
                assert_eq!(out.action, action::REDIRECT);
                let backend = reference_backend6(&spec, &f);
                seen.insert(backend);
                let golden = packet::build6(&f, packet::tcp::SYN, LB0_MAC, backend_mac6(backend), b"dsr6");
                assert_eq!(out.packet, golden, "{hash:?} sport {sport}: only the MACs change");
            }
            assert_eq!(seen.len(), 3, "{hash:?}: every backend takes flows");
        }
    }

    /// Keep this test's thread on CPU 0: the caches are per CPU.
    fn stay_on_one_cpu() {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the call reads it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
        }
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn v6_established_flows_are_served_from_the_flow_cache() {
        let mut fx = Fixture::sized("v6_cache", 512);
        stay_on_one_cpu();
        let spec = ServiceSpec {
            key: ServiceKey { vip: VIP6.into(), port: 80, proto: Protocol::Tcp },
            backend_port: 80,
            backends: parse_endpoints("fd00:201::11,fd00:201::12").unwrap(),
            mode: Mode::Dsr,
            select: Select::Maglev,
            hash: HashFunction::Xxhash,
        };
        fx.loaded.dataplane.upsert(&spec).unwrap();
        let three = ServiceSpec {
            backends: parse_endpoints("fd00:201::11,fd00:201::12,fd00:201::13").unwrap(),
            ..spec.clone()
        };
        // A flow that the table with a third backend sends elsewhere.
        let f = (43000..44000)
            .map(|p| flow6(p, 80, Protocol::Tcp))
            .find(|f| reference_backend6(&spec, f) != reference_backend6(&three, f))
            .expect("some flow moves");
        let backend = reference_backend6(&spec, &f);
        let send = |fx: &Fixture, f: &Flow6, flags| {
            let out = fx.run_on(fx.lb1, &packet::build6(f, flags, CLIENT_MAC, LB1_MAC, b"cache6"));
            assert_eq!(out.action, action::REDIRECT);
            packet::parse6(&out.packet).unwrap().dst_mac
        };
        send(&fx, &f, packet::tcp::SYN);
        assert_eq!(send(&fx, &f, packet::tcp::ACK), backend_mac6(backend), "established");
        // New flows push the flow's conntrack6 entry out of the small table:
        // SYNs (never cached), each sent twice so that the LRU counts their
        // entries as used as the flow's (it evicts unused entries first).
        for i in 0..4000u16 {
            let other = Flow6 { src: Ipv6Addr::new(0xfd00, 0x201, 3, 0, 0, 0, 0, i), ..f };
            send(&fx, &other, packet::tcp::SYN);
            send(&fx, &other, packet::tcp::SYN);
        }
        let entries = fx.loaded.dataplane.conntrack6().unwrap();
        assert!(!entries.iter().any(|e| e.key == f.key()), "the flow's entry was not evicted: the test shows nothing");
        // The table changes; without its entry, the flow's next packet would
        // be a new flow on it. From the cache, it stays on its backend.
        fx.loaded.dataplane.upsert(&three).unwrap();
        assert_ne!(reference_backend6(&three, &f), backend);
        let flows = fx.loaded.dataplane.stats().unwrap()[0].total.flows;
        assert_eq!(send(&fx, &f, packet::tcp::ACK), backend_mac6(backend), "not served from the flow cache");
        assert_eq!(fx.loaded.dataplane.stats().unwrap()[0].total.flows, flows, "counted as a new flow");
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn v6_next_hop_is_cached_and_follows_a_neighbour_change_within_the_ttl() {
        let mut fx = Fixture::new("v6_nexthop");
        stay_on_one_cpu();
        let spec = service6(&mut fx, 80, Protocol::Tcp, Mode::Dsr, HashFunction::Xxhash);
        let f = flow6(42000, 80, Protocol::Tcp);
        let backend = reference_backend6(&spec, &f);
        let frame = packet::build6(&f, packet::tcp::ACK, CLIENT_MAC, LB1_MAC, b"nh6");
        let dst_mac = |fx: &Fixture| packet::parse6(&fx.run_on(fx.lb1, &frame).packet).unwrap().dst_mac;
        assert_eq!(dst_mac(&fx), backend_mac6(backend));
        let (addr, new_mac) = (backend.to_string(), "02:00:00:00:00:99");
        fx.net.ip(&["-6", "neigh", "replace", &addr, "lladdr", new_mac, "dev", "lb0"]).unwrap();
        // Within the TTL (250 jiffies, at least 0.25 s) the cached next hop
        // is used, without a FIB lookup; after it, the new neighbour.
        assert_eq!(dst_mac(&fx), backend_mac6(backend), "the next hop was not cached");
        std::thread::sleep(std::time::Duration::from_millis(2600));
        assert_eq!(dst_mac(&fx), [2, 0, 0, 0, 0, 0x99]);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn v6_extension_headers_and_other_addresses_pass_to_the_kernel() {
        let mut fx = Fixture::new("v6_pass");
        service6(&mut fx, 80, Protocol::Tcp, Mode::Nat, HashFunction::Xxhash);
        let f = flow6(42000, 80, Protocol::Tcp);
        // Next header hop-by-hop (0), fragment (44): not balanced, counted.
        for next in [0u8, 44] {
            let mut frame = packet::build6(&f, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"ext");
            frame[14 + 6] = next;
            let before = total(&fx, "unsupported");
            let out = fx.run_on(fx.lb1, &frame);
            assert_eq!((out.action, &out.packet), (action::PASS, &frame), "next header {next}");
            assert_eq!(total(&fx, "unsupported"), before + 1);
        }
        // ICMPv6 (58), and TCP to an address that is no VIP: passed.
        let mut icmp = packet::build6(&f, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"icmp");
        icmp[14 + 6] = 58;
        let other = Flow6 { dst: "fd00:201:1::2".parse().unwrap(), ..f };
        for frame in [icmp, packet::build6(&other, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"x")] {
            let before = total(&fx, "passed");
            let out = fx.run_on(fx.lb1, &frame);
            assert_eq!((out.action, &out.packet), (action::PASS, &frame));
            assert_eq!(total(&fx, "passed"), before + 1);
        }
        // A payload length beyond the frame: dropped as malformed.
        let mut short = packet::build6(&f, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b"x");
        short[14 + 4..14 + 6].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(fx.run_on(fx.lb1, &short).action, action::DROP);
        assert_eq!(fx.loaded.dataplane.stats().unwrap()[0].total.packets, 0, "nothing balanced");
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn v6_and_v4_services_coexist_and_list_back() {
        let mut fx = Fixture::new("v6_dual");
        let v4 = fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.12", Mode::Nat, HashFunction::Xxhash);
        let v6 = service6(&mut fx, 80, Protocol::Tcp, Mode::Nat, HashFunction::Xxhash);
        let listed: Vec<ServiceSpec> = fx.loaded.dataplane.services().unwrap().into_iter().map(|s| s.spec).collect();
        let mut want = vec![v4.clone(), v6.clone()];
        for s in &mut want {
            s.backends.sort_by_key(|b| b.ip);
        }
        assert_eq!(listed, want);
        assert_nat_forwarded(&fx, &v4, &flow(43000, 80, Protocol::Tcp));
        let f = flow6(43000, 80, Protocol::Tcp);
        let out = fx.run_on(fx.lb1, &packet::build6(&f, packet::tcp::SYN, CLIENT_MAC, LB1_MAC, b""));
        let p = packet::parse6(&out.packet).unwrap();
        assert_eq!((p.flow.dst, p.l4_checksum_ok), (reference_backend6(&v6, &f), true));
        assert!(fx.loaded.dataplane.delete(&v6.key).unwrap());
        let out = fx.run_on(fx.lb1, &packet::build6(&flow6(43001, 80, Protocol::Tcp), 2, CLIENT_MAC, LB1_MAC, b""));
        assert_eq!(out.action, action::PASS, "deleted");
        // An IPv4 VIP with IPv6 endpoints is refused.
        let mixed = ServiceSpec { backends: parse_endpoints("fd00:201::11").unwrap(), ..v4 };
        assert!(fx.loaded.dataplane.upsert(&mixed).unwrap_err().to_string().contains("family"));
    }
}
