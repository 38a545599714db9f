//! The fabric model: ports, links, hosts and flows reacting to events.
//!
//! Each output port is a queue discipline feeding a small device queue
//! (ns-3's NetDevice queue, `device_packets` long) feeding a transmitter. A
//! packet moves from the discipline to the device queue whenever the device
//! queue has room, which is when marking-at-dequeue disciplines mark it; the
//! transmitter serialises the device queue's head at the link rate, then the
//! packet spends the propagation delay on the link. One pending event per
//! port at most for each of these (htsim style): `Tx` when the transmitter
//! frees up with work waiting, `Arrive` for the oldest packet on the link
//! (links are FIFO, so arrivals come out in order). Ports with a delay
//! stage (the seed's RTT variation, at hosts' NICs or at the switch ports
//! facing hosts: [`DelayAt`]) hold each packet for its delay class first, in
//! one FIFO per class, again with at most one event for the oldest.
//!
//! Most packets find their port's discipline empty with room in the device
//! queue behind it: they pass straight through (the discipline counts and
//! marks them as if they had been queued and taken out again at once) into
//! the device queue, or onto the link if the transmitter is free.
//!
//! Routing is the load-balancing scheme's ([`crate::lb`]): hosts ask it for
//! a path for each packet they send ([`Scheme::edge_path`]), switches for
//! an output port ([`Scheme::switch_port`], per-flow ECMP by default), and
//! ACKs and timeouts are reported to it. Hosts run
//! [`Sender`] and [`Receiver`]; the retransmission timer is lazy: one
//! pending `Timer` event per flow, re-armed when it fires early.

use std::collections::VecDeque;

use fulcrum_des::{Model, Streams, Wheel};

use crate::aqm::{self, DropTail};
use crate::cc;
use crate::faults::Faults;
use crate::lb::{EdgeCtx, Hooks, Loads, Probe, ProbeReply, Scheme, SchemeStats, SwitchCtx};
use crate::packet::{probe_flow, Kind, Nanos, Packet, NO_PATH};
use crate::qdisc::{Qdisc, QueueStats};
use crate::reseq::Resequencer;
use crate::ring;
use crate::sched::{Policy, Scheduler};
use crate::tcp::{Phase, Receiver, Sender, TcpConfig};
use crate::topology::{End, Fabric};
use crate::txtime::TxTimes;
use crate::workload::FlowSpec;

/// Bytes of point-to-point framing on every packet (ns-3's PPP header).
pub const FRAMING: u32 = 2;

/// Wire size of a probe and of its reply: an empty IPv4 packet (the
/// original's probes carry no payload) plus framing.
const PROBE_WIRE: u16 = 20 + FRAMING as u16;

/// Settings of the model itself (the topology and flows come separately).
#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub tcp: TcpConfig,
    /// Every flow's congestion control.
    pub congestion: cc::Config,
    /// IP + TCP header bytes per packet (with the timestamp option).
    pub header: u32,
    /// Device queue length of every port (packets).
    pub device_packets: u32,
    /// Queue discipline limit of switch ports (packets).
    pub switch_limit: u32,
    /// Limit of hosts' NIC queues without a marking discipline (packets).
    pub host_limit: u32,
    /// Hosts' NICs without a delay stage run `marking` too (with
    /// `host_limit`), as the seed's queue-track program installs its queue
    /// discipline on both ends of every link.
    pub nic_marking: bool,
    /// Hosts' NICs without a delay stage have no discipline, as in the
    /// seed's mq program: their `host_limit` and `device_packets` are one
    /// drop-tail device queue.
    pub bare_nics: bool,
    pub marking: aqm::Config,
    /// Scheduler of the switch ports (all, or `scheduler_ports`) and its
    /// number of classes (each class a discipline of `switch_limit` packets
    /// and its `class_marking`); None: one discipline per port.
    pub scheduler: Option<(Policy, usize)>,
    /// Each scheduler class's marking rule (one per class); empty: `marking`.
    pub class_marking: Vec<aqm::Config>,
    /// The switch ports that get the scheduler; None: every switch port.
    pub scheduler_ports: Option<Vec<u32>>,
    /// Host delay of each class; data segments use the flow's class.
    pub delay_classes: Vec<Nanos>,
    /// Class of the packets without application data (SYN, SYN-ACK, ACK):
    /// the original tags only the application's data with the flow's class.
    pub control_class: u8,
    /// ECMP hashing seed.
    pub salt: u64,
    /// The queue rules' random streams: port `i`'s class `c` gets stream
    /// `i × 256 + c` of `Streams::new(aqm_seed)`.
    pub aqm_seed: u64,
    pub service: Service,
    pub delay_at: DelayAt,
}

/// Where the delay classes act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelayAt {
    /// On each host's NIC, before its queue.
    Nic,
    /// On each switch port facing a host; the hosts' NICs then get the
    /// switches' queue discipline. This is where the seed's large-scale
    /// program installs them (its own comment notes the swap).
    SwitchPort,
}

/// When a port's device queue takes packets from its discipline (and a
/// host's NIC its delayed packets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Whenever the device queue has room, and a host's delayed packet as
    /// soon as it is due.
    OnRoom,
    /// As ns-3 (the seed's version) does: when a packet is handed to the
    /// port, and when the transmitter finishes with the device queue empty.
    /// A host's delayed packet that falls due therefore waits for the
    /// host's next packet or the end of its current transmission.
    OnEmpty,
}

/// What happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    /// Port's transmitter is free and has work.
    Tx(u32),
    /// Oldest packet on port's link reaches the far end.
    Arrive(u32),
    /// Oldest packet of a delay FIFO (port × classes + class) is due.
    Release(u32),
    /// Flows may be due to open: the first event at or after the next
    /// flow's start opens every flow due ([`World::start_due`]), so that one
    /// of these is pending at a time, not one per flow.
    Start,
    /// A flow's retransmission timer may be due.
    Timer(u32),
    /// Sample every port's backlog.
    Sample,
    /// Sample the watched flows' throughput.
    Throughput,
    /// A flow's resequencing buffer may have to flush.
    Reseq(u32),
    /// The routing scheme's hosts send their probes.
    Probe,
}

/// One output port. `repr(C)` and cache-line alignment keep the fields a
/// packet's hop touches together: the transmitter's, the port's flags and
/// the delay stage's in the first line, the link's in the second, where
/// the discipline begins (256 bytes, four lines, asserted below; in Rust's
/// own order the unaligned fields began with the discipline and straddled
/// one line more).
#[repr(C, align(64))]
struct Port {
    device: VecDeque<Packet>,
    busy_until: Nanos,
    /// Link rate: an index into the world's `tx_times`.
    rate: u32,
    /// The flags every packet handed to the port reads, in the padding
    /// after `rate`: a packet joining a busy port's device queue then
    /// needs neither the second line nor the link's.
    tx_armed: bool,
    /// Packets wait their delay class here before the discipline.
    delayed: bool,
    /// The discipline is never used: a delay stage served on-empty fills
    /// the device queue itself ([`World::fill_from_delay`]), so the
    /// discipline stays empty and its cache line need not be read for its
    /// length (most of a host's packets, with the delay on the NICs).
    bypass: bool,
    delay: Nanos,
    /// Packets in the delay stage.
    held: u32,
    max_backlog: u32,
    /// Packets on the wire, each stamped with its arrival time (see
    /// [`Packet::enqueued`]).
    link: VecDeque<Packet>,
    /// The earliest due time at the front of the port's delay FIFOs
    /// (`Nanos::MAX` when they are empty): servicing a delay stage with
    /// nothing due yet, the common case, skips the look at every FIFO.
    next_due: Nanos,
    to: End,
    qdisc: Scheduler,
}

