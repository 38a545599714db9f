//! Property tests over random operation sequences (pick, complete, cancel,
//! change endpoints, let time pass) for every algorithm: no panic, active
//! counts always equal the requests actually outstanding (so never negative),
//! and picks always among the current endpoints.

use std::collections::HashMap;

use fulcrum_balance::{build, AlgorithmConfig, AlgorithmKind, Balancer, Endpoint, Outcome, Ticket, MILLISECOND};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Pick(Option<u64>),
    Complete {
        index: usize,
        latency_ms: u64,
        success: bool,
    },
    Cancel {
        index: usize,
    },
    /// Keep the endpoints whose bit is set in `mask` (ids 0..12) with these weights.
    SetEndpoints {
        mask: u16,
        weights: [u8; 12],
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<Option<u64>>().prop_map(Op::Pick),
        3 => (any::<usize>(), 0..500u64, any::<bool>())
            .prop_map(|(index, latency_ms, success)| Op::Complete { index, latency_ms, success }),
        1 => any::<usize>().prop_map(|index| Op::Cancel { index }),
        1 => (any::<u16>(), any::<[u8; 12]>()).prop_map(|(mask, weights)| Op::SetEndpoints { mask, weights }),
        1 => (0..20_000u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn config() -> impl Strategy<Value = AlgorithmConfig> {
    let plain = prop::sample::select(AlgorithmKind::all()).prop_map(|k| k.default_config());
    let bounded = prop::sample::select(vec![
        "kind = \"maglev\"\ntable_size = 251\nbounded_load = 1.1",
        "kind = \"ring-hash\"\nmin_ring_size = 64\nbounded_load = 1.0",
        "kind = \"rendezvous\"\nhash = \"murmur3\"\nbounded_load = 1.5",
        "kind = \"least-request\"\nchoices = 3\nactive_request_bias = 0.5",
        "kind = \"peak-ewma\"\ndefault_rtt = \"0s\"\nunmeasured_penalty = true",
    ])
    .prop_map(|text| toml::from_str(text).unwrap());
    prop_oneof![plain, bounded]
}

fn endpoint_set(mask: u16, weights: &[u8; 12]) -> Vec<Endpoint> {
    (0..12u64)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| Endpoint::new(i, format!("10.1.0.{i}:443")).with_weight(1.0 + f64::from(weights[i as usize] % 8)))
        .collect()
}

/// Outstanding tickets with the generation of their endpoint when picked.
struct Model {
    tickets: Vec<(Ticket, u64)>,
    /// Current generation per endpoint id; bumped when the id leaves the set.
    generation: HashMap<u64, u64>,
}

impl Model {
    fn outstanding(&self, id: u64) -> u32 {
        let gen = self.generation.get(&id).copied().unwrap_or(0);
        self.tickets.iter().filter(|(t, g)| t.endpoint().0 == id && *g == gen).count() as u32
    }
}

fn check(b: &dyn Balancer, model: &Model, now: u64) -> Result<(), TestCaseError> {
    let loads = b.loads(now);
    prop_assert_eq!(loads.len(), b.endpoints().len());
    for load in loads {
        prop_assert_eq!(load.active, model.outstanding(load.id.0), "endpoint {}", load.id.0);
        if let Some(estimate) = load.latency_estimate {
            prop_assert!(estimate.is_finite() && estimate >= 0.0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_operation_sequences_keep_the_invariants(
        config in config(),
        initial in any::<u16>(),
        weights in any::<[u8; 12]>(),
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut b = build(&config, &endpoint_set(initial, &weights), seed).unwrap();
        let mut model = Model { tickets: Vec::new(), generation: HashMap::new() };
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Pick(key) => match b.pick(now, key) {
                    Some(t) => {
                        let id = t.endpoint().0;
                        prop_assert!(b.endpoints().iter().any(|e| e.id.0 == id), "picked {id}, not a current endpoint");
                        let gen = model.generation.get(&id).copied().unwrap_or(0);
                        model.tickets.push((t, gen));
                    }
                    None => prop_assert!(b.endpoints().is_empty(), "None with endpoints present"),
                },
                Op::Complete { index, latency_ms, success } if !model.tickets.is_empty() => {
                    let (t, _) = model.tickets.swap_remove(index % model.tickets.len());
                    let latency = latency_ms * MILLISECOND;
                    let outcome = if success { Outcome::Success { latency } } else { Outcome::Failure { latency } };
                    b.on_complete(t, now, outcome);
                }
                Op::Cancel { index } if !model.tickets.is_empty() => {
                    let (t, _) = model.tickets.swap_remove(index % model.tickets.len());
                    b.on_cancel(t);
                }
                Op::SetEndpoints { mask, weights } => {
                    let next = endpoint_set(mask, &weights);
                    for e in b.endpoints() {
                        if !next.iter().any(|n| n.id == e.id) {
                            *model.generation.entry(e.id.0).or_insert(0) += 1;
                        }
                    }
                    b.set_endpoints(&next).unwrap();
                }
                Op::Advance { ms } => now += ms * MILLISECOND,
                Op::Complete { .. } | Op::Cancel { .. } => {}
            }
            check(b.as_ref(), &model, now)?;
        }
        // Settling everything leaves every count at zero.
        for (t, _) in model.tickets.drain(..) {
            b.on_complete(t, now, Outcome::Success { latency: MILLISECOND });
        }
        prop_assert!(b.loads(now).iter().all(|l| l.active == 0));
    }
}
