//! End-to-end tests of `fulcrum fabric`: the real binary on the shipped
//! scenarios (shortened with --set so the tests stay quick).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fulcrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(args).current_dir(repo()).output().expect("binary runs")
}

const SHORT: [&str; 4] = ["--set", "end=\"20ms\"", "--set", "workload.launch_end=\"10ms\""];

#[test]
fn every_shipped_scenario_runs_and_prints_one_json_line() {
    for name in ["large-scale-ecnsharp", "large-scale-tcn-high", "large-scale-tcn-low", "hermes-scale"] {
        let path = format!("scenarios/fabric/{name}.toml");
        let mut args = vec!["fabric", path.as_str(), "--json"];
        args.extend(SHORT);
        let out = fulcrum(&args);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().count(), 1, "one JSON line");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["scenario"], name);
        for key in ["avg", "small_avg", "small_p99", "large_avg"] {
            assert!(v["fct_ms"][key].is_number(), "{name}: fct_ms.{key}");
        }
        for key in ["buckets", "queues", "set"] {
            assert!(v[key].is_array(), "{name}: {key}");
        }
        assert!(v["flows"].as_f64().unwrap() > 10.0);
        assert!(v["events"].as_f64().unwrap() > 0.0 && v["wall_seconds"].is_number());
    }
}

#[test]
fn the_json_and_the_csv_say_what_made_them() {
    let dir = std::env::temp_dir().join(format!("fulcrum-fabric-provenance-{}", std::process::id()));
    let mut args = vec!["fabric", "scenarios/fabric/large-scale-ecnsharp.toml", "--json", "--seed", "4", "--runs", "2"];
    args.extend(SHORT);
    args.extend(["--csv", dir.to_str().unwrap()]);
    let o = fulcrum(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v["provenance"];
    assert_eq!(p["fulcrum"], env!("CARGO_PKG_VERSION"));
    assert_eq!((p["seed"].as_u64(), p["runs"].as_u64()), (Some(4), Some(2)));
    assert_eq!(p["overrides"], serde_json::json!(["end=\"20ms\"", "workload.launch_end=\"10ms\""]));
    let hash = p["scenario_hash"].as_str().unwrap();
    let commit = p["commit"].as_str().unwrap_or("");
    let flows = std::fs::read_to_string(dir.join("flows.csv")).unwrap();
    let expected = format!(
        "# fulcrum={}\n# commit={commit}\n# scenario_hash={hash}\n# seed=4\n# runs=2\n\
         # override=end=\"20ms\"\n# override=workload.launch_end=\"10ms\"\nseed,flow,",
        env!("CARGO_PKG_VERSION")
    );
    assert!(flows.starts_with(&expected), "{}", &flows[..300.min(flows.len())]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_names_the_field_and_exits_2() {
    let mut args = vec!["fabric", "scenarios/fabric/large-scale-ecnsharp.toml", "--set", "workload.load=1.5"];
    args.extend(SHORT);
    let out = fulcrum(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("workload.load") && err.contains("below 1"), "{err}");

    let out = fulcrum(&["fabric", "scenarios/fabric/large-scale-ecnsharp.toml", "--set", "aqm.kind=\"codel\""]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    // CoDel takes no `threshold`: the file's key is named, with its line.
    assert!(err.contains("codel") && err.contains("aqm.threshold") && err.contains(".toml:"), "{err}");
}

#[test]
fn set_overrides_fields_and_bad_keys_and_seeds_are_named() {
    let run = |extra: &[&str]| {
        let mut args = vec!["fabric", "scenarios/fabric/large-scale-ecnsharp.toml", "--json"];
        args.extend(SHORT);
        args.extend(extra);
        fulcrum(&args)
    };
    let o = run(&["--set", "workload.load=0.3", "--set", "routing.scheme=presto", "--set", "routing.flowcell=32KiB"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["set"][2], "workload.load=0.3");
    for (set, needle) in [
        ("workload.load=1.5", "--set workload.load=1.5: workload.load: must be above 0 and below 1 (found 1.5)"),
        ("workload.laod=0.3", "--set workload.laod=0.3: workload.laod: unknown field `laod`"),
        ("tcp.min_rto=5 parsecs", "--set tcp.min_rto=5 parsecs: tcp.min_rto: \"5 parsecs\" is not a duration"),
        ("load", "--set load: (syntax): expected KEY=VALUE"),
    ] {
        let o = run(&["--set", set]);
        assert_eq!(o.status.code(), Some(2), "{set}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(err.contains(needle), "{set}: {err}");
    }
    let o = run(&["--seed", "18446744073709551615", "--runs", "2"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("2 runs from seed 18446744073709551615 pass the largest seed"), "{err}");
}

#[test]
fn load_balancing_scenarios_run_and_a_sweep_plots() {
    let shapes = ["4x4x8", "8x8x16"];
    let cases = ["symmetric", "asymmetric", "random-drop", "black-hole"];
    for name in shapes.iter().flat_map(|s| cases.iter().map(move |c| format!("lb-{s}-{c}"))) {
        let path = format!("scenarios/fabric/{name}.toml");
        let mut args = vec!["fabric", path.as_str(), "--json", "--set", "routing.scheme=letflow"];
        args.extend(SHORT);
        let out = fulcrum(&args);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // A two-scheme, two-load sweep of the small fabric, then its figure.
    let mut lines = String::new();
    for scheme in ["ecmp", "drill"] {
        for load in ["0.3", "0.6"] {
            let (s, l) = (format!("routing.scheme={scheme}"), format!("workload.load={load}"));
            let mut args =
                vec!["fabric", "scenarios/fabric/lb-4x4x8-symmetric.toml", "--json", "--set", &s, "--set", &l];
            args.extend(SHORT);
            let out = fulcrum(&args);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            lines.push_str(&String::from_utf8(out.stdout).unwrap());
        }
    }
    let dir = std::env::temp_dir().join(format!("fulcrum-fabric-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (results, svg) = (dir.join("sweep.jsonl"), dir.join("sweep.svg"));
    std::fs::write(&results, lines).unwrap();
    let out = fulcrum(&["fabric", "--plot-sweep", results.to_str().unwrap(), "--plot", svg.to_str().unwrap()]);
    let drawn = std::fs::read_to_string(&svg);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let drawn = drawn.unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains("drill") && drawn.contains("small-flow p99"), "{drawn}");
    let tables = String::from_utf8(out.stdout).unwrap();
    assert!(tables.contains("| ecmp | 1.00 / 1.00 |") && tables.contains("| drill | "), "{tables}");
}

#[test]
fn help_explains_the_options_and_what_they_write() {
    let out = fulcrum(&["fabric", "--help"]);
    assert!(out.status.success());
    // Wrapped to the width of a terminal: compare words, not lines.
    let help = String::from_utf8(out.stdout).unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in
        ["--runs", "95 %", "--json", "one line", "--csv", "flows.csv", "--plot", "flow-size bucket", "--threads"]
    {
        assert!(help.contains(needle), "{needle} missing in\n{help}");
    }
}
