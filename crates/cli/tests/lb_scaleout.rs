//! Scale-out end to end: several `fulcrum lb` nodes behind a router that
//! spreads the VIP over them with ECMP, the route learnt over eBGP from BIRD
//! on every node (scripts/xdp-scaleout-topology; BIRD processes started here
//! and ended by PID). DSR mode, so backends answer through the router.
//!
//! `nodes_pick_the_same_backend_and_announce_only_while_serving`: the
//! multipath route appears with one next hop per node; the same 1,000
//! 5-tuples, run through every node's attached program, get the same backend
//! on every node; `drain`, `announce` and `detach` withdraw and restore the
//! node's next hop. `connections_survive_fleet_changes`: long-lived TCP
//! connections (a request every 100 ms) through the VIP while the test adds
//! a node, drains one, kills one, drains a backend, and removes a node while
//! adding a backend, with and without waiting for ECMP to settle before the
//! table changes; broken connections are counted and asserted, gaps are
//! printed, and the broken count of the naive order is compared with the
//! model of `fulcrum lb simulate` (`fulcrum_xdp::fleet`). Each test runs
//! once per address family: the IPv6 one gives the nodes an IPv6 VIP, which
//! BIRD announces over the same (IPv4) BGP session and the router installs
//! as an IPv6 multipath route. Needs root, the XDP program (built with clang)
//! and BIRD 2: the tests are ignored unless asked for, and fail where they
//! cannot run.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::answer_with_name;
use fulcrum_xdp::fleet;
use fulcrum_xdp::flow::{Flow, Flow6};
use fulcrum_xdp::netns::{require_bpf, Netns};
use fulcrum_xdp::spec::{Protocol, Select};
use fulcrum_xdp::{packet, testrun};

/// The router's address, on the BGP session of every family.
const ROUTER: &str = "10.202.0.254";
const BFD_MS: u32 = 100;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fail, saying why, without root, the XDP program or BIRD.
fn require(test: &str) {
    require_bpf(test);
    if let Some(tool) = ["bird", "birdc"].into_iter().find(|t| Command::new(t).arg("--version").output().is_err()) {
        panic!("{test} cannot run: `{tool}` not found (apt-get install bird2; scripts/xdp-setup does)");
    }
}

/// The address family of the VIP, the backends and the client's traffic
/// (scripts/xdp-scaleout-topology is dual stack: 10.20X.Y.Z ↔ fd00:20X:Y::Z).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    IPv4,
    IPv6,
}

impl Family {
    /// The fabric address ending in `last`.
    fn fabric(self, last: usize) -> String {
        match self {
            Family::IPv4 => format!("10.202.0.{last}"),
            Family::IPv6 => format!("fd00:202::{last}"),
        }
    }

    fn vip(self) -> &'static str {
        match self {
            Family::IPv4 => "10.202.1.1",
            Family::IPv6 => "fd00:202:1::1",
        }
    }

    /// A client address (the `i`th of a few thousand) behind the router.
    fn client(self, i: u32) -> IpAddr {
        match self {
            Family::IPv4 => Ipv4Addr::new(10, 203, 1 + (i / 250) as u8, (i % 250) as u8 + 1).into(),
            Family::IPv6 => Ipv6Addr::new(0xfd00, 0x203, 1 + (i / 250) as u16, 0, 0, 0, 0, (i % 250) as u16 + 1).into(),
        }
    }

    fn any(self) -> IpAddr {
        match self {
            Family::IPv4 => Ipv4Addr::UNSPECIFIED.into(),
            Family::IPv6 => Ipv6Addr::UNSPECIFIED.into(),
        }
    }
}

/// Node `k`'s IPv4 address: its BGP session's, whatever the VIP's family.
fn node_ip(k: usize) -> String {
    Family::IPv4.fabric(k)
}

/// The router's BIRD: every fabric address may open a session (dynamic
/// BGP) carrying both families, routes learnt are merged into one multipath
/// kernel route per family, BFD on.
fn router_config() -> String {
    format!(
        "router id {ROUTER};\nprotocol device {{}}\n\
         protocol kernel {{ ipv4 {{ import none; export all; }}; merge paths on; }}\n\
         protocol kernel {{ ipv6 {{ import none; export all; }}; merge paths on; }}\n\
         protocol bfd {{ interface \"eth1\" {{ min rx interval {BFD_MS} ms; min tx interval {BFD_MS} ms; multiplier 3; }}; }}\n\
         protocol bgp nodes {{ local {ROUTER} as 65000; neighbor range 10.202.0.0/24 external; bfd on;\n  \
         ipv4 {{ import all; export none; }}; ipv6 {{ import all; export none; }}; }}\n"
    )
}

