//! End-to-end tests of `fulcrum sim`: the real binary on the shipped scenarios.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIGURES: [&str; 10] = ["min", "avg", "p50", "p75", "p90", "p95", "p99", "p999", "max", "stddev"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fulcrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(args).current_dir(repo()).output().expect("binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The keys of a JSON object, sorted (serde_json's map sorts them).
fn keys(v: &serde_json::Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

fn sorted(mut k: Vec<&str>) -> Vec<&str> {
    k.sort_unstable();
    k
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fulcrum-sim-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn seed_000_table_is_printed_and_deterministic() {
    let a = fulcrum(&["sim", "scenarios/seed-000.toml"]);
    assert!(a.status.success(), "{}", stderr(&a));
    let text = stdout(&a);
    for needle in ["Min", "Avg", "P50", "P75", "P90", "P95", "P99", "P999", "Max", "StdDev", "Requests per server"] {
        assert!(text.contains(needle), "{needle} missing in\n{text}");
    }
    for algo in ["round-robin", "least-request", "random", "ring-hash", "maglev", "peak-ewma"] {
        assert!(text.contains(algo), "{algo} missing");
    }
    let b = fulcrum(&["sim", "scenarios/seed-000.toml", "--threads", "1"]);
    assert_eq!(a.stdout, b.stdout, "same scenario and seed, byte-identical output");
    let c = fulcrum(&["sim", "scenarios/seed-000.toml", "--seed", "2"]);
    assert_ne!(a.stdout, c.stdout);
}

#[test]
fn json_has_the_documented_shape() {
    let o = fulcrum(&["sim", "scenarios/seed-000.toml", "--json", "--algorithms", "WRR,PeakEWMA,RingHash,lr"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let v: serde_json::Value = serde_json::from_str(&text).expect("stdout is JSON only");
    let top = ["provenance", "scenario", "seed", "results", "simulated_requests", "wall_seconds"];
    assert_eq!(keys(&v), sorted(top.to_vec()));
    let at: Vec<usize> = top.iter().map(|k| text.find(&format!("\n  \"{k}\":")).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "keys in the documented order");
    assert_eq!(v["scenario"], "seed-000");
    assert_eq!(v["seed"], 1);
    assert_eq!(v["simulated_requests"], 4000);
    assert!(v["wall_seconds"].as_f64().unwrap() >= 0.0);
    let results = v["results"].as_array().unwrap();
    let names: Vec<&str> = results.iter().map(|r| r["algorithm"].as_str().unwrap()).collect();
    assert_eq!(names, ["round-robin", "peak-ewma", "ring-hash", "least-request"]);
    for r in results {
        assert_eq!(keys(r), sorted(vec!["algorithm", "requests", "failed", "latency_ms", "requests_per_server"]));
        assert_eq!(keys(&r["latency_ms"]), sorted(FIGURES.to_vec()));
        assert_eq!(r["requests"], 1000);
        assert_eq!(r["requests_per_server"].as_array().unwrap().len(), 10);
    }
}

#[test]
fn runs_add_means_and_intervals() {
    let o = fulcrum(&["sim", "scenarios/seed-000.toml", "--json", "--runs", "5", "--algorithms", "random"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["runs"], 5);
    let r = &v["results"][0];
    assert_eq!(keys(&r["ci95_ms"]), sorted(FIGURES.to_vec()));
    assert!(r["ci95_ms"]["avg"].as_f64().unwrap() > 0.0);
    assert_eq!(v["simulated_requests"], 5000);
    let table = stdout(&fulcrum(&["sim", "scenarios/seed-000.toml", "--runs", "3"]));
    assert!(table.contains("mean of 3 runs") && table.contains("95 % interval"), "{table}");
}

#[test]
fn csv_and_plot_are_written() {
    let dir = tmp("out");
    let svg = dir.join("seed.svg");
    let o = fulcrum(&[
        "sim",
        "scenarios/seed-004-50k.toml",
        "--csv",
        dir.join("csv").to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = std::fs::read_to_string(dir.join("csv/summary.csv")).unwrap();
    // The provenance comes first, as `# key=value` lines, in every file.
    let (comment, table) = summary.split_at(summary.find("algorithm,").unwrap());
    let keys: Vec<&str> = comment.lines().map(|l| l.split('=').next().unwrap()).collect();
    assert_eq!(keys, ["# fulcrum", "# commit", "# scenario_hash", "# seed", "# runs"], "{comment}");
    assert!(comment.contains("# seed=1\n# runs=1\n"), "{comment}");
    assert!(table.starts_with("algorithm,seed,requests,failed,min_ms,avg_ms,p50_ms"), "{summary}");
    assert_eq!(table.lines().count(), 4);
    for f in ["requests_per_server.csv", "cdf.csv", "share.csv"] {
        let text = std::fs::read_to_string(dir.join("csv").join(f)).unwrap();
        assert!(text.starts_with(comment), "{f}");
        assert!(text.lines().count() > 3 + keys.len(), "{f}");
    }
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("latency CDF (log scale)") && svg.contains("Share of requests"));
    assert_eq!(svg.matches("<polyline").count(), 3 + 3 * 10, "3 CDFs and 3 panels of 10 servers");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_json_says_what_made_it() {
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", "scenarios/seed-000.toml", "--json", "--set", "clients.requests=200"];
        args.extend(extra);
        let o = fulcrum(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["provenance"].clone()
    };
    let p = run(&["--seed", "9", "--runs", "2", "--algorithms", "lr", "--exact"]);
    assert_eq!(p["fulcrum"], env!("CARGO_PKG_VERSION"));
    assert!(p["commit"].is_null() || p["commit"].as_str().unwrap().len() == 40, "{p}");
    assert_eq!((p["seed"].as_u64(), p["runs"].as_u64()), (Some(9), Some(2)));
    assert_eq!(p["overrides"], serde_json::json!(["clients.requests=200", "--algorithms=lr", "--exact"]));
    // The hash is the resolved scenario's: the same whatever the seed and
    // options, another with another --set.
    let plain = run(&[]);
    assert_eq!(plain["scenario_hash"], p["scenario_hash"]);
    assert!(p["scenario_hash"].as_str().unwrap().starts_with("xxh64:"));
    assert_ne!(run(&["--set", "clients.requests=300"])["scenario_hash"], p["scenario_hash"]);
}

#[test]
fn the_hash_covers_the_trace_it_replays() {
    let dir = tmp("trace-hash");
    let scenario = dir.join("trace-replay.toml");
    std::fs::copy(repo().join("examples/sim/trace-replay.toml"), &scenario).unwrap();
    let trace = std::fs::read_to_string(repo().join("examples/sim/trace-replay.csv")).unwrap();
    let hash = |csv: &str| {
        std::fs::write(dir.join("trace-replay.csv"), csv).unwrap();
        let o = fulcrum(&["sim", scenario.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["provenance"]["scenario_hash"].as_str().unwrap().to_string()
    };
    let first = hash(&trace);
    assert_eq!(hash(&trace), first);
    // The last request sent a nanosecond later: same document, another trace.
    let last = trace.trim_end().rsplit('\n').next().unwrap();
    let time: u64 = last.split(',').next().unwrap().parse().unwrap();
    let moved = trace.replacen(last, &last.replacen(&time.to_string(), &(time + 1).to_string(), 1), 1);
    assert_ne!(moved, trace);
    assert_ne!(hash(&moved), first);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let dir = tmp("bad");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[clients]\nloop = \"open\"\nintervall = \"1ms\"\nrequests = 1\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["sim".into(), "no/such.toml".into()], "cannot read scenario"),
        (vec!["sim".into(), bad.display().to_string()], "intervall"),
        (vec!["sim".into(), "scenarios/seed-000.toml".into(), "--algorithms".into(), "fastest".into()], "fastest"),
        (vec!["sim".into(), "scenarios/seed-000.toml".into(), "--runs".into(), "0".into()], "runs"),
        (vec!["sim".into(), "scenarios/seed-000.toml".into(), "--seed".into(), "x".into()], "seed"),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = fulcrum(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = fulcrum(&["sim", bad.to_str().unwrap()]);
    assert!(stderr(&o).contains("bad.toml:3:1: clients.intervall: unknown field"), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn help_explains_the_options() {
    let o = fulcrum(&["sim", "--help"]);
    assert!(o.status.success());
    // Wrapped to the width of a terminal: compare words, not lines.
    let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in ["--algorithms", "--seed", "--runs", "--json", "--csv", "summary.csv", "--plot", "95 %", "Examples"] {
        assert!(help.contains(needle), "{needle} missing in\n{help}");
    }
}

#[test]
fn every_shipped_scenario_runs() {
    for entry in std::fs::read_dir(repo().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") && !path.to_string_lossy().contains("seed-004-1m") {
            let o = fulcrum(&["sim", path.to_str().unwrap(), "--json"]);
            assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
        }
    }
}

/// Past 1,000,000 measured requests a run's percentiles come from an HDR
/// histogram, and the report says so; `--exact` keeps every sample. Both
/// agree to the histogram's precision, and min, max and mean stay exact.
#[test]
fn past_the_limit_quantiles_switch_to_hdr_unless_exact() {
    let dir = tmp("hdr");
    let scenario = dir.join("big.toml");
    let text = std::fs::read_to_string(repo().join("scenarios/seed-004-1m.toml")).unwrap();
    let text = text
        .replace("requests = 1_000_000", "requests = 1_200_000")
        .replace(r#"algorithms = ["peak-ewma", "least-request", "round-robin"]"#, r#"algorithms = ["round-robin"]"#);
    std::fs::write(&scenario, text).unwrap();
    let path = scenario.to_str().unwrap();

    let table = fulcrum(&["sim", path]);
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(stdout(&table).contains("Quantiles: HDR histogram, 3 significant digits"), "{}", stdout(&table));
    let exact_table = fulcrum(&["sim", path, "--exact"]);
    assert!(exact_table.status.success(), "{}", stderr(&exact_table));
    assert!(!stdout(&exact_table).contains("Quantiles:"), "{}", stdout(&exact_table));

    let json = |args: &[&str]| -> serde_json::Value {
        let o = fulcrum(&[&["sim", path, "--json"], args].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["results"][0]["latency_ms"].clone()
    };
    let (hdr, exact) = (json(&[]), json(&["--exact"]));
    assert_eq!(hdr["method"], "hdr");
    assert!(exact.get("method").is_none(), "{exact}");
    for figure in FIGURES {
        let (h, e) = (hdr[figure].as_f64().unwrap(), exact[figure].as_f64().unwrap());
        let tolerance = if ["min", "max", "avg"].contains(&figure) { 1e-9 } else { 0.01 };
        assert!((h - e).abs() <= tolerance * e, "{figure}: hdr {h} vs exact {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn set_overrides_a_scenario_field_and_a_bad_one_names_itself() {
    let base = ["sim", "scenarios/seed-000.toml", "--json", "--algorithms", "peak-ewma"];
    let run = |sets: &[&str]| fulcrum(&[&base[..], sets].concat());
    let o = run(&["--set", "clients.requests=50", "--set", "servers[1].count=4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["results"][0]["requests_per_server"].as_array().map(Vec::len), Some(9 + 4));
    assert_eq!(v["results"][0]["requests"], 10 * 50);
    for (set, needle) in [
        ("clients.requests=0", "--set clients.requests=0: clients.requests: must be at least 1"),
        ("clients.reqests=5", "--set clients.reqests=5: clients.reqests: unknown field `reqests`"),
        ("servers[9].count=1", "--set servers[9].count=1: servers[9]: out of range"),
        ("requests", "--set requests: (syntax): expected KEY=VALUE"),
    ] {
        let o = run(&["--set", set]);
        assert_eq!(o.status.code(), Some(2), "{set}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{set}: {}", stderr(&o));
    }
    let o = run(&["--seed", "18446744073709551615", "--runs", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 runs from seed 18446744073709551615 pass the largest seed"), "{}", stderr(&o));
}
