//! Golden outputs: every shipped request-simulator scenario
//! (`scenarios/*.toml`), run at its own seed (long ones shortened, see
//! [`shorten`]), must give the JSON report it gave when its digest was
//! written, byte for byte, and handle as many events.
//!
//! Each scenario's expected output is `tests/golden/NAME.digest`: the xxh64
//! of its JSON report (what `fulcrum sim --json` prints, with
//! `wall_seconds` set to 0, the one figure that depends on the machine),
//! and the events the runs handled. A scenario without a digest file fails
//! the test, so a new scenario is pinned when it is added.
//!
//! When a change to the model is meant to move the figures, write the
//! digests again with
//!
//! ```text
//! FULCRUM_BLESS=1 cargo test -p fulcrum-sim --test golden
//! ```
//!
//! and say in the commit why the figures moved. On a mismatch the test
//! writes the JSON it got to `golden-actual/NAME.json` under Cargo's
//! temporary directory for the target, to compare with a run of the older
//! code (`fulcrum sim scenarios/NAME.toml --json`, shortened likewise).

use std::path::{Path, PathBuf};

use fulcrum_sim::{report, simulate, Plan, Scenario};

/// Make a long scenario short enough for a debug-build test (the figures
/// are per request, and the shortened run takes the same paths): the
/// fleet of 1,000 servers sends for 200 ms instead of 10 s, and the seed-004
/// reproduction stops at 100,000 requests instead of 1,000,000 (its slow
/// endpoint still answers up to 2 s late, so its tail stays in the run).
fn shorten(scenario: &mut Scenario) {
    match scenario.name.as_str() {
        "fleet-1000" => scenario.clients.duration = Some(200_000_000),
        "seed-004-1m" => scenario.clients.requests = Some(100_000),
        _ => {}
    }
}

/// What a run of `scenario` is pinned by: its JSON report and the digest
/// file's text.
fn pinned(scenario: &Scenario) -> (String, String) {
    let plan = Plan::for_scenario(scenario);
    let mut report = simulate(scenario, &plan, None).unwrap_or_else(|e| panic!("{}: {e}", scenario.name));
    report.wall_seconds = 0.0;
    let json = report::json(&report);
    let digest =
        format!("json xxh64:{:016x}\nevents {}\n", xxhash_rust::xxh64::xxh64(json.as_bytes(), 0), report.events);
    (json, digest)
}

#[test]
fn every_shipped_scenario_gives_its_pinned_output() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let golden = root.join("tests/golden");
    let bless = std::env::var_os("FULCRUM_BLESS").is_some();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("../../scenarios"))
        .expect("the scenarios directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 10, "only {} scenarios found", paths.len());
    let mut wrong = Vec::new();
    for path in &paths {
        let mut scenario = Scenario::load(path).unwrap_or_else(|e| panic!("{e}"));
        shorten(&mut scenario);
        let (json, digest) = pinned(&scenario);
        let file = golden.join(format!("{}.digest", stem(path)));
        if bless {
            std::fs::create_dir_all(&golden).expect("the golden directory");
            std::fs::write(&file, &digest).expect("a digest written");
            continue;
        }
        let expected = std::fs::read_to_string(&file).unwrap_or_default();
        if expected != digest {
            let actual = Path::new(env!("CARGO_TARGET_TMPDIR")).join("golden-actual");
            std::fs::create_dir_all(&actual).expect("a directory for the output");
            std::fs::write(actual.join(format!("{}.json", stem(path))), &json).expect("the output written");
            wrong.push(format!("{}:\n  expected {expected:?}\n  got      {digest:?}", stem(path)));
        }
    }
    // A digest left behind by a scenario renamed or removed pins nothing.
    for entry in std::fs::read_dir(&golden).expect("the golden directory") {
        let file = entry.expect("a directory entry").path();
        let scenario = root.join("../../scenarios").join(format!("{}.toml", stem(&file)));
        assert!(scenario.exists(), "{} pins no shipped scenario", file.display());
    }
    assert!(
        wrong.is_empty(),
        "outputs differ from tests/golden (JSON written to {}/golden-actual; if the change is meant, \
         run `FULCRUM_BLESS=1 cargo test -p fulcrum-sim --test golden` and say why in the commit):\n{}",
        env!("CARGO_TARGET_TMPDIR"),
        wrong.join("\n")
    );
}

fn stem(path: &Path) -> String {
    path.file_stem().expect("a file name").to_string_lossy().into_owned()
}

/// A trace replay (`examples/sim/trace-replay.toml`): the same trace and
/// seed give the same report, byte for byte, pinned by
/// `tests/golden-examples/trace-replay.digest` (blessed as above).
#[test]
fn a_trace_replay_gives_its_pinned_output() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let scenario = Scenario::load(&root.join("../../examples/sim/trace-replay.toml")).unwrap_or_else(|e| panic!("{e}"));
    let (json, digest) = pinned(&scenario);
    assert_eq!(pinned(&scenario).0, json, "two runs differ");
    let file = root.join("tests/golden-examples/trace-replay.digest");
    if std::env::var_os("FULCRUM_BLESS").is_some() {
        std::fs::create_dir_all(file.parent().unwrap()).expect("the golden directory");
        std::fs::write(&file, &digest).expect("a digest written");
        return;
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap_or_default(), digest, "output differs from {}", file.display());
}
