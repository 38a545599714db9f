//! Connection tracking by state, through `BPF_PROG_TEST_RUN` in the
//! namespace of `fulcrum_xdp::fixture`: entries follow the TCP flags in
//! both directions, an expired entry or a SYN on a closed one makes a new
//! flow, and with the sweep a table filled by closed flows keeps its live
//! flows. Needs root and the program (built with clang): the tests are
//! ignored unless asked for, and fail where they cannot run.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// The IPv4 address of an IPv4 service's backend.
fn v4(ip: IpAddr) -> Ipv4Addr {
    match ip {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(ip) => panic!("{ip} in an IPv4 service"),
    }
}
use std::time::Duration;

use fulcrum_balance::HashFunction;
use fulcrum_xdp::conntrack::{Direction, Entry, State, Timeouts};
use fulcrum_xdp::fixture::{backend_mac, FibFixture, CLIENT, CLIENT_MAC, LB0_MAC, LB1_MAC, VIP};
use fulcrum_xdp::flow::{entry, Flow};
use fulcrum_xdp::maps::FlowKey;
use fulcrum_xdp::netns::require_bpf;
use fulcrum_xdp::packet::{self, tcp};
use fulcrum_xdp::spec::{parse_endpoints, Mode, Protocol, Select, ServiceKey, ServiceSpec};
use fulcrum_xdp::testrun::{self, action};
use fulcrum_xdp::Loaded;

struct Fx {
    loaded: Loaded,
    net: FibFixture,
}

impl Fx {
    fn new(test: &str, conntrack_entries: Option<u32>) -> Fx {
        require_bpf(test);
        let net = FibFixture::new(&format!("ct{}-{}", std::process::id(), &test[..test.len().min(8)])).unwrap();
        let loaded = match conntrack_entries {
            Some(n) => Loaded::with_conntrack_entries(n),
            None => Loaded::new(),
        };
        Fx { loaded: loaded.unwrap(), net }
    }

    fn service(&mut self, port: u16, proto: Protocol, backends: &str, mode: Mode) -> ServiceSpec {
        let spec = ServiceSpec {
            key: ServiceKey { vip: VIP.into(), port, proto },
            backend_port: if mode == Mode::Dsr { port } else { 8080 },
            backends: parse_endpoints(backends).unwrap(),
            mode,
            select: Select::Maglev,
            hash: HashFunction::Xxhash,
        };
        self.loaded.dataplane.upsert(&spec).unwrap();
        spec
    }

    fn timeouts(&mut self, set: &[(State, Duration)]) {
        let mut t = Timeouts::default();
        for &(s, d) in set {
            t.set(s, d).unwrap();
        }
        self.loaded.dataplane.set_timeouts(&t).unwrap();
    }

    /// A client packet with `flags`: the backend it left for (NAT: its
    /// new destination; DSR: the owner of its new destination MAC).
    fn send(&self, f: &Flow, flags: u8) -> Ipv4Addr {
        let frame = packet::build_tcp(f, flags, CLIENT_MAC, LB1_MAC, b"ct");
        let out = testrun::run(self.loaded.program_fd().unwrap(), &frame, self.net.lb1, 1).unwrap();
        assert_eq!(out.action, action::REDIRECT, "{f:?} flags {flags:#x}");
        let p = packet::parse(&out.packet).unwrap();
        if p.flow.dst != VIP {
            return p.flow.dst;
        }
        let backend = Ipv4Addr::new(10, 201, 0, p.dst_mac[5]);
        assert_eq!(backend_mac(backend), p.dst_mac);
        backend
    }

