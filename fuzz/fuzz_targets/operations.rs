//! Random operation sequences against every balancer and the resilience
//! state machines, driven the way the proxy and the simulator drive them:
//! pick, complete, cancel, endpoint changes (valid or not), time steps,
//! results fed to the outlier detector, detector ticks, slow-start steps
//! through `routable`, retry-budget deposits and withdrawals.
//!
//! Invariants checked after every operation:
//! - a pick is among the current endpoints, and `None` only when there are none;
//! - each endpoint's active count equals the tickets outstanding for it (a
//!   ticket from before the endpoint left is ignored), estimates are finite;
//! - a rejected endpoint set changes nothing;
//! - the routable set of a valid set is itself valid (every weight finite and
//!   above zero), panics exactly below the threshold, and never lists an
//!   ejected endpoint outside panic;
//! - the detector ejects only current, un-ejected endpoints, until a time
//!   not before now, returns only ejected ones, and its state matches the
//!   changes it reported;
//! - slow-start factors lie in [floor, 1] and never fall as an endpoint ages;
//! - the retry budget never allows more retries in its window than
//!   `ratio × deposits + min_per_second × ttl`.
#![no_main]

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use arbitrary::Arbitrary;
use fulcrum_balance::{
    build, AlgorithmConfig, AlgorithmKind, Balancer, Endpoint, EndpointId, LeastRequestConfig, MaglevConfig, Outcome,
    PeakEwmaConfig, RendezvousConfig, RingHashConfig, Ticket,
};
use fulcrum_resilience::{
    routable, Change, OutlierConfig, OutlierDetector, RequestResult, RetryBudget, RetryBudgetConfig, SlowStart,
    SlowStartConfig,
};
use libfuzzer_sys::fuzz_target;

const MS: u64 = 1_000_000;
const ENDPOINTS: u64 = 12;

#[derive(Arbitrary, Debug)]
enum Algorithm {
    RoundRobin,
    Random,
    LeastRequest { choices: u8, bias: u8 },
    PeakEwma { decay_ms: u16, rtt_ms: u16, penalty_ms: u16, unmeasured: bool },
    RingHash { min_ring: u16, max_ring: u16, murmur: bool, bounded: Option<u8> },
    Maglev { table: u8, bounded: Option<u8> },
    Rendezvous { murmur: bool, bounded: Option<u8> },
}

#[derive(Arbitrary, Debug)]
struct Outlier {
    consecutive_5xx: u8,
    consecutive_gateway_failure: u8,
    interval_ms: u16,
    base_ms: u16,
    max_ms: u16,
    max_ejection_percent: u8,
    success_rate_minimum_hosts: u8,
    success_rate_request_volume: u8,
    success_rate_stdev_tenths: u8,
    failure_percentage_threshold: u8,
    failure_percentage_minimum_hosts: u8,
    failure_percentage_request_volume: u8,
}

#[derive(Arbitrary, Debug)]
struct Slow {
    window_ms: u16,
    aggression_sixteenths: u8,
    min_weight_percent: u8,
}

#[derive(Arbitrary, Debug)]
struct Budget {
    ratio_fiftieths: u8,
    min_per_second: u8,
    ttl_s: u8,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Pick(Option<u64>),
    Complete {
        index: u16,
        latency_ms: u16,
        success: bool,
    },
    Cancel {
        index: u16,
    },
    /// Configure the endpoints whose bit is set, with these weights (see [`weight`]).
    SetEndpoints {
        mask: u16,
        weights: [u8; 12],
    },
    Advance {
        ms: u16,
    },
    /// Feed a result of endpoint `endpoint % 12` to the detector.
    Record {
        endpoint: u8,
        result: u8,
    },
    Tick,
    /// Give the balancer the routable set (ejections, slow start, panic).
    Guard {
        panic_threshold: u8,
    },
    Deposit,
    Withdraw,
}

