//! Least request with two choices, as an outside algorithm: draw two
//! distinct endpoints and keep the one with fewer requests in flight (the
//! first drawn on a tie). The same draws as the built-in `least-request`
//! with equal weights, so the same seed gives the same picks.

use fulcrum_balance::{
    Algorithm, Balancer, BuildError, Endpoint, EndpointLoad, EndpointTable, Nanos, Outcome, Rng, Ticket,
};
use serde::{Deserialize, Serialize};

/// The algorithm; `kind = "two-choices"`.
#[derive(Debug)]
pub struct TwoChoices {
    table: EndpointTable<()>,
    rng: Rng,
}

/// Its parameters: none, but unknown keys are still rejected.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TwoChoicesConfig {}

impl Algorithm for TwoChoices {
    const NAME: &'static str = "two-choices";
    const ALIASES: &'static [&'static str] = &["p2c-example"];
    type Config = TwoChoicesConfig;

    fn build(_: &TwoChoicesConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(TwoChoices { table: EndpointTable::new(endpoints, |_| ())?, rng: Rng::new(seed) }))
    }
}

impl Balancer for TwoChoices {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn pick(&mut self, _now: Nanos, _key: Option<u64>) -> Option<Ticket> {
        let n = self.table.len() as u64;
        let slot = match n {
            0 => return None,
            1 => self.rng.below(1) as usize,
            _ => {
                let a = self.rng.below(n) as usize;
                let mut b = self.rng.below(n - 1) as usize;
                if b >= a {
                    b += 1;
                }
                if self.table.active(b) < self.table.active(a) {
                    b
                } else {
                    a
                }
            }
        };
        Some(self.table.issue(slot))
    }

    fn on_complete(&mut self, ticket: Ticket, _now: Nanos, _outcome: Outcome) {
        self.table.settle(&ticket);
    }

    fn on_cancel(&mut self, ticket: Ticket) {
        self.table.settle(&ticket);
    }

    fn set_endpoints(&mut self, endpoints: &[Endpoint]) -> Result<(), BuildError> {
        self.table.replace(endpoints, |_| ())
    }

    fn endpoints(&self) -> &[Endpoint] {
        self.table.endpoints()
    }

    fn loads(&self, _now: Nanos) -> Vec<EndpointLoad> {
        self.table.loads()
    }
}
