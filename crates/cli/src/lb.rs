//! `fulcrum lb`: the XDP L4 load balancer's control plane, loxicmd-style.
//!
//! `create`, `list`, `delete` and `stats` work on the data plane pinned in
//! bpffs (`--pin-dir`), so each call is a short-lived process and the data
//! plane with its flows outlives it; `create --iface` also attaches the
//! program, `detach` and `reset` undo that. The work is in `fulcrum-xdp`.
//! `conntrack` lists and counts the connection-tracking entries, sweeps
//! the expired ones (`--gc`) and sets the idle timeout of each state.
//! On a scale-out node, `announce`, `drain` and `bird-config` tie the node to
//! BIRD (`crate::bird`): a VIP is announced while the program is attached and
//! its service has a backend of non-zero weight that `health` has not found
//! down (`crate::lb_health`).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use fulcrum_xdp::conntrack::{Counts, Entry, FlowKind, State, Timeouts};
use fulcrum_xdp::dataplane::{self, Dataplane, ServiceInfo, ServiceStats, Sweep, XdpMode, DEFAULT_PIN_DIR};
use fulcrum_xdp::fleet::{self, Ecmp};
use fulcrum_xdp::maps::Counters;
use fulcrum_xdp::spec::{self, Protocol, Select, ServiceKey, ServiceSpec};
use serde_json::{json, Value};

use crate::bird::{self, Announcement};
use crate::cli::{Failure, JsonOutput, GLOBAL_HEADING};

/// Options of `fulcrum lb`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum lb create 20.20.20.1 --tcp=80:8080 --endpoints=10.0.1.1:1,10.0.1.2:2 --iface eth0
  fulcrum lb list
  fulcrum lb stats --json
  fulcrum lb delete 20.20.20.1 --tcp=80
  fulcrum lb reset                            # detach everywhere, remove every service
  fulcrum lb simulate --nodes 10 --leave 3    # no root needed: a model of an ECMP fleet

Every command but simulate and bird-config needs root (CAP_BPF and CAP_NET_ADMIN), and a \
binary built with clang (the XDP program is compiled at build time). The data plane is pinned \
in bpffs, so it and its flows outlive each command.")]
pub struct Args {
    /// Where the data plane's maps and links are pinned (a bpffs directory;
    /// /sys/fs/bpf is mounted if needed).
    #[arg(long, global = true, value_name = "DIR", default_value = DEFAULT_PIN_DIR, help_heading = GLOBAL_HEADING)]
    pin_dir: PathBuf,
    /// The BIRD include file naming the VIPs this node announces (written
    /// by `announce` and `drain`, refreshed by `create`, `delete`, `detach`
    /// and `reset` when it exists).
    #[arg(long, global = true, value_name = "FILE", default_value = bird::DEFAULT_INCLUDE, help_heading = GLOBAL_HEADING)]
    bird_include: PathBuf,
    /// BIRD's control socket (`birdc -s`).
    #[arg(long, global = true, value_name = "SOCKET", default_value = bird::DEFAULT_SOCKET, help_heading = GLOBAL_HEADING)]
    bird_socket: PathBuf,
    #[command(subcommand)]
    command: LbCommand,
}

impl Args {
    /// The pin directory the command works on.
    #[cfg(test)]
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }
}

#[derive(Debug, Subcommand)]
enum LbCommand {
    /// Create a service, or replace its endpoints (established flows stay).
    #[command(after_help = "\
Examples:
  fulcrum lb create 20.20.20.1 --tcp=80:8080 --endpoints=10.0.1.1,10.0.1.2 --iface eth0
  fulcrum lb create 20.20.20.1 --tcp=80 --endpoints=10.0.1.1:3,10.0.1.2:1 --mode dsr
  fulcrum lb create 20.20.20.1 --udp=53 --endpoints=10.0.1.1,10.0.1.2 --select rendezvous

Run it again with other --endpoints to change them: connections already established keep \
their backend while it stays; a backend of weight 0 takes no new flow.")]
    #[command(override_usage = "fulcrum lb create <VIP> --tcp|--udp <PORT[:BACKEND_PORT]> \
        --endpoints <IP[:WEIGHT],…>")]
    Create(CreateArgs),
    /// List the services.
    #[command(after_help = "Examples:\n  fulcrum lb list\n  fulcrum lb list --json | jq '.services[].vip'")]
    List {
        #[command(flatten)]
        output: JsonOutput,
    },
    /// Delete a service.
    #[command(after_help = "Examples:\n  fulcrum lb delete 20.20.20.1 --tcp=80")]
    #[command(override_usage = "fulcrum lb delete [OPTIONS] <VIP> --tcp|--udp <PORT[:BACKEND_PORT]>")]
    Delete(DeleteArgs),
    /// Packets, bytes and new flows per service and backend.
    #[command(after_help = "Examples:\n  fulcrum lb stats\n  fulcrum lb stats --json")]
    Stats {
        #[command(flatten)]
        output: JsonOutput,
    },
    /// List and count the connection-tracking entries (IPv4 and IPv6);
    /// delete the expired ones (--gc); set the idle timeout of a state
    /// (--timeout).
    #[command(
        after_help = "Examples:\n  fulcrum lb conntrack --count\n  fulcrum lb conntrack --json | jq '.counts'\n  \
fulcrum lb conntrack --gc --interval 10s\n  fulcrum lb conntrack --timeout established=1h --timeout udp=30s"
    )]
    Conntrack(ConntrackArgs),
    /// Check every backend's health until stopped: a backend that fails
    /// --fall checks in a row takes no new flows (its established ones
    /// stay) until it passes --rise in a row; a VIP with no healthy backend
    /// is withdrawn from BGP.
    #[command(after_help = "Examples:\n  fulcrum lb health\n  \