// The layout `Port`'s documentation gives.
const _: () = {
    use std::mem::{offset_of, size_of};
    // The transmitter's fields, the flags and the delay stage's: line 0.
    assert!(offset_of!(Port, max_backlog) + size_of::<u32>() <= 64);
    // The link's fields: line 1, from its start.
    assert!(offset_of!(Port, link) == 64);
    assert!(offset_of!(Port, to) + size_of::<End>() <= 128);
    // Then the discipline, a one-class port's where its own layout wants
    // it; four lines in all.
    assert!((offset_of!(Port, qdisc) + crate::sched::FIFO_AT) % 64 == crate::qdisc::START_IN_LINE);
    assert!(size_of::<Port>() == 4 * 64);
};

impl Port {
    /// Packets in the discipline.
    #[inline]
    fn discipline_len(&self) -> usize {
        if self.bypass {
            debug_assert!(self.qdisc.is_empty());
            0
        } else {
            self.qdisc.len()
        }
    }
}

/// One flow: what it is, and what it did. Its transport state exists
/// only while it runs, so that a flow waiting to start costs its spec and
/// a word (a million-flow list loads in little memory), and a finished one
/// its record besides.
#[derive(Debug)]
pub struct Flow {
    pub spec: FlowSpec,
    state: State,
}

/// What a flow did (all `None` and 0 before it starts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// First packet (the SYN) sent.
    pub first_tx: Option<Nanos>,
    /// First packet of the flow's forward direction received (its first
    /// SYN to arrive: nothing else is sent before the SYN-ACK).
    pub first_rx: Option<Nanos>,
    /// Last packet of the flow's forward direction received.
    pub last_rx: Option<Nanos>,
    /// Every segment received.
    pub done: Option<Nanos>,
    /// IP bytes sent in the forward direction (retransmissions included).
    pub tx_bytes: u64,
    pub tx_packets: u64,
}

#[derive(Debug)]
enum State {
    /// Not started: nothing but the spec.
    Waiting,
    /// Started, its sender not done.
    Live(Box<Live>),
    /// Its sender is done: every segment acknowledged. Its transport state
    /// is gone, having nothing left to do: the sender ignores what comes
    /// (ACKs, SYN-ACKs, timers) and the receiver, complete, answers no
    /// segment; the record still counts what arrives and what is sent.
    Finished(Box<Record>),
}

/// A running flow's record and transport state.
#[derive(Debug)]
struct Live {
    rec: Record,
    sender: Sender,
    receiver: Receiver,
    segs: u32,
    timer_at: Option<Nanos>,
    /// The receiver's resequencing buffer (when switched on) and its
    /// pending flush time.
    reseq: Resequencer,
    reseq_at: Option<Nanos>,
}

impl Flow {
    /// What the flow did so far.
    pub fn record(&self) -> Record {
        match &self.state {
            State::Waiting => Record::default(),
            State::Live(l) => l.rec,
            State::Finished(r) => **r,
        }
    }

    /// Whether its transport state is built (started, sender not done).
    pub fn running(&self) -> bool {
        matches!(self.state, State::Live(_))
    }

    /// The record of a started flow (packets exist only for those).
    #[inline]
    fn rec(&mut self) -> &mut Record {
        match &mut self.state {
            State::Live(l) => &mut l.rec,
            State::Finished(r) => r,
            State::Waiting => unreachable!("a flow that has not started has no packets"),
        }
    }

    #[inline]
    fn live(&mut self) -> Option<&mut Live> {
        match &mut self.state {
            State::Live(l) => Some(l),
            _ => None,
        }
    }
}

/// The whole simulated fabric.
pub struct World {
    pub cfg: ModelConfig,
    pub fabric: Fabric,
    ports: Vec<Port>,
    /// Packets in delay stages, each stamped with its due time.
    delay_fifo: Vec<VecDeque<Packet>>,
    /// The due time of each delay FIFO's front packet (`Nanos::MAX` when
    /// it is empty), kept beside the FIFOs: choosing the next packet to
    /// leave a delay stage reads the port's few adjacent times (8 bytes
    /// per delay class) instead of every FIFO's header and front packet.
    delay_front: Vec<Nanos>,
    pub flows: Vec<Flow>,
    /// The flows in start order (by start time, then by index), the
    /// position of the next to start, and its start time (`Nanos::MAX`
    /// when none is left).
    start_order: Vec<u32>,
    next: usize,
    next_start: Nanos,
    /// Time of the `Start` event in the queue (`Nanos::MAX`: none).
    wake_at: Nanos,
    /// Flows started, and `Start` events handled (each start counts as an
    /// event, the wake-ups that do it do not: see [`World::events`]).
    started: u64,
    wakes: u64,
    pub data_packets: u64,
    /// Sampling interval of port backlogs, and the sums so far.
    sample_every: Nanos,
    backlog_sum: Vec<u64>,
    pub samples: u64,
    /// Ports whose queue-discipline length is recorded at every sample, and
    /// the recorded lengths (one list per watched port).
    watched_ports: Vec<u32>,
    pub queue_series: Vec<Vec<u32>>,
    /// Flows whose throughput is sampled, how often, and the bytes each had
    /// delivered at the previous sample.
    watched: Vec<u32>,
    watch_every: Nanos,
    watched_rx: Vec<u64>,
    /// Throughput samples: (time, Gb/s of each watched flow over the
    /// interval ending then).
    pub throughput: Vec<(Nanos, Vec<f64>)>,
    /// Time of the event being handled.
    now: Nanos,
    /// The load-balancing scheme and the calls it needs.
    routing: Box<dyn Scheme>,
    hooks: Hooks,
    /// Paths between racks, `rack · racks + rack` (for edge schemes).
    rack_paths: Vec<u32>,
    racks: u32,
    faults: Faults,
    /// Scratch: the ports of a group still in the routes.
    live: Vec<u32>,
    /// Receivers resequence data segments, with this timeout.
    reseq_timeout: Option<Nanos>,
    /// Scratch: segments the resequencing buffer hands to TCP.
    ready: Vec<Packet>,
    /// Transmission times by link rate and packet size.
    tx_times: TxTimes,
}

/// The earliest due time at the fronts of a port's delay FIFOs
/// (`Nanos::MAX` when every one is empty), from [`World::delay_front`].
fn earliest_due(fronts: &[Nanos]) -> Nanos {
    earliest_front(fronts).map_or(Nanos::MAX, |(due, _)| due)
}

/// The (due time, class) of the earliest front of a port's delay FIFOs,
/// the lowest class first among equal times; `None` when all are empty.
/// `fronts` is the port's slice of [`World::delay_front`].
fn earliest_front(fronts: &[Nanos]) -> Option<(Nanos, usize)> {
    let mut first = (Nanos::MAX, 0);
    for (c, &due) in fronts.iter().enumerate() {
        if due < first.0 {
            first = (due, c);
        }
    }
    (first.0 != Nanos::MAX).then_some(first)
}

/// Port backlogs as routing schemes read them.
struct PortLoads<'a>(&'a [Port]);

impl Loads for PortLoads<'_> {
    #[inline]
    fn queued(&self, port: u32) -> u32 {
        let p = &self.0[port as usize];
        (p.discipline_len() + p.device.len()) as u32
    }
}

