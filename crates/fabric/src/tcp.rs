//! TCP as a plain state machine: it takes `now` and what arrived, and says
//! what to send; the fabric model moves the packets. The congestion
//! control algorithm (NewReno, DCTCP or one registered from outside) is
//! the sender's [`CongestionControl`] ([`crate::cc`]).
//!
//! The reference is the TCP of ns3-ecn-sharp (an ns-3 fork): its
//! `TcpSocketBase` (`tcp-socket-base.cc`), `TcpNewReno`
//! (`tcp-congestion-ops.cc`) and `TcpDCTCP` (`tcp-dctcp.cc`), whose
//! congestion states (open, disorder, CWR, recovery, loss) [`Sender`]
//! follows; RFC 5681/6582/6298/3042 and DCTCP (Alizadeh et al., SIGCOMM
//! 2010) where the fork follows them.
//!
//! - Windows count segments of one MSS; the initial window is `iw`. Growth
//!   is per ACK, not per segment acknowledged: slow start adds one segment,
//!   congestion avoidance MSS²/cwnd bytes (at least one byte).
//! - New segments leave at most [`SEND_BURST`] per send call: the fork's
//!   `SendPendingData` stops after two segments, and runs once when the
//!   connection opens, once per ACK of new data and once per duplicate ACK
//!   in fast recovery. So the initial window is not sent at once: two
//!   segments go, and each ACK releases at most two more. Retransmissions
//!   go outside the cap (ns-3's `DoRetransmit`), and so does limited
//!   transmit: the first and second duplicate ACKs (and any further ones
//!   that cannot start a recovery) each send one new segment beyond the
//!   window.
//! - Three duplicate ACKs start fast recovery only if everything sent
//!   before the previous recovery or timeout has been acknowledged
//!   (RFC 6582's guard). ssthresh is then NewReno's (half the data in
//!   flight, at least two segments — also under DCTCP, whose rule ns-3
//!   bypasses in recovery), cwnd = ssthresh + 3, inflated by one per
//!   further duplicate. A partial ACK retransmits the next hole and deflates
//!   the window; only the first partial ACK restarts the retransmission
//!   timer. The ACK that ends recovery sets cwnd to the smaller of ssthresh
//!   and the data in flight plus one segment. "Data in flight" is ns-3's:
//!   sent and unacknowledged, less duplicate ACKs, plus retransmissions.
//! - Retransmission timeout: RTT estimated on every ACK of new data from the
//!   timestamp it echoes (ns-3 runs with timestamps on); RTO = max(min RTO,
//!   SRTT + max(clock granularity, 4·RTTVAR)), doubled at each expiry and
//!   reset by new data acknowledged. On the first expiry: ssthresh as for an
//!   ECN echo, cwnd = 1 segment; at every expiry the first unacknowledged
//!   segment is resent and sending restarts after it (go-back-N; the receiver
//!   keeps what it has). Until new data is acknowledged (the loss state)
//!   duplicate ACKs do nothing.
//! - ECN: an ACK with ECE in the open or disorder state — a duplicate too —
//!   sets ssthresh (DCTCP: the larger of cwnd·(1 − α/2) and half the data in
//!   flight; NewReno: half the data in flight, at least 2) and cuts cwnd
//!   (DCTCP: ×(1 − α/2); NewReno: halved, at least one segment), and
//!   enters CWR: no growth, and no further cut, until the first new segment
//!   sent after the cut (it carries CWR) is acknowledged. A window below
//!   one segment sends nothing but a flow's shorter last segment if it fits
//!   (ns-3's silly-window rule); the timeout restarts it.
//! - The receiver answers every segment at once (no delayed ACKs), a
//!   duplicate too, except a stale one: a segment wholly below the
//!   cumulative ACK point (it ends before the next byte expected, so any
//!   but the last segment delivered) is dropped without an answer. This is
//!   ns3-ecn-sharp's `TcpSocketBase::DoForwardUp`: data for which
//!   `OutOfRange` holds is discarded, and the fork commented out the empty
//!   ACK that RFC 793 (p. 69) and stock ns-3 send for it. It is in the
//!   model because it is what the reference does, and it matters after a
//!   reordering or a go-back-N resend: the copies a recovery resent while
//!   the originals were still on their way arrive late, and answered they
//!   would be duplicate ACKs that start the next fast retransmit. Traced
//!   against ns-3 (the mq scenario's long flow over 100 ms), the model
//!   with the rule goes through ns-3's recoveries and timeouts at ns-3's
//!   times; without it, it leaves them at the second recovery.
//! - The receiver echoes ECN as ns3-ecn-sharp's does: a CE segment turns
//!   the echo on, an ECN-capable segment without CE turns it off, a segment
//!   that is not ECN-capable (a retransmission) leaves it, and a segment
//!   carrying CWR turns it off after that; every ACK carries the echo's
//!   state (no delayed ACKs).
//! - DCTCP's α: see [`crate::cc::Dctcp`].
//! - A connection opens with SYN / SYN-ACK (one round trip before data, as
//!   in the original, whose flow completion times include it); a SYN with no
//!   answer is sent again after an RTO.