fulcrum lb health --kind http --path /healthz --interval 2s --fall 3 --rise 2 --gc")]
    Health(crate::lb_health::HealthArgs),
    /// Detach the program from an interface.
    #[command(after_help = "Examples:\n  fulcrum lb detach --iface eth0")]
    Detach {
        /// The interface.
        #[arg(long)]
        iface: String,
    },
    /// Detach everywhere and remove every pinned map: all services go.
    #[command(after_help = "Examples:\n  fulcrum lb reset")]
    Reset,
    /// Announce over BGP (through BIRD) every VIP whose service has a
    /// backend of non-zero weight that is not down, while the program is
    /// attached.
    #[command(after_help = "Examples:\n  fulcrum lb announce\n  \
        fulcrum lb --bird-socket /run/bird/bird.ctl announce")]
    Announce,
    /// Withdraw every announcement; the data plane keeps serving the flows
    /// that still reach it. `announce` undoes it.
    #[command(after_help = "Examples:\n  fulcrum lb drain       # before maintenance\n  \
        fulcrum lb announce    # back in the fleet")]
    Drain,
    /// Model a fleet change (ECMP in front of several nodes, the same table
    /// on each): the flows that change node and the flows that break.
    #[command(after_help = "\
Examples:
  fulcrum lb simulate --nodes 10 --leave 3
  fulcrum lb simulate --nodes 100 --join 1 --ecmp resilient --select maglev
  fulcrum lb simulate --backends 100 --remove-backends 1 --json

Needs no root and touches nothing: the nodes, the router and the flows are modelled.")]
    Simulate(SimulateArgs),
    /// Print the BIRD 2 configuration of a node that announces its VIPs to
    /// one router over eBGP with BFD (and create the include file, announcing
    /// nothing, if it is missing).
    #[command(after_help = "Examples:\n  \
        fulcrum lb bird-config --local 10.0.0.2 --peer 10.0.0.1 > /etc/bird/bird.conf")]
    BirdConfig(BirdConfigArgs),
}

#[derive(Debug, ClapArgs)]
struct ConntrackArgs {
    /// Print the counts, not the entries.
    #[arg(long)]
    count: bool,
    /// Delete the expired entries, so that new flows take their room
    /// rather than evict live flows.
    #[arg(long)]
    gc: bool,
    /// With --gc: sweep every DURATION (e.g. 5s) until stopped.
    #[arg(long, requires = "gc", value_parser = humantime::parse_duration)]
    interval: Option<Duration>,
    /// Set the idle timeout of a state: STATE=DURATION, the state one of
    /// syn, established, closing, udp (e.g. established=1h); repeat for
    /// several. Entries follow at their next packet.
    #[arg(long = "timeout", value_name = "STATE=DURATION")]
    timeouts: Vec<String>,
    #[command(flatten)]
    output: JsonOutput,
}

#[derive(Debug, ClapArgs)]
struct SimulateArgs {
    /// LB nodes before the change.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Nodes that leave (numbered from 1; repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    leave: Vec<usize>,
    /// Nodes that join.
    #[arg(long, default_value_t = 0)]
    join: usize,
    /// Backends before the change.
    #[arg(long, default_value_t = 10_000)]
    backends: usize,
    /// Backends added at the same moment.
    #[arg(long, default_value_t = 0)]
    add_backends: usize,
    /// Backends removed at the same moment.
    #[arg(long, default_value_t = 0)]
    remove_backends: usize,
    /// The table: maglev, rendezvous or both.
    #[arg(long, default_value = "both")]
    select: String,
    /// The router's multipath: hash-threshold (BIRD's) or resilient.
    #[arg(long, default_value = "hash-threshold")]
    ecmp: String,
    /// Buckets of a resilient group.
    #[arg(long, default_value_t = 8192)]
    buckets: usize,
    /// Established flows.
    #[arg(long, default_value_t = 100_000)]
    flows: usize,
    /// Seed of the flows and the router's hash.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    output: JsonOutput,
}