impl World {
    /// A fabric with its flows; `queue` receives the first flow's start.
    pub fn new(
        cfg: ModelConfig,
        fabric: Fabric,
        specs: Vec<FlowSpec>,
        sample_every: Nanos,
        queue: &mut Wheel<Ev>,
    ) -> World {
        let tx_times = TxTimes::new(fabric.ports.iter().map(|p| p.bps));
        let ports = fabric
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let scheduled = cfg.scheduler_ports.as_ref().is_none_or(|ports| ports.contains(&(i as u32)));
                let delayed = !cfg.delay_classes.is_empty()
                    && match cfg.delay_at {
                        DelayAt::Nic => matches!(p.from, End::Host(_)),
                        DelayAt::SwitchPort => matches!((p.from, p.to), (End::Switch(_), End::Host(_))),
                    };
                // Hosts' NICs get the switches' discipline only where the
                // original puts one: when the delay stage sits on the switch.
                let plain = delayed
                    || (matches!(p.from, End::Host(_))
                        && (cfg.delay_classes.is_empty() || cfg.delay_at == DelayAt::Nic));
                let aqm = Streams::new(cfg.aqm_seed);
                let rng = |class: usize| aqm.stream(((i as u64) << 8) + class as u64);
                let qdisc = match &cfg.scheduler {
                    _ if plain => {
                        let host = matches!(p.from, End::Host(_));
                        let limit = if host { cfg.host_limit } else { u32::MAX };
                        let rule = if host && !delayed && cfg.nic_marking {
                            cfg.marking.build(rng(0))
                        } else {
                            Box::new(DropTail)
                        };
                        Scheduler::fifo(Qdisc::new(limit, rule))
                    }
                    Some((policy, n)) if scheduled => Scheduler::new(
                        policy.clone(),
                        (0..*n)
                            .map(|c| {
                                let rule = cfg.class_marking.get(c).unwrap_or(&cfg.marking).build(rng(c));
                                Qdisc::new(cfg.switch_limit, rule)
                            })
                            .collect(),
                    ),
                    _ => Scheduler::fifo(Qdisc::new(cfg.switch_limit, cfg.marking.build(rng(0)))),
                };
                Port {
                    qdisc,
                    delayed,
                    bypass: delayed && cfg.service == Service::OnEmpty,
                    held: 0,
                    next_due: Nanos::MAX,
                    device: VecDeque::new(),
                    busy_until: 0,
                    tx_armed: false,
                    max_backlog: 0,
                    link: VecDeque::new(),
                    rate: tx_times.rate(p.bps),
                    delay: p.delay,
                    to: p.to,
                }
            })
            .collect();
        let classes = cfg.delay_classes.len().max(1);
        let delay_fifo = (0..fabric.ports.len() * classes).map(|_| VecDeque::new()).collect();
        let delay_front = vec![Nanos::MAX; fabric.ports.len() * classes];
        // Stable, and linear on a list already in time order.
        let mut start_order: Vec<u32> = (0..specs.len() as u32).collect();
        start_order.sort_by_key(|&i| specs[i as usize].start);
        let next_start = start_order.first().map_or(Nanos::MAX, |&i| specs[i as usize].start);
        if next_start != Nanos::MAX {
            queue.schedule(next_start, Ev::Start);
        }
        let flows = specs.into_iter().map(|spec| Flow { spec, state: State::Waiting }).collect();
        queue.schedule(0, Ev::Sample);
        let backlog_sum = vec![0; fabric.ports.len()];
        let racks = fabric.racks().max(1);
        let first_of = |r: u32| fabric.rack.iter().position(|&x| x == r).unwrap_or(0) as u32;
        let rack_paths = (0..racks * racks).map(|i| fabric.paths(first_of(i / racks), first_of(i % racks))).collect();
        World {
            cfg,
            fabric,
            ports,
            delay_fifo,
            delay_front,
            flows,
            start_order,
            next: 0,
            next_start,
            wake_at: next_start,
            started: 0,
            wakes: 0,
            data_packets: 0,
            sample_every,
            backlog_sum,
            samples: 0,
            watched_ports: Vec::new(),
            queue_series: Vec::new(),
            watched: Vec::new(),
            watch_every: 0,
            watched_rx: Vec::new(),
            throughput: Vec::new(),
            now: 0,
            routing: Box::new(crate::lb::Ecmp),
            hooks: crate::lb::Ecmp.hooks(),
            rack_paths,
            racks,
            faults: Faults::none(),
            live: Vec::new(),
            reseq_timeout: None,
            ready: Vec::new(),
            tx_times,
        }
    }

    /// Route with `scheme` instead of per-flow ECMP.
    pub fn set_routing(&mut self, scheme: Box<dyn Scheme>, queue: &mut Wheel<Ev>) {
        self.hooks = scheme.hooks();
        if scheme.probe_interval().is_some() {
            queue.schedule(0, Ev::Probe);
        }
        self.routing = scheme;
    }

    /// What the routing scheme counted so far ([`Scheme::stats`]).
    pub fn routing_stats(&self) -> Option<SchemeStats> {
        self.routing.stats()
    }

    /// The routing scheme's probes leave their hosts; the next round is
    /// scheduled one probe interval on.
    fn send_probes(&mut self, now: Nanos, q: &mut Wheel<Ev>) {
        let Some(every) = self.routing.probe_interval() else { return };
        let mut probes = Vec::new();
        self.routing.probes(now, &mut probes);
        for probe in probes {
            let mut p = self.packet(probe_flow(probe.from), Kind::Probe, probe.from, 0, probe.to, now);
            p.path = probe.path;
            p.wire = PROBE_WIRE;
            self.host_send(now, probe.from, p, q);
        }
        q.schedule(now + every.max(1), Ev::Probe);
    }

    /// A probe reached the host it probes (`h`), which answers with its
    /// one-way delay and mark; or the answer reached the prober.
    fn receive_probe(&mut self, now: Nanos, h: u32, p: Packet, q: &mut Wheel<Ev>) {
        let prober = u32::MAX - p.flow;
        if p.kind == Kind::Probe {
            let mut reply = self.packet(p.flow, Kind::ProbeReply, h, 0, prober, now);
            reply.lb = u32::try_from(now - p.echo).unwrap_or(u32::MAX);
            reply.set_ece(p.ce());
            reply.echo_path = p.path;
            reply.wire = PROBE_WIRE;
            self.host_send(now, h, reply, q);
        } else {
            let probe = Probe { from: prober, to: p.seq, path: p.echo_path };
            self.routing.on_probe_reply(now, &ProbeReply { probe, delay: Nanos::from(p.lb), ce: p.ece() });
        }
    }

    /// The host that sent `p` (for routing contexts and faults).
    fn packet_src(&self, p: &Packet) -> u32 {
        match p.kind {
            Kind::Probe => u32::MAX - p.flow,
            Kind::ProbeReply => p.seq,
            _ => {
                let spec = &self.flows[p.flow as usize].spec;
                if p.is_reverse() {
                    spec.dst
                } else {
                    spec.src
                }
            }
        }
    }

    /// Inject `faults` (bound to this fabric's ports; slow links already
    /// applied to it).
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Give every receiver a resequencing buffer ([`Resequencer`]) that
    /// flushes after `timeout`.
    pub fn set_resequencing(&mut self, timeout: Nanos) {
        self.reseq_timeout = Some(timeout);
    }

    /// Packets dropped by injected faults.
    pub fn fault_drops(&self) -> u64 {
        self.faults.dropped
    }

    /// Sample the throughput of `flows` every `every` from time 0 on, as
    /// the original's mq program does: the bytes the receiver delivered in
    /// order during the interval, over the interval.
    pub fn watch_throughput(&mut self, flows: Vec<u32>, every: Nanos, queue: &mut Wheel<Ev>) {
        self.watched_rx = vec![0; flows.len()];
        self.watched = flows;
        self.watch_every = every;
        queue.schedule(0, Ev::Throughput);
    }

    /// Record the length of `ports`' queue disciplines (packets, device
    /// queue and delay stage left out, as the seed's queue-track program
    /// samples `QueueDisc::GetNPackets`) at every backlog sample.
    pub fn watch_queues(&mut self, ports: Vec<u32>) {
        self.queue_series = vec![Vec::new(); ports.len()];
        self.watched_ports = ports;
    }

    fn sample_throughput(&mut self, now: Nanos, q: &mut Wheel<Ev>) {
        let mss = self.cfg.tcp.mss as u64;
        let secs = self.watch_every as f64 / 1e9;
        let gbps = (0..self.watched.len())
            .map(|i| {
                let flow = &self.flows[self.watched[i] as usize];
                let rx = match &flow.state {
                    State::Waiting => 0,
                    State::Live(l) => (l.receiver.next as u64 * mss).min(flow.spec.bytes),
                    // The receiver had every segment.
                    State::Finished(_) => flow.spec.bytes,
                };
                let delta = rx - std::mem::replace(&mut self.watched_rx[i], rx);
                delta as f64 * 8.0 / secs / 1e9
            })
            .collect();
        self.throughput.push((now, gbps));
        q.schedule(now + self.watch_every, Ev::Throughput);
    }

    /// Marking and drop counters of `port`'s discipline.
    pub fn queue_stats(&self, port: u32) -> QueueStats {
        self.ports[port as usize].qdisc.stats()
    }

    /// Largest backlog `port` held (discipline plus device queue, packets).
    pub fn max_backlog(&self, port: u32) -> u32 {
        self.ports[port as usize].max_backlog
    }

    /// Packets waiting at `port` (delay stage, discipline and device queue).
    pub fn backlog(&self, port: u32) -> usize {
        let i = port as usize;
        let p = &self.ports[i];
        p.discipline_len() + p.device.len() + p.held as usize
    }

    /// Mean sampled backlog of `port` (packets).
    pub fn mean_backlog(&self, port: u32) -> f64 {
        self.backlog_sum[port as usize] as f64 / self.samples.max(1) as f64
    }

    fn sample(&mut self, now: Nanos, q: &mut Wheel<Ev>) {
        for i in 0..self.ports.len() {
            self.backlog_sum[i] += self.backlog(i as u32) as u64;
        }
        for (series, &port) in self.queue_series.iter_mut().zip(&self.watched_ports) {
            series.push(self.ports[port as usize].qdisc.len() as u32);
        }
        self.samples += 1;
        q.schedule(now + self.sample_every, Ev::Sample);
    }

    /// ns-3's transmission time (rounded down, [`crate::txtime`]).
    fn tx_time(&self, port: usize, wire: u16) -> Nanos {
        self.tx_times.get(self.ports[port].rate, u32::from(wire))
    }

    /// Hand a packet to an output port: its delay stage if it has one,
    /// else its discipline, which is then serviced.
    fn offer(&mut self, now: Nanos, port: u32, p: Packet, q: &mut Wheel<Ev>) {
        if self.ports[port as usize].delayed {
            self.delay(now, port as usize, p, q);
        } else {
            self.enqueue(now, port as usize, p, q);
        }
    }

    fn enqueue(&mut self, now: Nanos, i: usize, p: Packet, q: &mut Wheel<Ev>) {
        // A packet goes straight through a discipline that is a single
        // class holding nothing, on a port with room in its device queue
        // serviced from its discipline (not from a delay stage); see
        // `passed`.
        let cap = self.cfg.device_packets as usize;
        let on_empty = self.cfg.service == Service::OnEmpty;
        let port = &mut self.ports[i];
        let queued = port.device.len();
        if queued < cap && !(port.delayed && on_empty) {
            let idle = queued == 0 && !port.tx_armed && port.busy_until <= now;
            if let Some(qdisc) = port.qdisc.idle_fifo() {
                let p = qdisc.pass(now, p, queued + 1 < cap);
                return self.passed(now, i, p, idle, q);
            }
        }
        // Only a port with several classes needs the flow's (a cache miss).
        let class = match p.prober() {
            // Probes go in the highest-priority class.
            None if self.ports[i].qdisc.classes() > 1 => self.flows[p.flow as usize].spec.prio as usize,
            _ => 0,
        };
        #[cfg(debug_assertions)]
        let (flow, seq, kind) = (p.flow as usize, p.seq, p.kind);
        if self.cfg.bare_nics && !self.ports[i].delayed && matches!(self.fabric.ports[i].from, End::Host(_)) {
            // One device queue (ns-3's NIC without a discipline): the packet
            // finds the room a transmission has just made.
            self.refill(now, i);
        }
        let kept = self.ports[i].qdisc.enqueue(now, class, p);
        #[cfg(debug_assertions)]
        if !kept {
            crate::trace::note(flow, now, format_args!("drop,{seq},{kind:?},{i}"));
        }
        // ns-3's traffic-control layer runs the discipline after every
        // packet handed to it, kept or dropped: a full discipline still
        // tops up a device queue that has room, so drops alternate with
        // admissions instead of coming in runs of a device queue's size.
        self.service(now, i, q);
        if kept {
            self.note_backlog(i);
        }
    }

    /// A packet went straight through port `i`'s discipline
    /// ([`Qdisc::pass`], None: dropped). The general path (enqueue,
    /// service, refill) would have moved it into the discipline and at
    /// once out again, with a zero sojourn, into the device queue;
    /// [`Qdisc::pass`] did the discipline's part (the enqueue, the dequeue
    /// and, if the device queue still has room after the packet, the
    /// refill's closing empty dequeue) in the same order, and this does
    /// the rest, so every counter, mark and event is as before. An `idle`
    /// transmitter takes the packet at once ([`World::send`]), without the
    /// device queue's round trip.
    fn passed(&mut self, now: Nanos, i: usize, p: Option<Packet>, idle: bool, q: &mut Wheel<Ev>) {
        match p {
            // Dropped (a discipline without room): serviced all the same.
            None => return self.service(now, i, q),
            Some(p) if idle => self.send(now, i, p, q),
            Some(p) => {
                self.ports[i].device.push_back(p);
                self.start_transmitter(now, i, q);
            }
        }
        self.note_backlog(i);
    }

    fn note_backlog(&mut self, i: usize) {
        let b = self.backlog(i as u32) as u32;
        let port = &mut self.ports[i];
        port.max_backlog = port.max_backlog.max(b);
    }

    /// Service a port (ns-3's `QueueDisc::Run`): fill its device queue from
    /// the discipline — or, for a delay stage in [`Service::OnEmpty`] mode,
    /// from its packets that are due — and start the transmitter if it is
    /// idle.
    fn service(&mut self, now: Nanos, i: usize, q: &mut Wheel<Ev>) {
        if self.ports[i].delayed && self.cfg.service == Service::OnEmpty {
            self.fill_from_delay(now, i);
        } else {
            self.refill(now, i);
        }
        self.start_transmitter(now, i, q);
    }

    /// Start port `i`'s transmitter on the device queue's head if it is
    /// free, or arm its `Tx` for when it frees up (unless it is armed or
    /// has nothing to send).
    #[inline]
    fn start_transmitter(&mut self, now: Nanos, i: usize, q: &mut Wheel<Ev>) {
        let port = &mut self.ports[i];
        if port.tx_armed || port.device.is_empty() {
            return;
        }
        if port.busy_until <= now {
            self.transmit(now, i, q);
        } else {
            port.tx_armed = true;
            q.schedule(port.busy_until, Ev::Tx(i as u32));
        }
    }

    /// Move packets from the discipline into the device queue while it has room.
    fn refill(&mut self, now: Nanos, i: usize) {
        let cap = self.cfg.device_packets as usize;
        let port = &mut self.ports[i];
        while port.device.len() < cap {
            match port.qdisc.dequeue(now) {
                Some((_, p)) => port.device.push_back(p),
                None => break,
            }
        }
    }

    /// Move port `i`'s delayed packets that are due, oldest due first, into
    /// its device queue while it has room.
    fn fill_from_delay(&mut self, now: Nanos, i: usize) {
        if self.ports[i].next_due > now {
            return; // nothing due yet
        }
        let classes = self.cfg.delay_classes.len();
        let cap = self.cfg.device_packets as usize;
        let fifos = &mut self.delay_fifo[i * classes..(i + 1) * classes];
        let fronts = &mut self.delay_front[i * classes..(i + 1) * classes];
        // One look at the fronts per packet moved: the earliest front is
        // the next to go if it is due, else the port's next due time.
        loop {
            let next = earliest_front(fronts);
            match next {
                Some((due, c)) if due <= now && self.ports[i].device.len() < cap => {
                    let p = ring::pop_front(&mut fifos[c]).expect("front was just seen");
                    fronts[c] = fifos[c].front().map_or(Nanos::MAX, |p| p.enqueued);
                    self.ports[i].device.push_back(p);
                    self.ports[i].held -= 1;
                }
                _ => {
                    self.ports[i].next_due = next.map_or(Nanos::MAX, |(due, _)| due);
                    return;
                }
            }
        }
    }

    /// Start sending the device queue's head (the transmitter is idle).
    fn transmit(&mut self, now: Nanos, i: usize, q: &mut Wheel<Ev>) {
        let Some(p) = ring::pop_front(&mut self.ports[i].device) else { return };
        self.send(now, i, p, q);
    }

    /// The idle transmitter of port `i` starts sending `p`, just taken from
    /// the device queue (or passed straight through, [`World::passed`]).
    #[inline]
    fn send(&mut self, now: Nanos, i: usize, mut p: Packet, q: &mut Wheel<Ev>) {
        let done = now + self.tx_time(i, p.wire);
        if self.cfg.service == Service::OnRoom {
            self.refill(now, i);
        }
        // In OnEmpty mode the end of this transmission services the port if
        // the device queue is then empty and something waits behind it.
        let wake =
            self.cfg.service == Service::OnEmpty && (self.ports[i].held > 0 || self.ports[i].discipline_len() > 0);
        let port = &mut self.ports[i];
        port.busy_until = done;
        if port.link.is_empty() {
            q.schedule(done + port.delay, Ev::Arrive(i as u32));
        }
        p.enqueued = done + port.delay;
        port.link.push_back(p);
        if !port.device.is_empty() || wake {
            port.tx_armed = true;
            q.schedule(done, Ev::Tx(i as u32));
        }
    }

    /// The transmitter of port `i` finished: send the next packet of the
    /// device queue, or service the port when the device queue is empty.
    fn tx_done(&mut self, now: Nanos, i: usize, q: &mut Wheel<Ev>) {
        self.ports[i].tx_armed = false;
        if self.ports[i].device.is_empty() {
            self.service(now, i, q);
        } else {
            self.transmit(now, i, q);
        }
    }

    /// The oldest packet on a link arrives at its far end.
    fn arrive(&mut self, now: Nanos, i: usize, q: &mut Wheel<Ev>) {
        let port = &mut self.ports[i];
        let Some(p) = ring::pop_front(&mut port.link) else { return };
        if let Some(next) = port.link.front() {
            q.schedule(next.enqueued, Ev::Arrive(i as u32));
        }
        match port.to {
            End::Switch(s) => {
                let mut p = p;
                let out = self.route(now, s, i as u32, &mut p);
                if self.faults.any() {
                    let src = self.packet_src(&p);
                    if self.faults.drops(out, now, &p, src, &self.fabric.rack) {
                        return;
                    }
                }
                self.offer(now, out, p, q);
            }
            End::Host(h) => self.deliver(now, h, p, q),
        }
    }

    /// The output port of switch `switch` for `p`, which came in on
    /// `in_port`: the routing scheme's choice among the equal-cost group.
    fn route(&mut self, now: Nanos, switch: u32, in_port: u32, p: &mut Packet) -> u32 {
        let full = self.fabric.group(switch, p.dst);
        if full.len() == 1 && !self.hooks.single_port_hops {
            return full[0];
        }
        let src = if self.hooks.src { self.packet_src(p) } else { crate::lb::NO_HOST };
        let reverse = p.is_reverse();
        let mut group = full;
        if self.faults.may_unroute() && full.len() > 1 {
            // Detected failures leave the routes (unless nothing is left).
            self.live.clear();
            self.live.extend(full.iter().filter(|&&port| self.faults.routed(port, now)));
            if !self.live.is_empty() {
                group = &self.live;
            }
        }
        let ctx = SwitchCtx {
            now,
            switch,
            in_port,
            src,
            dst: p.dst,
            reverse,
            group,
            fabric: &self.fabric,
            loads: &PortLoads(&self.ports),
            salt: self.cfg.salt,
        };
        self.routing.switch_port(&ctx, p)
    }

    /// A host sends a packet through its NIC, on the path the routing
    /// scheme chooses for it.
    fn host_send(&mut self, now: Nanos, host: u32, mut p: Packet, q: &mut Wheel<Ev>) {
        // A probe keeps the path its prober chose; a reply goes by ECMP.
        if self.hooks.edge && p.prober().is_none() {
            self.choose_path(now, host, &mut p);
        }
        let port = self.fabric.host_port[host as usize];
        self.offer(now, port, p, q);
    }

    /// The edge scheme's path for `p`, leaving `host`.
    fn choose_path(&mut self, now: Nanos, host: u32, p: &mut Packet) {
        let racks = self.racks;
        let (from, to) = (self.fabric.rack[host as usize], self.fabric.rack[p.dst as usize]);
        let ctx = EdgeCtx {
            now,
            host,
            peer: p.dst,
            reverse: p.is_reverse(),
            paths: self.rack_paths[(from * racks + to) as usize],
            fabric: &self.fabric,
        };
        p.path = self.routing.edge_path(&ctx, p).unwrap_or(NO_PATH);
    }

    /// A packet enters port `i`'s delay stage: it waits its class's delay.
    /// Data segments use their flow's class, other packets the control class.
    /// (Kept out of line: inlined in [`World::offer`], its register saves
    /// were paid by every packet offered, most of which go to a discipline.)
    #[inline(never)]
    fn delay(&mut self, now: Nanos, i: usize, mut p: Packet, q: &mut Wheel<Ev>) {
        let classes = self.cfg.delay_classes.len();
        let class = if p.kind == Kind::Data { self.flows[p.flow as usize].spec.class } else { self.cfg.control_class };
        let c = (class as usize).min(classes - 1);
        let fifo = i * classes + c;
        let due = now + self.cfg.delay_classes[c];
        let was_empty = self.delay_fifo[fifo].is_empty();
        if was_empty {
            self.delay_front[fifo] = due;
        }
        p.enqueued = due;
        self.delay_fifo[fifo].push_back(p);
        self.ports[i].held += 1;
        self.ports[i].next_due = self.ports[i].next_due.min(due);
        self.note_backlog(i);
        match self.cfg.service {
            Service::OnRoom if was_empty => q.schedule(due, Ev::Release(fifo as u32)),
            Service::OnRoom => {}
            // The original services the port when a packet is handed to it,
            // not when a delayed packet falls due.
            Service::OnEmpty => self.service(now, i, q),
        }
    }

    fn release(&mut self, now: Nanos, fifo: usize, q: &mut Wheel<Ev>) {
        let Some(p) = ring::pop_front(&mut self.delay_fifo[fifo]) else { return };
        let next = self.delay_fifo[fifo].front().map(|p| p.enqueued);
        self.delay_front[fifo] = next.unwrap_or(Nanos::MAX);
        if let Some(due) = next {
            q.schedule(due, Ev::Release(fifo as u32));
        }
        let classes = self.cfg.delay_classes.len();
        let i = fifo / classes;
        self.ports[i].held -= 1;
        self.ports[i].next_due = earliest_due(&self.delay_front[i * classes..(i + 1) * classes]);
        self.enqueue(now, i, p, q);
    }

    fn packet(&self, flow: u32, kind: Kind, seq: u32, payload: u32, dst: u32, now: Nanos) -> Packet {
        let wire = u16::try_from(payload + self.cfg.header + FRAMING)
            .expect("the scenario keeps a segment with its headers within 65,535 bytes");
        let mut p = Packet::new(flow, kind, seq, dst, wire, now);
        // Probes are ECN-capable too (the original's carry ECT(1)).
        p.set_ect(matches!(kind, Kind::Data | Kind::Probe));
        p
    }

    /// Payload bytes of segment `seq` of a flow of `bytes` in `segs` segments.
    fn payload(&self, bytes: u64, segs: u32, seq: u32) -> u32 {
        let mss = self.cfg.tcp.mss as u64;
        if seq + 1 < segs {
            mss as u32
        } else {
            (bytes - mss * (segs as u64 - 1)).max(1) as u32
        }
    }

    /// Sender-side transmission of a forward packet of flow `f`.
    fn send_forward(&mut self, now: Nanos, f: usize, p: Packet, q: &mut Wheel<Ev>) {
        let flow = &mut self.flows[f];
        let rec = flow.rec();
        rec.tx_bytes += u64::from(p.wire) - u64::from(FRAMING);
        rec.tx_packets += 1;
        let src = flow.spec.src;
        self.host_send(now, src, p, q);
    }

    /// Open every flow whose start time has come, in start order, and
    /// have a `Start` event wake the model at the next one's. Called
    /// before the first event handled at or after `next_start`, so that
    /// flows open before anything else happens at their start time.
    fn start_due(&mut self, now: Nanos, popped_start: bool, q: &mut Wheel<Ev>) {
        if popped_start {
            self.wake_at = Nanos::MAX;
        }
        while self.next_start <= now {
            let f = self.start_order[self.next] as usize;
            self.next += 1;
            self.next_start =
                self.start_order.get(self.next).map_or(Nanos::MAX, |&i| self.flows[i as usize].spec.start);
            self.start(now, f, q);
        }
        self.wake(now, q);
    }

    /// Have a `Start` event wake the model at the next start time, unless
    /// one is queued for it, or for now: that one, popping next at this
    /// time, schedules the next wake-up itself (one event instead of two).
    fn wake(&mut self, now: Nanos, q: &mut Wheel<Ev>) {
        if self.next_start != Nanos::MAX && self.wake_at != self.next_start && self.wake_at != now {
            self.wake_at = self.next_start;
            q.schedule(self.next_start, Ev::Start);
        }
    }

    /// Events handled in a run that popped `popped` from the queue: each
    /// flow's start counts as one, as when each had its own event, and the
    /// wake-ups do not.
    pub fn events(&self, popped: u64) -> u64 {
        popped - self.wakes + self.started
    }

    /// Flow `f` opens: its transport state is built and its SYN sent.
    fn start(&mut self, now: Nanos, f: usize, q: &mut Wheel<Ev>) {
        self.started += 1;
        let flow = &mut self.flows[f];
        let bytes = flow.spec.bytes;
        let segs = bytes.div_ceil(self.cfg.tcp.mss as u64).max(1) as u32;
        let mut sender = Sender::new(&self.cfg.tcp, bytes, self.cfg.congestion.build(()));
        sender.on_syn_sent(now);
        let rec = Record { first_tx: Some(now), ..Record::default() };
        flow.state = State::Live(Box::new(Live {
            rec,
            sender,
            receiver: Receiver::new(segs),
            segs,
            timer_at: None,
            reseq: Resequencer::default(),
            reseq_at: None,
        }));
        let syn = self.packet(f as u32, Kind::Syn, 0, 0, self.flows[f].spec.dst, now);
        self.send_forward(now, f, syn, q);
        self.arm_timer(f, q);
    }

    /// Send whatever the sender's window allows, then keep its timer armed.
    fn pump(&mut self, now: Nanos, f: usize, q: &mut Wheel<Ev>) {
        let (bytes, dst) = (self.flows[f].spec.bytes, self.flows[f].spec.dst);
        while let Some((seg, segs)) = self.flows[f].live().and_then(|l| Some((l.sender.poll_send(now)?, l.segs))) {
            let payload = self.payload(bytes, segs, seg.seq);
            let mut p = self.packet(f as u32, Kind::Data, seg.seq, payload, dst, now);
            p.set_ect(!seg.again);
            p.set_cwr(seg.cwr);
            #[cfg(debug_assertions)]
            if crate::trace::traced(f) {
                let what = if seg.again { "retx" } else { "tx" };
                let sender = &self.flows[f].live().expect("sending").sender;
                crate::trace::event(now, what, seg.seq, sender, self.cfg.tcp.mss);
            }
            self.data_packets += 1;
            self.send_forward(now, f, p, q);
        }
        self.arm_timer(f, q);
    }

    fn arm_timer(&mut self, f: usize, q: &mut Wheel<Ev>) {
        let Some(live) = self.flows[f].live() else { return };
        if let Some(d) = live.sender.deadline {
            if live.timer_at.is_none_or(|t| t > d) {
                live.timer_at = Some(d);
                q.schedule(d, Ev::Timer(f as u32));
            }
        }
    }

    fn timer(&mut self, now: Nanos, f: usize, q: &mut Wheel<Ev>) {
        let src = self.flows[f].spec.src;
        // A finished flow's sender has no timer running.
        let Some(live) = self.flows[f].live() else { return };
        if live.timer_at != Some(now) {
            return; // superseded by an earlier one
        }
        live.timer_at = None;
        match live.sender.deadline {
            Some(d) if d <= now => {
                let fresh = live.sender.timeout_is_fresh();
                self.routing.on_timeout(now, src, f as u32, fresh);
                let cfg = self.cfg.tcp;
                let live = self.flows[f].live().expect("running");
                #[cfg(debug_assertions)]
                if crate::trace::traced(f) {
                    crate::trace::event(now, "timeout", 0, &live.sender, cfg.mss);
                }
                if live.sender.on_timeout(&cfg, now) {
                    let syn = self.packet(f as u32, Kind::Syn, 0, 0, self.flows[f].spec.dst, now);
                    self.send_forward(now, f, syn, q);
                }
                self.pump(now, f, q);
            }
            _ => self.arm_timer(f, q),
        }
    }

    /// A data segment goes up to TCP at its receiver `h`, which answers.
    fn receive_data(&mut self, now: Nanos, h: u32, p: Packet, q: &mut Wheel<Ev>) {
        let flow = &mut self.flows[p.flow as usize];
        let src = flow.spec.src;
        flow.rec().last_rx = Some(now);
        // Counted as received (the flow monitor sees it), not answered: a
        // segment after the connection closed (always so once the flow
        // finished), or a stale copy (tcp.rs).
        let live = match flow.live() {
            Some(l) if !(l.receiver.ignores() || l.receiver.stale(p.seq)) => l,
            _ => {
                #[cfg(debug_assertions)]
                crate::trace::note(p.flow as usize, now, format_args!("rx-unanswered,{},{}", p.seq, p.ce() as u8));
                return;
            }
        };
        let next = live.receiver.on_data(p.seq);
        let ece = live.receiver.ecn_echo(p.ect(), p.ce(), p.cwr());
        #[cfg(debug_assertions)]
        crate::trace::note(p.flow as usize, now, format_args!("rx,{},{},{next},{}", p.seq, p.ce() as u8, ece as u8));
        let closes = live.rec.done.is_none() && live.receiver.complete();
        if closes {
            live.rec.done = Some(now);
        }
        let mut ack = self.packet(p.flow, Kind::Ack, next, 0, src, now);
        ack.set_ece(ece);
        ack.echo = p.echo;
        ack.echo_path = p.path;
        // The data's one-way delay, for schemes that sense paths by it
        // (Hermes): the ACK's routing scratch field carries it.
        ack.lb = u32::try_from(now - p.echo).unwrap_or(u32::MAX);
        self.host_send(now, h, ack, q);
        if closes {
            // The sink has shut its sending side: the sender's FIN
            // (on the last segment) is answered with its own.
            let fin = self.packet(p.flow, Kind::Fin, next, 0, src, now);
            self.host_send(now, h, fin, q);
        }
    }

    /// A data segment reaches receiver `h`'s resequencing buffer; what it
    /// releases goes up to TCP, and a flush is scheduled while it holds any.
    fn resequence(&mut self, now: Nanos, h: u32, p: Packet, q: &mut Wheel<Ev>) {
        let f = p.flow as usize;
        let mut ready = std::mem::take(&mut self.ready);
        match self.flows[f].live() {
            Some(live) => live.reseq.arrive(now, p, &mut ready),
            // Its buffer had handed every segment up: a late copy goes
            // straight to TCP, which ignores it.
            None => ready.push(p),
        }
        self.hand_up(now, h, f, ready, q);
    }

    /// The resequencing buffer of flow `f` may be due to flush.
    fn reseq_timer(&mut self, now: Nanos, f: usize, q: &mut Wheel<Ev>) {
        // A finished flow's buffer holds nothing.
        let Some(live) = self.flows[f].live() else { return };
        if live.reseq_at != Some(now) {
            return; // superseded
        }
        live.reseq_at = None;
        let timeout = self.reseq_timeout.unwrap_or(0);
        let mut ready = std::mem::take(&mut self.ready);
        if live.reseq.deadline(timeout).is_some_and(|d| d <= now) {
            live.reseq.flush(&mut ready);
        }
        let h = self.flows[f].spec.dst;
        self.hand_up(now, h, f, ready, q);
    }

    /// Hand `ready` to TCP in order, then keep flow `f`'s flush timer armed.
    fn hand_up(&mut self, now: Nanos, h: u32, f: usize, mut ready: Vec<Packet>, q: &mut Wheel<Ev>) {
        for p in ready.drain(..) {
            self.receive_data(now, h, p, q);
        }
        self.ready = ready;
        let timeout = self.reseq_timeout.unwrap_or(0);
        let Some(live) = self.flows[f].live() else { return };
        if let Some(d) = live.reseq.deadline(timeout) {
            if live.reseq_at.is_none_or(|t| t > d) {
                live.reseq_at = Some(d);
                q.schedule(d, Ev::Reseq(f as u32));
            }
        }
    }

    /// A packet reaches host `h`.
    fn deliver(&mut self, now: Nanos, h: u32, p: Packet, q: &mut Wheel<Ev>) {
        if p.prober().is_some() {
            return self.receive_probe(now, h, p, q);
        }
        let f = p.flow as usize;
        let src = self.flows[f].spec.src;
        match p.kind {
            Kind::Syn => {
                let rec = self.flows[f].rec();
                rec.first_rx.get_or_insert(now);
                rec.last_rx = Some(now);
                let reply = self.packet(p.flow, Kind::SynAck, 0, 0, src, now);
                self.host_send(now, h, reply, q);
            }
            Kind::Data if self.reseq_timeout.is_some() => self.resequence(now, h, p, q),
            Kind::Data => self.receive_data(now, h, p, q),
            Kind::Fin => {
                let dst = self.flows[f].spec.dst;
                let ack = self.packet(p.flow, Kind::FinAck, 0, 0, dst, now);
                self.send_forward(now, f, ack, q);
            }
            Kind::FinAck => self.flows[f].rec().last_rx = Some(now),
            // A finished flow's sender ignores it.
            Kind::SynAck => {
                if let Some(live) = self.flows[f].live() {
                    live.sender.on_syn_ack();
                    self.pump(now, f, q);
                }
            }
            Kind::Probe | Kind::ProbeReply => {}
            Kind::Ack => {
                self.routing.on_ack(now, h, &p);
                let cfg = self.cfg.tcp;
                // A finished flow's sender ignores it.
                let flow = &mut self.flows[f];
                let Some(live) = flow.live() else { return };
                let sender = &mut live.sender;
                sender.on_ack(&cfg, now, p.seq, p.ece(), p.echo);
                #[cfg(debug_assertions)]
                if crate::trace::traced(f) {
                    crate::trace::event(now, if p.ece() { "ack-ece" } else { "ack" }, p.seq, sender, cfg.mss);
                }
                if sender.phase != Phase::Done {
                    self.pump(now, f, q);
                } else {
                    // Done: keep the record only (see `State::Finished`).
                    flow.state = State::Finished(Box::new(live.rec));
                }
            }
        }
    }
}