pub use crate::cc::CongState;
use crate::cc::{CongestionControl, Window};
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
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig { mss: 1400, iw: 10, min_rto: 5_000_000, granularity: 100_000, initial_rtt: 80_000 }
    }
}

/// Connection phase of a sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Connecting,
    Open,
    Done,
}

/// A segment to put on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub seq: u32,
    /// Sent before (retransmissions go without ECT, as in the original).
    pub again: bool,
    /// Carries CWR: the first new segment after a cut for an ECN echo.
    pub cwr: bool,
}

/// The sending side of one flow.
#[derive(Debug)]
pub struct Sender {
    pub phase: Phase,
    /// Segments in the flow.
    segs: u32,
    /// Whether the last segment is shorter than an MSS (it may then go
    /// through a window of less than one segment).
    short_last: bool,
    pub snd_una: u32,
    pub snd_nxt: u32,
    cwnd: f64,
    ssthresh: f64,
    state: CongState,
    dupacks: u32,
    /// Retransmissions not yet known to have arrived (ns-3's `m_retransOut`).
    retrans_out: u32,
    /// `high` when the last recovery or timeout began (ns-3's `m_recover`).
    recover: u32,
    /// No partial ACK yet in this recovery (it restarts the timer).
    first_partial: bool,
    /// A cut for ECE waits for the next new segment to carry CWR.
    queue_cwr: bool,
    /// The segment that carried CWR; CWR ends when it is acknowledged.
    cwr_sent: Option<u32>,
    /// A retransmission to send before new data.
    retx: Option<u32>,
    /// One past the highest segment ever sent.
    high: u32,
    /// New segments the current send call may still send ([`SEND_BURST`]).
    burst: u32,
    /// Limited transmit: one new segment beyond the window.
    limited: bool,
    srtt: Option<(f64, f64)>,
    rto: Nanos,
    /// When the retransmission timer expires, if running.
    pub deadline: Option<Nanos>,
    cc: Box<dyn CongestionControl>,
}

