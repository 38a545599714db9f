//! A packet-level simulator of datacenter fabrics: leaf-spine, star and
//! dumbbell topologies of hosts and switches, TCP NewReno and DCTCP, and
//! ECN-marking queue disciplines (RED with DCTCP's threshold K, TCN, ECN#,
//! CoDel).
//!
//! It answers the questions the ns3-ecn-sharp simulator
//! (github.com/snowzjx/ns3-ecn-sharp; Zhang, Bai and Chen, "Enabling ECN for
//! datacenter networks with RTT variations", CoNEXT 2019) is used for —
//! flow completion times under a marking scheme — with the same model
//! semantics (documented in each module) at a fraction of the cost:
//! packets are small `Copy` values, time is integer nanoseconds, every
//! component keeps at most one pending event, and the event core is
//! [`fulcrum_des`]. The same scenario and seed give byte-identical results.
//!
//! - [`packet`]: the packet value.
//! - [`txtime`]: a packet's transmission time, rounded as ns-3 rounds it.
//! - [`qdisc`]: queue disciplines.
//! - [`aqm`]: their marking rules (drop-tail, RED, TCN, ECN#, CoDel) and
//!   the registry of rules by name.
//! - [`codel`]: CoDel's marking state machine (RFC 8289, ns-3's arithmetic).
//! - [`sched`]: DWRR, strict-priority and WFQ schedulers over per-class
//!   disciplines.
//! - [`tcp`]: the TCP sender and receiver state machines.
//! - [`cc`]: their congestion control (NewReno, DCTCP) and the registry of
//!   algorithms by name.
//! - [`reseq`]: the receiver's resequencing buffer for per-packet schemes.
//! - [`topology`]: leaf-spine, star and dumbbell fabrics and their
//!   equal-cost groups.
//! - [`ports`]: port names people write ("switch 0 -> host 5").
//! - [`faults`]: slow, failing, dropping and black-holing links.
//! - [`lb`]: load balancing inside the fabric: the routing hook and the
//!   schemes (ECMP, DRB, Presto, LetFlow, DRILL, CONGA, CLOVE-ECN,
//!   FlowBender, Hermes).
//! - [`workload`]: Poisson arrivals at a load, sizes from a CDF file
//!   ([`fulcrum_workload::Cdf`]); long-lived and short flows, permutations,
//!   incast bursts.
//! - [`flowlist`]: explicit flow lists from CSV files.
//! - [`world`]: the event-driven model tying them together.
//! - [`metrics`]: flow completion times and their summaries.
//! - [`scenario`]: the TOML scenario format.
//! - [`report`]: tables and JSON lines.
//! - [`plot`]: the SVG figures of `--plot`.
//! - [`sweep`]: the load-balancing sweep's figure (FCT against load,
//!   normalised to ECMP's).

#![forbid(unsafe_code)]

pub mod aqm;
pub mod cc;
pub mod codel;
pub mod faults;
pub mod flowlist;
pub mod lb;
pub mod metrics;
pub mod packet;
pub mod plot;
pub mod ports;
pub mod qdisc;
pub mod report;
pub mod reseq;
mod ring;
pub mod scenario;
pub mod sched;
pub mod sweep;
pub mod tcp;
pub mod topology;
pub mod trace;
pub mod txtime;
pub mod workload;
pub mod world;

use std::sync::atomic::AtomicU64;

use fulcrum_des::{Streams, Wheel};
use serde::Serialize;

pub use fulcrum_workload::runs::SeedOverflow;
pub use metrics::{Bucket, Convention, FctSummary, FlowRecord, Stranded};
pub use scenario::{Scenario, ScenarioError};

use crate::faults::Faults;
use crate::packet::Nanos;
use crate::topology::End;
use crate::world::{ModelConfig, World, FRAMING};

