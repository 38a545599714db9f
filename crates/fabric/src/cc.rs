//! Congestion control of the senders ([`crate::tcp::Sender`]), and the
//! registry that names the algorithms a scenario's `tcp.congestion` table
//! can choose.
//!
//! The split follows ns-3's `TcpCongestionOps`: the sender keeps the
//! connection's state machine (windows, recovery, CWR, timeouts; see
//! [`crate::tcp`]) and asks its controller ([`CongestionControl`], one
//! object per flow, owning that flow's state) for the slow-start threshold
//! after a congestion event ([`CongestionControl::ssthresh`]), the window
//! after an ECN echo ([`CongestionControl::cut`]), the window after an ACK
//! of new data ([`CongestionControl::increase`]), and tells it of every
//! ACK ([`CongestionControl::pkts_acked`]). Windows count segments.
//!
//! Adding an algorithm, here or in another crate: a type implementing
//! [`CongestionControl`], and a [`CongestionType`] giving its name (`kind`),
//! its parameters (the other keys, read with serde and checked by
//! [`CongestionType::check`]) and its constructor, added with [`register`].
//! The built-ins ([`BUILT_IN`]) are NewReno and DCTCP, as ns3-ecn-sharp's
//! `TcpNewReno` (`tcp-congestion-ops.cc`) and `TcpDCTCP` (`tcp-dctcp.cc`).

use std::fmt;

use fulcrum_balance::Empty;
use fulcrum_config::registry::{Extends, Factory, Kind, Registry, Typed};
pub use fulcrum_config::registry::{NameTaken, ParamError, Params};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// ns-3's congestion states (`TcpSocketState::TcpCongState_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CongState {
    Open,
    /// One or two duplicate ACKs (or more that could not start a recovery).
    Disorder,
    /// The window was cut for an ECN echo.
    Cwr,
    /// Fast recovery.
    Recovery,
    /// After a retransmission timeout, until new data is acknowledged.
    Loss,
}

/// What a controller sees of its sender, in segments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub cwnd: f64,
    pub ssthresh: f64,
    /// ns-3's `BytesInFlight`: sent and unacknowledged, less the segments
    /// duplicate ACKs say have left, plus retransmissions.
    pub pipe: f64,
    /// The state (during a congestion event: the one it enters).
    pub state: CongState,
    /// One past the highest segment sent.
    pub high: u32,
    /// Payload bytes per segment.
    pub mss: u32,
}

/// One flow's congestion controller; see the module documentation.
pub trait CongestionControl: Send + fmt::Debug {
    /// Name as written in a scenario.
    fn name(&self) -> &'static str;

    /// The slow-start threshold after a congestion event: an ECN echo
    /// (state `Cwr`), three duplicate ACKs (`Recovery`) or a timeout
    /// (`Loss`). NewReno's by default: half the data in flight, at least 2.
    fn ssthresh(&self, w: &Window) -> f64 {
        (w.pipe / 2.0).max(2.0)
    }

    /// The window after an ECN echo (asked after [`Self::ssthresh`]):
    /// halved, at least one segment, by default.
    fn cut(&mut self, w: &Window) -> f64 {
        (w.cwnd / 2.0).max(1.0)
    }

    /// The window after an ACK of `acked` new segments: NewReno's growth
    /// ([`NewReno::grow`]) by default.
    fn increase(&mut self, w: &Window, acked: u32) -> f64 {
        NewReno::grow(w, acked)
    }

    /// An ACK arrived (ns-3's `PktsAcked`): it counts `n` segments, up to
    /// the cumulative `ack`, and echoed congestion if `ece`.
    fn pkts_acked(&mut self, _w: &Window, _n: u32, _ece: bool, _ack: u32) {}

    /// The congestion estimate a trace line shows (DCTCP's α; 1 unless
    /// the algorithm keeps one).
    fn alpha(&self) -> f64 {
        1.0
    }
}