impl Sender {
    /// A sender of `bytes` in segments of `cfg.mss` (at least one segment),
    /// whose window `cc` controls.
    pub fn new(cfg: &TcpConfig, bytes: u64, cc: Box<dyn CongestionControl>) -> Sender {
        let mss = cfg.mss as u64;
        let mut s = Sender {
            phase: Phase::Connecting,
            segs: bytes.div_ceil(mss).max(1) as u32,
            short_last: !bytes.is_multiple_of(mss),
            snd_una: 0,
            snd_nxt: 0,
            cwnd: cfg.iw as f64,
            ssthresh: f64::INFINITY,
            state: CongState::Open,
            dupacks: 0,
            retrans_out: 0,
            recover: 0,
            first_partial: true,
            queue_cwr: false,
            cwr_sent: None,
            retx: None,
            high: 0,
            burst: 0,
            limited: false,
            srtt: None,
            rto: 0,
            deadline: None,
            cc,
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

    /// The controller's congestion estimate (DCTCP's α).
    pub fn alpha(&self) -> f64 {
        self.cc.alpha()
    }

    /// What the controller sees.
    fn window(&self, cfg: &TcpConfig) -> Window {
        let (cwnd, ssthresh, pipe, state, high) = (self.cwnd, self.ssthresh, self.pipe(), self.state, self.high);
        Window { cwnd, ssthresh, pipe, state, high, mss: cfg.mss }
    }

    /// cwnd, ssthresh and data in flight in bytes, the congestion state, α
    /// and the RTO, comma-separated (for [`crate::trace`]).
    pub fn describe(&self, mss: u32) -> String {
        let b = |segs: f64| (segs * mss as f64).min(u32::MAX as f64) as u64;
        let state = format!("{:?}", self.state);
        format!("{},{},{},{state},{:.4},{}", b(self.cwnd), b(self.ssthresh), b(self.pipe()), self.alpha(), self.rto)
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

    /// ns-3's `BytesInFlight`, in segments: sent and unacknowledged, less
    /// the segments duplicate ACKs say have left, plus retransmissions.
    fn pipe(&self) -> f64 {
        let flight = self.snd_nxt - self.snd_una;
        (flight + self.retrans_out).saturating_sub(self.dupacks) as f64
    }

    /// Whether the window has room for segment `snd_nxt`: a whole segment,
    /// or the flow's shorter last one in what is left.
    fn window_open(&self) -> bool {
        let room = self.cwnd - self.in_flight();
        room >= 1.0 || (self.short_last && self.snd_nxt + 1 == self.segs && room > 0.0)
    }

    /// The next segment to put on the wire, if the window allows one; the
    /// caller sends it at `now` and calls again until `None`.
    pub fn poll_send(&mut self, now: Nanos) -> Option<Segment> {
        if self.phase != Phase::Open {
            return None;
        }
        let seq = if let Some(seq) = self.retx.take() {
            seq
        } else if self.snd_nxt < self.segs && (self.limited || (self.burst > 0 && self.window_open())) {
            if !std::mem::take(&mut self.limited) {
                self.burst -= 1;
            }
            self.snd_nxt += 1;
            self.snd_nxt - 1
        } else {
            self.limited = false;
            return None;
        };
        if self.deadline.is_none() {
            self.deadline = Some(now + self.rto);
        }
        let again = seq < self.high;
        self.high = self.high.max(seq + 1);
        let cwr = !again && std::mem::take(&mut self.queue_cwr);
        if cwr {
            self.cwr_sent = Some(seq);
        }
        Some(Segment { seq, again, cwr })
    }

    /// A cumulative ACK for everything below `ack` arrived, echoing the send
    /// time `echo` of the segment that caused it.
    pub fn on_ack(&mut self, cfg: &TcpConfig, now: Nanos, ack: u32, ece: bool, echo: Nanos) {
        if self.phase != Phase::Open || ack < self.snd_una {
            return;
        }
        // Only an ACK of new data or a duplicate in recovery runs a send call.
        self.burst = 0;
        self.limited = false;
        if ack > self.snd_una {
            self.rtt_sample(cfg, now.saturating_sub(echo));
        }
        if ece && !self.queue_cwr && matches!(self.state, CongState::Open | CongState::Disorder) {
            self.state = CongState::Cwr;
            let w = self.window(cfg);
            self.ssthresh = self.cc.ssthresh(&w);
            self.cwnd = self.cc.cut(&w);
            self.queue_cwr = true;
        }
        if ack > self.snd_una {
            self.on_new_ack(cfg, now, ack, ece);
        } else if self.snd_nxt > self.snd_una {
            self.on_dup_ack(cfg, ack, ece);
        }
    }

    fn on_new_ack(&mut self, cfg: &TcpConfig, now: Nanos, ack: u32, ece: bool) {
        let acked = ack - self.snd_una;
        // Segments the duplicate ACKs have not already counted.
        let fresh = if acked > self.dupacks { acked - self.dupacks } else { 1 };
        let mut grow = Some(acked);
        let mut restart_timer = true;
        match self.state {
            CongState::Open => {}
            CongState::Cwr => {
                if self.cwr_sent.is_some_and(|s| ack > s) {
                    self.state = CongState::Open;
                    self.cwr_sent = None;
                }
                self.dupacks = 0;
                self.retrans_out = 0;
            }
            CongState::Disorder | CongState::Loss => {
                self.state = CongState::Open;
                self.first_partial = true;
                self.dupacks = 0;
                self.retrans_out = 0;
            }
            CongState::Recovery if ack < self.recover => {
                self.on_partial_ack(ack, acked, fresh);
                restart_timer = std::mem::replace(&mut self.first_partial, false);
                grow = None;
            }
            CongState::Recovery => {
                self.cwnd = self.ssthresh.min(self.pipe() + 1.0);
                self.first_partial = true;
                self.dupacks = 0;
                self.retrans_out = 0;
                self.state = CongState::Open;
                grow = Some(ack - self.recover);
            }
        }
        let counted = if grow.is_none() { 1 } else { fresh };
        // One view for both calls: counting the ACK changes no field of it.
        let w = self.window(cfg);
        self.cc.pkts_acked(&w, counted, ece, ack);
        if let Some(n) = grow {
            self.cwnd = self.cc.increase(&w, n);
        }
        self.snd_una = ack;
        self.snd_nxt = self.snd_nxt.max(ack);
        self.burst = SEND_BURST;
        if self.snd_una >= self.segs {
            self.phase = Phase::Done;
            self.deadline = None;
        } else if restart_timer {
            self.deadline = Some(now + self.rto);
        }
    }

    /// A partial ACK in recovery: the next hole is lost too.
    fn on_partial_ack(&mut self, ack: u32, acked: u32, fresh: u32) {
        self.cwnd = (self.cwnd - acked as f64).max(0.0) + 1.0;
        self.dupacks = self.dupacks.saturating_sub(fresh);
        self.retrans_out = self.retrans_out.saturating_sub(1);
        self.retransmit(ack);
    }

    fn on_dup_ack(&mut self, cfg: &TcpConfig, ack: u32, ece: bool) {
        self.dupacks += 1;
        match self.state {
            CongState::Open => {
                self.state = CongState::Disorder;
                self.limited = true;
            }
            CongState::Disorder | CongState::Cwr if self.dupacks == 3 && self.snd_una >= self.recover => {
                self.recover = self.high;
                self.state = CongState::Recovery;
                self.ssthresh = self.cc.ssthresh(&self.window(cfg));
                self.cwnd = self.ssthresh + 3.0;
                self.retransmit(self.snd_una);
            }
            CongState::Disorder | CongState::Cwr => self.limited = true,
            CongState::Recovery => {
                self.cwnd += 1.0;
                self.burst = SEND_BURST;
            }
            CongState::Loss => {}
        }
        self.pkts_acked(cfg, 1, ece, ack);
    }

    fn retransmit(&mut self, seq: u32) {
        self.retx = Some(seq);
        self.retrans_out += 1;
    }

    /// The controller counts an ACK (ns-3's `PktsAcked`).
    fn pkts_acked(&mut self, cfg: &TcpConfig, n: u32, ece: bool, ack: u32) {
        let w = self.window(cfg);
        self.cc.pkts_acked(&w, n, ece, ack);
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

    /// Whether a retransmission timeout now would start a loss episode
    /// (or re-send the SYN) rather than back off inside one.
    pub fn timeout_is_fresh(&self) -> bool {
        match self.phase {
            Phase::Connecting => true,
            Phase::Open => self.state != CongState::Loss,
            Phase::Done => false,
        }
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
                self.recover = self.high;
                if self.state != CongState::Loss {
                    self.state = CongState::Loss;
                    self.ssthresh = self.cc.ssthresh(&self.window(cfg));
                    self.cwnd = 1.0;
                }
                self.dupacks = 0;
                self.burst = 0;
                self.limited = false;
                self.retransmit(self.snd_una);
                self.snd_nxt = self.snd_una + 1;
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
    /// ECN echo state (ns-3's `m_demandCWR`).
    echo: bool,
}

impl Receiver {
    pub fn new(segs: u32) -> Receiver {
        Receiver { next: 0, segs: segs.max(1), ooo: Vec::new(), echo: false }
    }

    /// A data segment with these ECN bits arrived: whether its ACK echoes
    /// congestion.
    pub fn ecn_echo(&mut self, ect: bool, ce: bool, cwr: bool) -> bool {
        if ce {
            self.echo = true;
        } else if ect {
            self.echo = false;
        }
        if cwr {
            self.echo = false;
        }
        self.echo
    }

    /// Every segment has arrived.
    pub fn complete(&self) -> bool {
        self.next >= self.segs
    }

    /// Whether a data segment arriving now goes unanswered. Once every
    /// segment is in, ns3-ecn-sharp's receiver has taken the FIN on the last
    /// one and sent its own (CLOSE_WAIT, then LAST_ACK): only the next
    /// sequence number is then in range, so a retransmitted segment is
    /// dropped without an ACK (`TcpSocketBase::DoForwardUp`), and after the
    /// LAST_ACK timer has closed the socket the port's listening socket
    /// ignores anything but a SYN. So a late copy of the last segment never
    /// releases the receiver's own ACK and FIN if they wait in its NIC's
    /// delay queue: the sender's timeouts repeat, doubling, until other
    /// traffic leaves that NIC.
    pub fn ignores(&self) -> bool {
        self.complete()
    }

    fn has(&self, seq: u32) -> bool {
        self.ooo.get(seq as usize / 64).is_some_and(|w| w >> (seq % 64) & 1 == 1)
    }

    /// Whether segment `seq` is stale (ns-3's `OutOfRange`: it ends before
    /// the next byte expected), so that it is dropped unanswered. A copy of
    /// the last segment delivered ends at the ACK point and is answered
    /// (a duplicate ACK), as in ns-3.
    pub fn stale(&self, seq: u32) -> bool {
        seq + 1 < self.next
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

    const MSS: u64 = 1400;

    #[test]
    fn receiver_ignores_segments_once_complete() {
        let mut r = Receiver::new(2);
        assert!(!r.ignores());
        r.on_data(1);
        assert!(!r.ignores(), "out of order, still open");
        r.on_data(0);
        assert!(r.complete() && r.ignores());
    }

    /// The transport settings and the congestion control of a test.
    struct Setup {
        tcp: TcpConfig,
        cc: crate::cc::Config,
    }

    impl std::ops::Deref for Setup {
        type Target = TcpConfig;
        fn deref(&self) -> &TcpConfig {
            &self.tcp
        }
    }

    fn newreno() -> Setup {
        let cc = crate::cc::Config::new::<crate::cc::NewReno>(fulcrum_balance::Empty {}).unwrap();
        Setup { tcp: TcpConfig::default(), cc }
    }

    fn dctcp() -> Setup {
        Setup { tcp: TcpConfig::default(), cc: crate::cc::Config::default() }
    }

    fn sender(cfg: &Setup, bytes: u64) -> Sender {
        Sender::new(cfg, bytes, cfg.cc.build(()))
    }

    fn open(cfg: &Setup, segs: u32) -> Sender {
        let mut s = sender(cfg, segs as u64 * MSS);
        s.on_syn_sent(0);
        s.on_syn_ack();
        s
    }

    /// What one send call puts on the wire.
    fn drain(s: &mut Sender, now: Nanos) -> Vec<u32> {
        std::iter::from_fn(|| s.poll_send(now).map(|seg| seg.seq)).collect()
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

    /// `n` duplicate ACKs of `ack`, each followed by what it sends.
    fn dups(s: &mut Sender, cfg: &TcpConfig, ack: u32, n: usize, now: Nanos) -> Vec<Vec<u32>> {
        (0..n)
            .map(|_| {
                s.on_ack(cfg, now, ack, false, 0);
                drain(s, now)
            })
            .collect()
    }

    #[test]
    fn initial_window_then_slow_start() {
        let cfg = newreno();
        let mut s = open(&cfg, 100);
        assert_eq!(fill(&mut s, 100), (0..10).collect::<Vec<_>>());
        s.on_ack(&cfg, 200, 1, false, 100);
        assert_eq!(s.cwnd(), 11.0);
        assert_eq!(drain(&mut s, 200), [10, 11]);
        // Growth is per ACK: an ACK of three segments adds one.
        s.on_ack(&cfg, 210, 4, false, 100);
        assert_eq!(s.cwnd(), 12.0);
    }

    #[test]
    fn congestion_avoidance_adds_mss_squared_over_cwnd_bytes_per_ack() {
        let cfg = newreno();
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        s.ssthresh = 5.0;
        s.on_ack(&cfg, 200, 3, false, 100);
        // ⌊1400 / 10⌋ = 140 bytes, whatever the number of segments acked.
        assert!((s.cwnd() - (10.0 + 140.0 / 1400.0)).abs() < 1e-12, "{}", s.cwnd());
    }

    #[test]
    fn each_send_call_sends_at_most_two_new_segments() {
        let cfg = dctcp();
        let mut s = open(&cfg, 100);
        // The connection opens with a window of 10, but one call sends two.
        assert_eq!(drain(&mut s, 100), [0, 1]);
        assert_eq!(drain(&mut s, 100), [] as [u32; 0], "no send call until an ACK");
        // An ACK of one segment: two more (the window would allow ten).
        s.on_ack(&cfg, 200, 1, false, 100);
        assert_eq!(drain(&mut s, 200), [2, 3]);
    }

    #[test]
    fn limited_transmit_then_fast_retransmit_with_newreno_ssthresh() {
        for cfg in [newreno(), dctcp()] {
            let mut s = open(&cfg, 100);
            fill(&mut s, 100);
            // The first two duplicates each send one new segment beyond the
            // window; the third retransmits the hole.
            assert_eq!(dups(&mut s, &cfg, 0, 3, 200), [vec![10], vec![11], vec![0]]);
            // ssthresh is half of what is in flight (12 sent, less 3 that
            // left), under DCTCP too; cwnd = ssthresh + 3.
            assert_eq!(s.cwnd(), 4.5 + 3.0);
            // Each further duplicate inflates by one and runs a send call,
            // which sends once the window exceeds the 12 unacknowledged.
            let sent = dups(&mut s, &cfg, 0, 6, 210);
            assert_eq!(sent.concat(), [12]);
            assert_eq!(sent[5], [12]);
            // The ACK past the recovery point: cwnd = min(ssthresh, in flight + 1).
            s.on_ack(&cfg, 300, 12, false, 200);
            assert_eq!(s.cwnd(), 4.5, "recovery ends deflated");
            assert_eq!(s.state, CongState::Open);
        }
    }

    #[test]
    fn only_the_first_partial_ack_restarts_the_timer() {
        let cfg = newreno();
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        dups(&mut s, &cfg, 0, 3, 200);
        s.on_ack(&cfg, 1_000, 3, false, 200);
        assert_eq!(drain(&mut s, 1_000).first(), Some(&3), "the next hole goes again");
        let deadline = s.deadline;
        assert_eq!(deadline, Some(1_000 + s.rto));
        s.on_ack(&cfg, 2_000, 5, false, 200);
        assert_eq!(drain(&mut s, 2_000).first(), Some(&5));
        assert_eq!(s.deadline, deadline, "a second partial ACK leaves the timer");
    }

    #[test]
    fn timeout_goes_back_to_the_first_hole() {
        let cfg = newreno();
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        let deadline = s.deadline.unwrap();
        assert_eq!(deadline, 100 + cfg.min_rto);
        assert!(!s.on_timeout(&cfg, deadline));
        assert_eq!(s.cwnd(), 1.0);
        assert_eq!(drain(&mut s, deadline), [0]);
        assert_eq!(s.deadline, Some(deadline + 2 * cfg.min_rto), "backed off");
        // In the loss state duplicate ACKs do nothing.
        assert_eq!(dups(&mut s, &cfg, 0, 3, deadline + 10), vec![vec![] as Vec<u32>; 3]);
        s.on_ack(&cfg, deadline + 20, 1, false, deadline);
        assert_eq!(s.state, CongState::Open);
        assert_eq!(drain(&mut s, deadline + 20), [1, 2], "slow start from one segment");
    }

    #[test]
    fn no_fast_retransmit_before_the_last_recovery_point_is_acked() {
        let cfg = newreno();
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        let deadline = s.deadline.unwrap();
        s.on_timeout(&cfg, deadline);
        drain(&mut s, deadline);
        s.on_ack(&cfg, deadline + 10, 2, false, deadline);
        drain(&mut s, deadline + 10);
        // Segment 2 was lost again; 10 was sent before the timeout, so three
        // duplicates of 2 only send new data (limited transmit).
        let sent = dups(&mut s, &cfg, 2, 3, deadline + 20);
        assert!(sent.iter().all(|d| d.len() == 1 && d[0] > 2), "{sent:?}");
        assert_eq!(s.state, CongState::Disorder);
    }

    #[test]
    fn dctcp_alpha_and_reduction() {
        let cfg = dctcp();
        let mut s = open(&cfg, 1000);
        fill(&mut s, 100);
        // First ACK reaches the initial mark (0): α updates with F = 1 (ECE).
        s.on_ack(&cfg, 200, 1, true, 100);
        assert_eq!(s.alpha(), 1.0);
        assert_eq!(s.cwnd(), 5.0, "cwnd × (1 − α/2) with α = 1");
        // The first new segment after the cut (10) carries CWR; the window
        // holds until it is acknowledged.
        fill(&mut s, 200);
        assert_eq!(s.cwr_sent, None, "nothing sent: 9 in flight, window 5");
        s.on_ack(&cfg, 210, 6, false, 100);
        assert_eq!(drain(&mut s, 210), [10]);
        assert_eq!(s.cwr_sent, Some(10));
        s.on_ack(&cfg, 215, 10, false, 100);
        // The ack of 10 reached the mark set at the first update: F = 0/9.
        assert!((s.alpha() - 15.0 / 16.0).abs() < 1e-12, "{}", s.alpha());
        assert_eq!(s.cwnd(), 5.0);
        // The ACK of 10 ends CWR; its echo came while CWR held, so no second
        // cut, and the window grows again (⌊1400 / 5⌋ bytes).
        s.on_ack(&cfg, 220, 11, true, 100);
        assert_eq!(s.state, CongState::Open);
        assert!((s.cwnd() - 5.2).abs() < 1e-12, "{}", s.cwnd());
    }

    #[test]
    fn an_echo_on_a_duplicate_ack_cuts_the_window() {
        let cfg = dctcp();
        let mut s = open(&cfg, 100);
        fill(&mut s, 100);
        s.on_ack(&cfg, 200, 0, true, 100);
        assert_eq!(s.state, CongState::Cwr);
        assert_eq!(s.cwnd(), 5.0);
        assert_eq!(s.poll_send(200), Some(Segment { seq: 10, again: false, cwr: true }), "limited transmit");
        assert_eq!(s.cwr_sent, Some(10), "that segment carries CWR");
    }

    #[test]
    fn a_window_below_one_segment_sends_only_a_short_last_segment() {
        let cfg = dctcp();
        let mut s = sender(&cfg, 3 * MSS);
        s.on_syn_sent(0);
        s.on_syn_ack();
        s.cwnd = 0.6;
        assert_eq!(drain(&mut s, 100), [] as [u32; 0]);
        let mut s = sender(&cfg, 2 * MSS + 100);
        s.on_syn_sent(0);
        s.on_syn_ack();
        s.snd_nxt = 2;
        s.snd_una = 2;
        s.cwnd = 0.6;
        assert_eq!(drain(&mut s, 100), [2]);
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
    fn only_a_copy_of_the_last_segment_delivered_is_answered() {
        let mut r = Receiver::new(5);
        r.on_data(0);
        r.on_data(1);
        r.on_data(3);
        assert!(r.stale(0), "below the ACK point: dropped");
        assert!(!r.stale(1), "ends at the ACK point: answered (a duplicate ACK)");
        assert!(!r.stale(2) && !r.stale(3) && !r.stale(4));
    }

    #[test]
    fn receiver_echo_follows_ce_until_cwr_or_a_clean_segment() {
        let mut r = Receiver::new(10);
        assert!(!r.ecn_echo(true, false, false));
        assert!(r.ecn_echo(true, true, false), "CE turns the echo on");
        assert!(r.ecn_echo(false, false, false), "a retransmission leaves it");
        assert!(!r.ecn_echo(true, false, false), "a clean ECN-capable segment ends it");
        assert!(!r.ecn_echo(true, true, true), "CWR ends it, even on a CE segment");
    }

    #[test]
    fn syn_timeout_resends_the_syn() {
        let cfg = dctcp();
        let mut s = sender(&cfg, 3 * MSS);
        s.on_syn_sent(0);
        assert_eq!(s.poll_send(1), None);
        assert!(s.on_timeout(&cfg, cfg.min_rto));
    }
}