    /// A NAT reply with `flags` from `backend` to the client of `f`:
    /// rewritten back to the VIP.
    fn reply(&self, f: &Flow, backend: Ipv4Addr, flags: u8) {
        let r = Flow { src: backend, dst: f.src, sport: 8080, dport: f.sport, proto: f.proto };
        let frame = packet::build_tcp(&r, flags, backend_mac(backend), LB0_MAC, b"ct");
        let out = testrun::run(self.loaded.program_fd().unwrap(), &frame, self.net.lb0, 1).unwrap();
        assert_eq!(out.action, action::REDIRECT);
        assert_eq!(packet::parse(&out.packet).unwrap().flow.src, VIP);
    }

    fn entries(&self) -> HashMap<FlowKey, Entry> {
        self.loaded.dataplane.conntrack().unwrap().into_iter().map(|e| (e.key, e)).collect()
    }

    fn flows(&self) -> u64 {
        self.loaded.dataplane.stats().unwrap().iter().map(|s| s.total.flows).sum()
    }
}

fn flow(sport: u16, dport: u16, proto: Protocol) -> Flow {
    Flow { src: CLIENT, dst: VIP, sport, dport, proto }
}

fn reply_key(f: &Flow, backend: Ipv4Addr) -> FlowKey {
    Flow { src: backend, dst: f.src, sport: 8080, dport: f.sport, proto: f.proto }.key()
}

/// The backend the table of `spec` gives `f`.
fn table_backend(spec: &ServiceSpec, f: &Flow) -> Ipv4Addr {
    let (backends, table) = fulcrum_xdp::table::build(spec).unwrap();
    v4(backends[table[entry(f.hash(spec.hash))] as usize].ip)
}

/// A flow on `port` that `before`'s table and `after`'s send to different
/// backends.
fn moving_flow(before: &ServiceSpec, after: &ServiceSpec, port: u16, proto: Protocol) -> Flow {
    (20000..30000)
        .map(|p| flow(p, port, proto))
        .find(|f| table_backend(before, f) != table_backend(after, f))
        .expect("some flow moves")
}

/// `#[ignore]`d: run by `cargo test -- --ignored` as root (scripts/test),
/// failing, not passing, where they cannot run; `--skip needs_root::` leaves
/// them out.
mod needs_root {
    use super::*;

