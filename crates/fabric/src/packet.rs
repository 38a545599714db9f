//! The packet: a small plain value copied from queue to queue.
//!
//! Nothing in a packet lives on the heap, so moving millions of them through
//! the fabric allocates nothing once the queues have reached their working
//! size. Sizes are wire sizes (payload plus headers); sequence numbers count
//! segments, not bytes, because every segment but a flow's last is one MSS.

pub use fulcrum_balance::Nanos;

/// [`Packet::path`] of a packet whose path the switches choose.
pub const NO_PATH: u16 = u16::MAX;

/// What a packet carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Connection request (sender → receiver).
    Syn,
    /// Connection accepted (receiver → sender).
    SynAck,
    /// A data segment; `seq` is its index in the flow.
    Data,
    /// A cumulative acknowledgement; `seq` is the next segment expected.
    Ack,
    /// The receiver closes its side once every segment is in (receiver →
    /// sender; the sender's FIN rides on its last segment, as in ns-3).
    Fin,
    /// The sender acknowledges that FIN (sender → receiver): the flow's
    /// last forward packet, which the original's FCT counts.
    FinAck,
    /// A path probe of an edge scheme (Hermes): header only, on the path the
    /// prober chose; it belongs to no flow (see [`probe_flow`]).
    Probe,
    /// The probed host's answer: `lb` carries the probe's one-way delay,
    /// `ece` whether it arrived with CE, `echo_path` its path, `seq` the
    /// probed host.
    ProbeReply,
}

/// One packet in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Index of the flow in the run's flow table.
    pub flow: u32,
    /// Segment index (data) or next expected segment (ACK).
    pub seq: u32,
    /// Host the packet is going to.
    pub dst: u32,
    /// Bytes on the wire.
    pub wire: u32,
    pub kind: Kind,
    /// ECN-capable transport (data segments only, as in the original).
    pub ect: bool,
    /// Congestion Experienced: set by a marking queue.
    pub ce: bool,
    /// ECN-Echo on an ACK: the receiver's echo state when it sent it.
    pub ece: bool,
    /// Path chosen by an edge load-balancing scheme at the sender
    /// ([`NO_PATH`]: the switches choose); see `crate::lb`.
    pub path: u16,
    /// On an ACK: the path of the data segment it answers (the receiver
    /// reflects it, for edge schemes' per-path feedback).
    pub echo_path: u16,
    /// Scratch field of the routing scheme (e.g. CONGA's congestion extent
    /// and feedback); 0 when the packet leaves its host, except on an ACK,
    /// where it carries the one-way delay (ns) of the data segment the ACK
    /// answers, for schemes that sense paths by it (Hermes).
    pub lb: u32,
    /// Congestion Window Reduced on a data segment: the sender has cut its
    /// window for an echo (the receiver then stops echoing).
    pub cwr: bool,
    /// The time stamp of the stage the packet is in: in a queue
    /// discipline, when it took the packet (for the sojourn time); on a
    /// link, when the packet reaches the far end; in a delay stage, when it
    /// is due. (One field for the three keeps a packet on the wire or in a
    /// delay FIFO at 48 bytes instead of 56 with a time beside it.)
    pub enqueued: Nanos,
    /// Send time of the data segment an ACK answers (the timestamp echo that
    /// gives an RTT sample on every ACK).
    pub echo: Nanos,
}

/// The `flow` field of probes sent by `host`: counted down from the top of
/// the range, so that it names no flow and hashes per prober.
pub fn probe_flow(host: u32) -> u32 {
    u32::MAX - host
}

impl Packet {
    /// Whether the packet travels from a flow's receiver back to its sender.
    pub fn is_reverse(&self) -> bool {
        matches!(self.kind, Kind::SynAck | Kind::Ack | Kind::Fin | Kind::ProbeReply)
    }

    /// The host that sent the probe this packet is or answers (`None`: a
    /// flow's packet).
    pub fn prober(&self) -> Option<u32> {
        matches!(self.kind, Kind::Probe | Kind::ProbeReply).then(|| u32::MAX - self.flow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_stay_small() {
        // Queues hold packets by value: keep them within one cache line.
        assert!(std::mem::size_of::<Packet>() <= 48, "{}", std::mem::size_of::<Packet>());
    }
}