/// RNG stream of the workload draws.
const STREAM_WORKLOAD: u64 = 0;
/// RNG stream of the ECMP hashing seed (the routing scheme's is
/// [`lb::STREAM_ROUTING`]).
const STREAM_ECMP: u64 = 1;
/// RNG stream of the faults (slow links drawn, random drops).
const STREAM_FAULTS: u64 = 3;
/// RNG stream of the seed of the queue rules' streams.
const STREAM_AQM: u64 = 4;

/// Queue figures of one group of ports (by position in the fabric).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueSummary {
    /// "host-nic" (host → switch), "to-host" (switch → host) or "fabric"
    /// (switch → switch), over every port of the group; or one port's name
    /// ("switch 0 -> host 16") for a port `monitor.queue_ports` names, whose
    /// figures are then its queue discipline's sampled length.
    pub port: String,
    /// Mean sampled backlog per port of the group (packets).
    pub mean_packets: f64,
    /// Largest backlog any port of the group held.
    pub max_packets: u32,
    pub marks: u64,
    pub drops: u64,
}

/// The queue length of one chosen port over time (`monitor.queue_ports`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueSeries {
    /// The port's name, e.g. "switch 0 -> host 16".
    pub port: String,
    /// Time between samples (ns); sample k is taken at k × this.
    pub interval_ns: u64,
    /// Packets in the port's queue discipline at each sample (device
    /// queue and delay stage left out).
    pub packets: Vec<u32>,
}

/// What one run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    pub flows: Vec<FlowRecord>,
    pub fct: FctSummary,
    pub buckets: Vec<Bucket>,
    pub queues: Vec<QueueSummary>,
    pub simulated_ns: u64,
    pub events: u64,
    pub data_packets: u64,
    /// Flows that had not received every byte when the run ended.
    pub unfinished: usize,
    /// Flows of which nothing arrived before the run ended (they have no
    /// FCT record; among `unfinished`).
    pub stranded: Vec<Stranded>,
    /// Packets dropped by injected faults (`[faults]`).
    pub fault_drops: u64,
    /// Long flows' throughput samples: (time ns, Gb/s of each long flow
    /// over the interval ending then); empty without long flows.
    pub throughput: Vec<(u64, Vec<f64>)>,
    /// Queue length over time of each port `monitor.queue_ports` names.
    pub queue_series: Vec<QueueSeries>,
    /// What the routing scheme counted ([`lb::Scheme::stats`]; Hermes's
    /// placements and moves), `None` for a scheme that counts nothing.
    pub routing_stats: Option<lb::SchemeStats>,
}

