//! The options both simulators' commands take (`fulcrum sim`, `fulcrum
//! fabric`): how many seeded runs, on how many threads, and where the
//! report goes. Each command's help says, after the options, which files
//! and figures its `--csv` and `--plot` write.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::cli::Failure;

/// Runs, threads and report outputs of a simulation command.
#[derive(Debug, Args)]
pub struct SimOptions {
    /// Repeat each simulation with seeds seed, seed+1, …; report the mean
    /// and the 95 % interval of every figure.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub runs: u32,

    /// Print the report as JSON on stdout (nothing else goes to stdout).
    #[arg(long)]
    pub json: bool,

    /// Also write the report's tables as CSV files into this directory
    /// (listed below).
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,

    /// Also draw the report's figures into this SVG file (described below).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Threads the simulations are spread over (default: one per core).
    /// Results do not depend on it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Option<u32>,

    /// Draw the progress bar even when stderr is not a terminal.
    #[arg(long, hide = true)]
    pub progress: bool,
}

/// The digest of the scenario at `path` after `sets`, with the files it
/// named (`inputs`, read with it) folded in: its provenance's
/// `scenario_hash` (`fulcrum_config::digest`, `Inputs::digest`).
pub fn scenario_digest(path: &Path, sets: &[String], inputs: &fulcrum_config::Inputs) -> Result<u64, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
    let digest = fulcrum_config::digest(path, &text, sets).map_err(|e| Failure::input(e.to_string()))?;
    Ok(inputs.digest(digest))
}