/// The namespaces, BIRD processes, pins and backend servers of one test;
/// all removed on drop (also when the test panics).
struct Fleet {
    family: Family,
    prefix: String,
    dir: PathBuf,
    birds: BTreeMap<String, Child>,
    nodes: Vec<usize>,
    weights: BTreeMap<usize, u32>,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

impl Fleet {
    fn up(family: Family, name: &str, nodes: usize, backends: usize) -> Fleet {
        let prefix = format!("so{}{name}", std::process::id());
        let dir = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut fleet = Fleet {
            family,
            prefix,
            dir,
            birds: BTreeMap::new(),
            nodes: Vec::new(),
            weights: BTreeMap::new(),
            stop: Arc::new(AtomicBool::new(false)),
            servers: Vec::new(),
        };
        fleet.script(&["up", &nodes.to_string(), &backends.to_string()]);
        let conf = fleet.dir.join("router.conf");
        std::fs::write(&conf, router_config()).unwrap();
        fleet.start_bird("r", &conf);
        for k in 1..=backends {
            fleet.weights.insert(k, 1);
            fleet.serve(k);
        }
        for k in 1..=nodes {
            fleet.start_node(k);
        }
        fleet.wait_nexthops(nodes);
        fleet
    }

    fn script(&self, args: &[&str]) {
        let mut all = vec![args[0], &self.prefix];
        all.extend_from_slice(&args[1..]);
        let status = Command::new(repo().join("scripts/xdp-scaleout-topology")).args(&all).status().unwrap();
        assert!(status.success(), "xdp-scaleout-topology {all:?} failed");
    }

    fn ns(&self, node: &str) -> String {
        format!("{}-{node}", self.prefix)
    }

    fn pin_dir(&self, k: usize) -> String {
        format!("/sys/fs/bpf/{}-lb{k}", self.prefix)
    }

    fn backend_ip(&self, k: usize) -> String {
        self.family.fabric(10 + k)
    }

    /// The router's next hops for the VIP when node `k`s serve, in order.
    fn node_hops(&self, k: &[usize]) -> Vec<String> {
        k.iter().map(|&k| self.family.fabric(k)).collect()
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.ctl"))
    }

    /// BIRD in namespace `name`, in the foreground so that it is our child.
    fn start_bird(&mut self, name: &str, conf: &Path) {
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns(name)))
            .args(["bird", "-f", "-c"])
            .arg(conf)
            .arg("-s")
            .arg(self.socket(name))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.birds.insert(name.to_owned(), child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.socket(name).exists() {
            assert!(Instant::now() < deadline, "BIRD in {name} did not open its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `fulcrum lb ARGS` on node `k` (its pins, include file and BIRD).
    fn lb(&self, k: usize, args: &[&str]) -> String {
        let name = format!("lb{k}");
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns(&name)))
            .arg(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["lb", "--pin-dir", &self.pin_dir(k), "--bird-include"])
            .arg(self.dir.join(format!("{name}-vips.conf")))
            .arg("--bird-socket")
            .arg(self.socket(&name))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "fulcrum lb {args:?} on {name}: {}", String::from_utf8_lossy(&out.stderr));
        text
    }

    fn endpoints(&self) -> String {
        let weighted = |k, w| match self.family {
            Family::IPv4 => format!("{}:{w}", self.backend_ip(k)),
            Family::IPv6 => format!("[{}]:{w}", self.backend_ip(k)),
        };
        let e: Vec<String> = self.weights.iter().map(|(&k, w)| weighted(k, w)).collect();
        format!("--endpoints={}", e.join(","))
    }

    /// Give every node the current endpoints.
    fn update_endpoints(&self) {
        for &k in &self.nodes {
            self.lb(k, &["create", self.family.vip(), "--tcp=80", &self.endpoints(), "--mode=dsr"]);
        }
    }