/// Run `scenario` once with `seed`; `progress`, if given, counts simulated
/// microseconds.
pub fn run(scenario: &Scenario, seed: u64, progress: Option<&AtomicU64>) -> Outcome {
    let streams = Streams::new(seed);
    let shape = scenario.shape().0;
    let mut fabric = scenario.fabric().clone();
    let faults =
        scenario.faults().map(|(cfg, leaves)| Faults::new(&cfg, &mut fabric, leaves, streams.stream(STREAM_FAULTS)));
    let classes: Vec<u64> = scenario.hosts.delay_classes.iter().map(|d| d.0).collect();
    let mut specs = Vec::new();
    let mut rng = streams.stream(STREAM_WORKLOAD);
    if let Some(poisson) = scenario.poisson() {
        poisson.generate(&fabric, classes.len(), &mut rng, &mut specs);
    }
    if let Some((fixed, _)) = scenario.fixed() {
        fixed.generate(&fabric, scenario.end.0, &mut rng, &mut specs);
    }
    if let Some(perm) = scenario.permutation() {
        perm.generate(&fabric, scenario.end.0, classes.len(), &mut rng, &mut specs);
    }
    specs.extend_from_slice(&scenario.flow_list);
    if let Some(incast) = scenario.incast() {
        incast.generate(classes.len(), &mut rng, &mut specs);
    }
    let cfg = ModelConfig {
        tcp: scenario.tcp_config(),
        congestion: scenario.congestion.clone(),
        header: scenario.tcp.header_bytes,
        device_packets: scenario.buffers.device_packets,
        switch_limit: scenario.buffers.switch_packets,
        host_limit: scenario.buffers.host_packets.unwrap_or(u32::MAX),
        nic_marking: scenario.buffers.host_aqm,
        bare_nics: !scenario.buffers.host_qdisc,
        marking: scenario.marking(),
        scheduler: scenario.scheduler(),
        class_marking: scenario.class_markings(),
        scheduler_ports: scenario.scheduler_port_ids.clone(),
        delay_classes: classes,
        control_class: scenario.hosts.control_class,
        salt: streams.stream(STREAM_ECMP).next_u64(),
        aqm_seed: streams.stream(STREAM_AQM).next_u64(),
        service: scenario.buffers.service.into(),
        delay_at: scenario.hosts.delay_at.into(),
    };
    let scheme = lb::build(&scenario.routing(), &fabric, &streams);
    let mut queue = Wheel::new();
    let mut world = World::new(cfg, fabric, specs, scenario.monitor.interval.0, &mut queue);
    world.set_routing(scheme, &mut queue);
    if let Some(faults) = faults {
        world.set_faults(faults);
    }
    if let Some(timeout) = scenario.resequencing() {
        world.set_resequencing(timeout);
    }
    if let Some((long, every)) = scenario.long_flows() {
        world.watch_throughput((0..long).collect(), every, &mut queue);
    }
    let watched = scenario.monitor.queue_port_ids.clone();
    if !watched.is_empty() {
        world.watch_queues(watched.clone());
    }
    let ran = fulcrum_des::run(&mut world, &mut queue, scenario.end.0, progress);
    let flows = records(&world);
    let stranded = stranded(&world, scenario.end.0);
    let queue_series: Vec<QueueSeries> = watched
        .iter()
        .zip(std::mem::take(&mut world.queue_series))
        .map(|(&port, packets)| QueueSeries {
            port: ports::name(&world.fabric, &shape, port),
            interval_ns: scenario.monitor.interval.0,
            packets,
        })
        .collect();
    let mut queues = queue_summaries(&world);
    queues.extend(watched.iter().zip(&queue_series).map(|(&port, s)| port_summary(&world, port, s)));
    Outcome {
        seed,
        fct: metrics::summarise(&flows, &stranded, scenario.monitor.fct),
        buckets: metrics::buckets(&flows),
        queues,
        simulated_ns: scenario.end.0,
        events: world.events(ran.events),
        data_packets: world.data_packets,
        unfinished: world.flows.iter().filter(|f| f.record().done.is_none()).count(),
        stranded,
        fault_drops: world.fault_drops(),
        flows,
        throughput: std::mem::take(&mut world.throughput),
        queue_series,
        routing_stats: world.routing_stats(),
    }
}

/// The figures of one watched port: its sampled queue-discipline length
/// (mean and largest sample) and its marks and drops.
fn port_summary(world: &World, port: u32, series: &QueueSeries) -> QueueSummary {
    let stats = world.queue_stats(port);
    let n = series.packets.len().max(1) as f64;
    QueueSummary {
        port: series.port.clone(),
        mean_packets: series.packets.iter().map(|&p| p as f64).sum::<f64>() / n,
        max_packets: series.packets.iter().copied().max().unwrap_or(0),
        marks: stats.marks,
        drops: stats.drops,
    }
}

/// Run seeds `first_seed, first_seed + 1, …` (`runs` of them) on up to
/// `threads` threads (`progress` sums their simulated microseconds);
/// outcomes come back in seed order whatever the thread count. Seeds that
/// would pass `u64::MAX` are an error.
pub fn run_many(
    scenario: &Scenario,
    first_seed: u64,
    runs: usize,
    threads: usize,
    progress: Option<&AtomicU64>,
) -> Result<Vec<Outcome>, SeedOverflow> {
    let seeds = fulcrum_workload::runs::seeds(first_seed, runs as u64)?;
    Ok(fulcrum_workload::runs::on_threads(&seeds, threads, |&seed| run(scenario, seed, progress)))
}

