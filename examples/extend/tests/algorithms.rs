//! The outside algorithms give the built-ins' results byte for byte on a
//! shipped scenario, and configure the proxy by name like a built-in.

use std::path::{Path, PathBuf};

use fulcrum_balance::AlgorithmKind;
use fulcrum_sim::{report, simulate, Plan, Scenario};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The JSON report of `scenario` run with the algorithm named `name`
/// alone, with that name blanked out.
fn run(scenario: &str, name: &str) -> String {
    fulcrum_extend_example::register();
    let mut s = Scenario::load(&root().join("scenarios").join(scenario)).unwrap_or_else(|e| panic!("{e}"));
    let kind: AlgorithmKind = name.parse().unwrap();
    s.algorithms = vec![s.config_for(kind)];
    let mut r = simulate(&s, &Plan { threads: 1, ..Plan::for_scenario(&s) }, None).unwrap();
    r.wall_seconds = 0.0;
    report::json(&r).replace(&format!("\"algorithm\": \"{}\"", kind.name()), "\"algorithm\": \"-\"")
}

#[test]
fn two_choices_gives_least_requests_report_byte_for_byte() {
    let (ours, theirs) = (run("seed-000.toml", "two-choices"), run("seed-000.toml", "least-request"));
    assert!(ours.contains("\"algorithm\": \"-\""), "{ours}");
    assert_eq!(ours, theirs);
}

#[test]
fn the_proxy_configures_it_by_name_and_names_a_bad_key() {
    fulcrum_extend_example::register();
    let config = |alg: &str| {
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"web\" }}]\n\n\
             [[cluster]]\nname = \"web\"\nendpoints = [\"127.0.0.1:8081\"]\nalgorithm = {alg}\n"
        );
        fulcrum_proxy::Config::parse(Path::new("proxy.toml"), &text)
    };
    let c = config("{ kind = \"two-choices\" }").unwrap();
    assert_eq!(c.clusters[0].algorithm.kind().name(), "two-choices");
    let err = config("{ kind = \"two-choices\", choices = 3 }").unwrap_err().to_string();
    assert!(err.starts_with("proxy.toml:8:") && err.contains("unknown field `choices`"), "{err}");
}