    /// Bring node `k` up: service, program, BIRD, announcement.
    fn start_node(&mut self, k: usize) {
        let (vip, endpoints) = (self.family.vip(), self.endpoints());
        let created =
            self.lb(k, &["create", vip, "--tcp=80", &endpoints, "--mode=dsr", "--iface=eth0", "--xdp-mode=native"]);
        assert!(created.contains("attached to eth0"), "{created}");
        let bfd = BFD_MS.to_string();
        let conf = self.lb(
            k,
            &["bird-config", "--local", &node_ip(k), "--peer", ROUTER, "--iface=eth0", "--bfd-interval-ms", &bfd],
        );
        let path = self.dir.join(format!("lb{k}.conf"));
        std::fs::write(&path, conf).unwrap();
        self.start_bird(&format!("lb{k}"), &path);
        let said = self.lb(k, &["announce"]);
        assert!(said.contains(vip), "{said}");
        self.nodes.push(k);
    }

    /// A node that dies at once: its link goes down, its BIRD is killed and
    /// its program detached, so the router notices only through BFD.
    fn kill_node(&mut self, k: usize) {
        self.script_ip(&["-n", &self.ns("sw"), "link", "set", &format!("v{k}"), "down"]);
        if let Some(mut bird) = self.birds.remove(&format!("lb{k}")) {
            let _ = bird.kill();
            let _ = bird.wait();
        }
        std::fs::remove_dir_all(self.pin_dir(k)).unwrap();
        self.nodes.retain(|&n| n != k);
    }