#[derive(Debug, ClapArgs)]
struct BirdConfigArgs {
    /// The node's address towards the router (also its BGP router id).
    #[arg(long)]
    local: Ipv4Addr,
    /// The router's address.
    #[arg(long)]
    peer: Ipv4Addr,
    /// The node's AS number.
    #[arg(long, default_value_t = 65001)]
    asn: u32,
    /// The router's AS number.
    #[arg(long, default_value_t = 65000)]
    peer_asn: u32,
    /// The interface towards the router (BFD runs on it).
    #[arg(long, default_value = "eth0")]
    iface: String,
    /// BFD interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    bfd_interval_ms: u32,
    /// BFD multiplier: missed intervals before the router drops the node.
    #[arg(long, default_value_t = 3)]
    bfd_multiplier: u32,
}

/// The service port: `--tcp=PORT[:BACKEND_PORT]` or `--udp=…`.
#[derive(Debug, ClapArgs)]
#[group(required = true, multiple = false)]
struct PortArgs {
    /// TCP service: PORT[:BACKEND_PORT], e.g. 2020:5001 (the backends' port defaults to PORT).
    #[arg(long, value_name = "PORT[:BACKEND_PORT]")]
    tcp: Option<String>,
    /// UDP service: PORT[:BACKEND_PORT].
    #[arg(long, value_name = "PORT[:BACKEND_PORT]")]
    udp: Option<String>,
}

impl PortArgs {
    fn parse(&self) -> Result<(Protocol, u16, u16), Failure> {
        let (proto, text) = match (&self.tcp, &self.udp) {
            (Some(t), _) => (Protocol::Tcp, t),
            (_, Some(u)) => (Protocol::Udp, u),
            (None, None) => return Err(Failure::input("give --tcp=PORT[:BACKEND_PORT] or --udp=…")),
        };
        let (front, back) = spec::parse_ports(text).map_err(input)?;
        Ok((proto, front, back))
    }
}

#[derive(Debug, ClapArgs)]
struct CreateArgs {
    /// The virtual IP: IPv4, or IPv6 (`2001:db8::1` or `[2001:db8::1]`) with IPv6 endpoints.
    #[arg(value_parser = parse_vip)]
    vip: IpAddr,
    #[command(flatten)]
    port: PortArgs,
    /// Backends, comma-separated: IP or IP:WEIGHT (a whole-number weight, default 1; 0 takes no
    /// new flow; IPv6 as [IP]:WEIGHT). Not a port: backends listen on --tcp's or --udp's BACKEND_PORT.
    #[arg(long, value_name = "IP[:WEIGHT],…")]
    endpoints: String,
    /// nat (rewrite the destination, replies come back through the LB) or
    /// dsr (rewrite MACs only; backends hold the VIP on loopback).
    #[arg(long, default_value = "nat")]
    mode: String,
    /// The table: maglev or rendezvous (fulcrum-balance's implementations).
    #[arg(long, default_value = "maglev")]
    select: String,
    /// The flow hash: xxhash or murmur3.
    #[arg(long, default_value = "xxhash")]
    flow_hash: String,
    /// Attach the program to these interfaces (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    iface: Vec<String>,
    /// XDP attach mode: native (driver), generic (skb) or auto.
    #[arg(long, default_value = "native")]
    xdp_mode: String,
    /// Entries of each conntrack map (IPv4 and IPv6), fixed when the data
    /// plane is created: 524288 and 131072 unless given (a NAT flow takes
    /// two).
    #[arg(long)]
    conntrack_entries: Option<u32>,
}

#[derive(Debug, ClapArgs)]
struct DeleteArgs {
    /// The virtual IP.
    #[arg(value_parser = parse_vip)]
    vip: IpAddr,
    #[command(flatten)]
    port: PortArgs,
}

fn parse_vip(s: &str) -> Result<IpAddr, String> {
    spec::parse_ip(s).map_err(|e| e.0)
}

fn input(e: spec::SpecError) -> Failure {
    Failure::input(e.0)
}

