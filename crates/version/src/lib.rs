//! Fulcrum's version and the git commit it was built from (none when it
//! was built outside a checkout), and the [`Provenance`] of a report made
//! from them. A crate of its own, so that a new commit rebuilds only this
//! and the front ends that print reports (the `fulcrum` binary and the
//! Python module), not the simulators.

#![forbid(unsafe_code)]

pub use fulcrum_workload::report::Provenance;

/// The workspace's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit of the checkout this was built from (`build.rs`).
pub const COMMIT: Option<&str> = option_env!("FULCRUM_GIT_COMMIT");

/// The provenance of runs of a scenario whose resolved document digests to
/// `digest` (`fulcrum_config::digest`), seeds `seed..seed + runs`, with
/// `overrides` (`--set`s as `KEY=VALUE`, then options as `--name=value`).
pub fn provenance(digest: u64, seed: u64, runs: u64, overrides: Vec<String>) -> Provenance {
    Provenance {
        fulcrum: VERSION.to_string(),
        commit: COMMIT.map(str::to_string),
        scenario_hash: Provenance::hash_text(digest),
        seed,
        runs,
        overrides,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_commit_is_the_checkouts() {
        let p = super::provenance(1, 2, 3, vec!["a=b".into()]);
        assert_eq!(p.fulcrum, env!("CARGO_PKG_VERSION"));
        assert_eq!(p.scenario_hash, "xxh64:0000000000000001");
        // Cargo rebuilt this when HEAD moved (build.rs), so git says the
        // same now; outside a checkout (or without git) there is none.
        let head = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        match std::env::var("FULCRUM_GIT_COMMIT") {
            Ok(given) if !given.is_empty() => assert_eq!(p.commit, Some(given)),
            _ => assert_eq!(p.commit, head),
        }
    }
}
