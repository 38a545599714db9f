//! TCP NewReno and DCTCP as plain state machines: they take `now` and what
//! arrived, and say what to send; the fabric model moves the packets.
//!
//! Semantics matched (ns-3's TcpNewReno and ns3-ecn-sharp's `tcp-dctcp.cc`,
//! RFC 5681/6582/6298, DCTCP per Alizadeh et al., SIGCOMM 2010):
//!
//! - Windows count segments of one MSS; the initial window is `iw`; slow
//!   start adds one segment per segment acknowledged, congestion avoidance
//!   1/cwnd per segment.
//! - Three duplicate ACKs: retransmit the first unacknowledged segment, set
//!   ssthresh (NewReno: half the data in flight, at least 2 segments; DCTCP:
//!   the larger of cwnd·(1 − α/2) and half the data in flight), cwnd =
//!   ssthresh + 3 and inflate by one per further duplicate; a partial ACK
//!   retransmits the next hole and deflates; an ACK past the recovery point
//!   ends recovery with cwnd = ssthresh.
//! - Retransmission timeout: RTT estimated on every ACK of new data from the
//!   timestamp it echoes (ns-3 runs with timestamps on); RTO = max(min RTO,
//!   SRTT + max(clock granularity, 4·RTTVAR)), doubled at each expiry and
//!   reset by new data acknowledged. On expiry: ssthresh as for a loss, cwnd
//!   = 1 segment, and sending restarts from the first unacknowledged segment
//!   (go-back-N; the receiver keeps what it already has).
//! - DCTCP: the receiver echoes each data segment's CE bit on its ACK (no
//!   delayed ACKs, so the echo is exact). The sender counts segments acked
//!   and those acked with ECE; once per window (when an ACK reaches the send
//!   point recorded at the previous update) α ← (1 − g)·α + g·F, with α
//!   starting at 1. An ACK with ECE outside recovery and outside a reduction
//!   already under way sets ssthresh as for a loss and cwnd ← cwnd·(1 − α/2),
//!   and holds the window (no growth) until the first segment sent after the
//!   reduction is acknowledged (ns-3's CWR state).
//! - A connection opens with SYN / SYN-ACK (one round trip before data, as
//!   in the original, whose flow completion times include it); a SYN with no
//!   answer is sent again after an RTO.
//! - New segments leave at most [`SEND_BURST`] per send call: ns3-ecn-sharp's
//!   `TcpSocketBase::SendPendingData` stops after two segments, and runs once
//!   when the connection opens, once per ACK of new data and once per
//!   duplicate ACK in fast recovery. So the initial window is not sent at
//!   once: two segments go, and each ACK releases at most two more, which
//!   ramps the first flight up by the ACK clock. Retransmissions (fast
//!   retransmit, a partial ACK's, a timeout's) are sent outside the cap, as
//!   ns-3 sends them from `DoRetransmit`.

use crate::packet::Nanos;

/// New segments one send call may put on the wire (ns3-ecn-sharp's
/// `SendPendingData` breaks out of its loop after two).
pub const SEND_BURST: u32 = 2;

/// Transport settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// Payload bytes per segment.
    pub mss: u32,
    /// Initial window (segments).
    pub iw: u32,
    pub min_rto: Nanos,
    /// RTO clock granularity (ns-3's `ClockGranularity`).
    pub granularity: Nanos,
    /// RTT estimate before any sample.
    pub initial_rtt: Nanos,
    /// DCTCP's gain g; `None` runs plain NewReno.
    pub dctcp_g: Option<f64>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1400,
            iw: 10,
            min_rto: 5_000_000,
            granularity: 100_000,
            initial_rtt: 80_000,
            dctcp_g: Some(1.0 / 16.0),
        }
    }
}

/// Connection phase of a sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Connecting,
    Open,
    Done,
}

/// The sending side of one flow.
#[derive(Clone, Debug)]
pub struct Sender {
    pub phase: Phase,
    /// Segments in the flow.
    segs: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    cwnd: f64,
    ssthresh: f64,
    dupacks: u32,
    recovery: Option<u32>,
    /// DCTCP's hold after a reduction: the send point it waits for.
    cwr_until: Option<u32>,
    /// A retransmission to send before new data.
    retx: Option<u32>,
    /// One past the highest segment ever sent.
    high: u32,
    /// New segments the current send call may still send ([`SEND_BURST`]).
    burst: u32,
    srtt: Option<(f64, f64)>,
    rto: Nanos,
    /// When the retransmission timer expires, if running.
    pub deadline: Option<Nanos>,
    alpha: f64,
    acked: u64,
    acked_ece: u64,
    alpha_mark: u32,
}