pub(crate) fn failure(e: fulcrum_xdp::Error) -> Failure {
    if e.is_input() {
        Failure::input(e.to_string())
    } else {
        Failure::runtime(e.to_string())
    }
}

/// Run one `fulcrum lb` command.
pub fn run(args: Args) -> Result<(), Failure> {
    let dir = args.pin_dir.as_path();
    let bgp = Bgp { include: &args.bird_include, socket: &args.bird_socket };
    match args.command {
        LbCommand::Create(c) => create(dir, c).and_then(|()| bgp.refresh(dir)),
        LbCommand::List { output } => list(dir, output.wanted(), &bgp),
        LbCommand::Delete(d) => delete(dir, d).and_then(|()| bgp.refresh(dir)),
        LbCommand::Stats { output } => stats(dir, output.wanted()),
        LbCommand::Conntrack(c) => conntrack(dir, c),
        LbCommand::Health(h) => crate::lb_health::run(dir, h, || bgp.refresh(dir)),
        LbCommand::Detach { iface } => {
            let done = dataplane::detach(dir, &iface).map_err(failure)?;
            println!("{}", if done { format!("detached from {iface}") } else { format!("not attached to {iface}") });
            bgp.refresh(dir)
        }
        LbCommand::Reset => dataplane::reset(dir).map_err(failure).and_then(|()| bgp.refresh(dir)),
        LbCommand::Announce => bgp.set(dir, false),
        LbCommand::Drain => bgp.set(dir, true),
        LbCommand::Simulate(a) => simulate(a),
        LbCommand::BirdConfig(b) => {
            // BIRD refuses to start when an included file is missing.
            if bgp.read()?.is_none() {
                bird::write(&args.bird_include, &Announcement::default()).map_err(Failure::runtime)?;
            }
            print!(
                "{}",
                bird::node_config(&bird::NodeConfig {
                    local: b.local,
                    asn: b.asn,
                    peer: b.peer,
                    peer_asn: b.peer_asn,
                    iface: b.iface,
                    bfd_interval_ms: b.bfd_interval_ms,
                    bfd_multiplier: b.bfd_multiplier,
                    include: args.bird_include.display().to_string(),
                })
            );
            Ok(())
        }
    }
}

/// Where this node's announcement lives.
struct Bgp<'a> {
    include: &'a Path,
    socket: &'a Path,
}

impl Bgp<'_> {
    fn read(&self) -> Result<Option<Announcement>, Failure> {
        bird::read(self.include).map_err(Failure::runtime)
    }

    /// `announce` (drained = false) or `drain`.
    fn set(&self, dir: &Path, drained: bool) -> Result<(), Failure> {
        let vips = if drained { Vec::new() } else { announceable(dir)? };
        let a = Announcement { vips, drained };
        bird::write_and_reconfigure(self.include, &a, self.socket).map_err(Failure::runtime)?;
        if drained {
            println!("drained: no VIP announced; established flows that still arrive are served");
        } else {
            let vips: Vec<String> = a.vips.iter().map(ToString::to_string).collect();
            println!("announcing: {}", if vips.is_empty() { "nothing".into() } else { vips.join(", ") });
        }
        Ok(())
    }

    /// After a change to services or attachments, announce what now
    /// qualifies, unless the node does not use BGP (no include file) or is
    /// drained.
    fn refresh(&self, dir: &Path) -> Result<(), Failure> {
        match self.read()? {
            Some(a) if !a.drained => self.set(dir, false),
            _ => Ok(()),
        }
    }
}

/// The VIPs this node may announce: none unless the program is attached
/// somewhere; otherwise those of services with a backend of non-zero weight
/// that health checks have not found down.
fn announceable(dir: &Path) -> Result<Vec<IpAddr>, Failure> {
    if dataplane::attached(dir).is_empty() {
        return Ok(Vec::new());
    }
    let services = match Dataplane::open_pinned(dir, false) {
        Ok(dp) => dp.services().map_err(failure)?,
        Err(fulcrum_xdp::Error::NotCreated(_)) => return Ok(Vec::new()),
        Err(e) => return Err(failure(e)),
    };
    let serving = |s: &ServiceInfo| s.spec.backends.iter().zip(&s.down).any(|(b, &down)| b.weight > 0 && !down);
    let mut vips: Vec<IpAddr> = services.iter().filter(|s| serving(s)).map(|s| s.spec.key.vip).collect();
    vips.sort_unstable();
    vips.dedup();
    Ok(vips)
}

