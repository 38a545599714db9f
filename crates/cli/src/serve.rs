//! `fulcrum serve`: run the L7/L4 proxy until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args as ClapArgs;
use fulcrum_balance::AlgorithmKind;
use fulcrum_proxy::{Config, Proxy};

use crate::cli::Failure;

/// Options of `fulcrum serve`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "Examples:\n  fulcrum serve --config fulcrum.toml\n  \
    fulcrum serve --listen 127.0.0.1:8080 --backends 127.0.0.1:9001,127.0.0.1:9002 --algorithm peak-ewma")]
pub struct Args {
    /// Configuration file (TOML): listeners, routes, clusters. See the README.
    #[arg(short, long, conflicts_with_all = ["listen", "backends", "algorithm"])]
    config: Option<PathBuf>,
    /// Quick mode: address to listen on for HTTP/1.1 and h2c.
    #[arg(long, requires = "backends")]
    listen: Option<SocketAddr>,
    /// Quick mode: comma-separated backend addresses (host:port).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Quick mode: load-balancing algorithm (round-robin, random, least-request,
    /// peak-ewma, ring-hash, maglev, rendezvous; aliases wrr, lr, …).
    #[arg(long, default_value = "round-robin")]
    algorithm: Option<String>,
    /// Admin listener (/metrics, /status, /healthz); overrides the file's.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Worker threads (default: the file's, else one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
    /// On SIGTERM/SIGINT, wait this long for requests in flight.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    drain: Duration,
}

fn load(args: &Args) -> Result<Config, Failure> {
    let mut config = match (&args.config, args.listen) {
        (Some(path), _) => Config::load(path).map_err(|e| Failure::input(e.to_string()))?,
        (None, Some(listen)) => {
            let name = args.algorithm.as_deref().unwrap_or("round-robin");
            let kind: AlgorithmKind =
                name.parse().map_err(|e: fulcrum_balance::UnknownAlgorithm| Failure::input(e.to_string()))?;
            Config::quick(listen, &args.backends, kind).map_err(|e| Failure::input(e.to_string()))?
        }
        (None, None) => {
            return Err(Failure::input("give --config FILE, or --listen ADDR --backends LIST (see --help)"))
        }
    };
    if let Some(admin) = args.admin {
        config.admin = Some(admin);
    }
    if let Some(workers) = args.workers {
        if !(1..=256).contains(&workers) {
            return Err(Failure::input("--workers must be between 1 and 256"));
        }
        config.workers = workers;
    }
    Ok(config)
}

/// Start the proxy and serve until a signal says stop.
pub fn run(args: Args) -> Result<(), Failure> {
    let config = load(&args)?;
    if args.check {
        eprintln!("fulcrum: configuration OK");
        return Ok(());
    }
    let workers = config.workers;
    let proxy = Proxy::start(config).map_err(|e| Failure::runtime(e.to_string()))?;
    for addr in proxy.listen_addrs() {
        eprintln!("fulcrum: listening on {addr} ({workers} workers)");
    }
    if let Some(admin) = proxy.admin_addr() {
        eprintln!("fulcrum: admin on http://{admin}/metrics");
    }
    wait_for_signal().map_err(|e| Failure::runtime(format!("cannot wait for signals: {e}")))?;
    eprintln!("fulcrum: stopping; draining requests in flight for up to {}", humantime::format_duration(args.drain));
    proxy.shutdown(args.drain);
    Ok(())
}

/// Block until SIGINT or SIGTERM.
fn wait_for_signal() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    })
}
