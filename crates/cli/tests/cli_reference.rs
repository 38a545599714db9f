//! docs/reference/cli.md is what `fulcrum reference` prints: the help of
//! every command, generated from the same clap definitions as the parser.
//! A flag added, renamed or reworded without regenerating the page fails
//! here, with the command that regenerates it.

use std::path::PathBuf;
use std::process::Command;

const REGENERATE: &str = "FULCRUM_BLESS=1 cargo test -p fulcrum --test cli_reference";

fn page() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md")
}

#[test]
fn the_cli_reference_is_what_the_code_generates() {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("reference").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = String::from_utf8(out.stdout).unwrap();
    assert!(
        generated.contains("\n## fulcrum lb bird-config\n") && generated.contains("```sh\nfulcrum "),
        "{generated}"
    );
    if std::env::var_os("FULCRUM_BLESS").is_some() {
        std::fs::create_dir_all(page().parent().unwrap()).unwrap();
        std::fs::write(page(), &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(page()).unwrap_or_default();
    if current != generated {
        let line = current
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| current.lines().count().min(generated.lines().count()) + 1, |i| i + 1);
        let (was, now) = (current.lines().nth(line - 1), generated.lines().nth(line - 1));
        panic!(
            "docs/reference/cli.md differs from the code's help from line {line}:\n  page: {was:?}\n  code: {now:?}\n\
             Regenerate it with:\n  {REGENERATE}"
        );
    }
}