fn create(dir: &Path, c: CreateArgs) -> Result<(), Failure> {
    let (proto, port, backend_port) = c.port.parse()?;
    let xdp_mode = match c.xdp_mode.as_str() {
        "native" | "driver" => XdpMode::Driver,
        "generic" | "skb" => XdpMode::Skb,
        "auto" => XdpMode::Default,
        other => return Err(Failure::input(format!("unknown XDP mode {other:?} (native, generic or auto)"))),
    };
    let spec = ServiceSpec {
        key: ServiceKey { vip: c.vip, port, proto },
        backend_port,
        backends: spec::parse_endpoints(&c.endpoints).map_err(input)?,
        mode: spec::parse_mode(&c.mode).map_err(input)?,
        select: spec::parse_select(&c.select).map_err(input)?,
        hash: spec::parse_hash(&c.flow_hash).map_err(input)?,
    };
    spec.validate().map_err(input)?;
    let mut dp = match c.conntrack_entries {
        Some(n) => Dataplane::create_pinned(dir, n),
        None => Dataplane::open_pinned(dir, true),
    }
    .map_err(failure)?;
    let change = dp.upsert(&spec).map_err(failure)?;
    if change.created {
        println!("created {} with {} endpoints", spec.key, spec.backends.len());
    } else {
        println!("updated {}: {} endpoints added, {} removed", spec.key, change.added, change.removed);
    }
    for iface in &c.iface {
        if dataplane::attach(dir, iface, xdp_mode).map_err(failure)? {
            println!("attached to {iface} ({})", c.xdp_mode);
        }
    }
    Ok(())
}

fn simulate(a: SimulateArgs) -> Result<(), Failure> {
    let selects = match a.select.as_str() {
        "both" => vec![Select::Maglev, Select::Rendezvous],
        s => vec![spec::parse_select(s).map_err(input)?],
    };
    let ecmp = match a.ecmp.as_str() {
        "hash-threshold" => Ecmp::HashThreshold,
        "resilient" => Ecmp::Resilient(a.buckets),
        e => return Err(Failure::input(format!("unknown ECMP {e:?} (hash-threshold or resilient)"))),
    };
    if let Some(&0) = a.leave.iter().find(|&&k| k == 0) {
        return Err(Failure::input("--leave: nodes are numbered from 1"));
    }
    let mut rows = Vec::new();
    for select in selects {
        let change = fleet::Change {
            nodes: a.nodes,
            leave: a.leave.iter().map(|k| k - 1).collect(),
            join: a.join,
            backends: a.backends,
            add_backends: a.add_backends,
            remove_backends: a.remove_backends,
            select,
            ecmp,
            flows: a.flows,
            seed: a.seed,
        };
        let o = fleet::simulate(&change).map_err(|e| Failure::input(e.to_string()))?;
        rows.push((select, o));
    }
    if a.output.wanted() {
        let rows: Vec<Value> = rows
            .iter()
            .map(|(s, o)| {
                json!({"select": lower(s), "ecmp": a.ecmp, "moved_node": o.moved_node,
                       "broken_at_once": o.broken_at_once, "broken_settled": o.broken_settled})
            })
            .collect();
        println!("{}", json!({ "flows": a.flows, "results": rows }));
        return Ok(());
    }
    println!(
        "{:<11} {:<15} {:>16} {:>20} {:>20}",
        "SELECT", "ECMP", "CHANGED NODE", "BROKEN (AT ONCE)", "BROKEN (SETTLED)"
    );
    let pct = |f: f64| format!("{:.2} %", 100.0 * f);
    for (s, o) in rows {
        let (m, b, st) = (pct(o.moved_node), pct(o.broken_at_once), pct(o.broken_settled));
        println!("{:<11} {:<15} {m:>16} {b:>20} {st:>20}", lower(s), a.ecmp);
    }
    Ok(())
}

fn lower(v: impl std::fmt::Debug) -> String {
    format!("{v:?}").to_lowercase()
}

