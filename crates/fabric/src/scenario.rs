//! Scenario files (TOML): the fabric, buffers, transport, queue discipline,
//! host delays and workload of a run, checked when loaded.
//!
//! The file is read into a raw scenario (serde, every table rejecting
//! unknown fields), each section is checked, and the checked scenario then
//! resolves what the sections name (the topology, ports, a flow list, a
//! CDF). Durations and sizes have the syntax of every configuration file,
//! and a mistake is reported as every format reports it
//! (`fulcrum_config`): with the file, the line, the column and the field,
//! e.g.
//!
//! ```text
//! scenarios/fabric/x.toml:12:8: workload.load: must be above 0 and below 1 (found 1.2)
//! ```
//!
//! `--set KEY=VALUE` overrides any field before the file is read (`KEY`
//! is the dotted path, `VALUE` a TOML value, or a bare string such as
//! `30us`); errors in an override name it: `--set workload.load=1.2: …`.

use std::path::{Path, PathBuf};

use fulcrum_config::Source;
use serde::Deserialize;

use crate::aqm;
use crate::cc;
use crate::faults::{BlackHole, FaultConfig, LinkFailure};
use crate::flowlist;
use crate::lb;
use crate::metrics::Convention;
use crate::packet::Nanos;
use crate::ports;
use crate::sched::Policy;
use crate::tcp::TcpConfig;
use crate::topology::{End, Fabric, Shape};
use crate::workload::{Fixed, FlowSpec, Incast, LongFlow, Permutation, Poisson, ShortFlows};
use crate::world::{DelayAt, Service};
use fulcrum_workload::Cdf;

/// A rejected scenario: `file:line:column: field: message`.
pub type ScenarioError = fulcrum_config::Error;

/// A duration written as text ("10us", "5ms", "0.5s"), in nanoseconds.
pub use fulcrum_config::Dur;

/// The scenario as written: what the file (and the `--set`s) say, before
/// any check.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default = "one")]
    seed: u64,
    end: Dur,
    topology: Topology,
    #[serde(default)]
    buffers: Buffers,
    #[serde(default)]
    tcp: Tcp,
    aqm: toml::Table,
    #[serde(default)]
    hosts: Hosts,
    workload: Workload,
    #[serde(default)]
    scheduler: Option<SchedulerCfg>,
    #[serde(default)]
    monitor: Monitor,
    #[serde(default)]
    routing: Option<toml::Table>,
    #[serde(default)]
    faults: Option<FaultsCfg>,
    #[serde(default)]
    resequence: Option<ResequenceCfg>,
}

/// A checked scenario, with what its sections name resolved.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Name reported in the output.
    pub name: String,
    /// Seed used when the command line gives none.
    pub seed: u64,
    /// Simulated time at which the run stops.
    pub end: Dur,
    pub topology: Topology,
    pub buffers: Buffers,
    pub tcp: Tcp,
    /// Every flow's congestion control (`tcp.congestion`).
    pub congestion: cc::Config,
    /// The marking rule of the queues (`[aqm]`).
    pub aqm: aqm::Config,
    /// Each scheduler class's rule (`scheduler.aqm`); empty: `aqm`.
    pub class_aqm: Vec<aqm::Config>,
    pub hosts: Hosts,
    pub workload: Workload,
    /// Scheduler of every switch port; none: one discipline per port.
    pub scheduler: Option<SchedulerCfg>,
    pub monitor: Monitor,
    /// Load balancing inside the fabric; per-flow ECMP unless given.
    pub routing: lb::Config,
    /// Asymmetry and failures (leaf-spine only); none unless given.
    pub faults: Option<FaultsCfg>,
    /// The receivers' resequencing buffer; off unless given.
    pub resequence: Option<ResequenceCfg>,
    /// The file the scenario came from (for relative paths).
    pub path: PathBuf,
    pub cdf: Option<Cdf>,
    /// `scheduler.ports` resolved when loaded; None: every switch port.
    pub scheduler_port_ids: Option<Vec<u32>>,
    /// The flows of a `list` workload, read with the scenario.
    pub flow_list: Vec<FlowSpec>,
    /// The files it named (flow list, CDF), for the results' provenance.
    pub inputs: fulcrum_config::Inputs,
    /// `topology` built once when loaded: named ports resolve against it
    /// and every run starts from a copy. Private, so that a `Scenario`
    /// only comes from [`Scenario::parse`], which sets it.
    fabric: Fabric,
}

fn one() -> u64 {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "kebab-case")]
pub enum Topology {
    LeafSpine {
        spines: u32,
        leaves: u32,
        hosts_per_leaf: u32,
        #[serde(default = "one_u32")]
        links: u32,
        host_gbps: f64,
        fabric_gbps: f64,
        link_delay: Dur,
    },
    Star {
        hosts: u32,
        gbps: f64,
        link_delay: Dur,
        /// Extra propagation delay of each host's link, in host order.
        #[serde(default)]
        extra_delay: Vec<Dur>,
    },
    Dumbbell {
        left: u32,
        right: u32,
        host_gbps: f64,
        bottleneck_gbps: f64,
        link_delay: Dur,
    },
}

fn one_u32() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Buffers {
    /// Device (NIC) queue of every port, packets.
    pub device_packets: u32,
    /// Queue-discipline limit of switch ports, packets.
    pub switch_packets: u32,
    /// Limit of a host NIC's queue in front of its device queue, packets
    /// (unlimited unless given). The seed's mq senders have a 600-packet
    /// device queue and no discipline: 595 here plus 5 device packets.
    #[serde(default)]
    pub host_packets: Option<u32>,
    /// Whether hosts' NIC queues (those without a delay stage) mark by the
    /// `[aqm]` rule too, as the seed's queue-track program installs its
    /// discipline on both ends of every link (default false: drop-tail).
    #[serde(default)]
    pub host_aqm: bool,
    /// Whether hosts' NICs without a delay stage have a queue discipline in
    /// front of their device queue (default true). The seed's mq program
    /// removes it (`tc.Uninstall`), leaving ns-3's one 600-packet device
    /// queue: with false, `host_packets` and `device_packets` act as that
    /// one drop-tail queue, so a packet finds the room a transmission has
    /// just made (with a discipline in front, the device queue takes it
    /// only when the port is next serviced).
    #[serde(default = "yes")]
    pub host_qdisc: bool,
    /// When a device queue takes packets from its discipline (and a host's
    /// NIC its delayed packets): "on-room" or "on-empty" (ns-3's rule).
    #[serde(default)]
    pub service: ServiceRule,
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers {
            device_packets: 10,
            switch_packets: 250,
            host_packets: None,
            host_aqm: false,
            host_qdisc: true,
            service: ServiceRule::OnRoom,
        }
    }
}

/// [`Service`] as written in a scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceRule {
    #[default]
    OnRoom,
    OnEmpty,
}

