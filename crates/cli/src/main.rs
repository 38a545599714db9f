//! The `fulcrum` binary: parse the command line, run, map the result to an
//! exit code. Everything else lives in the library crates.

mod algorithms;
mod backend;
mod bird;
mod cli;
mod concurrency;
mod ctl;
mod demo;
mod fabric;
mod lb;
mod lb_health;
mod load;
mod questions;
mod reference;
mod serve;
mod signal;
mod sim;
mod sim_options;
mod whatif;

use std::process::ExitCode;

// The proxy allocates and frees a few small objects per request (header maps,
// futures, buffers); mimalloc's per-thread free lists make that cheaper than
// glibc's arenas (`bench/proxies` measures the proxy's CPU per request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cli::run(cli::parse())
}
