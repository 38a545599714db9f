//! Every file under `examples/` works with the real binary: each proxy
//! configuration passes `fulcrum serve --check`, each request scenario and
//! each fabric scenario runs to the end and prints its JSON report. A new
//! example is picked up without editing this test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The `.toml` files of one `examples/` folder; the folder must have some.
fn examples(dir: &str) -> Vec<PathBuf> {
    let dir = repo().join("examples").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no example", dir.display());
    files
}

/// Run the binary from the repository's root, as the documentation does.
fn fulcrum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(args).current_dir(repo()).output().expect("binary runs")
}

fn assert_ok(file: &Path, out: &Output) {
    assert!(
        out.status.success(),
        "{}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        file.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn relative(file: &Path) -> String {
    file.strip_prefix(repo()).unwrap_or(file).display().to_string()
}

#[test]
fn proxy_configurations_pass_the_check() {
    for file in examples("proxy") {
        let out = fulcrum(&["serve", "--check", "-c", &relative(&file)]);
        assert_ok(&file, &out);
    }
}

#[test]
fn request_scenarios_run() {
    for file in examples("sim") {
        let out = fulcrum(&["sim", &relative(&file), "--json"]);
        assert_ok(&file, &out);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{}: the output is not JSON: {e}", file.display()));
        assert!(report.is_object(), "{}: {report}", file.display());
    }
}

#[test]
fn fabric_scenarios_run() {
    for file in examples("fabric") {
        let out = fulcrum(&["fabric", &relative(&file), "--json"]);
        assert_ok(&file, &out);
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or_default();
        let report: serde_json::Value = serde_json::from_str(first)
            .unwrap_or_else(|e| panic!("{}: the output is not JSON lines: {e}", file.display()));
        assert!(report.is_object(), "{}: {report}", file.display());
    }
}