/// `list --json`: the services as `create` would make them, and the
/// interfaces the program is attached to.
fn services_json(services: &[ServiceInfo], attached: &[String], bgp: Option<&Announcement>) -> Value {
    let services: Vec<Value> = services
        .iter()
        .map(|s| {
            let spec = &s.spec;
            json!({
                "vip": spec.key.vip.to_string(),
                "port": spec.key.port,
                "protocol": spec.key.proto.to_string(),
                "backend_port": spec.backend_port,
                "mode": lower(spec.mode),
                "select": lower(spec.select),
                "flow_hash": lower(spec.hash),
                "endpoints": spec.backends.iter().zip(&s.down)
                    .map(|(b, &down)| json!({"ip": b.ip.to_string(), "weight": b.weight, "healthy": !down}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let announced: Vec<String> = bgp.map(|a| a.vips.iter().map(ToString::to_string).collect()).unwrap_or_default();
    json!({
        "services": services,
        "attached": attached,
        "bgp": bgp.is_some(),
        "announced": announced,
        "drained": bgp.is_some_and(|a| a.drained),
    })
}

fn counters_json(c: &Counters) -> Value {
    json!({ "packets": c.packets, "bytes": c.bytes, "flows": c.flows })
}

/// `stats --json`: counters per service and per backend (`ip:port`), and
/// the data plane's own pass/drop counters by name.
fn stats_json(stats: &[ServiceStats], totals: &[(&str, u64)]) -> Value {
    let services: Vec<Value> = stats
        .iter()
        .map(|s| {
            let spec = &s.info.spec;
            let backends: Vec<Value> = spec
                .backends
                .iter()
                .zip(&s.backends)
                .map(|(b, c)| {
                    let mut v = counters_json(c);
                    v["endpoint"] = json!(std::net::SocketAddr::new(b.ip, spec.backend_port).to_string());
                    v
                })
                .collect();
            let mut v = counters_json(&s.total);
            v["service"] = json!(spec.key.to_string());
            v["backends"] = json!(backends);
            v
        })
        .collect();
    let data_plane: serde_json::Map<String, Value> = totals.iter().map(|(n, v)| (n.to_string(), json!(v))).collect();
    json!({ "services": services, "data_plane": data_plane })
}

fn list(dir: &Path, json: bool, bgp: &Bgp) -> Result<(), Failure> {
    let dp = Dataplane::open_pinned(dir, false).map_err(failure)?;
    let services = dp.services().map_err(failure)?;
    let ifaces = dataplane::attached(dir);
    let announcement = bgp.read()?;
    if json {
        println!("{}", services_json(&services, &ifaces, announcement.as_ref()));
        return Ok(());
    }
    println!(
        "{:<16} {:>5} {:<5} {:>5} {:<4} {:<10} {:<7} ENDPOINTS (IP:WEIGHT)",
        "VIP", "PORT", "PROTO", "BPORT", "MODE", "SELECT", "HASH"
    );
    for s in &services {
        let spec = &s.spec;
        let endpoints: Vec<String> = spec
            .backends
            .iter()
            .zip(&s.down)
            .map(|(b, &down)| {
                let ip = if b.ip.is_ipv6() { format!("[{}]", b.ip) } else { b.ip.to_string() };
                format!("{ip}:{}{}", b.weight, if down { "(down)" } else { "" })
            })
            .collect();
        println!(
            "{:<16} {:>5} {:<5} {:>5} {:<4} {:<10} {:<7} {}",
            spec.key.vip.to_string(),
            spec.key.port,
            spec.key.proto,
            spec.backend_port,
            lower(spec.mode),
            lower(spec.select),
            lower(spec.hash),
            endpoints.join(",")
        );
    }
    if !ifaces.is_empty() {
        println!("attached to: {}", ifaces.join(", "));
    }
    if let Some(a) = announcement {
        let vips: Vec<String> = a.vips.iter().map(ToString::to_string).collect();
        let state = if a.drained { " (drained)" } else { "" };
        println!("announced over BGP{state}: {}", if vips.is_empty() { "nothing".into() } else { vips.join(", ") });
    }
    Ok(())
}

fn delete(dir: &Path, d: DeleteArgs) -> Result<(), Failure> {
    let (proto, port, _) = d.port.parse()?;
    let key = ServiceKey { vip: d.vip, port, proto };
    let mut dp = Dataplane::open_pinned(dir, false).map_err(failure)?;
    if !dp.delete(&key).map_err(failure)? {
        return Err(Failure::input(format!("no service {key}")));
    }
    println!("deleted {key}");
    Ok(())
}

fn stats(dir: &Path, json: bool) -> Result<(), Failure> {
    let dp = Dataplane::open_pinned(dir, false).map_err(failure)?;
    let stats = dp.stats().map_err(failure)?;
    let totals = dp.totals().map_err(failure)?;
    if json {
        println!("{}", stats_json(&stats, &totals));
        return Ok(());
    }
    println!("{:<24} {:<22} {:>12} {:>14} {:>10}", "SERVICE", "BACKEND", "PACKETS", "BYTES", "FLOWS");
    for s in &stats {
        let t = s.total;
        println!("{:<24} {:<22} {:>12} {:>14} {:>10}", s.info.spec.key.to_string(), "*", t.packets, t.bytes, t.flows);
        for (b, c) in s.info.spec.backends.iter().zip(&s.backends) {
            let name = std::net::SocketAddr::new(b.ip, s.info.spec.backend_port).to_string();
            println!("{:<24} {:<22} {:>12} {:>14} {:>10}", "", name, c.packets, c.bytes, c.flows);
        }
    }
    let totals: Vec<String> = totals.iter().map(|(n, v)| format!("{n}={v}")).collect();
    println!("data plane: {}", totals.join(" "));
    Ok(())
}

/// `STATE=DURATION` settings over `current`.
fn parse_timeouts(current: Timeouts, settings: &[String]) -> Result<Timeouts, Failure> {
    let mut t = current;
    for s in settings {
        let (state, d) = s
            .split_once('=')
            .ok_or_else(|| Failure::input(format!("--timeout {s:?}: give STATE=DURATION, e.g. established=1h")))?;
        let state = State::parse(state.trim()).map_err(Failure::input)?;
        let d = humantime::parse_duration(d.trim())
            .map_err(|e| Failure::input(format!("--timeout {s:?}: {e} (a duration like 10s or 15m)")))?;
        t.set(state, d).map_err(Failure::input)?;
    }
    Ok(t)
}

fn timeouts_text(t: &Timeouts) -> String {
    let items: Vec<String> =
        State::ALL.iter().map(|&s| format!("{s} {}", humantime::format_duration(t.get(s)))).collect();
    items.join(", ")
}

fn timeouts_json(t: &Timeouts) -> Value {
    State::ALL.iter().map(|&s| (s.name().to_string(), json!(t.get(s).as_secs_f64()))).collect()
}

fn counts_json(c: &Counts, capacity: u32) -> Value {
    let states: serde_json::Map<String, Value> =
        State::ALL.iter().zip(c.by_state).map(|(s, n)| (s.name().to_string(), json!(n))).collect();
    json!({"entries": c.total, "capacity": capacity, "forward": c.forward, "reply": c.reply,
           "expired": c.expired, "states": states})
}

fn protocol_name<K: FlowKind>(e: &Entry<K>) -> String {
    e.proto.map_or_else(|| e.proto_number.to_string(), |p| p.to_string())
}

fn entry_json<K: FlowKind>(e: &Entry<K>) -> Value {
    json!({
        "direction": e.direction.name(),
        "protocol": protocol_name(e),
        "source": e.src.to_string(),
        "destination": e.dst.to_string(),
        "via": e.via.map(|v| v.to_string()),
        "state": e.state.name(),
        "idle_s": e.idle.as_secs_f64(),
        "expired": e.expired,
    })
}

fn sweep_json(s: &Sweep) -> Value {
    json!({"examined": s.examined, "deleted": s.deleted})
}

fn conntrack(dir: &Path, a: ConntrackArgs) -> Result<(), Failure> {
    let json = a.output.wanted();
    let mut dp = Dataplane::open_pinned(dir, false).map_err(failure)?;
    if !a.timeouts.is_empty() {
        let t = parse_timeouts(dp.timeouts().map_err(failure)?, &a.timeouts)?;
        dp.set_timeouts(&t).map_err(failure)?;
        if json {
            println!("{}", json!({ "timeouts_s": timeouts_json(&t) }));
        } else {
            println!("timeouts: {}", timeouts_text(&t));
        }
        return Ok(());
    }
    if a.gc {
        loop {
            let s = dp.conntrack_gc().map_err(failure)?;
            if json {
                println!("{}", sweep_json(&s));
            } else {
                println!("swept: {} expired entries deleted of {}", s.deleted, s.examined);
            }
            let Some(every) = a.interval else { return Ok(()) };
            std::thread::sleep(every);
        }
    }
    let (v4, v6) = (dp.conntrack().map_err(failure)?, dp.conntrack6().map_err(failure)?);
    let counts = [
        (Counts::of(&v4), dp.conntrack_capacity().map_err(failure)?),
        (Counts::of(&v6), dp.conntrack6_capacity().map_err(failure)?),
    ];
    let timeouts = dp.timeouts().map_err(failure)?;
    if json {
        let mut v = json!({"counts": counts_json(&counts[0].0, counts[0].1),
                           "counts6": counts_json(&counts[1].0, counts[1].1),
                           "timeouts_s": timeouts_json(&timeouts)});
        if !a.count {
            v["entries"] = v4.iter().map(entry_json).chain(v6.iter().map(entry_json)).collect();
        }
        println!("{v}");
        return Ok(());
    }
    if !a.count {
        println!(
            "{:<8} {:<5} {:<21} {:<21} {:<21} {:<11} {:>9} EXPIRES",
            "DIR", "PROTO", "SOURCE", "DESTINATION", "VIA", "STATE", "IDLE"
        );
        print_entries(&v4, &timeouts);
        print_entries(&v6, &timeouts);
    }
    for (family, (c, capacity)) in ["IPv4", "IPv6"].iter().zip(counts) {
        let states: Vec<String> = State::ALL.iter().zip(c.by_state).map(|(s, n)| format!("{s} {n}")).collect();
        println!(
            "{family} entries: {} of {capacity} ({} forward, {} reply); {}; {} expired",
            c.total,
            c.forward,
            c.reply,
            states.join(", "),
            c.expired
        );
    }
    println!("timeouts: {}", timeouts_text(&timeouts));
    Ok(())
}

fn print_entries<K: FlowKind>(entries: &[Entry<K>], timeouts: &Timeouts) {
    for e in entries {
        let expires = if e.expired {
            "expired".to_string()
        } else {
            format!("in {:.1}s", timeouts.get(e.state).saturating_sub(e.idle).as_secs_f64())
        };
        println!(
            "{:<8} {:<5} {:<21} {:<21} {:<21} {:<11} {:>8.1}s {expires}",
            e.direction.name(),
            protocol_name(e),
            e.src.to_string(),
            e.dst.to_string(),
            e.via.map_or_else(|| "(backend gone)".to_string(), |v| v.to_string()),
            e.state.name(),
            e.idle.as_secs_f64(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> ServiceInfo {
        ServiceInfo {
            spec: ServiceSpec {
                key: ServiceKey { vip: Ipv4Addr::new(20, 20, 20, 1).into(), port: 2020, proto: Protocol::Tcp },
                backend_port: 5001,
                backends: spec::parse_endpoints("31.31.31.1:1,32.32.32.1:2").unwrap(),
                mode: spec::parse_mode("dsr").unwrap(),
                select: spec::parse_select("rendezvous").unwrap(),
                hash: spec::parse_hash("murmur3").unwrap(),
            },
            id: 0,
            slots: vec![0, 1],
            down: vec![false, true],
        }
    }

    #[test]
    fn timeouts_parse_over_the_current_ones() {
        let t = parse_timeouts(Timeouts::default(), &["established=1h".into(), "udp = 30s".into()]).unwrap();
        assert_eq!(t.get(State::Established), Duration::from_secs(3600));
        assert_eq!(t.get(State::Udp), Duration::from_secs(30));
        assert_eq!(t.get(State::Closing), Duration::from_secs(10));
        assert_eq!(timeouts_text(&t), "syn 1m, established 1h, closing 10s, udp 30s");
        assert_eq!(timeouts_json(&t)["established"], json!(3600.0));
        for bad in ["established", "fin=10s", "udp=soon", "syn=0s"] {
            assert!(parse_timeouts(Timeouts::default(), &[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn list_json_reads_back_as_the_create_arguments() {
        let bgp = Announcement { vips: vec![Ipv4Addr::new(20, 20, 20, 1).into()], drained: false };
        let v = services_json(&[service()], &["eth0".to_string()], Some(&bgp));
        assert_eq!((&v["bgp"], &v["announced"], &v["drained"]), (&json!(true), &json!(["20.20.20.1"]), &json!(false)));
        let s = &v["services"][0];
        assert_eq!(s["vip"], "20.20.20.1");
        assert_eq!(s["port"], 2020);
        assert_eq!(s["protocol"], "tcp");
        assert_eq!(s["backend_port"], 5001);
        assert_eq!(
            (&s["mode"], &s["select"], &s["flow_hash"]),
            (&json!("dsr"), &json!("rendezvous"), &json!("murmur3"))
        );
        assert_eq!(
            s["endpoints"],
            json!([{"ip": "31.31.31.1", "weight": 1, "healthy": true}, {"ip": "32.32.32.1", "weight": 2, "healthy": false}])
        );
        assert_eq!(v["attached"], json!(["eth0"]));
    }

    #[test]
    fn stats_json_has_service_backend_and_data_plane_counters() {
        let c = |n: u64| Counters { packets: n, bytes: 60 * n, flows: n / 10 };
        let stats = ServiceStats { info: service(), total: c(30), backends: vec![c(10), c(20)] };
        let v = stats_json(&[stats], &[("passed", 7), ("malformed", 1)]);
        let s = &v["services"][0];
        assert_eq!(s["service"], service().spec.key.to_string());
        assert_eq!((&s["packets"], &s["bytes"], &s["flows"]), (&json!(30), &json!(1800), &json!(3)));
        assert_eq!(s["backends"][1], json!({"endpoint": "32.32.32.1:5001", "packets": 20, "bytes": 1200, "flows": 2}));
        assert_eq!(v["data_plane"], json!({"passed": 7, "malformed": 1}));
    }
}