impl Sender {
    /// A sender of `segs` segments (at least 1).
    pub fn new(cfg: &TcpConfig, segs: u32) -> Sender {
        let mut s = Sender {
            phase: Phase::Connecting,
            segs: segs.max(1),
            snd_una: 0,
            snd_nxt: 0,
            cwnd: cfg.iw as f64,
            ssthresh: f64::INFINITY,
            dupacks: 0,
            recovery: None,
            cwr_until: None,
            retx: None,
            high: 0,
            burst: 0,
            srtt: None,
            rto: 0,
            deadline: None,
            alpha: 1.0,
            acked: 0,
            acked_ece: 0,
            alpha_mark: 0,
        };
        s.rto = s.compute_rto(cfg, cfg.initial_rtt as f64, 0.0);
        s
    }

    fn compute_rto(&self, cfg: &TcpConfig, srtt: f64, rttvar: f64) -> Nanos {
        let rto = srtt + (4.0 * rttvar).max(cfg.granularity as f64);
        (rto as Nanos).max(cfg.min_rto)
    }

    /// Congestion window in segments.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// DCTCP's congestion estimate α.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The SYN was just sent.
    pub fn on_syn_sent(&mut self, now: Nanos) {
        self.deadline = Some(now + self.rto);
    }

    /// The SYN-ACK arrived: data may flow.
    pub fn on_syn_ack(&mut self) {
        if self.phase == Phase::Connecting {
            self.phase = Phase::Open;
            self.deadline = None;
            self.burst = SEND_BURST;
        }
    }

    fn in_flight(&self) -> f64 {
        (self.snd_nxt - self.snd_una) as f64
    }

    /// The next segment to put on the wire, if the window allows one, and
    /// whether it was sent before (retransmissions go without ECT, as in the
    /// original); the caller sends it at `now` and calls again until `None`.
    pub fn poll_send(&mut self, now: Nanos) -> Option<(u32, bool)> {
        if self.phase != Phase::Open {
            return None;
        }
        let seq = if let Some(seq) = self.retx.take() {
            seq
        } else if self.burst > 0 && self.snd_nxt < self.segs && self.in_flight() < self.cwnd.floor().max(1.0) {
            self.burst -= 1;
            self.snd_nxt += 1;
            self.snd_nxt - 1
        } else {
            return None;
        };
        if self.deadline.is_none() {
            self.deadline = Some(now + self.rto);
        }
        let again = seq < self.high;
        self.high = self.high.max(seq + 1);
        Some((seq, again))
    }

    /// A cumulative ACK for everything below `ack` arrived, echoing the send
    /// time `echo` of the segment that caused it.
    pub fn on_ack(&mut self, cfg: &TcpConfig, now: Nanos, ack: u32, ece: bool, echo: Nanos) {
        if self.phase != Phase::Open {
            return;
        }
        // Only an ACK of new data or a duplicate in recovery runs a send call.
        self.burst = 0;
        if ack > self.snd_una {
            self.on_new_ack(cfg, now, ack, ece, echo);
        } else if ack == self.snd_una && self.snd_nxt > self.snd_una {
            self.on_dup_ack(cfg);
        }
    }

    fn on_new_ack(&mut self, cfg: &TcpConfig, now: Nanos, ack: u32, ece: bool, echo: Nanos) {
        self.rtt_sample(cfg, now.saturating_sub(echo));
        let acked = ack - self.snd_una;
        self.snd_una = ack;
        self.snd_nxt = self.snd_nxt.max(ack);
        self.dupacks = 0;
        self.burst = SEND_BURST;
        if let Some(g) = cfg.dctcp_g {
            self.acked += acked as u64;
            if ece {
                self.acked_ece += acked as u64;
            }
            if ack >= self.alpha_mark {
                let f = if self.acked == 0 { 0.0 } else { self.acked_ece as f64 / self.acked as f64 };
                self.alpha = (1.0 - g) * self.alpha + g * f;
                self.acked = 0;
                self.acked_ece = 0;
                self.alpha_mark = self.snd_nxt;
            }
        }
        if let Some(recover) = self.recovery {
            if ack >= recover {
                self.recovery = None;
                self.cwnd = self.ssthresh;
            } else {
                // Partial ACK: the next hole is lost too.
                self.retx = Some(ack);
                self.cwnd = (self.cwnd - acked as f64 + 1.0).max(1.0);
            }
        } else {
            if self.cwr_until.is_some_and(|until| ack > until) {
                self.cwr_until = None;
            }
            if ece && cfg.dctcp_g.is_some() && self.cwr_until.is_none() {
                self.ssthresh = self.loss_ssthresh(cfg);
                self.cwnd = (self.cwnd * (1.0 - self.alpha / 2.0)).max(1.0);
                self.cwr_until = Some(self.snd_nxt);
            } else if self.cwr_until.is_none() {
                if self.cwnd < self.ssthresh {
                    self.cwnd += acked as f64;
                } else {
                    self.cwnd += acked as f64 / self.cwnd;
                }
            }
        }
        if self.snd_una >= self.segs {
            self.phase = Phase::Done;
            self.deadline = None;
        } else {
            self.deadline = Some(now + self.rto);
        }
    }