#[derive(Arbitrary, Debug)]
struct Input {
    algorithm: Algorithm,
    seed: u64,
    initial: u16,
    weights: [u8; 12],
    outlier: Outlier,
    slow: Slow,
    budget: Budget,
    ops: Vec<Op>,
}

/// A weight from a byte: mostly small integers, sometimes invalid or extreme.
fn weight(b: u8) -> f64 {
    match b {
        250 => 0.0,
        251 => f64::NAN,
        252 => f64::INFINITY,
        253 => 5e-324,
        254 => 1e300,
        255 => -1.0,
        b => 1.0 + f64::from(b % 8),
    }
}

fn endpoint_set(mask: u16, weights: &[u8; 12]) -> Vec<Endpoint> {
    (0..ENDPOINTS)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| Endpoint::new(i, format!("10.1.0.{i}:443")).with_weight(weight(weights[i as usize])))
        .collect()
}

fn valid(endpoints: &[Endpoint]) -> bool {
    endpoints.iter().all(|e| e.weight.is_finite() && e.weight > 0.0)
}

fn config(a: &Algorithm) -> AlgorithmConfig {
    let bounded = |b: &Option<u8>| b.map(|b| 1.0 + f64::from(b) / 64.0);
    let mut c = match a {
        Algorithm::RoundRobin => AlgorithmKind::ROUND_ROBIN,
        Algorithm::Random => AlgorithmKind::RANDOM,
        Algorithm::LeastRequest { .. } => AlgorithmKind::LEAST_REQUEST,
        Algorithm::PeakEwma { .. } => AlgorithmKind::PEAK_EWMA,
        Algorithm::RingHash { .. } => AlgorithmKind::RING_HASH,
        Algorithm::Maglev { .. } => AlgorithmKind::MAGLEV,
        Algorithm::Rendezvous { .. } => AlgorithmKind::RENDEZVOUS,
    }
    .default_config();
    match a {
        Algorithm::LeastRequest { choices, bias } => {
            let c = c.params_mut::<LeastRequestConfig>().expect("least request's parameters");
            c.choices = usize::from(*choices % 8);
            c.active_request_bias = f64::from(*bias) / 32.0;
        }
        Algorithm::PeakEwma { decay_ms, rtt_ms, penalty_ms, unmeasured } => {
            let c = c.params_mut::<PeakEwmaConfig>().expect("Peak-EWMA's parameters");
            c.decay = Duration::from_millis(u64::from(*decay_ms));
            c.default_rtt = Duration::from_millis(u64::from(*rtt_ms));
            c.failure_penalty = Duration::from_millis(u64::from(*penalty_ms));
            c.unmeasured_penalty = *unmeasured;
        }
        Algorithm::RingHash { min_ring, max_ring, murmur, bounded: b } => {
            let c = c.params_mut::<RingHashConfig>().expect("ring hash's parameters");
            // Small rings keep each input fast; the sizes' rules are still exercised.
            c.min_ring_size = u64::from(*min_ring % 4096);
            c.max_ring_size = u64::from(*max_ring % 8192);
            if *murmur {
                c.hash = fulcrum_balance::HashFunction::Murmur3;
            }
            c.bounded_load = bounded(b);
        }
        Algorithm::Maglev { table, bounded: b } => {
            let c = c.params_mut::<MaglevConfig>().expect("Maglev's parameters");
            c.table_size = [251, 257, 1021, 4093, 100, 2][usize::from(*table) % 6];
            c.bounded_load = bounded(b);
        }
        Algorithm::Rendezvous { murmur, bounded: b } => {
            let c = c.params_mut::<RendezvousConfig>().expect("rendezvous's parameters");
            if *murmur {
                c.hash = fulcrum_balance::HashFunction::Murmur3;
            }
            c.bounded_load = bounded(b);
        }
        Algorithm::RoundRobin | Algorithm::Random => {}
    }
    c
}

