//! Criterion benchmarks of the algorithm core: pick + complete for every
//! algorithm at 10, 100 and 1,000 endpoints, and table builds for Maglev and
//! ring hash. A bare RNG draw is measured alongside as the baseline that
//! `bench/algorithms-table` divides by, since this machine is shared and
//! absolute figures drift between runs.
//!
//! Run: `cargo bench -p fulcrum-balance --bench algorithms`, then
//! `bench/algorithms-table` for the table in `docs/results/algorithms-speed.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fulcrum_balance::hash::xxh64;
use fulcrum_balance::{build, AlgorithmKind, Endpoint, HashFunction, Maglev, Outcome, RingHash, Rng};

fn endpoints(n: u64) -> Vec<Endpoint> {
    (0..n).map(|i| Endpoint::new(i, format!("10.0.{}.{}:8080", i / 250, i % 250 + 1))).collect()
}

fn pick_complete(c: &mut Criterion) {
    let keys: Vec<u64> = (0..4096u64).map(|i| xxh64(&i.to_le_bytes(), 0)).collect();
    let mut group = c.benchmark_group("pick_complete");
    for n in [10u64, 100, 1000] {
        group.bench_with_input(BenchmarkId::new("baseline-rng", n), &n, |b, &n| {
            let mut rng = Rng::new(1);
            b.iter(|| black_box(rng.below(n)));
        });
        for kind in AlgorithmKind::all() {
            let mut lb = build(&kind.default_config(), &endpoints(n), 1).unwrap();
            let mut i = 0usize;
            let mut now = 0u64;
            group.bench_with_input(BenchmarkId::new(kind.name(), n), &n, |b, _| {
                b.iter(|| {
                    i = (i + 1) & 4095;
                    now += 1_000;
                    let t = lb.pick(now, Some(keys[i])).unwrap();
                    // Latency varies with the key so latency-aware balancers do real work.
                    let latency = 1_000_000 + (keys[i] & 0xfffff);
                    lb.on_complete(black_box(t), now, Outcome::Success { latency });
                });
            });
        }
    }
    group.finish();
}

fn table_build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    group.sample_size(20);
    for n in [100u64, 1000] {
        let eps = endpoints(n);
        group.bench_with_input(BenchmarkId::new("maglev-65537", n), &eps, |b, eps| {
            b.iter(|| Maglev::new(black_box(eps), 65537, None, 0).unwrap());
        });
        group.bench_with_input(BenchmarkId::new("ring-hash-1024", n), &eps, |b, eps| {
            b.iter(|| RingHash::new(black_box(eps), 1024, 8_388_608, HashFunction::Xxhash, None, 0).unwrap());
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = pick_complete, table_build
}
criterion_main!(benches);
