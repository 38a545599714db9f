//! Least request, as Envoy's `LEAST_REQUEST` policy (with distinct choices).
//!
//! Equal weights: draw `choices` distinct endpoints at random (power of *d*
//! choices, Mitzenmacher 2001; d = 2 by default) and keep the one with the
//! fewest active requests, ties broken at random. Envoy draws with
//! replacement; distinct draws, as tower, Linkerd and Finagle make them,
//! never waste a choice on the same endpoint twice.
//!
//! Unequal weights: Envoy's rule. An earliest-deadline-first rotation in
//! which an endpoint's effective weight, computed when it is re-inserted
//! after a pick, is `weight / (active + 1)^bias` (`active_request_bias`,
//! default 1.0; bias 0 is plain weighted round robin).

use crate::edf::Edf;
use crate::endpoints::EndpointTable;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, Nanos, Outcome, Rng, Ticket};

/// Power of *d* choices on active requests; EDF on weight/(active+1)^bias
/// when weights differ.
#[derive(Debug, Clone)]
pub struct LeastRequest {
    table: EndpointTable<()>,
    choices: usize,
    bias: f64,
    weighted: Option<Edf>,
    rng: Rng,
    scratch: Vec<usize>,
}

/// Two distinct uniform slots of `0..n` (`n` ≥ 2).
#[inline]
pub(crate) fn two_distinct(rng: &mut Rng, n: usize) -> (usize, usize) {
    let a = rng.below(n as u64) as usize;
    let mut b = rng.below(n as u64 - 1) as usize;
    if b >= a {
        b += 1;
    }
    (a, b)
}

/// `d` distinct uniform slots of `0..n` into `out` (Floyd's algorithm).
fn distinct(rng: &mut Rng, n: usize, d: usize, out: &mut Vec<usize>) {
    out.clear();
    for j in n - d..n {
        let t = rng.below(j as u64 + 1) as usize;
        out.push(if out.contains(&t) { j } else { t });
    }
}

impl LeastRequest {
    /// A balancer drawing `choices` (≥ 1) candidates per pick, with
    /// `active_request_bias` (≥ 0) for unequal weights.
    pub fn new(
        endpoints: &[Endpoint],
        choices: usize,
        active_request_bias: f64,
        seed: u64,
    ) -> Result<Self, BuildError> {
        if choices == 0 {
            return Err(BuildError::InvalidParameter {
                field: "choices",
                value: choices.to_string(),
                expected: "an integer of at least 1 (2 is the usual choice)",
            });
        }
        if !(active_request_bias.is_finite() && active_request_bias >= 0.0) {
            return Err(BuildError::InvalidParameter {
                field: "active_request_bias",
                value: active_request_bias.to_string(),
                expected: "a finite number ≥ 0 (1.0 is the default)",
            });
        }
        let table = EndpointTable::new(endpoints, |_| ())?;
        let mut lr = LeastRequest {
            table,
            choices,
            bias: active_request_bias,
            weighted: None,
            rng: Rng::new(seed),
            scratch: Vec::with_capacity(choices),
        };
        lr.rebuild();
        Ok(lr)
    }

    fn rebuild(&mut self) {
        self.weighted = if self.table.uniform_weights() {
            None
        } else {
            let table = &self.table;
            let bias = self.bias;
            Some(Edf::new((0..table.len()).map(|s| effective_weight(table, s, bias)), &mut self.rng))
        };
    }

    fn least_of_choices(&mut self) -> usize {
        let n = self.table.len();
        let table = &self.table;
        let active = |slot: usize| table.active(slot);
        if n == 1 || self.choices == 1 {
            return self.rng.below(n as u64) as usize;
        }
        if self.choices == 2 {
            let (a, b) = two_distinct(&mut self.rng, n);
            return match active(a).cmp(&active(b)) {
                std::cmp::Ordering::Less => a,
                std::cmp::Ordering::Greater => b,
                // The draw order is random, so taking the first is a fair coin.
                std::cmp::Ordering::Equal => a,
            };
        }
        distinct(&mut self.rng, n, self.choices.min(n), &mut self.scratch);
        let mut best = self.scratch[0];
        let mut ties = 1;
        for &c in &self.scratch[1..] {
            if active(c) < active(best) {
                best = c;
                ties = 1;
            } else if active(c) == active(best) {
                // Reservoir sampling keeps each tied candidate with equal chance.
                ties += 1;
                if self.rng.below(ties) == 0 {
                    best = c;
                }
            }
        }
        best
    }
}