fn outlier_config(o: &Outlier) -> OutlierConfig {
    OutlierConfig {
        consecutive_5xx: u32::from(o.consecutive_5xx % 16),
        consecutive_gateway_failure: u32::from(o.consecutive_gateway_failure % 16),
        interval: Duration::from_millis(u64::from(o.interval_ms)),
        base_ejection_time: Duration::from_millis(u64::from(o.base_ms)),
        max_ejection_time: Duration::from_millis(u64::from(o.max_ms) * 4),
        max_ejection_percent: f64::from(o.max_ejection_percent % 128),
        success_rate_minimum_hosts: usize::from(o.success_rate_minimum_hosts % 16),
        success_rate_request_volume: u64::from(o.success_rate_request_volume % 32),
        success_rate_stdev_factor: f64::from(o.success_rate_stdev_tenths) / 10.0,
        failure_percentage_threshold: f64::from(o.failure_percentage_threshold),
        failure_percentage_minimum_hosts: usize::from(o.failure_percentage_minimum_hosts % 16),
        failure_percentage_request_volume: u64::from(o.failure_percentage_request_volume % 32),
    }
}

/// Outstanding tickets with the generation of their endpoint when picked.
#[derive(Default)]
struct Tickets {
    tickets: Vec<(Ticket, u64)>,
    /// Bumped when the id leaves the balancer's set.
    generation: HashMap<u64, u64>,
}

impl Tickets {
    fn outstanding(&self, id: u64) -> u32 {
        let gen = self.generation.get(&id).copied().unwrap_or(0);
        self.tickets.iter().filter(|(t, g)| t.endpoint().0 == id && *g == gen).count() as u32
    }

    /// `next` replaced the balancer's set `before`.
    fn replaced(&mut self, before: &[Endpoint], next: &[Endpoint]) {
        for e in before {
            if !next.iter().any(|n| n.id == e.id) {
                *self.generation.entry(e.id.0).or_insert(0) += 1;
            }
        }
    }
}

/// Model of the retry budget's window: (second, deposits, withdrawals).
struct BudgetModel {
    config: RetryBudgetConfig,
    seconds: VecDeque<(u64, f64, f64)>,
}

impl BudgetModel {
    fn at(&mut self, now: u64) -> &mut (u64, f64, f64) {
        let second = now / 1_000_000_000;
        let ttl = self.config.ttl.as_secs().max(1);
        while self.seconds.front().is_some_and(|s| s.0 + ttl <= second) {
            self.seconds.pop_front();
        }
        if self.seconds.back().is_none_or(|s| s.0 != second) {
            self.seconds.push_back((second, 0.0, 0.0));
        }
        self.seconds.back_mut().unwrap()
    }

    fn check(&self) {
        let ttl = self.config.ttl.as_secs().max(1) as f64;
        let deposits: f64 = self.seconds.iter().map(|s| s.1).sum();
        let withdrawn: f64 = self.seconds.iter().map(|s| s.2).sum();
        let allowed = deposits * self.config.ratio + self.config.min_per_second * ttl;
        assert!(withdrawn <= allowed + 1e-6 * allowed.max(1.0), "{withdrawn} retries, {allowed} allowed");
    }
}

fn check_balancer(b: &dyn Balancer, model: &Tickets, now: u64) {
    let loads = b.loads(now);
    assert_eq!(loads.len(), b.endpoints().len());
    for load in loads {
        assert_eq!(load.active, model.outstanding(load.id.0), "active count of endpoint {}", load.id.0);
        if let Some(estimate) = load.latency_estimate {
            assert!(estimate.is_finite() && estimate >= 0.0, "estimate {estimate}");
        }
    }
}

