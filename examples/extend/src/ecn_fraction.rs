//! DCTCP as outside congestion control (`tcp.congestion = { kind =
//! "ecn-fraction", g = … }`): α, a moving average of the share of segments
//! acknowledged with ECE, updated once per window of data; an ECN echo
//! cuts the window by α/2; NewReno's growth, none while the cut is in
//! force. The same algorithm as the built-in `dctcp`.

use fulcrum_fabric::cc::{CongState, CongestionControl, CongestionType, NewReno, ParamError, Window};
use serde::{Deserialize, Serialize};

/// The gain of α's moving average.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gain {
    pub g: f64,
}

/// One flow's state.
#[derive(Debug)]
pub struct EcnFraction {
    g: f64,
    alpha: f64,
    acked: u64,
    marked: u64,
    /// The ACK that ends the current window of data.
    window_end: u32,
}

impl CongestionType for EcnFraction {
    const NAME: &'static str = "ecn-fraction";
    type Params = Gain;

    fn check(p: &Gain) -> Result<(), ParamError> {
        if p.g > 0.0 && p.g <= 1.0 {
            return Ok(());
        }
        Err(ParamError::new("g", format!("must be within (0, 1] (found {})", p.g)))
    }

    fn build(p: &Gain) -> Box<dyn CongestionControl> {
        Box::new(EcnFraction { g: p.g, alpha: 1.0, acked: 0, marked: 0, window_end: 0 })
    }
}

impl CongestionControl for EcnFraction {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// NewReno's in fast recovery (as ns-3 does), else the cut window.
    fn ssthresh(&self, w: &Window) -> f64 {
        match w.state {
            CongState::Recovery => (w.pipe / 2.0).max(2.0),
            _ => (w.cwnd * (1.0 - self.alpha / 2.0)).max(w.pipe / 2.0),
        }
    }

    fn cut(&mut self, w: &Window) -> f64 {
        w.cwnd * (1.0 - self.alpha / 2.0)
    }

    fn increase(&mut self, w: &Window, acked: u32) -> f64 {
        if w.state == CongState::Cwr {
            return w.cwnd;
        }
        NewReno::grow(w, acked)
    }

    fn pkts_acked(&mut self, w: &Window, n: u32, ece: bool, ack: u32) {
        self.acked += u64::from(n);
        self.marked += if ece { u64::from(n) } else { 0 };
        if ack >= self.window_end {
            self.window_end = w.high;
            let fraction = if self.acked == 0 { 0.0 } else { self.marked as f64 / self.acked as f64 };
            self.alpha = (1.0 - self.g) * self.alpha + self.g * fraction;
            (self.acked, self.marked) = (0, 0);
        }
    }

    fn alpha(&self) -> f64 {
        self.alpha
    }
}