    fn script_ip(&self, args: &[&str]) {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A server in backend `k`'s namespace on port 80, answering each line
    /// with its address.
    fn serve(&mut self, k: usize) {
        let ns = Netns::attach(&self.ns(&format!("b{k}")));
        let stop = Arc::clone(&self.stop);
        let (name, any) = (self.backend_ip(k), self.family.any());
        let (ready_tx, ready_rx) = mpsc::channel();
        self.servers.push(std::thread::spawn(move || {
            ns.enter().unwrap();
            let listener = TcpListener::bind((any, 80)).unwrap();
            listener.set_nonblocking(true).unwrap();
            ready_tx.send(()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        let name = name.clone();
                        std::thread::spawn(move || answer_with_name(conn, &name));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        }));
        ready_rx.recv().unwrap();
    }

    /// The router's next hops for the VIP.
    fn nexthops(&self) -> Vec<String> {
        let family = if self.family == Family::IPv4 { "-4" } else { "-6" };
        let out = Command::new("ip")
            .args(["-n", &self.ns("r"), family, "route", "show", self.family.vip()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut hops: Vec<String> = text
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_owned())
            .collect();
        hops.sort();
        hops
    }

    fn wait_nexthops(&self, n: usize) -> Duration {
        let start = Instant::now();
        loop {
            let hops = self.nexthops();
            if hops.len() == n {
                return start.elapsed();
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the router has next hops {hops:?}, want {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in self.servers.drain(..) {
            let _ = s.join();
        }
        for (_, mut bird) in std::mem::take(&mut self.birds) {
            let _ = bird.kill();
            let _ = bird.wait();
        }
        for k in 1..=9 {
            let _ = std::fs::remove_dir_all(self.pin_dir(k));
        }
        let _ = Command::new(repo().join("scripts/xdp-scaleout-topology")).args(["down", &self.prefix]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The program attached to node `k`'s eth0, opened by id.
fn node_program(fleet: &Fleet, k: usize) -> OwnedFd {
    let link = format!("{}/link-eth0", fleet.pin_dir(k));
    let out = Command::new("bpftool").args(["-j", "link", "show", "pinned", &link]).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = info["prog_id"].as_u64().unwrap_or_else(|| panic!("no prog_id in {info}")) as u32;
    // BPF_PROG_GET_FD_BY_ID takes { prog_id, next_id, open_flags }.
    let attr: [u32; 3] = [id, 0, 0];
    // SAFETY: a valid attr of the size given.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 13, attr.as_ptr(), std::mem::size_of_val(&attr)) };
    assert!(fd >= 0, "BPF_PROG_GET_FD_BY_ID {id}: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor that we own.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// A SYN from the router to node `k` for each of 1,000 flows to the VIP
/// (clients' addresses and ports spread over the range).
fn syns(family: Family, k: usize) -> Vec<Vec<u8>> {
    let (mac, router_mac) = ([2, 0xfc, 0, 0, 0, k as u8], [2, 0xfc, 0, 0, 0, 254]);
    (0..1000u32)
        .map(|i| {
            let (sport, dport, proto) = (10_000 + (i * 37 % 50_000) as u16, 80, Protocol::Tcp);
            match (family.client(i), family.vip().parse().unwrap()) {
                (IpAddr::V4(src), IpAddr::V4(dst)) => {
                    packet::build(&Flow { src, dst, sport, dport, proto }, router_mac, mac, b"")
                }
                (IpAddr::V6(src), IpAddr::V6(dst)) => {
                    let flow = Flow6 { src, dst, sport, dport, proto };
                    packet::build6(&flow, packet::tcp::SYN, router_mac, mac, b"")
                }
                _ => unreachable!("one family"),
            }
        })
        .collect()
}

/// The backend (last octet of the MAC the program wrote) node `k` picks for
/// each of [`syns`]' flows, run through its attached program with
/// `BPF_PROG_TEST_RUN` inside its namespace (so FIB lookups see its routes
/// and neighbours).
fn picks(fleet: &Fleet, k: usize) -> Vec<u8> {
    let prog = node_program(fleet, k);
    let ns = Netns::attach(&fleet.ns(&format!("lb{k}")));
    let frames = syns(fleet.family, k);
    std::thread::spawn(move || {
        ns.enter().unwrap();
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) };
        frames
            .iter()
            .enumerate()
            .map(|(i, frame)| {
                // SAFETY: the descriptor outlives the call.
                let fd = unsafe { BorrowedFd::borrow_raw(prog.as_raw_fd()) };
                let out = testrun::run(fd, frame, ifindex, 1).unwrap();
                assert_eq!(out.action, testrun::action::TX, "node {k}: flow {i}");
                out.packet[5]
            })
            .collect()
    })
    .join()
    .unwrap()
}

/// `#[ignore]`d: run by `cargo test -- --ignored` as root (scripts/test),
/// failing, not passing, where they cannot run; `--skip needs_root::` leaves
/// them out.
mod needs_root {
    use super::*;

    #[test]
    #[ignore = "needs root, the XDP program built with clang, and BIRD 2 (scripts/test runs it as root)"]
    fn nodes_pick_the_same_backend_and_announce_only_while_serving() {
        pick_and_announce(Family::IPv4, "pick");
    }

    #[test]
    #[ignore = "needs root, the XDP program built with clang, and BIRD 2 (scripts/test runs it as root)"]
    fn ipv6_nodes_pick_the_same_backend_and_announce_only_while_serving() {
        pick_and_announce(Family::IPv6, "pick6");
    }

    fn pick_and_announce(family: Family, name: &str) {
        require(name);
        let fleet = Fleet::up(family, name, 3, 3);
        assert_eq!(fleet.nexthops(), fleet.node_hops(&[1, 2, 3]), "one ECMP next hop per node");

        // The same 5-tuples to every node: the same backend from each.
        let first = picks(&fleet, 1);
        for k in [2, 3] {
            assert!(picks(&fleet, k) == first, "node {k} picks other backends than node 1");
        }
        let mut used = first.clone();
        used.sort();
        used.dedup();
        assert_eq!(used, [11, 12, 13], "every backend is picked");

        // What the node announces, and draining it.
        let vip = family.vip();
        let listed: serde_json::Value = serde_json::from_str(&fleet.lb(1, &["list", "--json"])).unwrap();
        assert_eq!((&listed["bgp"], &listed["announced"]), (&serde_json::json!(true), &serde_json::json!([vip])));
        fleet.lb(1, &["drain"]);
        fleet.wait_nexthops(2);
        assert_eq!(fleet.nexthops(), fleet.node_hops(&[2, 3]));
        let listed: serde_json::Value = serde_json::from_str(&fleet.lb(1, &["list", "--json"])).unwrap();
        assert_eq!((&listed["drained"], &listed["announced"]), (&serde_json::json!(true), &serde_json::json!([])));
        // A drained node stays drained through changes; `announce` undoes it.
        fleet.lb(1, &["create", vip, "--tcp=80", &fleet.endpoints(), "--mode=dsr"]);
        assert_eq!(fleet.nexthops().len(), 2);
        fleet.lb(1, &["announce"]);
        fleet.wait_nexthops(3);
        // Without the program attached a node announces nothing.
        fleet.lb(2, &["detach", "--iface", "eth0"]);
        fleet.wait_nexthops(2);
        assert_eq!(fleet.nexthops(), fleet.node_hops(&[1, 3]));
        let listed: serde_json::Value = serde_json::from_str(&fleet.lb(2, &["list", "--json"])).unwrap();
        assert_eq!(listed["announced"], serde_json::json!([]), "{listed}");
    }

    /// What the clients saw during one case.
    #[derive(Debug, Default)]
    struct Outcome {
        broken: u32,
        failed: u32,
        requests: u64,
        longest_gap: Duration,
    }

    /// One long-lived connection's life: a request every 100 ms until `stop`;
    /// a failed request (error, reset, end of stream, 8 s without an answer)
    /// breaks the connection, and the client connects again.
    fn client(family: Family, sport: u16, ready: mpsc::Sender<()>, stop: Arc<AtomicBool>) -> Outcome {
        let vip = SocketAddr::from((family.vip().parse::<IpAddr>().unwrap(), 80));
        let connect = |sport: Option<u16>| -> std::io::Result<BufReader<TcpStream>> {
            let s = socket2::Socket::new(socket2::Domain::for_address(vip), socket2::Type::STREAM, None)?;
            if let Some(p) = sport {
                s.set_reuse_address(true)?;
                s.bind(&SocketAddr::from((family.any(), p)).into())?;
            }
            s.connect_timeout(&vip.into(), Duration::from_secs(5))?;
            let s: TcpStream = s.into();
            s.set_read_timeout(Some(Duration::from_secs(8)))?;
            Ok(BufReader::new(s))
        };
        let ask = |c: &mut BufReader<TcpStream>| -> std::io::Result<()> {
            writeln!(c.get_mut(), "hello")?;
            let mut line = String::new();
            if c.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            Ok(())
        };
        let mut out = Outcome::default();
        let mut conn = connect(Some(sport)).expect("connecting through the VIP");
        ask(&mut conn).expect("a first answer");
        ready.send(()).unwrap();
        let mut last_ok = Instant::now();
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            next += Duration::from_millis(100);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            out.requests += 1;
            match ask(&mut conn) {
                Ok(()) => {
                    out.longest_gap = out.longest_gap.max(last_ok.elapsed());
                    last_ok = Instant::now();
                }
                Err(_) => {
                    out.broken += 1;
                    out.failed += 1;
                    loop {
                        match connect(None) {
                            Ok(c) => break conn = c,
                            Err(_) if !stop.load(Ordering::Relaxed) => out.failed += 1,
                            Err(_) => return out,
                        }
                    }
                }
            }
        }
        out
    }

    /// `n` clients (source ports `base`…) through the VIP; once all are
    /// connected and have had an answer, run `change`, then let them run
    /// `after` more and add up what they saw.
    fn under_load(fleet: &mut Fleet, n: usize, base: u16, change: impl FnOnce(&mut Fleet), after: Duration) -> Outcome {
        let ns = Netns::attach(&fleet.ns("c"));
        let family = fleet.family;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let stop2 = Arc::clone(&stop);
        let clients = std::thread::spawn(move || {
            ns.enter().unwrap();
            // Threads spawned from here inherit the client namespace.
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let (ready, stop) = (ready_tx.clone(), Arc::clone(&stop2));
                    std::thread::spawn(move || client(family, base + i as u16, ready, stop))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        for _ in 0..n {
            ready_rx.recv_timeout(Duration::from_secs(60)).expect("every client connects");
        }
        std::thread::sleep(Duration::from_millis(500));
        change(fleet);
        std::thread::sleep(after);
        stop.store(true, Ordering::Relaxed);
        let mut total = Outcome::default();
        for o in clients.join().unwrap() {
            total.broken += o.broken;
            total.failed += o.failed;
            total.requests += o.requests;
            total.longest_gap = total.longest_gap.max(o.longest_gap);
        }
        total
    }

    #[test]
    #[ignore = "needs root, the XDP program built with clang, and BIRD 2 (scripts/test runs it as root)"]
    fn connections_survive_fleet_changes() {
        survive(Family::IPv4, "survive");
    }

    #[test]
    #[ignore = "needs root, the XDP program built with clang, and BIRD 2 (scripts/test runs it as root)"]
    fn ipv6_connections_survive_fleet_changes() {
        survive(Family::IPv6, "survive6");
    }

    fn survive(family: Family, name: &str) {
        require(name);
        let n: usize = std::env::var("FULCRUM_SCALEOUT_CONNS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
        let settle = Duration::from_secs(1);
        let mut fleet = Fleet::up(family, name, 3, 3);
        let mut rows = Vec::new();
        let mut case = |name: &str, o: Outcome| {
            let gap = o.longest_gap.as_millis();
            println!("| {name} | {} | {} | {} | {gap} ms |", o.broken, o.failed, o.requests);
            rows.push((name.to_owned(), o));
        };
        println!(
            "| case ({family:?}, {n} connections, a request every 100 ms) | broken | requests failed | requests | longest gap |"
        );
        println!("|---|---:|---:|---:|---:|");

        // (a) a fourth node joins.
        let o = under_load(
            &mut fleet,
            n,
            20_000,
            |f| {
                f.script(&["add-lb", "4"]);
                f.start_node(4);
                f.wait_nexthops(4);
            },
            Duration::from_secs(2),
        );
        case("(a) add a fourth LB node", o);

        // (b) one is drained.
        let o = under_load(
            &mut fleet,
            n,
            21_000,
            |f| {
                f.lb(1, &["drain"]);
                f.wait_nexthops(3);
            },
            Duration::from_secs(2),
        );
        case("(b) drain an LB node", o);
        fleet.lb(1, &["announce"]);
        fleet.wait_nexthops(4);

        // (c) one dies: only BFD tells the router.
        let o = under_load(
            &mut fleet,
            n,
            22_000,
            |f| {
                f.kill_node(2);
                let took = f.wait_nexthops(3);
                println!("(c) the router dropped the dead node after {} ms", took.as_millis());
            },
            Duration::from_secs(3),
        );
        case("(c) kill an LB node (link, BIRD and XDP gone at once)", o);

        // (d) a backend drains (weight 0).
        let o = under_load(
            &mut fleet,
            n,
            23_000,
            |f| {
                f.weights.insert(1, 0);
                f.update_endpoints();
            },
            Duration::from_secs(2),
        );
        case("(d) drain a backend (weight 0)", o);

        // (e) a node leaves while a backend joins, at the same moment. The
        // route change takes longer to reach the router than the table change
        // takes to reach the nodes (as BGP convergence does), so moved flows
        // find no conntrack entry on their new node and the new table sends
        // some of them to the new backend.
        fleet.script(&["add-backend", "4"]);
        fleet.serve(4);
        let naive = under_load(
            &mut fleet,
            n,
            24_000,
            |f| {
                f.nodes.retain(|&k| k != 3);
                f.weights.insert(4, 1);
                f.update_endpoints();
                f.lb(3, &["drain"]);
                f.wait_nexthops(2);
            },
            Duration::from_secs(2),
        );
        case("(e) without the design: node leaves + backend joins at once", naive);
        // Back to the same starting point: node 3 serving, backend 4 out (no
        // connection is open now).
        fleet.weights.remove(&4);
        fleet.nodes.push(3);
        fleet.update_endpoints();
        fleet.lb(3, &["announce"]);
        fleet.wait_nexthops(3);
        // The design: the table changes only once the ECMP change has settled,
        // i.e. the route is gone and every moved flow has sent a packet to its
        // new node, which records it in conntrack under the old table.
        let settled = under_load(
            &mut fleet,
            n,
            25_000,
            |f| {
                f.lb(3, &["drain"]);
                f.nodes.retain(|&k| k != 3);
                f.wait_nexthops(2);
                std::thread::sleep(settle);
                f.weights.insert(4, 1);
                f.update_endpoints();
            },
            Duration::from_secs(2),
        );
        case("(e) with the design: backend joins after ECMP settled", settled);

        for (name, o) in &rows {
            if !name.contains("without") {
                assert_eq!(o.broken, 0, "{name}: {o:?}");
            }
        }
        let without = &rows.iter().find(|(n, _)| n.contains("without")).unwrap().1;
        assert!(without.broken > 0, "the naive order should break the moved flows that the new table sends elsewhere");
        // The model of `fulcrum lb simulate` for the same change: the middle of
        // three next hops leaves, two backends become three.
        let model = fleet::simulate(&fleet::Change {
            nodes: 3,
            leave: vec![1],
            join: 0,
            backends: 2,
            add_backends: 1,
            remove_backends: 0,
            select: Select::Maglev,
            ecmp: fleet::Ecmp::HashThreshold,
            flows: 20_000,
            seed: 1,
        })
        .unwrap();
        let predicted = model.broken_at_once * n as f64;
        println!("(e) model (fulcrum lb simulate): {predicted:.0} of {n} broken at once, 0 settled");
        // Loose: the namespace run has few flows, and its table change races
        // the route change.
        assert!(
            (predicted * 0.3..=predicted * 2.0).contains(&f64::from(without.broken)),
            "the model predicts {predicted:.0} broken, the namespaces broke {}",
            without.broken
        );
        assert_eq!(model.broken_settled, 0.0);
    }
}