impl Model for World {
    type Event = Ev;
    type Queue = Wheel<Ev>;

    fn handle(&mut self, now: Nanos, ev: Ev, q: &mut Wheel<Ev>) {
        self.now = now;
        if now >= self.next_start {
            self.start_due(now, matches!(ev, Ev::Start), q);
        }
        match ev {
            Ev::Tx(port) => self.tx_done(now, port as usize, q),
            Ev::Arrive(port) => self.arrive(now, port as usize, q),
            Ev::Release(fifo) => self.release(now, fifo as usize, q),
            Ev::Start => {
                self.wakes += 1;
                if self.wake_at == now {
                    // Flows due now were opened by an earlier event.
                    self.wake_at = Nanos::MAX;
                    self.wake(now, q);
                }
            }
            Ev::Timer(f) => self.timer(now, f as usize, q),
            Ev::Sample => self.sample(now, q),
            Ev::Throughput => self.sample_throughput(now, q),
            Ev::Reseq(f) => self.reseq_timer(now, f as usize, q),
            Ev::Probe => self.send_probes(now, q),
        }
    }

    /// Progress is simulated time, in microseconds.
    fn work_done(&self, _events: u64) -> u64 {
        self.now / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Shape;

    /// One flow of `bytes` between the two hosts of a star; returns (FCT,
    /// marks + drops over all ports).
    fn lone_flow(bytes: u64, classes: Vec<Nanos>, service: Service) -> (Nanos, u64) {
        let fabric = Fabric::build(&Shape::Star { hosts: 2, gbps: 10.0, extra_delay: vec![] }, 10_000);
        let cfg = config(classes, service);
        let spec = FlowSpec { src: 0, dst: 1, bytes, start: 1000, class: 0, prio: 0 };
        let mut q = Wheel::new();
        let mut world = World::new(cfg, fabric, vec![spec], 100_000, &mut q);
        fulcrum_des::run(&mut world, &mut q, 100_000_000, None);
        let flow = world.flows[0].record();
        assert!(flow.done.is_some(), "the flow completes");
        let troubles =
            (0..world.fabric.ports.len() as u32).map(|p| world.queue_stats(p)).map(|s| s.marks + s.drops).sum();
        (flow.last_rx.unwrap() - flow.first_tx.unwrap(), troubles)
    }

    #[test]
    fn a_flow_has_transport_state_only_while_it_runs() {
        let fabric = Fabric::build(&Shape::Star { hosts: 2, gbps: 10.0, extra_delay: vec![] }, 10_000);
        let spec = |start| FlowSpec { src: 0, dst: 1, bytes: 100_000, start, class: 0, prio: 0 };
        let mut q = Wheel::new();
        // Out of time order: each opens at its own start, the later one never.
        let specs = vec![spec(50_000_000), spec(1000), spec(1000)];
        let mut world = World::new(config(vec![], Service::OnRoom), fabric, specs, 100_000, &mut q);
        fulcrum_des::run(&mut world, &mut q, 1_000_000, None);
        assert!(world.flows.iter().all(|f| !f.running()), "none started, or both done");
        assert_eq!(world.flows[0].record(), Record::default());
        for f in &world.flows[1..] {
            let r = f.record();
            assert_eq!(r.first_tx, Some(1000));
            assert!(r.done.is_some() && r.tx_packets > 70, "{r:?}");
        }
        fulcrum_des::run(&mut world, &mut q, 50_000_000, None);
        assert!(world.flows[0].running(), "started at its time");
        assert_eq!(world.flows[0].record().first_tx, Some(50_000_000));
    }

    fn config(classes: Vec<Nanos>, service: Service) -> ModelConfig {
        ModelConfig {
            tcp: TcpConfig::default(),
            congestion: cc::Config::default(),
            header: 52,
            device_packets: 10,
            switch_limit: 250,
            host_limit: u32::MAX,
            nic_marking: false,
            bare_nics: false,
            marking: aqm::Config::new::<aqm::Tcn>(aqm::Tcn { threshold: 70_000 }).unwrap(),
            scheduler: None,
            class_marking: Vec::new(),
            scheduler_ports: None,
            delay_classes: classes,
            control_class: 0,
            salt: 1,
            aqm_seed: 0,
            service,
            delay_at: DelayAt::SwitchPort,
        }
    }

    /// Host 0 probes host 8 (next leaf) on each of the four paths, once.
    struct Prober {
        sent: bool,
        replies: std::sync::Arc<std::sync::Mutex<Vec<(Nanos, ProbeReply)>>>,
    }

    impl Scheme for Prober {
        fn name(&self) -> &'static str {
            "prober"
        }
        fn probe_interval(&self) -> Option<Nanos> {
            Some(1_000_000)
        }
        fn probes(&mut self, _now: Nanos, out: &mut Vec<Probe>) {
            if !std::mem::replace(&mut self.sent, true) {
                out.extend((0..4).map(|path| Probe { from: 0, to: 8, path }));
            }
        }
        fn on_probe_reply(&mut self, now: Nanos, reply: &ProbeReply) {
            self.replies.lock().unwrap().push((now, *reply));
        }
    }