/// An algorithm that can be named in a scenario's `tcp.congestion` table.
pub trait CongestionType: 'static {
    /// The name, as `kind = "…"`.
    const NAME: &'static str;
    /// The other keys of the table (`#[serde(deny_unknown_fields)]`).
    type Params: Serialize + DeserializeOwned + Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    /// Check the parameters (the first bad one, named by its key).
    fn check(_params: &Self::Params) -> Result<(), ParamError> {
        Ok(())
    }

    /// The controller of one flow (each flow gets its own).
    fn build(params: &Self::Params) -> Box<dyn CongestionControl>;
}

/// The kind of the algorithms: a [`CongestionType`] configured by a
/// `tcp.congestion` table builds one flow's [`CongestionControl`].
pub struct Congestion;

impl Kind for Congestion {
    type Output = Box<dyn CongestionControl>;
    type Context<'a> = ();
    const KEY: &'static str = "kind";
    const WHAT: &'static str = "congestion control";

    fn registry() -> &'static Registry<dyn Factory<Congestion>> {
        &ALGORITHMS
    }

    /// DCTCP with g = 1/16.
    fn default_config() -> Config {
        Config::new::<Dctcp>(DctcpParams::default()).unwrap_or_else(|_| unreachable!("DCTCP's default g is valid"))
    }
}

impl<C: CongestionType> Extends<C> for Congestion {
    const NAME: &'static str = C::NAME;
    type Params = C::Params;

    fn check(params: &C::Params) -> Result<(), ParamError> {
        C::check(params)
    }

    fn build(params: &C::Params, (): ()) -> Box<dyn CongestionControl> {
        C::build(params)
    }
}

/// The built-in algorithms.
pub const BUILT_IN: [&dyn Factory<Congestion>; 2] =
    [&Typed::<Congestion, Dctcp>::NEW, &Typed::<Congestion, NewReno>::NEW];

static ALGORITHMS: Registry<dyn Factory<Congestion>> = Registry::new(&BUILT_IN);

/// Add `C` to the algorithms a scenario can name.
pub fn register<C: CongestionType>() -> Result<(), NameTaken> {
    Typed::<Congestion, C>::register()
}

/// Every algorithm: the built-ins, then the registered ones.
pub fn algorithms() -> Vec<&'static dyn Factory<Congestion>> {
    ALGORITHMS.all()
}

/// An algorithm and its parameters, as a `tcp.congestion` table gives them
/// (`kind` and the algorithm's keys); [`Config::build`] makes a new flow's
/// controller with `()`.
pub type Config = fulcrum_config::registry::Config<Congestion>;

/// NewReno (`kind = "new-reno"`, no parameters): every default of
/// [`CongestionControl`].
#[derive(Clone, Copy, Debug)]
pub struct NewReno;

impl NewReno {
    /// NewReno's growth for an ACK of `n` segments: growth is per ACK, not
    /// per segment acknowledged: slow start adds one segment, congestion
    /// avoidance MSS²/cwnd bytes (at least one byte).
    pub fn grow(w: &Window, mut n: u32) -> f64 {
        let mut cwnd = w.cwnd;
        if cwnd < w.ssthresh && n >= 1 {
            cwnd += 1.0;
            n -= 1;
        }
        if cwnd >= w.ssthresh && n > 0 {
            let mss = w.mss as f64;
            cwnd += (mss / cwnd).floor().max(1.0) / mss;
        }
        cwnd
    }
}

impl CongestionType for NewReno {
    const NAME: &'static str = "new-reno";
    type Params = Empty;

    fn build(_: &Empty) -> Box<dyn CongestionControl> {
        Box::new(NewReno)
    }
}

impl CongestionControl for NewReno {
    fn name(&self) -> &'static str {
        Self::NAME
    }
}

/// DCTCP's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DctcpParams {
    /// The gain g of α's moving average, in (0, 1].
    #[serde(default = "sixteenth")]
    pub g: f64,
}

fn sixteenth() -> f64 {
    1.0 / 16.0
}

impl Default for DctcpParams {
    fn default() -> Self {
        DctcpParams { g: sixteenth() }
    }
}

