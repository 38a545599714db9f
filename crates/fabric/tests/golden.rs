//! The shipped fabric scenarios' outputs, pinned: a short run of every
//! scenario in `scenarios/fabric/` (and of `lb-4x4x8-symmetric` under each
//! routing scheme), its JSON report (wall time zeroed) digested with xxh64
//! and compared with the line committed in `tests/golden/fabric.txt`. Each
//! line also shows a few headline figures of the run, so that a diff of the
//! file says which runs moved and roughly how.
//!
//! A change that is meant to move the figures (a model change) regenerates
//! the file with
//!
//! ```text
//! FULCRUM_BLESS=1 cargo test -p fulcrum-fabric --test golden
//! ```
//!
//! and its commit says why they moved. A scenario added to
//! `scenarios/fabric/` needs its shortened length in [`SHORT`] (the test
//! fails until it has one).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use fulcrum_fabric::report::Report;
use fulcrum_fabric::Scenario;

/// Every shipped scenario and the simulated time of its short run. Poisson
/// workloads stop launching flows at two thirds of it, so that most flows
/// finish.
const SHORT: &[(&str, u64)] = &[
    ("flow-list.toml", 30),
    ("hermes-scale.toml", 12),
    ("large-scale-ecnsharp.toml", 50),
    ("large-scale-tcn-high.toml", 50),
    ("large-scale-tcn-low.toml", 50),
    ("lb-4x4x8-asymmetric.toml", 50),
    ("lb-4x4x8-black-hole.toml", 50),
    ("lb-4x4x8-random-drop.toml", 50),
    ("lb-4x4x8-symmetric.toml", 50),
    ("lb-8x8x16-asymmetric.toml", 12),
    ("lb-8x8x16-black-hole.toml", 12),
    ("lb-8x8x16-random-drop.toml", 12),
    ("lb-8x8x16-symmetric.toml", 12),
    ("mq-ecnsharp.toml", 220),
    ("mq-tcn.toml", 220),
    ("permutation.toml", 20),
    ("queue-track-codel.toml", 300),
    ("queue-track-ecnsharp.toml", 300),
    ("queue-track-red.toml", 300),
];

/// The routing schemes run on `lb-4x4x8-symmetric` besides its own (ECMP).
const SCHEMES: &[&str] = &["drb", "presto", "letflow", "drill", "conga", "clove", "flowbender", "hermes"];

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fabric")
}

fn golden_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/fabric.txt")
}

/// One short run: a name for the golden line, the file, the `--set`s.
struct Case {
    name: String,
    file: String,
    sets: Vec<String>,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &(file, end_ms) in SHORT {
        let text = std::fs::read_to_string(scenarios_dir().join(file)).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        let kind = table.get("workload").and_then(|w| w.get("kind")).and_then(|k| k.as_str());
        let mut sets = vec![format!("end=\"{end_ms}ms\"")];
        if kind == Some("poisson") {
            sets.push(format!("workload.launch_end=\"{}us\"", end_ms * 2000 / 3));
        }
        let name = file.trim_end_matches(".toml").to_string();
        if file == "lb-4x4x8-symmetric.toml" {
            for scheme in SCHEMES {
                let mut sets = sets.clone();
                sets.push(format!("routing.scheme=\"{scheme}\""));
                cases.push(Case { name: format!("{name}+{scheme}"), file: file.to_string(), sets });
            }
        }
        cases.push(Case { name, file: file.to_string(), sets });
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// The golden line of one case: name, digest of the JSON report, headline
/// figures.
fn line(case: &Case) -> String {
    let scenario =
        Scenario::load(&scenarios_dir().join(&case.file), &case.sets).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let outcomes = fulcrum_fabric::run_many(&scenario, scenario.seed, 1, 1, None).unwrap();
    let report =
        Report { provenance: None, scenario: &scenario.name, sets: &case.sets, outcomes: &outcomes, wall_seconds: 0.0 };
    let json = report.json();
    let o = &outcomes[0];
    let mut line = format!("{} {:016x}", case.name, xxhash_rust::xxh64::xxh64(json.as_bytes(), 0));
    let _ = write!(
        line,
        " flows={} events={} packets={} avg_ms={:.4} small_p99_ms={:.4}",
        o.flows.len(),
        o.events,
        o.data_packets,
        o.fct.avg,
        o.fct.small_p99
    );
    line
}

#[test]
fn every_shipped_scenario_is_listed() {
    let mut shipped: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    shipped.sort();
    let listed: Vec<&str> = SHORT.iter().map(|s| s.0).collect();
    assert_eq!(shipped, listed, "SHORT lists every scenario in scenarios/fabric/, in order");
}

#[test]
fn short_runs_match_their_digests() {
    let cases = cases();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let l = line(case);
                done.lock().unwrap().push((i, l));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort();
    let lines: Vec<String> = done.into_iter().map(|(_, l)| l).collect();
    let mut got = String::new();
    for l in &lines {
        got.push_str(l);
        got.push('\n');
    }
    if std::env::var_os("FULCRUM_BLESS").is_some() {
        std::fs::create_dir_all(golden_file().parent().unwrap()).unwrap();
        std::fs::write(golden_file(), &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(golden_file()).unwrap_or_default();
    let moved: Vec<String> = lines
        .iter()
        .filter(|l| !want.lines().any(|w| w == l.as_str()))
        .map(|l| {
            let name = l.split(' ').next().unwrap_or("");
            let was = want.lines().find(|w| w.split(' ').next() == Some(name)).unwrap_or("(no line)");
            format!("  was {was}\n  now {l}")
        })
        .collect();
    let stale = want.lines().filter(|w| !lines.iter().any(|l| l.split(' ').next() == w.split(' ').next())).count();
    assert!(
        moved.is_empty() && stale == 0,
        "{} run(s) moved, {stale} golden line(s) without a run:\n{}\nIf the change is meant to move them: \
         FULCRUM_BLESS=1 cargo test -p fulcrum-fabric --test golden, and say why in the commit",
        moved.len(),
        moved.join("\n")
    );
}
