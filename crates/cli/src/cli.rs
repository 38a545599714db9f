//! Command-line surface: one subcommand per job.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Fulcrum: load-balancing algorithms, a simulator to compare them, and the
/// proxies that run them.
#[derive(Debug, Parser)]
#[command(name = "fulcrum", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: the seed-000 experiment live on loopback, next to the simulator's prediction.
    Demo(crate::demo::Args),
    /// List the load-balancing algorithms with their default parameters.
    Algorithms(crate::algorithms::Args),
    /// Simulate a scenario: compare algorithms' latency and request spread.
    Sim(crate::sim::Args),
    /// Simulate a datacenter fabric (leaf-spine, DCTCP, ECN marking) and report flow completion times.
    Fabric(crate::fabric::Args),
    /// Run the HTTP/TCP load balancer (config file, or quick mode on the command line).
    Serve(crate::serve::Args),
    /// Make a running `fulcrum serve --config` re-read its file (SIGHUP).
    Reload(crate::serve::ReloadArgs),
    /// Talk to a running proxy's runtime API: list, drain, undrain, weigh, add, remove endpoints.
    Ctl(crate::ctl::Args),
    /// Start test upstreams: service-time distribution, status mix, body size.
    Backend(crate::backend::Args),
    /// Send HTTP load (open loop without coordinated omission, closed loop, clients) and report.
    Load(crate::load::Args),
    /// The XDP L4 load balancer: create, list, delete services; stats.
    Lb(crate::lb::Args),
}

/// Parse `std::env::args`, exiting with a usage message on error.
pub fn parse() -> Cli {
    Cli::parse()
}

/// Run the chosen subcommand. Errors are printed to stderr; the exit code is
/// 0 on success, 1 on a runtime failure and 2 on bad input (clap's convention).
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Demo(args) => crate::demo::run(args),
        Command::Algorithms(args) => crate::algorithms::run(args),
        Command::Sim(args) => crate::sim::run(args),
        Command::Fabric(args) => crate::fabric::run(args),
        Command::Serve(args) => crate::serve::run(args),
        Command::Reload(args) => crate::serve::reload(args),
        Command::Ctl(args) => crate::ctl::run(args),
        Command::Backend(args) => crate::backend::run(args),
        Command::Load(args) => crate::load::run(args),
        Command::Lb(args) => crate::lb::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fulcrum: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

/// A failure the binary reports: what went wrong and which exit code it earns.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    /// The user gave something we cannot use (a bad file, name or value).
    pub fn input(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: 2 }
    }

    /// Something failed while running.
    pub fn runtime(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: 1 }
    }

    /// The user stopped it (SIGINT/SIGTERM): the shell's 128 + 2.
    pub fn interrupted() -> Self {
        Failure { message: "interrupted".into(), code: 130 }
    }

    fn exit_code(&self) -> u8 {
        self.code
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