fuzz_target!(|input: Input| {
    let mut all = endpoint_set(input.initial, &input.weights);
    if !valid(&all) {
        return;
    }
    let Ok(mut b) = build(&config(&input.algorithm), &all, input.seed) else { return };
    let mut now = 0u64;
    let mut tickets = Tickets::default();

    let ocfg = outlier_config(&input.outlier);
    let mut detector = ocfg
        .validate()
        .ok()
        .map(|()| OutlierDetector::new(ocfg.clone(), &all.iter().map(|e| e.id).collect::<Vec<_>>(), now));
    let mut ejected: BTreeSet<u64> = BTreeSet::new();

    let scfg = SlowStartConfig {
        window: Duration::from_millis(u64::from(input.slow.window_ms)),
        aggression: f64::from(input.slow.aggression_sixteenths) / 16.0,
        min_weight_percent: f64::from(input.slow.min_weight_percent),
    };
    let slow = SlowStart::new(&scfg).ok();
    // When each endpoint joined (slow start's clock).
    let mut since: HashMap<u64, u64> = HashMap::new();

    let bcfg = RetryBudgetConfig {
        ratio: f64::from(input.budget.ratio_fiftieths) / 50.0,
        min_per_second: f64::from(input.budget.min_per_second),
        ttl: Duration::from_secs(u64::from(input.budget.ttl_s % 30)),
    };
    let mut budget = RetryBudget::new(bcfg.clone())
        .ok()
        .map(|budget| (budget, BudgetModel { config: bcfg, seconds: VecDeque::new() }));

    for op in input.ops {
        match op {
            Op::Pick(key) => match b.pick(now, key) {
                Some(t) => {
                    let id = t.endpoint().0;
                    assert!(b.endpoints().iter().any(|e| e.id.0 == id), "picked {id}, not a current endpoint");
                    let gen = tickets.generation.get(&id).copied().unwrap_or(0);
                    tickets.tickets.push((t, gen));
                }
                None => assert!(b.endpoints().is_empty(), "no pick with endpoints present"),
            },
            Op::Complete { index, latency_ms, success } => {
                if !tickets.tickets.is_empty() {
                    let (t, _) = tickets.tickets.swap_remove(usize::from(index) % tickets.tickets.len());
                    let latency = u64::from(latency_ms) * MS;
                    let outcome = if success { Outcome::Success { latency } } else { Outcome::Failure { latency } };
                    b.on_complete(t, now, outcome);
                }
            }
            Op::Cancel { index } => {
                if !tickets.tickets.is_empty() {
                    let (t, _) = tickets.tickets.swap_remove(usize::from(index) % tickets.tickets.len());
                    b.on_cancel(t);
                }
            }
            Op::SetEndpoints { mask, weights } => {
                let next = endpoint_set(mask, &weights);
                let before = b.endpoints().to_vec();
                match b.set_endpoints(&next) {
                    Ok(()) => {
                        assert!(valid(&next), "an invalid set was accepted");
                        tickets.replaced(&before, &next);
                        for e in &next {
                            if !all.iter().any(|a| a.id == e.id) {
                                since.insert(e.id.0, now);
                            }
                        }
                        all = next;
                        if let Some(d) = &mut detector {
                            d.set_endpoints(&all.iter().map(|e| e.id).collect::<Vec<_>>());
                            ejected.retain(|id| all.iter().any(|e| e.id.0 == *id));
                        }
                    }
                    Err(e) => {
                        // A Maglev table holds at most table_size endpoints.
                        let too_many = matches!(e, fulcrum_balance::BuildError::TableTooSmall { .. });
                        assert!(!valid(&next) || too_many, "a valid set was rejected: {e}");
                        assert_eq!(b.endpoints(), &before[..], "a rejected set changed the balancer");
                    }
                }
            }
            Op::Advance { ms } => now += u64::from(ms) * MS,
            Op::Record { endpoint, result } => {
                if let Some(d) = &mut detector {
                    let id = u64::from(endpoint) % ENDPOINTS;
                    let result = [RequestResult::Success, RequestResult::ServerError, RequestResult::GatewayFailure]
                        [usize::from(result % 3)];
                    let change = d.record(EndpointId(id), now, result);
                    if let Some(change) = change {
                        apply_change(change, &all, &mut ejected, now);
                        assert!(d.ejected_count() <= d.max_ejections(), "ejected beyond the cap");
                    }
                    check_detector(d, &all, &ejected);
                }
            }
            Op::Tick => {
                if let Some(d) = &mut detector {
                    for change in d.tick(now) {
                        if matches!(change, Change::Returned { id } if all.iter().any(|e| e.id == id)) {
                            since.insert(change_id(change), now);
                        }
                        apply_change(change, &all, &mut ejected, now);
                    }
                    check_detector(d, &all, &ejected);
                }
            }
            Op::Guard { panic_threshold } => {
                let threshold = f64::from(panic_threshold % 101);
                let r = routable(
                    &all,
                    |e| !ejected.contains(&e.id.0),
                    |e| match (&slow, since.get(&e.id.0)) {
                        (Some(s), Some(&t)) => s.factor(now - t),
                        _ => 1.0,
                    },
                    threshold,
                );
                let healthy = all.iter().filter(|e| !ejected.contains(&e.id.0)).count();
                assert_eq!(r.panic, !all.is_empty() && (healthy as f64) < all.len() as f64 * threshold / 100.0);
                if !r.panic {
                    assert!(r.endpoints.iter().all(|e| !ejected.contains(&e.id.0)), "an ejected endpoint is routable");
                    assert_eq!(r.endpoints.len(), healthy);
                }
                assert!(valid(&r.endpoints), "routable made an invalid weight: {:?}", r.endpoints);
                let before = b.endpoints().to_vec();
                b.set_endpoints(&r.endpoints).expect("a routable set is accepted");
                tickets.replaced(&before, &r.endpoints);
            }
            Op::Deposit => {
                if let Some((budget, model)) = &mut budget {
                    budget.deposit(now);
                    model.at(now).1 += 1.0;
                }
            }
            Op::Withdraw => {
                if let Some((budget, model)) = &mut budget {
                    assert!(budget.balance(now).is_finite());
                    let entry = model.at(now);
                    if budget.try_withdraw(now) {
                        entry.2 += 1.0;
                        model.check();
                    }
                }
            }
        }
        check_balancer(b.as_ref(), &tickets, now);
        if let Some(s) = &slow {
            for age in [0, now / 3, now, now.saturating_mul(2)] {
                let (f, later) = (s.factor(age), s.factor(age.saturating_add(MS)));
                let floor = scfg.min_weight_percent / 100.0;
                assert!((floor..=1.0).contains(&f) && f <= later, "factor({age}) = {f}, then {later}");
            }
        }
    }
    // Settling everything leaves every count at zero.
    for (t, _) in tickets.tickets.drain(..) {
        b.on_complete(t, now, Outcome::Success { latency: MS });
    }
    assert!(b.loads(now).iter().all(|l| l.active == 0));
});

fn change_id(change: Change) -> u64 {
    match change {
        Change::Ejected { id, .. } | Change::Returned { id } => id.0,
    }
}

/// Follow one reported change in the model of the ejected set. The detector's
/// own state is compared after a whole list of changes (a tick may return an
/// endpoint and eject it again at once, on its interval's figures).
fn apply_change(change: Change, all: &[Endpoint], ejected: &mut BTreeSet<u64>, now: u64) {
    match change {
        Change::Ejected { id, until, .. } => {
            assert!(all.iter().any(|e| e.id == id), "ejected {id:?}, not an endpoint");
            assert!(until >= now, "ejected until {until}, before now {now}");
            assert!(ejected.insert(id.0), "ejected {id:?} twice");
        }
        Change::Returned { id } => {
            assert!(ejected.remove(&id.0), "returned {id:?}, which was not ejected");
        }
    }
}

fn check_detector(d: &OutlierDetector, all: &[Endpoint], ejected: &BTreeSet<u64>) {
    for e in all {
        assert_eq!(d.is_ejected(e.id), ejected.contains(&e.id.0), "ejection state of {:?}", e.id);
    }
    assert_eq!(d.ejected_count(), ejected.len(), "ejected count");
}