    #[test]
    fn probes_take_their_paths_and_replies_carry_the_one_way_delay() {
        let mut q = Wheel::new();
        let mut world =
            World::new(config(vec![], Service::OnRoom), crate::lb::testing::fabric(), vec![], 100_000, &mut q);
        let replies = std::sync::Arc::default();
        world.set_routing(Box::new(Prober { sent: false, replies: std::sync::Arc::clone(&replies) }), &mut q);
        fulcrum_des::run(&mut world, &mut q, 500_000, None);
        let got = replies.lock().unwrap().clone();
        // Four hops of 10 µs, each serialising a 22-byte probe (17.6 ns at
        // 10 Gb/s): 40 072 ns one way on every path (each spine once); the
        // probe on path k waited k serialisations at the prober's NIC.
        let tx = world.tx_time(world.fabric.host_port[0] as usize, PROBE_WIRE);
        let one_way = 4 * (10_000 + tx);
        assert_eq!(got.len(), 4, "{got:?}");
        for (k, (at, r)) in got.iter().enumerate() {
            let delay = one_way + k as Nanos * tx;
            assert_eq!((r.probe.from, r.probe.to, r.probe.path, r.delay, r.ce), (0, 8, k as u16, delay, false));
            // The reply comes back by ECMP: one more one-way trip.
            assert_eq!(*at, delay + one_way, "{r:?}");
        }
        assert!((40_000..40_100).contains(&one_way), "{one_way}");
    }

