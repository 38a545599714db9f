//! Bake the git commit of the checkout into `FULCRUM_GIT_COMMIT`: from the
//! environment when it is set there (a packager's build), else from
//! `git rev-parse HEAD`. Without git, or outside a checkout, there is none
//! and the build goes on. Cargo runs this again when HEAD moves (the files
//! `HEAD`, the branch it names and `packed-refs` of the git directory).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FULCRUM_GIT_COMMIT");
    let commit =
        std::env::var("FULCRUM_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| git(&["rev-parse", "HEAD"]));
    if let Some(commit) = commit {
        println!("cargo:rustc-env=FULCRUM_GIT_COMMIT={commit}");
    }
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"]), git(&["rev-parse", "--git-path", "packed-refs"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    // A path that does not exist would make Cargo run this on every build.
    for path in watched.into_iter().flatten().map(|p| here.join(p)).filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