impl From<ServiceRule> for Service {
    fn from(r: ServiceRule) -> Service {
        match r {
            ServiceRule::OnRoom => Service::OnRoom,
            ServiceRule::OnEmpty => Service::OnEmpty,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tcp {
    pub mss: u32,
    pub initial_window: u32,
    pub min_rto: Dur,
    pub clock_granularity: Dur,
    pub initial_rtt: Dur,
    /// IP + TCP header bytes per packet.
    pub header_bytes: u32,
    /// The congestion control: `kind` names it, the other keys are its
    /// parameters (see [`cc`]); DCTCP with g = 1/16 unless given.
    pub congestion: toml::Table,
}

fn dctcp() -> toml::Table {
    toml::Table::from_iter([("kind".to_string(), toml::Value::from("dctcp"))])
}

impl Default for Tcp {
    fn default() -> Self {
        Tcp {
            mss: 1400,
            initial_window: 10,
            min_rto: Dur(5_000_000),
            clock_granularity: Dur(100_000),
            initial_rtt: Dur(80_000),
            header_bytes: 52,
            congestion: dctcp(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hosts {
    /// Extra delay a host adds to a flow's packets, one per class; each flow
    /// draws a class uniformly.
    pub delay_classes: Vec<Dur>,
    /// Class of packets without application data (SYN, SYN-ACK, ACK); 0
    /// unless given.
    #[serde(default)]
    pub control_class: u8,
    /// Where the delay acts: "nic" (each host's NIC, the default) or
    /// "switch-port" (each switch port facing a host, as the seed's
    /// large-scale program installs it; hosts' NICs then get the AQM).
    #[serde(default)]
    pub delay_at: DelayPlace,
}

/// [`DelayAt`] as written in a scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelayPlace {
    #[default]
    Nic,
    SwitchPort,
}

impl From<DelayPlace> for DelayAt {
    fn from(d: DelayPlace) -> DelayAt {
        match d {
            DelayPlace::Nic => DelayAt::Nic,
            DelayPlace::SwitchPort => DelayAt::SwitchPort,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    Poisson {
        /// CDF file, relative to the scenario file.
        cdf: PathBuf,
        load: f64,
        #[serde(default = "zero")]
        start: Dur,
        launch_end: Dur,
        /// Hosts that start flows (default: all).
        #[serde(default)]
        sources: Vec<u32>,
        /// Hosts the flows go to (default: hosts of other racks); when
        /// given, `load` is relative to their links.
        #[serde(default)]
        destinations: Vec<u32>,
        #[serde(default)]
        incast: Option<IncastCfg>,
    },
    /// Long-lived flows joining at given times, plus optional short flows.
    Flows {
        #[serde(default)]
        long: Vec<LongCfg>,
        #[serde(default)]
        short: Option<ShortCfg>,
        /// How often the long flows' throughput is sampled.
        #[serde(default = "twenty_ms")]
        throughput_interval: Dur,
        #[serde(default)]
        incast: Option<IncastCfg>,
    },
    /// Every host sends to one other host (a random cyclic permutation).
    Permutation {
        /// Payload of each flow (a size); none: long-lived flows.
        #[serde(default, with = "fulcrum_config::size")]
        bytes: Option<u64>,
        #[serde(default = "zero")]
        start: Dur,
        /// How often long-lived flows' throughput is sampled.
        #[serde(default = "twenty_ms")]
        throughput_interval: Dur,
        #[serde(default)]
        incast: Option<IncastCfg>,
    },
    /// Flows listed in a file: Fulcrum's CSV (`start,src,dst,bytes[,class]`)
    /// or an ns-3 (HPCC) flow file.
    List {
        /// The flow file, relative to the scenario file.
        file: PathBuf,
        /// Its format.
        #[serde(default)]
        format: FlowFormat,
        #[serde(default)]
        incast: Option<IncastCfg>,
    },
}

/// The format of a `list` workload's file.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FlowFormat {
    /// `start,src,dst,bytes[,class[,delay]]` (see [`flowlist::parse`]).
    #[default]
    Csv,
    /// The HPCC simulator's `flow.txt` (see [`flowlist::parse_ns3`]).
    Ns3,
}

/// All-to-one bursts (`[workload.incast]`), with any workload kind.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncastCfg {
    /// Senders: the first `fan_in` hosts other than the receiver.
    pub fan_in: u32,
    pub receiver: u32,
    /// Payload of each sender's flow per burst (a size).
    #[serde(with = "fulcrum_config::size")]
    pub bytes: u64,
    /// When given (and larger), sizes are uniform in [bytes, bytes_max].
    #[serde(default, with = "fulcrum_config::size")]
    pub bytes_max: Option<u64>,
    /// Time of the first burst (default: one interval).
    #[serde(default)]
    pub start: Option<Dur>,
    pub interval: Dur,
    pub bursts: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongCfg {
    pub src: u32,
    pub dst: u32,
    #[serde(default = "zero")]
    pub start: Dur,
    /// Scheduler class.
    #[serde(default)]
    pub class: u8,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShortCfg {
    pub count: u32,
    #[serde(with = "fulcrum_config::size")]
    pub bytes: u64,
    /// Flow i leaves from `sources[i % len]`.
    pub sources: Vec<u32>,
    pub dst: u32,
    #[serde(default = "zero")]
    pub start: Dur,
    pub end: Dur,
    /// Each flow draws a scheduler class uniformly below this.
    #[serde(default = "one_u32")]
    pub classes: u32,
}

/// A port scheduler as written in a scenario; each class gets the `[aqm]`
/// discipline (or its own from `aqm`) with `buffers.switch_packets` of
/// room, on every switch port (or only on `ports`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "kebab-case")]
pub enum SchedulerCfg {
    Dwrr {
        quanta: Vec<u32>,
        #[serde(default)]
        ports: Vec<String>,
        #[serde(default)]
        aqm: Vec<toml::Table>,
    },
    Strict {
        classes: u32,
        #[serde(default)]
        ports: Vec<String>,
        #[serde(default)]
        aqm: Vec<toml::Table>,
    },
    Wfq {
        weights: Vec<u32>,
        #[serde(default)]
        ports: Vec<String>,
        #[serde(default)]
        aqm: Vec<toml::Table>,
    },
}

impl SchedulerCfg {
    /// The ports it is limited to (empty: every switch port) and the
    /// per-class disciplines (empty: `[aqm]` for every class).
    fn extras(&self) -> (&[String], &[toml::Table]) {
        match self {
            SchedulerCfg::Dwrr { ports, aqm, .. }
            | SchedulerCfg::Strict { ports, aqm, .. }
            | SchedulerCfg::Wfq { ports, aqm, .. } => (ports, aqm),
        }
    }
}

/// `[faults]`: see [`crate::faults`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsCfg {
    /// `[leaf, spine]` pairs whose links run slow.
    #[serde(default)]
    pub slow_links: Vec<[u32; 2]>,
    /// Share of all leaf–spine links that run slow, drawn from the seed.
    #[serde(default)]
    pub slow_fraction: f64,
    /// Rate of a slow link relative to the others (1/5 by default).
    #[serde(default = "fifth")]
    pub slow_factor: f64,
    /// Links that fail.
    #[serde(default)]
    pub fail: Vec<FailCfg>,
    #[serde(default)]
    pub random_drop: Option<RandomDropCfg>,
    #[serde(default)]
    pub black_hole: Option<BlackHoleCfg>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailCfg {
    pub leaf: u32,
    pub spine: u32,
    pub at: Dur,
    /// Delay until routes stop using the link; never unless given.
    #[serde(default)]
    pub detect: Option<Dur>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomDropCfg {
    pub spine: u32,
    pub rate: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlackHoleCfg {
    pub spine: u32,
    #[serde(default)]
    pub src_leaf: Option<u32>,
    #[serde(default)]
    pub dst_leaf: Option<u32>,
}

/// `[resequence]`: see [`crate::reseq`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResequenceCfg {
    /// On unless `false` (`--set resequence.enabled=true` switches it on).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How long a gap may stay open before the held segments go up.
    #[serde(default = "hundred_us")]
    pub timeout: Dur,
}

fn yes() -> bool {
    true
}

fn hundred_us() -> Dur {
    Dur(100_000)
}

fn fifth() -> f64 {
    0.2
}

fn zero() -> Dur {
    Dur(0)
}

fn twenty_ms() -> Dur {
    Dur(20_000_000)
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Monitor {
    /// How often queue lengths are sampled (100 µs unless given).
    #[serde(default = "hundred_us")]
    pub interval: Dur,
    /// Ports whose queue length is recorded at every sample, by name
    /// ("switch 0 -> host 16", "leaf 0 -> spine 1": [`crate::ports`]).
    #[serde(default)]
    pub queue_ports: Vec<String>,
    /// `queue_ports` resolved to port indices when the scenario is loaded.
    #[serde(skip)]
    pub queue_port_ids: Vec<u32>,
    /// Which FCT convention the summary (`fct_ms`) follows
    /// ([`crate::metrics`]): "monitor" (default), "parser" or "last-byte".
    #[serde(default)]
    pub fct: Convention,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor {
            interval: hundred_us(),
            queue_ports: Vec::new(),
            queue_port_ids: Vec::new(),
            fct: Convention::default(),
        }
    }
}

/// The switch ports `scheduler.ports` names; None: every switch port.
fn scheduler_ports(
    scheduler: Option<&SchedulerCfg>,
    fabric: &Fabric,
    shape: &Shape,
    src: &Source,
) -> Result<Option<Vec<u32>>, ScenarioError> {
    let names = scheduler.map_or(&[][..], |s| s.extras().0);
    if names.is_empty() {
        return Ok(None);
    }
    let mut ids = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let field = format!("scheduler.ports[{i}]");
        let port = ports::resolve(name, fabric, shape).map_err(|m| src.error_in(&field, m))?;
        if matches!(fabric.ports[port as usize].from, End::Host(_)) {
            return Err(src.error_in(&field, format!("{name:?}: a host's NIC has no scheduler; name a switch port")));
        }
        ids.push(port);
    }
    Ok(Some(ids))
}

/// A check that failed: the field (a dotted path) and what is wrong.
type Invalid = (String, String);

/// A failed check of `field`.
fn bad<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, Invalid> {
    Err((field.into(), message.into()))
}

/// `v` must be finite and above 0.
fn positive(field: &str, v: f64) -> Result<(), Invalid> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        bad(field, format!("must be above 0 (found {v})"))
    }
}

impl Topology {
    fn check(&self) -> Result<(), Invalid> {
        match self {
            Topology::LeafSpine { spines, leaves, hosts_per_leaf, links, host_gbps, fabric_gbps, .. } => {
                for (f, v) in
                    [("spines", spines), ("leaves", leaves), ("hosts_per_leaf", hosts_per_leaf), ("links", links)]
                {
                    positive(&format!("topology.{f}"), *v as f64)?;
                }
                positive("topology.host_gbps", *host_gbps)?;
                positive("topology.fabric_gbps", *fabric_gbps)
            }
            Topology::Star { hosts, gbps, .. } => {
                if *hosts < 2 {
                    return bad("topology.hosts", format!("a star needs at least 2 hosts (found {hosts})"));
                }
                positive("topology.gbps", *gbps)
            }
            Topology::Dumbbell { left, right, host_gbps, bottleneck_gbps, .. } => {
                positive("topology.left", *left as f64)?;
                positive("topology.right", *right as f64)?;
                positive("topology.host_gbps", *host_gbps)?;
                positive("topology.bottleneck_gbps", *bottleneck_gbps)
            }
        }
    }
}

impl Buffers {
    fn check(&self) -> Result<(), Invalid> {
        positive("buffers.device_packets", self.device_packets as f64)?;
        positive("buffers.switch_packets", self.switch_packets as f64)?;
        if self.host_aqm && !self.host_qdisc {
            return bad("buffers.host_qdisc", "host_aqm needs the hosts' NIC discipline (found false)");
        }
        Ok(())
    }
}

impl Tcp {
    fn check(&self) -> Result<(), Invalid> {
        positive("tcp.mss", self.mss as f64)?;
        // A packet's wire size is a u16 (crate::packet).
        if self.mss as u64 + self.header_bytes as u64 + crate::world::FRAMING as u64 > u16::MAX as u64 {
            return bad(
                "tcp.mss",
                format!(
                    "a segment with its {} header bytes must fit in 65,535 bytes on the wire (found {})",
                    self.header_bytes, self.mss
                ),
            );
        }
        positive("tcp.initial_window", self.initial_window as f64)?;
        congestion_config(&self.congestion)?;
        Ok(())
    }
}

impl Hosts {
    fn check(&self) -> Result<(), Invalid> {
        let classes = self.delay_classes.len();
        if classes > 0 && self.control_class as usize >= classes {
            return bad("hosts.control_class", format!("there are {classes} classes (found {})", self.control_class));
        }
        if classes > 255 {
            return bad("hosts.delay_classes", "has more than 255 classes");
        }
        Ok(())
    }
}

impl SchedulerCfg {
    /// Classes of the scheduler.
    fn classes(&self) -> usize {
        match self {
            SchedulerCfg::Dwrr { quanta, .. } => quanta.len(),
            SchedulerCfg::Strict { classes, .. } => *classes as usize,
            SchedulerCfg::Wfq { weights, .. } => weights.len(),
        }
    }

    fn check(&self) -> Result<(), Invalid> {
        let aqm = self.extras().1;
        for (i, a) in aqm.iter().enumerate() {
            aqm_config(a, &format!("scheduler.aqm[{i}]"))?;
        }
        let n = self.classes();
        if n == 0 || n > 255 {
            return bad("scheduler", format!("has {n} classes: give 1 to 255"));
        }
        if !aqm.is_empty() && aqm.len() != n {
            return bad("scheduler.aqm", format!("has {} disciplines for {n} classes", aqm.len()));
        }
        match self {
            SchedulerCfg::Dwrr { quanta, .. } if quanta.contains(&0) => bad("scheduler.quanta", "must all be above 0"),
            SchedulerCfg::Wfq { weights, .. } if weights.contains(&0) => {
                bad("scheduler.weights", "must all be above 0")
            }
            _ => Ok(()),
        }
    }
}

impl FaultsCfg {
    /// Faults name leaves and spines of a leaf-spine `topology`.
    fn check(&self, topology: &Topology) -> Result<(), Invalid> {
        let &Topology::LeafSpine { spines, leaves, .. } = topology else {
            return bad("faults", "apply to leaf-spine topologies only");
        };
        let range = |what: &str, field: String, v: u32, n: u32| {
            if v < n {
                Ok(())
            } else {
                bad(format!("faults.{field}"), format!("names {what} {v}: there are {n} (0 to {})", n - 1))
            }
        };
        for (i, &[leaf, spine]) in self.slow_links.iter().enumerate() {
            range("leaf", format!("slow_links[{i}]"), leaf, leaves)?;
            range("spine", format!("slow_links[{i}]"), spine, spines)?;
        }
        if !(0.0..=1.0).contains(&self.slow_fraction) {
            return bad("faults.slow_fraction", format!("must be within [0, 1] (found {})", self.slow_fraction));
        }
        if !(self.slow_factor > 0.0 && self.slow_factor <= 1.0) {
            return bad("faults.slow_factor", format!("must be within (0, 1] (found {})", self.slow_factor));
        }
        for (i, fail) in self.fail.iter().enumerate() {
            range("leaf", format!("fail[{i}].leaf"), fail.leaf, leaves)?;
            range("spine", format!("fail[{i}].spine"), fail.spine, spines)?;
        }
        if let Some(d) = &self.random_drop {
            range("spine", "random_drop.spine".into(), d.spine, spines)?;
            if !(d.rate > 0.0 && d.rate <= 1.0) {
                return bad("faults.random_drop.rate", format!("must be within (0, 1] (found {})", d.rate));
            }
        }
        if let Some(bh) = &self.black_hole {
            range("spine", "black_hole.spine".into(), bh.spine, spines)?;
            for (field, leaf) in [("src_leaf", bh.src_leaf), ("dst_leaf", bh.dst_leaf)] {
                if let Some(leaf) = leaf {
                    range("leaf", format!("black_hole.{field}"), leaf, leaves)?;
                }
            }
            if bh.src_leaf.is_none() && bh.dst_leaf.is_none() {
                return bad("faults.black_hole", "needs src_leaf, dst_leaf or both");
            }
        }
        Ok(())
    }
}

impl IncastCfg {
    /// Over a fabric of `hosts` hosts.
    fn check(&self, hosts: u32) -> Result<(), Invalid> {
        if self.receiver >= hosts {
            return bad("workload.incast.receiver", format!("hosts are 0 to {} (found {})", hosts - 1, self.receiver));
        }
        if self.fan_in == 0 || self.fan_in >= hosts {
            return bad("workload.incast.fan_in", format!("must be 1 to {} (found {})", hosts - 1, self.fan_in));
        }
        positive("workload.incast.bytes", self.bytes as f64)?;
        positive("workload.incast.interval", self.interval.0 as f64)?;
        positive("workload.incast.bursts", self.bursts as f64)?;
        if self.bytes_max.is_some_and(|m| m < self.bytes) {
            return bad("workload.incast.bytes_max", "must be at least workload.incast.bytes");
        }
        Ok(())
    }
}

impl Workload {
    fn incast(&self) -> Option<&IncastCfg> {
        match self {
            Workload::Poisson { incast, .. }
            | Workload::Flows { incast, .. }
            | Workload::Permutation { incast, .. }
            | Workload::List { incast, .. } => incast.as_ref(),
        }
    }

    /// Over a fabric of `hosts` hosts whose ports have `classes` scheduler
    /// classes (None: no scheduler).
    fn check(&self, hosts: u32, classes: Option<usize>) -> Result<(), Invalid> {
        if let Some(i) = self.incast() {
            i.check(hosts)?;
        }
        match self {
            Workload::Poisson { load, start, launch_end, sources, destinations, .. } => {
                if !(*load > 0.0 && *load < 1.0) {
                    return bad("workload.load", format!("must be above 0 and below 1 (found {load})"));
                }
                if launch_end.0 <= start.0 {
                    return bad("workload.launch_end", "must be after workload.start");
                }
                for (field, list) in [("workload.sources", sources), ("workload.destinations", destinations)] {
                    if let Some(i) = list.iter().position(|&h| h >= hosts) {
                        return bad(
                            format!("{field}[{i}]"),
                            format!("has host {}: hosts are 0 to {}", list[i], hosts - 1),
                        );
                    }
                }
                if destinations.len() == 1 && sources.iter().all(|&s| s == destinations[0]) {
                    return bad("workload.sources", "must have a host other than the one destination");
                }
            }
            Workload::Permutation { bytes, throughput_interval, .. } => {
                positive("workload.throughput_interval", throughput_interval.0 as f64)?;
                if *bytes == Some(0) {
                    return bad("workload.bytes", "must be above 0 (found 0)");
                }
                if hosts < 2 {
                    return bad("topology", "a permutation needs at least 2 hosts");
                }
            }
            Workload::List { .. } => {}
            Workload::Flows { long, short, throughput_interval, .. } => {
                positive("workload.throughput_interval", throughput_interval.0 as f64)?;
                let class_ok = |c: u32| classes.map_or(c == 0, |n| c < n as u32);
                for (i, l) in long.iter().enumerate() {
                    if l.src >= hosts || l.dst >= hosts || l.src == l.dst {
                        return bad(
                            format!("workload.long[{i}].src"),
                            format!("{} / dst = {}: hosts are 0 to {} and differ", l.src, l.dst, hosts - 1),
                        );
                    }
                    if !class_ok(l.class as u32) {
                        return bad(
                            format!("workload.long[{i}].class"),
                            format!("the scheduler has no such class (found {})", l.class),
                        );
                    }
                }
                if let Some(s) = short {
                    if s.sources.is_empty()
                        || s.sources.iter().chain([&s.dst]).any(|&h| h >= hosts)
                        || s.sources.contains(&s.dst)
                    {
                        return bad(
                            "workload.short.sources",
                            format!("must be non-empty hosts below {hosts}, other than dst"),
                        );
                    }
                    if s.end.0 <= s.start.0 {
                        return bad("workload.short.end", "must be after start");
                    }
                    if s.classes == 0 || !class_ok(s.classes - 1) {
                        return bad(
                            "workload.short.classes",
                            format!("the scheduler has fewer classes (found {})", s.classes),
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

impl RawScenario {
    /// Every section checked (in this order: the first failure is reported).
    fn check(&self) -> Result<(), Invalid> {
        self.topology.check()?;
        self.buffers.check()?;
        self.tcp.check()?;
        self.hosts.check()?;
        aqm_config(&self.aqm, "aqm")?;
        positive("monitor.interval", self.monitor.interval.0 as f64)?;
        if let Some(f) = &self.faults {
            f.check(&self.topology)?;
        }
        if let Some(r) = &self.resequence {
            positive("resequence.timeout", r.timeout.0 as f64)?;
        }
        if let Some(r) = &self.routing {
            routing_config(r)?;
        }
        positive("end", self.end.0 as f64)?;
        if let Some(s) = &self.scheduler {
            s.check()?;
        }
        let hosts = self.topology.shape().0.hosts();
        self.workload.check(hosts, self.scheduler.as_ref().map(SchedulerCfg::classes))
    }
}

impl Scenario {
    /// Load and check `path`, with `sets` (`KEY=VALUE`) applied on top.
    pub fn load(path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError::new(path, "(file)", format!("cannot read scenario: {e}")))?;
        Scenario::parse(&text, path, sets)
    }

    /// Parse scenario `text` that came from `path`, with `sets` applied to
    /// its document before it is read (`fulcrum_config::document`); the
    /// sections are checked, then the topology is built and the ports, the
    /// flow list and the CDF the scenario names are resolved against it.
    pub fn parse(text: &str, path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let (scenario, inputs) = fulcrum_config::Inputs::record(|| Scenario::read(text, path, sets));
        Ok(Scenario { inputs, ..scenario? })
    }

    fn read(text: &str, path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let (raw, src): (RawScenario, Source) = fulcrum_config::parse(path, text, sets)?;
        raw.check().map_err(|(field, message)| src.error_in(&field, message))?;
        let (shape, delay) = raw.topology.shape();
        let fabric = Fabric::build(&shape, delay);
        let mut monitor = raw.monitor;
        monitor.queue_port_ids = monitor
            .queue_ports
            .iter()
            .enumerate()
            .map(|(i, name)| {
                ports::resolve(name, &fabric, &shape).map_err(|m| src.error_in(&format!("monitor.queue_ports[{i}]"), m))
            })
            .collect::<Result<_, _>>()?;
        let scheduler_port_ids = scheduler_ports(raw.scheduler.as_ref(), &fabric, &shape, &src)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let flow_list = match &raw.workload {
            Workload::List { file, format, .. } => {
                let list_path = dir.join(file);
                let classes = raw.scheduler.as_ref().map_or(1, SchedulerCfg::classes) as u32;
                let text = fulcrum_config::read_input(&list_path)
                    .map_err(|e| src.error_in("workload.file", format!("{}: {e}", list_path.display())))?;
                let delays = raw.hosts.delay_classes.len() as u32;
                match format {
                    FlowFormat::Csv => flowlist::parse(&text, &list_path, shape.hosts(), classes, delays)?,
                    FlowFormat::Ns3 => flowlist::parse_ns3(&text, &list_path, shape.hosts())?,
                }
            }
            _ => Vec::new(),
        };
        let cdf = match &raw.workload {
            Workload::Poisson { cdf, .. } => {
                Some(Cdf::load(&dir.join(cdf)).map_err(|e| src.error_in("workload.cdf", e.to_string()))?)
            }
            _ => None,
        };
        let rules = |table: &toml::Table, path: &str| aqm_config(table, path).map_err(|(f, m)| src.error_in(&f, m));
        let aqm = rules(&raw.aqm, "aqm")?;
        let congestion = congestion_config(&raw.tcp.congestion).map_err(|(f, m)| src.error_in(&f, m))?;
        let class_aqm = match raw.scheduler.as_ref() {
            Some(s) => s
                .extras()
                .1
                .iter()
                .enumerate()
                .map(|(i, t)| rules(t, &format!("scheduler.aqm[{i}]")))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let routing = match &raw.routing {
            Some(table) => routing_config(table).map_err(|(field, message)| src.error_in(&field, message))?,
            None => lb::Config::default(),
        };
        Ok(Scenario {
            name: raw.name,
            seed: raw.seed,
            end: raw.end,
            topology: raw.topology,
            buffers: raw.buffers,
            tcp: raw.tcp,
            congestion,
            aqm,
            class_aqm,
            hosts: raw.hosts,
            workload: raw.workload,
            scheduler: raw.scheduler,
            monitor,
            routing,
            faults: raw.faults,
            resequence: raw.resequence,
            path: path.to_path_buf(),
            cdf,
            scheduler_port_ids,
            flow_list,
            inputs: fulcrum_config::Inputs::default(),
            fabric,
        })
    }

    /// The faults to inject and the number of leaves they refer to.
    pub fn faults(&self) -> Option<(FaultConfig, u32)> {
        let f = self.faults.as_ref()?;
        let &Topology::LeafSpine { leaves, .. } = &self.topology else { return None };
        let cfg = FaultConfig {
            slow_links: f.slow_links.iter().map(|&[l, s]| (l, s)).collect(),
            slow_fraction: f.slow_fraction,
            slow_factor: f.slow_factor,
            failures: f
                .fail
                .iter()
                .map(|x| LinkFailure { leaf: x.leaf, spine: x.spine, at: x.at.0, detect: x.detect.map(|d| d.0) })
                .collect(),
            random_drop: f.random_drop.as_ref().map(|d| (d.spine, d.rate)),
            black_hole: f.black_hole.as_ref().map(|b| BlackHole {
                spine: b.spine,
                src_leaf: b.src_leaf,
                dst_leaf: b.dst_leaf,
            }),
        };
        Some((cfg, leaves))
    }

    /// Classes of the port scheduler, if there is one.
    fn scheduler_classes(&self) -> Option<usize> {
        self.scheduler.as_ref().map(SchedulerCfg::classes)
    }

    /// The port scheduler and its number of classes.
    pub fn scheduler(&self) -> Option<(Policy, usize)> {
        let n = self.scheduler_classes()?;
        let policy = match self.scheduler.as_ref()? {
            SchedulerCfg::Dwrr { quanta, .. } => Policy::Dwrr { quanta: quanta.clone() },
            SchedulerCfg::Strict { .. } => Policy::Strict,
            SchedulerCfg::Wfq { weights, .. } => Policy::Wfq { weights: weights.clone() },
        };
        Some((policy, n))
    }

    /// The topology, built when the scenario was loaded.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The topology to build and its link delay.
    pub fn shape(&self) -> (Shape, Nanos) {
        self.topology.shape()
    }

    pub fn tcp_config(&self) -> TcpConfig {
        let t = &self.tcp;
        TcpConfig {
            mss: t.mss,
            iw: t.initial_window,
            min_rto: t.min_rto.0,
            granularity: t.clock_granularity.0,
            initial_rtt: t.initial_rtt.0,
        }
    }

    /// The marking rule of the queues.
    pub fn marking(&self) -> aqm::Config {
        self.aqm.clone()
    }

    /// The discipline of each scheduler class: `scheduler.aqm` when given,
    /// else `[aqm]` for every class; empty without a scheduler.
    pub fn class_markings(&self) -> Vec<aqm::Config> {
        let Some(n) = self.scheduler_classes() else { return Vec::new() };
        if self.class_aqm.is_empty() {
            vec![self.marking(); n]
        } else {
            self.class_aqm.clone()
        }
    }

    /// The resequencing buffer's timeout, if it is on.
    pub fn resequencing(&self) -> Option<Nanos> {
        self.resequence.as_ref().filter(|r| r.enabled).map(|r| r.timeout.0)
    }

    /// The load-balancing scheme and its parameters.
    pub fn routing(&self) -> lb::Config {
        self.routing.clone()
    }

    /// The Poisson workload with its CDF loaded, if that is the workload.
    pub fn poisson(&self) -> Option<Poisson> {
        let Workload::Poisson { load, start, launch_end, sources, destinations, .. } = &self.workload else {
            return None;
        };
        Some(Poisson {
            cdf: self.cdf.clone().expect("loaded with the scenario"),
            load: *load,
            start: start.0,
            launch_end: launch_end.0,
            sources: sources.clone(),
            destinations: destinations.clone(),
        })
    }

    fn incast_cfg(&self) -> Option<&IncastCfg> {
        self.workload.incast()
    }

    /// The incast bursts, if the workload has them.
    pub fn incast(&self) -> Option<Incast> {
        let i = self.incast_cfg()?;
        Some(Incast {
            fan_in: i.fan_in,
            receiver: i.receiver,
            bytes: i.bytes,
            bytes_max: i.bytes_max.unwrap_or(i.bytes),
            start: i.start.map_or(i.interval.0, |d| d.0),
            interval: i.interval.0,
            bursts: i.bursts,
        })
    }

    /// The permutation workload, if that is the workload.
    pub fn permutation(&self) -> Option<Permutation> {
        let Workload::Permutation { bytes, start, .. } = &self.workload else { return None };
        Some(Permutation { bytes: *bytes, start: start.0 })
    }

    /// How many long-lived flows lead the flow list (flows 0, 1, …) and
    /// how often their throughput is sampled.
    pub fn long_flows(&self) -> Option<(u32, Nanos)> {
        match &self.workload {
            Workload::Flows { long, throughput_interval, .. } if !long.is_empty() => {
                Some((long.len() as u32, throughput_interval.0))
            }
            Workload::Permutation { bytes: None, throughput_interval, .. } => {
                Some((self.shape().0.hosts(), throughput_interval.0))
            }
            _ => None,
        }
    }

    /// The fixed flows and their throughput sampling interval, if that is
    /// the workload.
    pub fn fixed(&self) -> Option<(Fixed, Nanos)> {
        let Workload::Flows { long, short, throughput_interval, .. } = &self.workload else { return None };
        let long = long.iter().map(|l| LongFlow { src: l.src, dst: l.dst, start: l.start.0, prio: l.class }).collect();
        let short = short.as_ref().map(|s| ShortFlows {
            count: s.count,
            bytes: s.bytes,
            sources: s.sources.clone(),
            dst: s.dst,
            start: s.start.0,
            end: s.end.0,
            classes: s.classes,
        });
        Some((Fixed { long, short }, throughput_interval.0))
    }
}

impl Topology {
    /// The topology to build and its link delay.
    pub fn shape(&self) -> (Shape, Nanos) {
        match self {
            &Topology::LeafSpine { spines, leaves, hosts_per_leaf, links, host_gbps, fabric_gbps, link_delay } => {
                (Shape::LeafSpine { spines, leaves, hosts_per_leaf, links, host_gbps, fabric_gbps }, link_delay.0)
            }
            Topology::Star { hosts, gbps, link_delay, extra_delay } => (
                Shape::Star { hosts: *hosts, gbps: *gbps, extra_delay: extra_delay.iter().map(|d| d.0).collect() },
                link_delay.0,
            ),
            &Topology::Dumbbell { left, right, host_gbps, bottleneck_gbps, link_delay } => {
                (Shape::Dumbbell { left, right, host_gbps, bottleneck_gbps }, link_delay.0)
            }
        }
    }
}

/// The scheme a `[routing]` table names, its parameters read and checked
/// by the scheme (see [`lb::SchemeType`]).
fn routing_config(table: &toml::Table) -> Result<lb::Config, Invalid> {
    lb::Config::from_table(table.clone()).map_err(|e| e.within("routing"))
}

/// The algorithm a `tcp.congestion` table names, its parameters read and
/// checked by the algorithm (see [`cc::CongestionType`]).
fn congestion_config(table: &toml::Table) -> Result<cc::Config, Invalid> {
    cc::Config::from_table(table.clone()).map_err(|e| e.within("tcp.congestion"))
}

/// The rule an `[aqm]` table at `path` names, its parameters read and
/// checked by the rule (see [`aqm::AqmType`]).
fn aqm_config(table: &toml::Table, path: &str) -> Result<aqm::Config, Invalid> {
    aqm::Config::from_table(table.clone()).map_err(|e| e.within(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::clove::CloveParams;
    use crate::lb::conga::CongaParams;
    use crate::lb::drb::{Presto, PrestoParams};
    use crate::lb::drill::DrillParams;
    use crate::lb::flowbender::FlowBenderParams;
    use crate::lb::hermes::HermesParams;
    use crate::lb::letflow::LetFlowParams;

    fn base() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scenarios/fabric/large-scale-ecnsharp.toml"
        ))
        .unwrap()
    }

    fn parse(text: &str, sets: &[&str]) -> Result<Scenario, String> {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/x.toml"));
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Scenario::parse(text, path, &sets).map_err(|e| e.to_string())
    }

    #[test]
    fn shipped_scenario_loads() {
        let s = parse(&base(), &[]).unwrap();
        assert_eq!(s.end, Dur(500_000_000));
        assert!((s.cdf.as_ref().unwrap().mean() - 1_711_250.0).abs() < 1e-6);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let text = base().replace("load = 0.6", "load = 1.2");
        let err = parse(&text, &[]).unwrap_err();
        assert!(err.ends_with("x.toml:63:8: workload.load: must be above 0 and below 1 (found 1.2)"), "{err}");
        let text = base().replace("load = 0.6", "load = 0.6\nlaod = 3");
        let err = parse(&text, &[]).unwrap_err();
        assert!(err.contains("x.toml:64:1: workload.laod: unknown field `laod`"), "{err}");
        let err = parse(&base().replace("\"70us\"", "\"70 furlongs\""), &[]).unwrap_err();
        assert!(err.contains("x.toml:") && err.contains("furlongs"), "{err}");
        let err = parse(
            &base().replace(
                "load = 0.6",
                "load = 0.6\nincast = { fan_in = 4, receiver = 99, bytes = \"2KiB\", interval = \"1ms\", bursts = 1 }",
            ),
            &[],
        )
        .unwrap_err();
        assert!(err.ends_with("x.toml:64:35: workload.incast.receiver: hosts are 0 to 31 (found 99)"), "{err}");
    }

    #[test]
    fn set_overrides_fields_and_names_itself_in_errors() {
        let s = parse(&base(), &["workload.load=0.4", "aqm.threshold=30us"]).unwrap();
        let Workload::Poisson { load, .. } = s.workload else { panic!("a Poisson workload") };
        assert_eq!(load, 0.4);
        assert_eq!(s.aqm.params::<aqm::ecn_sharp::EcnSharpParams>().map(|p| p.threshold), Some(30_000));
        let err = parse(&base(), &["workload.load=2"]).unwrap_err();
        assert_eq!(err, "--set workload.load=2: workload.load: must be above 0 and below 1 (found 2)");
        let err = parse(&base(), &["aqm.treshold=3us"]).unwrap_err();
        assert!(err.starts_with("--set aqm.treshold=3us: aqm.treshold: ecn-sharp: unknown field `treshold`"), "{err}");
        let err = parse(&base(), &["aqm.threshold=3 parsecs"]).unwrap_err();
        assert!(
            err.starts_with("--set aqm.threshold=3 parsecs: aqm.threshold: ecn-sharp: \"3 parsecs\" is not"),
            "{err}"
        );
        let err = parse(&base(), &["buffers.device_packets=0"]).unwrap_err();
        assert_eq!(err, "--set buffers.device_packets=0: buffers.device_packets: must be above 0 (found 0)");
        assert_eq!(parse(&base(), &["nonsense"]).unwrap_err(), "--set nonsense: (syntax): expected KEY=VALUE");
        let s = parse(&base(), &["routing.scheme=presto", "routing.flowcell=\"32KiB\""]).unwrap();
        assert_eq!(s.routing(), lb::Config::new::<Presto>(PrestoParams { flowcell: 32_768, weighted: false }).unwrap());
    }

    #[test]
    fn a_segment_must_fit_a_packets_wire_size() {
        // 65,535 wire bytes: 65,481 of payload, 52 of headers, 2 of framing.
        assert!(parse(&base(), &["tcp.mss=65481"]).is_ok());
        let err = parse(&base(), &["tcp.mss=65482"]).unwrap_err();
        assert!(err.contains("tcp.mss") && err.contains("65,535"), "{err}");
    }

    #[test]
    fn routing_schemes_parse_with_defaults_and_checked_fields() {
        assert_eq!(parse(&base(), &[]).unwrap().routing(), lb::Config::default());
        let with = |extra: &str| format!("{}\n[routing]\n{extra}\n", base());
        let s = parse(&with("scheme = \"letflow\""), &[]).unwrap();
        assert_eq!(s.routing(), lb::Config::new::<lb::LetFlow>(LetFlowParams { flowlet_gap: 500_000 }).unwrap());
        let s = parse(&with("scheme = \"presto\"\nweighted = true"), &[]).unwrap();
        assert_eq!(s.routing(), lb::Config::new::<Presto>(PrestoParams { flowcell: 65_536, weighted: true }).unwrap());
        let s = parse(&base(), &["routing.scheme=drill"]).unwrap();
        assert_eq!(s.routing(), lb::Config::new::<lb::Drill>(DrillParams { d: 2, memory: 1 }).unwrap());
        let err = parse(&with("scheme = \"drill\"\nd = 0"), &[]).unwrap_err();
        assert!(err.ends_with("x.toml:69:5: routing.d: sample 1 to 64 queues (found 0)"), "{err}");
        let err = parse(&with("scheme = \"letflow\"\nflowlet_gap = \"0us\""), &[]).unwrap_err();
        assert!(err.contains("routing.flowlet_gap"), "{err}");
        let err = parse(&with("scheme = \"conga-lite\""), &[]).unwrap_err();
        assert!(
            err.contains("x.toml:68:10: routing.scheme: unknown scheme \"conga-lite\" (expected one of: ecmp, drb"),
            "{err}"
        );
        let err = parse(&with("scheme = \"drb\"\nflowcell = 3"), &[]).unwrap_err();
        assert!(err.contains("flowcell"), "{err}");
        assert!(parse(&base(), &["routing.scheme=drill", "routing.d=99"]).unwrap_err().contains("--set routing.d"));
    }

    #[test]
    fn sensing_schemes_parse_with_defaults_and_checked_fields() {
        let with = |extra: &str| format!("{}\n[routing]\n{extra}\n", base());
        let s = parse(&with("scheme = \"conga\""), &[]).unwrap();
        assert_eq!(s.routing(), lb::Config::new::<lb::CongaScheme>(CongaParams::default()).unwrap());
        let s = parse(&with("scheme = \"clove\"\nhalf_rtt = \"60us\""), &[]).unwrap();
        assert_eq!(
            s.routing(),
            lb::Config::new::<lb::CloveScheme>(CloveParams { half_rtt: 60_000, ..CloveParams::default() }).unwrap()
        );
        let s = parse(&base(), &["routing.scheme=flowbender", "routing.reroute_on_timeout=false"]).unwrap();
        let fb = FlowBenderParams { reroute_on_timeout: false, ..FlowBenderParams::default() };
        assert_eq!(s.routing(), lb::Config::new::<lb::FlowBenderScheme>(fb).unwrap());
        let s = parse(&with("scheme = \"hermes\"\nmin_bytes = 100000\nmax_rate_gbps = 2.5"), &[]).unwrap();
        let h = HermesParams { min_bytes: 100_000, max_rate_bps: 2_500_000_000, ..HermesParams::default() };
        assert_eq!(s.routing(), lb::Config::new::<lb::HermesScheme>(h).unwrap());
        let s =
            parse(&base(), &["routing.scheme=hermes", "routing.reverse_ack=true", "routing.acklet_timeout=\"200us\""])
                .unwrap();
        let h = HermesParams { reverse_ack: true, acklet_timeout: 200_000, ..HermesParams::default() };
        assert_eq!(s.routing(), lb::Config::new::<lb::HermesScheme>(h).unwrap());
        for (text, field) in [
            ("scheme = \"conga\"\nq_bits = 7", "69:10: routing.q_bits: "),
            ("scheme = \"conga\"\nalpha = 1.5", "69:9: routing.alpha: "),
            ("scheme = \"clove\"\nflowlet_gap = \"0us\"", "69:15: routing.flowlet_gap: "),
            ("scheme = \"flowbender\"\nrounds = 0", "69:10: routing.rounds: "),
            ("scheme = \"hermes\"\nbad_delay = \"30us\"", "69:13: routing.bad_delay: "),
            ("scheme = \"hermes\"\nreroute_probability = 2.0", "69:23: routing.reroute_probability: "),
            // A default that fails with the others given: located at the table.
            ("scheme = \"hermes\"\ngood_delay = \"1s\"", "67:1: routing.bad_delay: "),
        ] {
            let err = parse(&with(text), &[]).unwrap_err();
            assert!(err.contains(&format!("x.toml:{field}")), "{text}: {err}");
        }
        let err = parse(&with("scheme = \"clove\"\nthreshold = 0.1"), &[]).unwrap_err();
        assert!(err.contains("threshold"), "{err}");
    }

    #[test]
    fn resequencing_is_off_unless_asked_for() {
        assert_eq!(parse(&base(), &[]).unwrap().resequencing(), None);
        assert_eq!(parse(&base(), &["resequence.enabled=true"]).unwrap().resequencing(), Some(100_000));
        let s = parse(&format!("{}\n[resequence]\ntimeout = \"50us\"\n", base()), &[]).unwrap();
        assert_eq!(s.resequencing(), Some(50_000));
        assert_eq!(parse(&base(), &["resequence.enabled=false"]).unwrap().resequencing(), None);
        assert!(parse(&base(), &["resequence.timeout=0us"]).unwrap_err().contains("--set resequence.timeout"));
    }

    #[test]
    fn faults_parse_and_name_their_field() {
        let with = |extra: &str| format!("{}\n[faults]\n{extra}\n", base());
        let text = with(concat!(
            "slow_links = [[0, 1]]\nslow_fraction = 0.25\n",
            "fail = [{ leaf = 2, spine = 3, at = \"10ms\", detect = \"1ms\" }]\n",
            "random_drop = { spine = 0, rate = 0.005 }\nblack_hole = { spine = 0, src_leaf = 1 }"
        ));
        let (cfg, leaves) = parse(&text, &[]).unwrap().faults().unwrap();
        assert_eq!(leaves, 4);
        assert_eq!((cfg.slow_links, cfg.slow_fraction, cfg.slow_factor), (vec![(0, 1)], 0.25, 0.2));
        assert_eq!(cfg.failures, [LinkFailure { leaf: 2, spine: 3, at: 10_000_000, detect: Some(1_000_000) }]);
        assert_eq!(cfg.random_drop, Some((0, 0.005)));
        assert_eq!(cfg.black_hole, Some(BlackHole { spine: 0, src_leaf: Some(1), dst_leaf: None }));
        let err = parse(&with("slow_links = [[0, 1], [0, 4]]"), &[]).unwrap_err();
        assert!(err.ends_with("x.toml:68:23: faults.slow_links[1]: names spine 4: there are 4 (0 to 3)"), "{err}");
        let err = parse(&with("random_drop = { spine = 0, rate = 2 }"), &[]).unwrap_err();
        assert!(err.ends_with("x.toml:68:35: faults.random_drop.rate: must be within (0, 1] (found 2)"), "{err}");
        let err = parse(&with("black_hole = { spine = 0 }"), &[]).unwrap_err();
        assert!(err.contains("faults.black_hole: needs"), "{err}");
        let err = parse(&with("slow_fraction = 0.5\nslow_factr = 0.1"), &[]).unwrap_err();
        assert!(err.contains("slow_factr"), "{err}");
        // An array of tables: each element's values on their own lines.
        let text = with(
            "[[faults.fail]]\nleaf = 0\nspine = 1\nat = \"1ms\"\n[[faults.fail]]\nleaf = 9\nspine = 1\nat = \"2ms\"",
        );
        let line = 1 + text.lines().position(|l| l == "leaf = 9").unwrap();
        let err = parse(&text, &[]).unwrap_err();
        assert!(
            err.ends_with(&format!("x.toml:{line}:8: faults.fail[1].leaf: names leaf 9: there are 4 (0 to 3)")),
            "{err}"
        );
        let err = parse(&text.replace("at = \"2ms\"", "at = \"2 fortnights\""), &[]).unwrap_err();
        assert!(err.contains(&format!("x.toml:{}:6: faults.fail[1].at: ", line + 2)), "{err}");
    }

    #[test]
    fn mq_scenario_loads_and_checks_classes_and_hosts() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/mq-tcn.toml"))
            .unwrap();
        let s = parse(&text, &[]).unwrap();
        assert_eq!(s.scheduler(), Some((Policy::Dwrr { quanta: vec![3000, 1500, 1500] }, 3)));
        let (fixed, every) = s.fixed().unwrap();
        assert_eq!((fixed.long.len(), fixed.long[2].start, fixed.long[2].prio, every), (3, 200_000_000, 2, 20_000_000));
        assert!(s.poisson().is_none() && s.cdf.is_none());
        let err = parse(&text.replace("class = 2 }", "class = 3 }"), &[]).unwrap_err();
        assert!(
            err.contains("x.toml:57:48: workload.long[2].class: the scheduler has no such class (found 3)"),
            "{err}"
        );
        let err = parse(&text, &["workload.short.classes=4"]).unwrap_err();
        assert!(err.contains("--set workload.short.classes"), "{err}");
        let err = parse(&text, &["scheduler.quanta=[1500, 0, 1500]"]).unwrap_err();
        assert!(err.contains("scheduler.quanta"), "{err}");
        assert!(parse(&text, &["workload.short.dst=6"]).unwrap_err().contains("workload.short.sources"));
    }

    #[test]
    fn queue_ports_resolve_by_name_and_errors_name_the_field() {
        let text = base()
            + "\n[monitor]\ninterval = \"100us\"\nqueue_ports = [\"leaf 0 -> spine 1\", \"leaf 3 -> host 31\"]\n";
        let s = parse(&text, &[]).unwrap();
        assert_eq!(s.monitor.queue_port_ids.len(), 2);
        let bad = text.replace("leaf 3 -> host 31", "leaf 3 -> host 30 -> x");
        assert!(parse(&bad, &[]).unwrap_err().contains("monitor.queue_ports"));
        let err = parse(&text.replace("host 31", "host 32"), &[]).unwrap_err();
        assert!(err.contains("x.toml:69:37: monitor.queue_ports[1]: ") && err.contains("no host 32"), "{err}");
        let err = parse(&base(), &["monitor.queue_ports=[\"leaf 0 -> leaf 1\"]"]).unwrap_err();
        assert!(err.contains("monitor.queue_ports") && err.contains("no link"), "{err}");
    }

    #[test]
    fn the_fct_convention_defaults_to_the_monitor_and_is_named_on_error() {
        assert_eq!(parse(&base(), &[]).unwrap().monitor.fct, Convention::Monitor);
        let s = parse(&base(), &["monitor.fct=\"last-byte\""]).unwrap();
        assert_eq!(s.monitor.fct, Convention::LastByte);
        let err = parse(&(base() + "\n[monitor]\nfct = \"receiver\"\n"), &[]).unwrap_err();
        assert!(err.contains("unknown variant `receiver`"), "{err}");
    }

    #[test]
    fn queue_track_loads_and_checks_destinations_and_incast() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scenarios/fabric/queue-track-ecnsharp.toml"
        ))
        .unwrap();
        let s = parse(&text, &[]).unwrap();
        let p = s.poisson().unwrap();
        assert_eq!((p.sources.len(), p.destinations.as_slice()), (16, &[16][..]));
        let i = s.incast().unwrap();
        assert_eq!(
            (i.fan_in, i.receiver, i.bytes, i.bytes_max, i.start, i.bursts),
            (16, 16, 3000, 60_000, 100_000_000, 10)
        );
        assert!(s.buffers.host_aqm);
        let err = parse(&text, &["buffers.host_qdisc=false"]).unwrap_err();
        assert!(err.contains("buffers.host_qdisc") && err.contains("host_aqm"), "{err}");
        let err = parse(&text.replace("destinations = [16]", "destinations = [17]"), &[]).unwrap_err();
        assert!(err.contains("x.toml:66:17: workload.destinations[0]: has host 17"), "{err}");
        let err = parse(&text, &["workload.incast.receiver=20"]).unwrap_err();
        assert!(err.contains("--set workload.incast.receiver"), "{err}");
        let err = parse(&text.replace("fan_in = 16", "fan_in = 17"), &[]).unwrap_err();
        assert!(err.contains("x.toml:69:10: workload.incast.fan_in: must be 1 to 16 (found 17)"), "{err}");
        let err = parse(&text.replace("bytes_max = 60000", "bytes_max = 60"), &[]).unwrap_err();
        assert!(err.contains("workload.incast.bytes_max"), "{err}");
    }

    #[test]
    fn codel_is_selectable() {
        let text = base();
        let s = parse(&text, &["aqm={kind=\"codel\", target=\"10us\", interval=\"150us\"}"]).unwrap();
        let want =
            crate::codel::Params { target: 10_000, interval: 150_000, min_bytes: 1500, mode: crate::codel::Mode::Mark };
        assert_eq!(s.marking().params(), Some(&want));
        let err = parse(&text, &["aqm={kind=\"codel\", target=\"10us\", interval=\"1us\"}"]).unwrap_err();
        assert!(err.contains("aqm.interval"), "{err}");
    }

    #[test]
    fn scheduler_classes_take_their_own_aqm_and_chosen_ports() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/mq-tcn.toml"))
            .unwrap();
        let s = parse(&text, &[]).unwrap();
        let tcn = |threshold| aqm::Config::new::<aqm::Tcn>(aqm::Tcn { threshold }).unwrap();
        assert_eq!(s.class_markings(), vec![tcn(150_000); 3]);
        assert_eq!(s.scheduler_port_ids, None);
        let aqm = "scheduler.aqm=[{kind=\"drop-tail\"}, {kind=\"red\", k=40}, {kind=\"tcn\", threshold=\"50us\"}]";
        let s = parse(&text, &[aqm, "scheduler.ports=[\"switch 0 -> host 5\"]"]).unwrap();
        let red = aqm::Config::new::<aqm::Red>(aqm::Red { k: 40 }).unwrap();
        assert_eq!(s.class_markings(), [aqm::Config::default(), red, tcn(50_000)]);
        assert_eq!(s.scheduler_port_ids.as_ref().map(Vec::len), Some(1));
        let err = parse(&text, &["scheduler.aqm=[{kind=\"drop-tail\"}]"]).unwrap_err();
        assert!(err.contains("scheduler.aqm") && err.contains("1 disciplines for 3 classes"), "{err}");
        let err = parse(&text, &["scheduler.ports=[\"host 0 -> switch 0\"]"]).unwrap_err();
        assert!(err.contains("scheduler.ports") && err.contains("switch port"), "{err}");
        let err = parse(&text, &["scheduler.ports=[\"switch 0 -> host 9\"]"]).unwrap_err();
        assert!(err.contains("scheduler.ports") && err.contains("no host 9"), "{err}");
        let codel = "scheduler.aqm=[{kind=\"codel\", target=\"1us\", interval=\"1us\"}, {kind=\"drop-tail\"}, {kind=\"drop-tail\"}]";
        assert!(parse(&text, &[codel]).unwrap_err().contains("scheduler.aqm"));
    }
}