    const THREE: &str = "10.201.0.11,10.201.0.12,10.201.0.13";

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn nat_entries_follow_the_tcp_flags_of_both_directions() {
        let mut fx = Fx::new("natstate", None);
        fx.service(80, Protocol::Tcp, THREE, Mode::Nat);
        let f = flow(40000, 80, Protocol::Tcp);
        let states = |fx: &Fx, b| {
            let e = fx.entries();
            (e[&f.key()].state, e[&reply_key(&f, b)].state)
        };
        let b = fx.send(&f, tcp::SYN);
        assert_eq!(states(&fx, b), (State::Syn, State::Syn));
        fx.reply(&f, b, tcp::SYN | tcp::ACK);
        assert_eq!(states(&fx, b), (State::Syn, State::Syn));
        assert_eq!(fx.send(&f, tcp::ACK), b);
        assert_eq!(states(&fx, b), (State::Established, State::Syn));
        fx.reply(&f, b, tcp::ACK);
        assert_eq!(states(&fx, b), (State::Established, State::Established));
        let e = fx.entries();
        let (fwd, rep) = (&e[&f.key()], &e[&reply_key(&f, b)]);
        assert_eq!((fwd.direction, rep.direction), (Direction::Forward, Direction::Reply));
        assert_eq!(fwd.via, Some(std::net::SocketAddrV4::new(b, 8080).into()));
        assert_eq!(rep.via, Some(std::net::SocketAddrV4::new(VIP, 80).into()));
        assert!(!fwd.expired && fwd.idle < Duration::from_secs(1));
        // Served from the flow cache now; a FIN still reaches the entry, and
        // closes the other direction's too.
        for _ in 0..3 {
            assert_eq!(fx.send(&f, tcp::ACK), b);
        }
        assert_eq!(fx.send(&f, tcp::FIN | tcp::ACK), b);
        assert_eq!(states(&fx, b), (State::Closing, State::Closing));
        assert_eq!(fx.flows(), 1);

        // A server's RST closes the client's direction.
        let g = flow(40001, 80, Protocol::Tcp);
        let b = fx.send(&g, tcp::ACK);
        fx.reply(&g, b, tcp::ACK);
        assert_eq!(
            (fx.entries()[&g.key()].state, fx.entries()[&reply_key(&g, b)].state),
            (State::Established, State::Established)
        );
        fx.reply(&g, b, tcp::RST);
        assert_eq!(fx.entries()[&g.key()].state, State::Closing);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn dsr_and_udp_entries_take_their_states() {
        let mut fx = Fx::new("dsrstate", None);
        fx.service(80, Protocol::Tcp, THREE, Mode::Dsr);
        fx.service(53, Protocol::Udp, THREE, Mode::Dsr);
        let f = flow(41000, 80, Protocol::Tcp);
        let state = |fx: &Fx, f: &Flow| fx.entries()[&f.key()].state;
        fx.send(&f, tcp::SYN);
        assert_eq!(state(&fx, &f), State::Syn);
        fx.send(&f, tcp::SYN);
        assert_eq!(state(&fx, &f), State::Syn, "a retransmitted SYN");
        fx.send(&f, tcp::ACK);
        fx.send(&f, tcp::ACK);
        assert_eq!(state(&fx, &f), State::Established);
        fx.send(&f, tcp::RST);
        assert_eq!(state(&fx, &f), State::Closing);
        // A flow first seen in the middle (another node had it) is established.
        let g = flow(41001, 80, Protocol::Tcp);
        fx.send(&g, tcp::ACK);
        assert_eq!(state(&fx, &g), State::Established);
        let u = flow(5353, 53, Protocol::Udp);
        fx.send(&u, 0);
        assert_eq!(state(&fx, &u), State::Udp);
        assert_eq!(fx.entries().len(), 3, "DSR keeps no reply entries");
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn an_expired_entry_is_a_new_flow_on_the_current_table() {
        let mut fx = Fx::new("expired", None);
        let cases = [(53, Protocol::Udp, 0), (80, Protocol::Tcp, tcp::ACK)];
        let mut flows = Vec::new();
        for (port, proto, flags) in cases {
            let two = fx.service(port, proto, "10.201.0.11,10.201.0.12", Mode::Nat);
            let four = ServiceSpec {
                backends: parse_endpoints("10.201.0.11,10.201.0.12,10.201.0.13,10.201.0.15").unwrap(),
                ..two.clone()
            };
            let f = moving_flow(&two, &four, port, proto);
            let was = fx.send(&f, flags);
            assert_eq!(was, table_backend(&two, &f));
            fx.loaded.dataplane.upsert(&four).unwrap();
            // Alive: the entry keeps the flow where it was.
            assert_eq!(fx.send(&f, flags), was, "{proto}");
            flows.push((f, flags, table_backend(&four, &f)));
        }
        // Now short timeouts: the flows' entries expire.
        fx.timeouts(&[(State::Udp, Duration::from_millis(300)), (State::Established, Duration::from_millis(300))]);
        // Idle past the timeout, and past the flow cache's refresh interval
        // (250 jiffies: 2.5 s at the slowest clock tick): a new flow, where
        // the table says.
        std::thread::sleep(Duration::from_millis(2700));
        let before = fx.flows();
        for (f, flags, now) in &flows {
            assert!(fx.entries()[&f.key()].expired, "{f:?}");
            assert_eq!(fx.send(f, *flags), *now, "{f:?}");
            assert!(!fx.entries()[&f.key()].expired);
        }
        assert_eq!(fx.flows(), before + 2);
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn a_syn_on_a_closed_flow_is_a_new_flow() {
        let mut fx = Fx::new("reopen", None);
        let two = fx.service(80, Protocol::Tcp, "10.201.0.11,10.201.0.12", Mode::Dsr);
        let four = ServiceSpec {
            backends: parse_endpoints("10.201.0.11,10.201.0.12,10.201.0.13,10.201.0.15").unwrap(),
            ..two.clone()
        };
        let f = moving_flow(&two, &four, 80, Protocol::Tcp);
        let was = fx.send(&f, tcp::SYN);
        fx.send(&f, tcp::ACK);
        fx.loaded.dataplane.upsert(&four).unwrap();
        assert_eq!(fx.send(&f, tcp::FIN | tcp::ACK), was);
        assert_eq!(fx.send(&f, tcp::ACK), was, "the last ACK of the old connection");
        // The client reuses its port: a new connection, on the current table.
        assert_eq!(fx.send(&f, tcp::SYN), table_backend(&four, &f));
        assert_eq!(fx.entries()[&f.key()].state, State::Syn);
    }

    /// Fill a small table with closed NAT flows (SYN, ACK, FIN) around live
    /// ones that stay quiet, in rounds, sweeping after each round when
    /// `sweep`; the live flows whose entries are still there afterwards.
    fn churn(sweep: bool) -> (usize, usize, Fx) {
        let mut fx = Fx::new(if sweep { "churnswp" } else { "churnlru" }, Some(4096));
        fx.timeouts(&[(State::Closing, Duration::from_millis(50))]);
        fx.service(80, Protocol::Tcp, THREE, Mode::Nat);
        let live: Vec<(Flow, Ipv4Addr)> = (0..300u16)
            .map(|i| {
                let f = flow(1000 + i, 80, Protocol::Tcp);
                let b = fx.send(&f, tcp::SYN);
                fx.send(&f, tcp::ACK);
                (f, b)
            })
            .collect();
        let mut deleted = 0;
        for round in 0..5u16 {
            for i in 0..1000u16 {
                let f = Flow { src: Ipv4Addr::new(10, 201, 3, round as u8), ..flow(20000 + i, 80, Protocol::Tcp) };
                fx.send(&f, tcp::SYN);
                fx.send(&f, tcp::ACK);
                fx.send(&f, tcp::FIN | tcp::ACK);
            }
            if sweep {
                std::thread::sleep(Duration::from_millis(100));
                deleted += fx.loaded.dataplane.conntrack_gc().unwrap().deleted;
            }
        }
        let entries = fx.entries();
        let kept = live
            .iter()
            .filter(|(f, b)| entries.contains_key(&f.key()) && entries.contains_key(&reply_key(f, *b)))
            .count();
        (kept, deleted, fx)
    }

    #[test]
    #[ignore = "needs root and the XDP program built with clang (scripts/test runs it as root)"]
    fn swept_closed_flows_make_room_and_live_flows_survive() {
        // Without the sweep the LRU evicts the quiet live flows first: this
        // is what the test would catch.
        let (kept, _, _) = churn(false);
        assert!(
            kept < 300,
            "without the sweep every live flow survived 10,000 entries in 4,096: the test shows nothing"
        );
        let (kept, deleted, mut fx) = churn(true);
        assert_eq!(kept, 300, "live flows evicted although the sweep freed closed ones");
        assert_eq!(deleted, 5 * 2000, "every closed flow's two entries swept");
        // And the live flows are still served by their entries: on a
        // changed table they stay where they were.
        let spec = fx.loaded.dataplane.services().unwrap()[0].spec.clone();
        let more = ServiceSpec {
            backends: parse_endpoints("10.201.0.11,10.201.0.12,10.201.0.13,10.201.0.15").unwrap(),
            ..spec
        };
        fx.loaded.dataplane.upsert(&more).unwrap();
        let entries = fx.entries();
        for i in 0..300u16 {
            let f = flow(1000 + i, 80, Protocol::Tcp);
            let b = entries[&f.key()].via.unwrap();
            assert_eq!(std::net::IpAddr::from(fx.send(&f, tcp::ACK)), b.ip());
        }
    }
}
