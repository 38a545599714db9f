//! `fulcrum serve`: run the L7/L4 proxy until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args as ClapArgs;
use fulcrum_balance::AlgorithmKind;
use fulcrum_proxy::config::HashKey;
use fulcrum_proxy::{Config, Proxy};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli::Failure;

/// Options of `fulcrum serve`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum serve -c fulcrum.toml --check        # check the file and exit
  fulcrum serve -c fulcrum.toml --pid-file /run/fulcrum.pid
  fulcrum serve --listen 127.0.0.1:8080 --backends 127.0.0.1:9001,127.0.0.1:9002 --threads 2

SIGHUP (or `fulcrum reload`) makes it read the --config file again; SIGINT or SIGTERM stops it \
after the requests in flight finish (at most --drain).")]
pub struct Args {
    /// Configuration file (TOML): listeners, routes, clusters (docs/reference/proxy-config.md).
    #[arg(short, long, value_name = "FILE", conflicts_with_all = ["listen", "backends", "algorithm"])]
    config: Option<PathBuf>,
    /// Quick mode: address to listen on for HTTP/1.1 and h2c.
    #[arg(long, value_name = "ADDR", requires = "backends")]
    listen: Option<SocketAddr>,
    /// Quick mode: comma-separated backend addresses (host:port).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    backends: Vec<String>,
    /// Quick mode: load-balancing algorithm (round-robin, random, least-request,
    /// peak-ewma, ring-hash, maglev, rendezvous; aliases wrr, lr, …).
    #[arg(long, value_name = "NAME", default_value = "round-robin")]
    algorithm: Option<String>,
    /// Quick mode: what hash-based algorithms hash: source-ip, path,
    /// header:NAME or cookie:NAME (a request without it gets a random key).
    #[arg(long, value_name = "KEY", default_value = "source-ip", value_parser = parse_hash_key)]
    hash_key: HashKey,
    /// Admin listener (/metrics, /status, /healthz, and the runtime API that `fulcrum ctl` calls; bind
    /// it to loopback: reaching it is all the authentication there is); overrides the file's.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// Worker threads, each with its own balancers (default: the file's `workers`, else one per
    /// core).
    #[arg(long, alias = "workers", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
    /// On SIGTERM/SIGINT, wait this long for requests in flight.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = fulcrum_config::parse_duration)]
    drain: Duration,
    /// Write the process id here, for `fulcrum reload --pid-file`.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
}

/// Options of `fulcrum reload`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum serve -c fulcrum.toml --pid-file /tmp/fulcrum.pid &
  fulcrum reload --pid-file /tmp/fulcrum.pid
  fulcrum reload --pid 12345                 # the server's process id

Sends SIGHUP to a running `fulcrum serve --config FILE`, which reads FILE again and applies it \
without dropping a connection; an invalid file is reported by the server and the old \
configuration keeps serving.")]
pub struct ReloadArgs {
    /// The file `fulcrum serve --pid-file` wrote.
    #[arg(long, value_name = "FILE", conflicts_with = "pid", required_unless_present = "pid")]
    pid_file: Option<PathBuf>,
    /// The server's process id.
    #[arg(long)]
    pid: Option<i32>,
}

fn parse_hash_key(s: &str) -> Result<HashKey, String> {
    match s.split_once(':') {
        None if s == "source-ip" => Ok(HashKey::SourceIp),
        None if s == "path" => Ok(HashKey::Path),
        Some(("header", name)) if !name.is_empty() => Ok(HashKey::Header(name.to_ascii_lowercase())),
        Some(("cookie", name)) if !name.is_empty() => Ok(HashKey::Cookie(name.to_string())),
        _ => Err("expected source-ip, path, header:NAME or cookie:NAME".into()),
    }
}

