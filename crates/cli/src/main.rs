//! The `fulcrum` binary: parse the command line, run, map the result to an
//! exit code. Everything else lives in the library crates.

mod algorithms;
mod backend;
mod cli;
mod demo;
mod lb;
mod load;
mod serve;
mod signal;
mod sim;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::run(cli::parse())
}