/// Bytes of a `payload` sent once in full segments, each carrying
/// `per_segment` bytes of headers.
fn sent_once(cfg: &ModelConfig, payload: u64, per_segment: u32) -> u64 {
    let segs = payload.div_ceil(u64::from(cfg.tcp.mss)).max(1);
    payload + segs * u64::from(per_segment)
}

/// Per-flow records of the flows of which something arrived.
fn records(world: &World) -> Vec<FlowRecord> {
    let cfg = &world.cfg;
    let rate = world.fabric.host_bps as f64;
    world
        .flows
        .iter()
        .enumerate()
        .filter_map(|(i, flow)| {
            let (spec, f) = (&flow.spec, flow.record());
            let (first, last) = (f.first_tx?, f.last_rx?);
            let class = |c: u8| cfg.delay_classes.get(c as usize).copied().unwrap_or(0);
            let one_way = world.fabric.path_delay(spec.src, spec.dst, i as u32, cfg.salt);
            let wire = sent_once(cfg, spec.bytes, cfg.header + FRAMING);
            let ideal = 3 * one_way + class(spec.class) + 2 * class(cfg.control_class);
            let ideal = ideal as f64 + wire as f64 * 8e9 / rate;
            let fct = last - first;
            let rx_span = f.first_rx.map_or(0, |r| last - r);
            Some(FlowRecord {
                id: i as u32,
                src: spec.src,
                dst: spec.dst,
                bytes: spec.bytes,
                start_ns: spec.start,
                fct_ns: fct,
                complete: f.done.is_some(),
                tx_bytes: f.tx_bytes,
                slowdown: fct as f64 / ideal,
                last_byte_ns: f.done.map(|d| d - first),
                tx_packets: f.tx_packets,
                rx_span_ns: rx_span,
                once_bytes: sent_once(cfg, spec.bytes, cfg.header),
            })
        })
        .collect()
}

/// The flows that sent their first packet but of which nothing arrived by
/// `end`; small by their payload and headers sent once.
fn stranded(world: &World, end: Nanos) -> Vec<Stranded> {
    let cfg = &world.cfg;
    world
        .flows
        .iter()
        .enumerate()
        .filter(|(_, f)| f.record().last_rx.is_none())
        .filter_map(|(i, f)| {
            let first = f.record().first_tx?;
            Some(Stranded {
                id: i as u32,
                bytes: f.spec.bytes,
                age_ns: end.saturating_sub(first),
                small: sent_once(cfg, f.spec.bytes, cfg.header) < metrics::SMALL_BYTES,
            })
        })
        .collect()
}

fn queue_summaries(world: &World) -> Vec<QueueSummary> {
    let group = |from: End, to: End| match (from, to) {
        (End::Host(_), _) => "host-nic",
        (_, End::Host(_)) => "to-host",
        _ => "fabric",
    };
    let mut out: Vec<(QueueSummary, usize)> = Vec::new();
    for (i, spec) in world.fabric.ports.iter().enumerate() {
        let name = group(spec.from, spec.to);
        let stats = world.queue_stats(i as u32);
        let idx = match out.iter().position(|(q, _)| q.port == name) {
            Some(idx) => idx,
            None => {
                out.push((
                    QueueSummary { port: name.into(), mean_packets: 0.0, max_packets: 0, marks: 0, drops: 0 },
                    0,
                ));
                out.len() - 1
            }
        };
        let (q, n) = &mut out[idx];
        q.mean_packets += world.mean_backlog(i as u32);
        q.max_packets = q.max_packets.max(world.max_backlog(i as u32));
        q.marks += stats.marks;
        q.drops += stats.drops;
        *n += 1;
    }
    out.into_iter()
        .map(|(mut q, n)| {
            q.mean_packets /= n as f64;
            q
        })
        .collect()
}
