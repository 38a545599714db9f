//! Simulator throughput: simulated requests per second of one run of the
//! seed-004 50k configuration (50,000 requests, closed loop) per algorithm,
//! and of the seed-000 scenario (first-contact delays, open loop).
//! The whole-scenario wall time (3 M requests) is `bench/sim-speed.sh`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fulcrum_sim::{run_once, Scenario};

fn load(name: &str) -> Scenario {
    Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name)).unwrap()
}

fn bench(c: &mut Criterion) {
    for name in ["seed-004-50k.toml", "seed-000.toml"] {
        let scenario = load(name);
        let mut group = c.benchmark_group(scenario.name.clone());
        group.sample_size(20);
        group.throughput(Throughput::Elements(scenario.total_requests().unwrap()));
        for config in &scenario.algorithms {
            group.bench_function(config.kind().name(), |b| {
                b.iter(|| run_once(&scenario, config, 1, None).unwrap().requests)
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