/// DCTCP (`kind = "dctcp"`): α, the share of segments acknowledged with
/// ECE, is counted on every ACK (a duplicate counts one); when an ACK
/// reaches the highest segment sent at the previous update,
/// α ← (1 − g)·α + g·F, α starting at 1. An ECN echo sets ssthresh to the
/// larger of cwnd·(1 − α/2) and half the data in flight (NewReno's rule in
/// recovery, which ns-3 keeps there) and cuts cwnd to cwnd·(1 − α/2); the
/// window does not grow in CWR.
#[derive(Clone, Copy, Debug)]
pub struct Dctcp {
    g: f64,
    alpha: f64,
    acked: u64,
    acked_ece: u64,
    /// The ACK that triggers the next update of α.
    mark: u32,
}

impl CongestionType for Dctcp {
    const NAME: &'static str = "dctcp";
    type Params = DctcpParams;

    fn check(p: &DctcpParams) -> Result<(), ParamError> {
        if p.g > 0.0 && p.g <= 1.0 {
            Ok(())
        } else {
            Err(ParamError::new("g", format!("must be within (0, 1] (found {})", p.g)))
        }
    }

    fn build(p: &DctcpParams) -> Box<dyn CongestionControl> {
        Box::new(Dctcp { g: p.g, alpha: 1.0, acked: 0, acked_ece: 0, mark: 0 })
    }
}

impl CongestionControl for Dctcp {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn ssthresh(&self, w: &Window) -> f64 {
        let half = w.pipe / 2.0;
        if w.state == CongState::Recovery {
            half.max(2.0)
        } else {
            (w.cwnd * (1.0 - self.alpha / 2.0)).max(half)
        }
    }

    fn cut(&mut self, w: &Window) -> f64 {
        w.cwnd * (1.0 - self.alpha / 2.0)
    }

    fn increase(&mut self, w: &Window, acked: u32) -> f64 {
        if w.state == CongState::Cwr {
            w.cwnd
        } else {
            NewReno::grow(w, acked)
        }
    }

    fn pkts_acked(&mut self, w: &Window, n: u32, ece: bool, ack: u32) {
        self.acked += n as u64;
        if ece {
            self.acked_ece += n as u64;
        }
        if ack >= self.mark {
            self.mark = w.high;
            let f = if self.acked == 0 { 0.0 } else { self.acked_ece as f64 / self.acked as f64 };
            self.alpha = (1.0 - self.g) * self.alpha + self.g * f;
            self.acked = 0;
            self.acked_ece = 0;
        }
    }

    fn alpha(&self) -> f64 {
        self.alpha
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn the_built_ins_are_named_and_checked() {
        let names: Vec<&str> = algorithms().iter().map(|a| a.name()).collect();
        assert_eq!(names, ["dctcp", "new-reno"]);
        assert_eq!(Config::from_table(table("kind = \"newreno\"")).unwrap().build(()).name(), "new-reno");
        let dctcp = Config::from_table(table("kind = \"dctcp\"\ng = 0.125")).unwrap();
        assert_eq!(dctcp.params::<DctcpParams>(), Some(&DctcpParams { g: 0.125 }));
        assert_eq!(Config::from_table(table("kind = \"dctcp\"")).unwrap(), Config::default());
        let err = Config::from_table(table("kind = \"dctcp\"\ng = 1.5")).unwrap_err();
        assert_eq!((err.field.as_str(), err.message.as_str()), ("g", "must be within (0, 1] (found 1.5)"));
        let err = Config::from_table(table("kind = \"cubic\"")).unwrap_err();
        assert!(err.field == "kind" && err.message.contains("dctcp, new-reno"), "{err:?}");
    }

    #[test]
    fn newreno_grows_by_a_segment_per_ack_then_by_mss_squared_over_cwnd() {
        let w = Window { cwnd: 10.0, ssthresh: 5.0, pipe: 10.0, state: CongState::Open, high: 10, mss: 1400 };
        // ⌊1400 / 10⌋ = 140 bytes, whatever the number of segments acked.
        assert!((NewReno::grow(&w, 3) - (10.0 + 140.0 / 1400.0)).abs() < 1e-12);
        assert_eq!(NewReno::grow(&Window { ssthresh: 64.0, ..w }, 3), 11.0);
    }
}
