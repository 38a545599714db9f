//! `fulcrum algorithms`: what can be configured, with the defaults.

use clap::Args as ClapArgs;
use fulcrum_balance::{AlgorithmKind, BuildError};

use crate::cli::Failure;

/// Options of `fulcrum algorithms`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum algorithms                 # every algorithm
  fulcrum algorithms peak-ewma       # one, with every parameter

Each block is an [algorithm] table with every parameter at its default: the same table \
configures a proxy's cluster and a simulator scenario.")]
pub struct Args {
    /// Show one algorithm only (names and aliases as in configuration:
    /// round-robin/wrr, random, least-request/lr, peak-ewma, ring-hash, maglev,
    /// rendezvous).
    name: Option<String>,
}

/// Print each algorithm's default configuration as TOML, ready to paste.
pub fn run(args: Args) -> Result<(), Failure> {
    let kinds: Vec<AlgorithmKind> = match &args.name {
        Some(name) => {
            vec![name.parse().map_err(|e: fulcrum_balance::UnknownAlgorithm| Failure::input(e.to_string()))?]
        }
        None => AlgorithmKind::all(),
    };
    for (i, kind) in kinds.into_iter().enumerate() {
        let config = kind.default_config();
        config.validate().map_err(|e: BuildError| Failure::runtime(e.to_string()))?;
        let text = toml::to_string(&config).map_err(|e| Failure::runtime(e.to_string()))?;
        if i > 0 {
            println!();
        }
        print!("[algorithm]\n{text}");
    }
    Ok(())
}