    #[test]
    fn a_lone_flow_takes_its_round_trips() {
        // SYN, SYN-ACK, data, FIN, FIN's ACK: five one-way trips of two
        // 10 µs links, plus serialisation (under 1 µs per hop here).
        let (fct, troubles) = lone_flow(1000, vec![], Service::OnRoom);
        assert!((100_000..105_000).contains(&fct), "{fct}");
        assert_eq!(troubles, 0);
        // 100 segments in slow start, two per ACK from a first flight of
        // two (2, 4, 8, … 64: six data round trips of about 40 µs), plus
        // 116 µs of serialisation at 10 Gb/s: no marks.
        let (fct, troubles) = lone_flow(140_000, vec![], Service::OnRoom);
        assert!((300_000..400_000).contains(&fct), "{fct}");
        assert_eq!(troubles, 0);
    }

    #[test]
    fn a_packet_dropped_by_a_full_discipline_still_services_its_port() {
        // A host NIC whose discipline is full and whose device queue is
        // empty (packets put there without a service): the next packet
        // handed over is dropped, and the port is serviced all the same, as
        // ns-3 runs the discipline after every enqueue. Without that the
        // discipline stayed full until the device queue drained, dropping
        // every packet in between.
        let fabric = Fabric::build(&Shape::Star { hosts: 2, gbps: 10.0, extra_delay: vec![] }, 10_000);
        let cfg = ModelConfig { host_limit: 3, ..config(vec![], Service::OnEmpty) };
        let mut q = Wheel::new();
        let mut world = World::new(cfg, fabric, vec![], 100_000, &mut q);
        let p = world.fabric.host_port[0] as usize;
        for seq in 0..3 {
            assert!(world.ports[p].qdisc.enqueue(0, 0, crate::lb::testing::data(0, seq, 0)));
        }
        world.enqueue(0, p, crate::lb::testing::data(0, 3, 0), &mut q);
        assert_eq!(world.queue_stats(p as u32).drops, 1);
        assert!(world.ports[p].qdisc.is_empty(), "the device queue took the discipline's packets");
        assert_eq!(world.ports[p].device.len(), 2, "one is on the wire");
    }