    fn loss_ssthresh(&self, cfg: &TcpConfig) -> f64 {
        let half = self.in_flight() / 2.0;
        match cfg.dctcp_g {
            Some(_) => (self.cwnd * (1.0 - self.alpha / 2.0)).max(half),
            None => half,
        }
        .max(2.0)
    }

    fn on_dup_ack(&mut self, cfg: &TcpConfig) {
        self.dupacks += 1;
        if self.recovery.is_some() {
            if self.dupacks > 3 {
                self.cwnd += 1.0;
            }
            self.burst = SEND_BURST;
        } else if self.dupacks == 3 {
            self.ssthresh = self.loss_ssthresh(cfg);
            self.cwnd = self.ssthresh + 3.0;
            self.recovery = Some(self.snd_nxt);
            self.cwr_until = None;
            self.retx = Some(self.snd_una);
        }
    }

    fn rtt_sample(&mut self, cfg: &TcpConfig, r: Nanos) {
        let r = r as f64;
        let (srtt, var) = match self.srtt {
            None => (r, r / 2.0),
            Some((s, v)) => (0.875 * s + 0.125 * r, 0.75 * v + 0.25 * (s - r).abs()),
        };
        self.srtt = Some((srtt, var));
        self.rto = self.compute_rto(cfg, srtt, var);
    }

    /// The retransmission timer expired at `now` (the caller checked
    /// `deadline`). Returns true when the SYN must go again.
    pub fn on_timeout(&mut self, cfg: &TcpConfig, now: Nanos) -> bool {
        self.rto = self.rto.saturating_mul(2).min(60_000_000_000);
        self.deadline = Some(now + self.rto);
        match self.phase {
            Phase::Connecting => true,
            Phase::Done => {
                self.deadline = None;
                false
            }
            Phase::Open => {
                self.ssthresh = self.loss_ssthresh(cfg);
                self.cwnd = 1.0;
                self.snd_nxt = self.snd_una;
                // The timeout resends the first hole alone.
                self.burst = 1;
                self.recovery = None;
                self.cwr_until = None;
                self.retx = None;
                self.dupacks = 0;
                false
            }
        }
    }
}

/// The receiving side of one flow: cumulative ACKs over a bitmap of
/// segments that arrived out of order (allocated only when one does).
#[derive(Clone, Debug, Default)]
pub struct Receiver {
    /// Next segment expected.
    pub next: u32,
    segs: u32,
    ooo: Vec<u64>,
}

impl Receiver {
    pub fn new(segs: u32) -> Receiver {
        Receiver { next: 0, segs: segs.max(1), ooo: Vec::new() }
    }

    /// Every segment has arrived.
    pub fn complete(&self) -> bool {
        self.next >= self.segs
    }

    fn has(&self, seq: u32) -> bool {
        self.ooo.get(seq as usize / 64).is_some_and(|w| w >> (seq % 64) & 1 == 1)
    }

