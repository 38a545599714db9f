//! `fulcrum backend`: start test upstreams and serve until SIGINT or SIGTERM.
//!
//! Raw flags become a [`BackendsConfig`] (one [`BackendSpec`] per backend,
//! on consecutive ports) before anything binds; the addresses go to stdout,
//! one a line, so scripts can read them.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::mpsc;

use clap::Args as ClapArgs;
use fulcrum_load::dist::{expand_list, parse_duration};
use fulcrum_load::{BackendSpec, Backends, BackendsConfig, DelayShape, Dist, StatusMix};

use crate::cli::Failure;

/// Options of `fulcrum backend`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum backend --listen 127.0.0.1:9001
  fulcrum backend --listen 127.0.0.1:9001 --count 10 --delays 5ms*9,50ms
  fulcrum backend --listen 127.0.0.1:0 --count 3 --delays 'exp(5ms)' --status 200:0.99,503:0.01
  fulcrum backend --listen 127.0.0.1:0 --count 2 --delays 'log-normal(5ms,0.5),empirical(lat.txt)'
  fulcrum backend --listen 127.0.0.1:9001 --echo

Every response carries `x-fulcrum-backend: <index>`; HTTP/1.1 and h2c are both spoken. The \
addresses listened on are printed on stdout, one a line.")]
pub struct Args {
    /// Address of the first backend; the others take the next ports (port 0:
    /// each a free port).
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: SocketAddr,

    /// Number of backends (default: the number of --delays).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    count: Option<u32>,

    /// Service times, one per backend or one for all, comma-separated, `X*N`
    /// repeats: 5ms*9,50ms. An item is a duration (shaped by --delay-dist),
    /// or any distribution the simulator knows: fixed(5ms), uniform(1ms,9ms),
    /// uniform-ms(10ms,50ms), exponential(5ms), log-normal(5ms,0.5) (median,
    /// sigma) or empirical(file) (one latency in ms per line).
    #[arg(long, default_value = "0ms")]
    delays: String,

    /// How a plain duration d in --delays is drawn: fixed, uniform (on
    /// [0, 2d]) or exponential (mean d).
    #[arg(long, default_value = "fixed")]
    delay_dist: String,

    /// Status codes: 200, or weighted: 200:0.99,503:0.01.
    #[arg(long, default_value = "200")]
    status: String,

    /// Size of each response body.
    #[arg(long, default_value_t = 0)]
    body_bytes: usize,

    /// Answer each request with what was received, as JSON: method, path (with query),
    /// authority, version, headers (lowercase names), body_bytes, backend (instead of
    /// --body-bytes zeros).
    #[arg(long)]
    echo: bool,

    /// Requests each backend serves at once; more wait in arrival order, and
    /// a service time starts when a slot frees (default: no limit).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: Option<u32>,

    /// Seed of the random delays and status codes.
    #[arg(long, default_value_t = 0)]
    seed: u64,

    /// Threads serving all the backends (one by default, leaving the other cores to what is
    /// measured).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
}

/// Turn the flags into backends to start.
fn config(args: &Args) -> Result<BackendsConfig, Failure> {
    let input = |flag: &'static str| move |e: fulcrum_load::ParseError| Failure::input(format!("{flag}: {e}"));
    let shape: DelayShape = args.delay_dist.parse().map_err(input("--delay-dist"))?;
    let status: StatusMix = args.status.parse().map_err(input("--status"))?;
    let delays = expand_list(&args.delays)
        .map_err(input("--delays"))?
        .iter()
        .map(|item| parse_duration(item).map(|d| shape.with_mean(d)).or_else(|_| item.parse::<Dist>()))
        .collect::<Result<Vec<Dist>, _>>()
        .map_err(input("--delays"))?;
    let count = args.count.map_or(delays.len(), |n| n as usize);
    let delays = match delays.as_slice() {
        [one] => vec![one.clone(); count],
        many if many.len() == count => delays,
        many => {
            return Err(Failure::input(format!("--delays gives {} delays for --count {count}", many.len())));
        }
    };
    let backends = delays
        .into_iter()
        .enumerate()
        .map(|(i, delay)| {
            let mut listen = args.listen;
            if listen.port() != 0 {
                let port = u16::try_from(listen.port() as usize + i).map_err(|_| {
                    Failure::input(format!("--count {count} from {} runs past port 65535", args.listen))
                })?;
                listen.set_port(port);
            }
            let body_bytes = args.body_bytes;
            Ok(BackendSpec {
                listen,
                delay,
                status: status.clone(),
                body_bytes,
                name: None,
                echo: args.echo,
                concurrency: args.concurrency,
            })
        })
        .collect::<Result<_, Failure>>()?;
    Ok(BackendsConfig { backends, seed: args.seed, threads: args.threads as usize })
}

/// Start the backends, print their addresses, serve until a signal.
pub fn run(args: Args) -> Result<(), Failure> {
    let config = config(&args)?;
    let described: Vec<String> = config.backends.iter().map(|b| b.delay.to_string()).collect();
    let backends = Backends::start(config).map_err(|e| Failure::runtime(format!("cannot start backends: {e}")))?;
    let (tx, rx) = mpsc::channel();
    crate::signal::on_signals(move |_| {
        let _ = tx.send(());
    })
    .map_err(|e| Failure::runtime(format!("cannot wait for signals: {e}")))?;

    let mut stdout = std::io::stdout().lock();
    for addr in backends.addrs() {
        let _ = writeln!(stdout, "{addr}");
    }
    let _ = stdout.flush();
    drop(stdout);
    eprintln!("fulcrum: {} backends ({}); Ctrl-C to stop", described.len(), summarize(&described));

    let _ = rx.recv();
    let served = backends.served();
    backends.shutdown();
    let served: Vec<String> = served.iter().map(u64::to_string).collect();
    eprintln!("fulcrum: stopped; responses per backend: {}", served.join(", "));
    Ok(())
}

/// `5ms, 5ms, 50ms` as `5ms×2, 50ms`.
fn summarize(items: &[String]) -> String {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for item in items {
        match runs.last_mut() {
            Some((last, n)) if *last == item.as_str() => *n += 1,
            _ => runs.push((item, 1)),
        }
    }
    let runs: Vec<String> =
        runs.iter().map(|&(item, n)| if n == 1 { item.to_string() } else { format!("{item}×{n}") }).collect();
    runs.join(", ")
}