fn effective_weight(table: &EndpointTable<()>, slot: usize, bias: f64) -> f64 {
    let load = table.active(slot) as f64 + 1.0;
    let w = table.weight(slot);
    if bias == 1.0 {
        w / load
    } else {
        w / load.powf(bias)
    }
}

impl Balancer for LeastRequest {
    fn name(&self) -> &'static str {
        "least-request"
    }

    fn pick(&mut self, _now: Nanos, _key: Option<u64>) -> Option<Ticket> {
        if self.table.is_empty() {
            return None;
        }
        let slot = match &mut self.weighted {
            None => self.least_of_choices(),
            Some(edf) => {
                let table = &self.table;
                let bias = self.bias;
                edf.next(|s| effective_weight(table, s, bias))?
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
        self.table.replace(endpoints, |_| ())?;
        self.rebuild();
        Ok(())
    }

    fn endpoints(&self) -> &[Endpoint] {
        self.table.endpoints()
    }

    fn loads(&self, _now: Nanos) -> Vec<EndpointLoad> {
        self.table.loads()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(n: u64) -> Vec<Endpoint> {
        (0..n).map(|i| Endpoint::new(i, format!("e{i}"))).collect()
    }

    #[test]
    fn two_distinct_never_repeats_and_is_uniform() {
        let mut rng = Rng::new(1);
        let mut counts = [0u32; 5];
        for _ in 0..50_000 {
            let (a, b) = two_distinct(&mut rng, 5);
            assert_ne!(a, b);
            counts[a] += 1;
            counts[b] += 1;
        }
        assert!(counts.iter().all(|&c| (19_000..21_000).contains(&c)), "{counts:?}");
    }

    #[test]
    fn floyd_draws_distinct() {
        let mut rng = Rng::new(2);
        let mut out = Vec::new();
        for _ in 0..1000 {
            distinct(&mut rng, 6, 4, &mut out);
            let mut s = out.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 4);
            assert!(s.iter().all(|&x| x < 6));
        }
    }

    #[test]
    fn prefers_the_endpoint_with_fewer_active() {
        // Endpoint 0 alone takes 5 requests; once endpoint 1 joins, both are
        // always drawn, so every further pick must go to endpoint 1 until it catches up.
        let mut lr = LeastRequest::new(&eps(1), 2, 1.0, 9).unwrap();
        let held: Vec<_> = (0..5).map(|_| lr.pick(0, None).unwrap()).collect();
        lr.set_endpoints(&eps(2)).unwrap();
        assert_eq!(lr.loads(0)[0].active, held.len() as u32);
        let mut others = Vec::new();
        for _ in 0..5 {
            let t = lr.pick(0, None).unwrap();
            assert_eq!(t.endpoint().0, 1);
            others.push(t);
        }
    }

    #[test]
    fn weighted_case_discounts_busy_endpoints() {
        let e = vec![Endpoint::new(0, "a").with_weight(2.0), Endpoint::new(1, "b").with_weight(1.0)];
        let mut lr = LeastRequest::new(&e, 2, 1.0, 3).unwrap();
        // Hold everything picked: the heavy endpoint's effective weight falls
        // as its active count grows, so the light one gets a fair share of the backlog.
        let mut counts = [0u32; 2];
        let mut held = Vec::new();
        for _ in 0..300 {
            let t = lr.pick(0, None).unwrap();
            counts[t.endpoint().0 as usize] += 1;
            held.push(t);
        }
        assert!(counts[1] > 100, "{counts:?}");
    }

    #[test]
    fn invalid_parameters_are_named() {
        let err = LeastRequest::new(&eps(2), 0, 1.0, 0).unwrap_err();
        assert!(err.to_string().contains("choices"), "{err}");
        let err = LeastRequest::new(&eps(2), 2, -1.0, 0).unwrap_err();
        assert!(err.to_string().contains("active_request_bias"), "{err}");
    }
}
