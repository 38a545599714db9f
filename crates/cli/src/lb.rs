//! `fulcrum lb`: the XDP L4 load balancer's control plane, loxicmd-style.
//!
//! `create`, `list`, `delete` and `stats` work on the data plane pinned in
//! bpffs (`--pin-dir`), so each call is a short-lived process and the data
//! plane with its flows outlives it; `create --iface` also attaches the
//! program, `detach` and `reset` undo that. The work is in `fulcrum-xdp`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use clap::{Args as ClapArgs, Subcommand};
use fulcrum_xdp::dataplane::{self, Dataplane, XdpMode, DEFAULT_PIN_DIR};
use fulcrum_xdp::spec::{self, Protocol, ServiceKey, ServiceSpec};

use crate::cli::Failure;

/// Options of `fulcrum lb`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Where the data plane's maps and links are pinned (a bpffs directory;
    /// /sys/fs/bpf is mounted if needed).
    #[arg(long, global = true, default_value = DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,
    #[command(subcommand)]
    command: LbCommand,
}

#[derive(Debug, Subcommand)]
enum LbCommand {
    /// Create a service, or replace its endpoints (established flows stay).
    Create(CreateArgs),
    /// List the services.
    List,
    /// Delete a service.
    Delete(DeleteArgs),
    /// Packets, bytes and new flows per service and backend.
    Stats,
    /// Detach the program from an interface.
    Detach {
        /// The interface.
        #[arg(long)]
        iface: String,
    },
    /// Detach everywhere and remove every pinned map: all services go.
    Reset,
}

/// The service port: `--tcp=PORT[:BACKEND_PORT]` or `--udp=…`.
#[derive(Debug, ClapArgs)]
#[group(required = true, multiple = false)]
struct PortArgs {
    /// TCP service: PORT[:BACKEND_PORT], e.g. 2020:5001.
    #[arg(long)]
    tcp: Option<String>,
    /// UDP service: PORT[:BACKEND_PORT].
    #[arg(long)]
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
    /// The virtual IP (IPv4).
    vip: Ipv4Addr,
    #[command(flatten)]
    port: PortArgs,
    /// Backends: IP[:WEIGHT],… (weights are whole numbers, default 1).
    #[arg(long)]
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
}

#[derive(Debug, ClapArgs)]
struct DeleteArgs {
    /// The virtual IP.
    vip: Ipv4Addr,
    #[command(flatten)]
    port: PortArgs,
}

fn input(e: spec::SpecError) -> Failure {
    Failure::input(e.0)
}

fn failure(e: fulcrum_xdp::Error) -> Failure {
    if e.is_input() {
        Failure::input(e.to_string())
    } else {
        Failure::runtime(e.to_string())
    }
}

/// Run one `fulcrum lb` command.
pub fn run(args: Args) -> Result<(), Failure> {
    let dir = args.pin_dir.as_path();
    match args.command {
        LbCommand::Create(c) => create(dir, c),
        LbCommand::List => list(dir),
        LbCommand::Delete(d) => delete(dir, d),
        LbCommand::Stats => stats(dir),
        LbCommand::Detach { iface } => {
            let done = dataplane::detach(dir, &iface).map_err(failure)?;
            println!("{}", if done { format!("detached from {iface}") } else { format!("not attached to {iface}") });
            Ok(())
        }
        LbCommand::Reset => dataplane::reset(dir).map_err(failure),
    }
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
    let mut dp = Dataplane::open_pinned(dir, true).map_err(failure)?;
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

fn list(dir: &Path) -> Result<(), Failure> {
    let dp = Dataplane::open_pinned(dir, false).map_err(failure)?;
    println!(
        "{:<16} {:>5} {:<5} {:>5} {:<4} {:<10} {:<7} ENDPOINTS (IP:WEIGHT)",
        "VIP", "PORT", "PROTO", "BPORT", "MODE", "SELECT", "HASH"
    );
    for s in dp.services().map_err(failure)? {
        let spec = &s.spec;
        let endpoints: Vec<String> = spec.backends.iter().map(|b| format!("{}:{}", b.ip, b.weight)).collect();
        println!(
            "{:<16} {:>5} {:<5} {:>5} {:<4} {:<10} {:<7} {}",
            spec.key.vip.to_string(),
            spec.key.port,
            spec.key.proto,
            spec.backend_port,
            format!("{:?}", spec.mode).to_lowercase(),
            format!("{:?}", spec.select).to_lowercase(),
            format!("{:?}", spec.hash).to_lowercase(),
            endpoints.join(",")
        );
    }
    let ifaces = dataplane::attached(dir);
    if !ifaces.is_empty() {
        println!("attached to: {}", ifaces.join(", "));
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

fn stats(dir: &Path) -> Result<(), Failure> {
    let dp = Dataplane::open_pinned(dir, false).map_err(failure)?;
    println!("{:<24} {:<22} {:>12} {:>14} {:>10}", "SERVICE", "BACKEND", "PACKETS", "BYTES", "FLOWS");
    for s in dp.stats().map_err(failure)? {
        let t = s.total;
        println!("{:<24} {:<22} {:>12} {:>14} {:>10}", s.info.spec.key.to_string(), "*", t.packets, t.bytes, t.flows);
        for (b, c) in s.info.spec.backends.iter().zip(&s.backends) {
            let name = format!("{}:{}", b.ip, s.info.spec.backend_port);
            println!("{:<24} {:<22} {:>12} {:>14} {:>10}", "", name, c.packets, c.bytes, c.flows);
        }
    }
    let totals: Vec<String> = dp.totals().map_err(failure)?.iter().map(|(n, v)| format!("{n}={v}")).collect();
    println!("data plane: {}", totals.join(" "));
    Ok(())
}