fn load(args: &Args) -> Result<Config, Failure> {
    let mut config = match (&args.config, args.listen) {
        (Some(path), _) => Config::load(path).map_err(|e| Failure::input(e.to_string()))?,
        (None, Some(listen)) => {
            let name = args.algorithm.as_deref().unwrap_or("round-robin");
            let kind: AlgorithmKind =
                name.parse().map_err(|e: fulcrum_balance::UnknownAlgorithm| Failure::input(e.to_string()))?;
            let mut config = Config::quick(listen, &args.backends, kind).map_err(|e| Failure::input(e.to_string()))?;
            config.clusters[0].hash_key = args.hash_key.clone();
            config
        }
        (None, None) => {
            return Err(Failure::input("give --config FILE, or --listen ADDR --backends LIST (see --help)"))
        }
    };
    if let Some(admin) = args.admin {
        config.admin = Some(admin);
    }
    if let Some(threads) = args.threads {
        config.workers = threads as usize;
    }
    Ok(config)
}

/// Start the proxy and serve until a signal says stop; SIGHUP reloads the file.
pub fn run(args: Args) -> Result<(), Failure> {
    let config = load(&args)?;
    if args.check {
        eprintln!("fulcrum: configuration OK");
        return Ok(());
    }
    let workers = config.workers;
    // Caught before anyone can know the proxy is up: a SIGTERM that comes
    // as soon as the "listening" lines appear still drains and exits 0.
    let signals = Signals::catch().map_err(|e| Failure::runtime(format!("cannot catch signals: {e}")))?;
    let proxy = Proxy::start(config).map_err(|e| Failure::runtime(e.to_string()))?;
    if let Some(path) = &args.pid_file {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?;
    }
    for addr in proxy.listen_addrs() {
        eprintln!("fulcrum: listening on {addr} ({workers} workers)");
    }
    if let Some(admin) = proxy.admin_addr() {
        // The runtime API has no login: reaching the address is the right to
        // drain and remove endpoints.
        if !admin.ip().is_loopback() {
            eprintln!(
                "fulcrum: warning: the admin listener on {admin} is not on loopback; anyone who can reach it can \
                 change endpoints (fulcrum ctl)"
            );
        }
        eprintln!("fulcrum: admin on http://{admin}/metrics");
    }
    signals.wait(|| match load(&args) {
        Ok(next) => match proxy.reload(next) {
            Ok(()) => eprintln!("fulcrum: configuration reloaded"),
            Err(e) => eprintln!("fulcrum: {e}"),
        },
        Err(e) => eprintln!("fulcrum: reload refused, the old configuration keeps serving: {e}"),
    });
    eprintln!("fulcrum: stopping; draining requests in flight for up to {}", humantime::format_duration(args.drain));
    proxy.shutdown(args.drain);
    if let Some(path) = &args.pid_file {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP, caught from the moment this is made.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    runtime: tokio::runtime::Runtime,
}

impl Signals {
    fn catch() -> std::io::Result<Signals> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let _context = runtime.enter();
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            runtime,
        })
    }

    /// Block until SIGINT or SIGTERM, calling `reload` on every SIGHUP.
    fn wait(self, mut reload: impl FnMut()) {
        let Signals { mut term, mut int, mut hup, runtime } = self;
        runtime.block_on(async {
            loop {
                tokio::select! {
                    _ = term.recv() => return,
                    _ = int.recv() => return,
                    _ = hup.recv() => reload(),
                }
            }
        })
    }
}

/// `fulcrum reload`: send SIGHUP to a running server.
pub fn reload(args: ReloadArgs) -> Result<(), Failure> {
    let pid = match (args.pid, &args.pid_file) {
        (Some(pid), _) => pid,
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| Failure::input(format!("cannot read {}: {e}", path.display())))?
            .trim()
            .parse()
            .map_err(|_| Failure::input(format!("{} does not hold a process id", path.display())))?,
        (None, None) => return Err(Failure::input("give --pid-file FILE or --pid N")),
    };
    if pid <= 0 {
        return Err(Failure::input(format!("{pid} is not a process id")));
    }
    // SAFETY: kill(2) with a positive pid and a valid signal number has no
    // memory-safety preconditions.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        return Err(Failure::runtime(format!("cannot signal process {pid}: {}", std::io::Error::last_os_error())));
    }
    eprintln!("fulcrum: asked process {pid} to reload its configuration");
    Ok(())
}