    /// Segment `seq` arrived; returns the cumulative ACK to send.
    pub fn on_data(&mut self, seq: u32) -> u32 {
        if seq == self.next {
            self.next += 1;
            while self.has(self.next) {
                self.next += 1;
            }
            if self.complete() {
                self.ooo = Vec::new();
            }
        } else if seq > self.next && seq < self.segs {
            if self.ooo.is_empty() {
                self.ooo = vec![0; self.segs as usize / 64 + 1];
            }
            self.ooo[seq as usize / 64] |= 1 << (seq % 64);
        }
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(cfg: &TcpConfig, segs: u32) -> Sender {
        let mut s = Sender::new(cfg, segs);
        s.on_syn_sent(0);
        s.on_syn_ack();
        s
    }

    /// What one send call puts on the wire.
    fn drain(s: &mut Sender, now: Nanos) -> Vec<u32> {
        std::iter::from_fn(|| s.poll_send(now).map(|(seq, _)| seq)).collect()
    }

    /// Send calls until the window is full.
    fn fill(s: &mut Sender, now: Nanos) -> Vec<u32> {
        let mut sent = Vec::new();
        loop {
            s.burst = SEND_BURST;
            let more = drain(s, now);
            if more.is_empty() {
                return sent;
            }
            sent.extend(more);
        }
    }

    #[test]
    fn initial_window_then_slow_start() {
        let cfg = TcpConfig { dctcp_g: None, ..TcpConfig::default() };
        let mut s = open(&cfg, 100);
        assert_eq!(fill(&mut s, 100), (0..10).collect::<Vec<_>>());
        s.on_ack(&cfg, 200, 1, false, 100);
        assert_eq!(s.cwnd(), 11.0);
        assert_eq!(drain(&mut s, 200), [10, 11]);
    }

    #[test]
    fn each_send_call_sends_at_most_two_new_segments() {
        let cfg = TcpConfig::default();
        let mut s = open(&cfg, 100);
        // The connection opens with a window of 10, but one call sends two.
        assert_eq!(drain(&mut s, 100), [0, 1]);
        assert_eq!(drain(&mut s, 100), [] as [u32; 0], "no send call until an ACK");
        // An ACK of one segment: two more (the window would allow ten).
        s.on_ack(&cfg, 200, 1, false, 100);
        assert_eq!(drain(&mut s, 200), [2, 3]);
        // A duplicate ACK outside recovery runs no send call.
        s.on_ack(&cfg, 210, 1, false, 100);
        assert_eq!(drain(&mut s, 210), [] as [u32; 0]);
    }

    #[test]
    fn three_dup_acks_retransmit_and_halve() {
        let cfg = TcpConfig { dctcp_g: None, ..TcpConfig::default() };
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        for _ in 0..3 {
            s.on_ack(&cfg, 200, 0, false, 100);
        }
        assert_eq!(s.poll_send(200), Some((0, true)), "fast retransmit");
        assert_eq!(s.cwnd(), 5.0 + 3.0);
        s.on_ack(&cfg, 300, 10, false, 200);
        assert_eq!(s.cwnd(), 5.0, "recovery ends deflated");
    }

    #[test]
    fn timeout_goes_back_to_the_first_hole() {
        let cfg = TcpConfig { dctcp_g: None, ..TcpConfig::default() };
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        let deadline = s.deadline.unwrap();
        assert_eq!(deadline, 100 + cfg.min_rto);
        assert!(!s.on_timeout(&cfg, deadline));
        assert_eq!(s.cwnd(), 1.0);
        assert_eq!(drain(&mut s, deadline), [0]);
        assert_eq!(s.deadline, Some(deadline + 2 * cfg.min_rto), "backed off");
    }

    #[test]
    fn dctcp_alpha_and_reduction() {
        let cfg = TcpConfig::default();
        let mut s = open(&cfg, 1000);
        fill(&mut s, 100);
        // First ACK reaches the initial mark (0): α updates with F = 1 (ECE).
        s.on_ack(&cfg, 200, 1, true, 100);
        assert_eq!(s.alpha(), 1.0);
        assert_eq!(s.cwnd(), 5.0, "cwnd × (1 − α/2) with α = 1");
        // Held until the first segment sent after the reduction (10) is acked.
        s.on_ack(&cfg, 210, 5, false, 100);
        assert_eq!(s.cwnd(), 5.0);
        s.on_ack(&cfg, 220, 10, false, 100);
        assert_eq!(s.cwnd(), 5.0);
        // The ack of 10 reached the mark set at the first update: F = 0/9.
        assert!((s.alpha() - 15.0 / 16.0).abs() < 1e-12, "{}", s.alpha());
        fill(&mut s, 220);
        s.on_ack(&cfg, 230, 11, false, 100);
        assert!(s.cwnd() > 5.0, "grows again once the hold ends");
    }

    #[test]
    fn receiver_acks_cumulatively_across_holes() {
        let mut r = Receiver::new(5);
        assert_eq!(r.on_data(0), 1);
        assert_eq!(r.on_data(2), 1);
        assert_eq!(r.on_data(3), 1);
        assert_eq!(r.on_data(1), 4);
        assert!(!r.complete());
        assert_eq!(r.on_data(4), 5);
        assert!(r.complete());
    }

    #[test]
    fn syn_timeout_resends_the_syn() {
        let cfg = TcpConfig::default();
        let mut s = Sender::new(&cfg, 3);
        s.on_syn_sent(0);
        assert_eq!(s.poll_send(1), None);
        assert!(s.on_timeout(&cfg, cfg.min_rto));
    }
}
