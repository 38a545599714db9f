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
///
/// 40 bytes: the four ECN bits share one byte ([`Packet::ect`] and the
/// others) and the wire size is a `u16` (the scenario keeps a segment with
/// its headers within 65,535 bytes), so that a link's or a queue's ring
/// holds 1.6 packets per cache line instead of 1.33 at 48 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Index of the flow in the run's flow table.
    pub flow: u32,
    /// Segment index (data) or next expected segment (ACK).
    pub seq: u32,
    /// Host the packet is going to.
    pub dst: u32,
    /// Scratch field of the routing scheme (e.g. CONGA's congestion extent
    /// and feedback); 0 when the packet leaves its host, except on an ACK,
    /// where it carries the one-way delay (ns) of the data segment the ACK
    /// answers, for schemes that sense paths by it (Hermes).
    pub lb: u32,
    /// Path chosen by an edge load-balancing scheme at the sender
    /// ([`NO_PATH`]: the switches choose); see `crate::lb`.
    pub path: u16,
    /// On an ACK: the path of the data segment it answers (the receiver
    /// reflects it, for edge schemes' per-path feedback).
    pub echo_path: u16,
    /// Bytes on the wire.
    pub wire: u16,
    pub kind: Kind,
    /// The ECN bits: [`ECT`], [`CE`], [`ECE`], [`CWR`].
    ecn: u8,
    /// The time stamp of the stage the packet is in: in a queue
    /// discipline, when it took the packet (for the sojourn time); on a
    /// link, when the packet reaches the far end; in a delay stage, when it
    /// is due. (One field for the three keeps a packet on the wire or in a
    /// delay FIFO small.)
    pub enqueued: Nanos,
    /// Send time of the data segment an ACK answers (the timestamp echo that
    /// gives an RTT sample on every ACK).
    pub echo: Nanos,
}

const _: () = assert!(std::mem::size_of::<Packet>() == 40);

/// ECN-capable transport (data segments and probes, as in the original).
const ECT: u8 = 1;
/// Congestion Experienced: set by a marking queue.
const CE: u8 = 2;
/// ECN-Echo on an ACK: the receiver's echo state when it sent it.
const ECE: u8 = 4;
/// Congestion Window Reduced on a data segment: the sender has cut its
/// window for an echo (the receiver then stops echoing).
const CWR: u8 = 8;

/// The `flow` field of probes sent by `host`: counted down from the top of
/// the range, so that it names no flow and hashes per prober.
pub fn probe_flow(host: u32) -> u32 {
    u32::MAX - host
}

impl Packet {
    /// A packet with no ECN bit set, no path chosen and both time stamps
    /// at `now`.
    pub fn new(flow: u32, kind: Kind, seq: u32, dst: u32, wire: u16, now: Nanos) -> Packet {
        Packet {
            flow,
            seq,
            dst,
            lb: 0,
            path: NO_PATH,
            echo_path: NO_PATH,
            wire,
            kind,
            ecn: 0,
            enqueued: now,
            echo: now,
        }
    }

    /// ECN-capable transport.
    #[inline]
    pub fn ect(&self) -> bool {
        self.ecn & ECT != 0
    }

    /// Congestion Experienced: set by a marking queue.
    #[inline]
    pub fn ce(&self) -> bool {
        self.ecn & CE != 0
    }

    /// ECN-Echo on an ACK: the receiver's echo state when it sent it.
    #[inline]
    pub fn ece(&self) -> bool {
        self.ecn & ECE != 0
    }

    /// Congestion Window Reduced on a data segment.
    #[inline]
    pub fn cwr(&self) -> bool {
        self.ecn & CWR != 0
    }

    #[inline]
    fn set_bit(&mut self, bit: u8, on: bool) {
        self.ecn = if on { self.ecn | bit } else { self.ecn & !bit };
    }

    #[inline]
    pub fn set_ect(&mut self, on: bool) {
        self.set_bit(ECT, on);
    }

    #[inline]
    pub fn set_ce(&mut self, on: bool) {
        self.set_bit(CE, on);
    }

    #[inline]
    pub fn set_ece(&mut self, on: bool) {
        self.set_bit(ECE, on);
    }

    #[inline]
    pub fn set_cwr(&mut self, on: bool) {
        self.set_bit(CWR, on);
    }

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
    fn ecn_bits_are_independent() {
        let mut p = Packet::new(0, Kind::Data, 0, 1, 1454, 0);
        assert!(!(p.ect() || p.ce() || p.ece() || p.cwr()));
        p.set_ect(true);
        p.set_cwr(true);
        assert!(p.ect() && !p.ce() && !p.ece() && p.cwr());
        p.set_ce(true);
        p.set_ect(false);
        p.set_ece(true);
        assert!(!p.ect() && p.ce() && p.ece() && p.cwr());
        p.set_cwr(false);
        assert!(!p.ect() && p.ce() && p.ece() && !p.cwr());
    }
}