    #[test]
    fn a_nic_without_a_discipline_is_one_device_queue() {
        // A host NIC holding its limit (3 in the discipline, 1 in a device
        // queue of 2: a transmission has just taken the other). With a
        // discipline in front the next packet is dropped; without one
        // (ns-3's NIC after `tc.Uninstall`) the 6 places are one queue and
        // the packet finds the place the transmission made.
        for (bare, drops) in [(false, 1), (true, 0)] {
            let fabric = Fabric::build(&Shape::Star { hosts: 2, gbps: 10.0, extra_delay: vec![] }, 10_000);
            let cfg =
                ModelConfig { host_limit: 3, device_packets: 2, bare_nics: bare, ..config(vec![], Service::OnEmpty) };
            let mut q = Wheel::new();
            let mut world = World::new(cfg, fabric, vec![], 100_000, &mut q);
            let p = world.fabric.host_port[0] as usize;
            for seq in 0..3 {
                assert!(world.ports[p].qdisc.enqueue(0, 0, crate::lb::testing::data(0, seq, 0)));
            }
            world.ports[p].device.push_back(crate::lb::testing::data(0, 3, 0));
            world.enqueue(0, p, crate::lb::testing::data(0, 4, 0), &mut q);
            assert_eq!(world.queue_stats(p as u32).drops, drops, "bare {bare}");
        }
    }

    #[test]
    fn ns3_service_strands_a_lone_delayed_packet_until_a_timeout() {
        // With the delay on the switch port and ns-3's service rule, the
        // SYN waits behind its 1 µs delay until the next packet for that
        // port: the SYN's own retransmission, one minimum RTO later.
        let (prompt, _) = lone_flow(1000, vec![1000], Service::OnRoom);
        let (stranded, _) = lone_flow(1000, vec![1000], Service::OnEmpty);
        assert!(prompt < 110_000, "{prompt}");
        assert!(stranded >= TcpConfig::default().min_rto, "{stranded}");
    }
}
