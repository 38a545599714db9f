//! `fulcrum load`: send HTTP load to a URL and report latency and errors.
//!
//! Raw flags become a [`LoadConfig`] before anything is sent; the run itself
//! is [`fulcrum_load::run_with`]. The report goes to stdout (a table, or
//! JSON with `--json`); a progress line goes to stderr when it is a terminal
//! and the run lasts over a second (`fulcrum_workload::progress`). The first Ctrl-C stops sending and
//! reports what was measured; a second one exits at once.

use std::io::Write;
use std::time::Duration;

use clap::Args as ClapArgs;
use fulcrum_load::{Clients, Control, LoadConfig, LoadError, Pattern};
use fulcrum_workload::progress;

use crate::cli::Failure;

/// Options of `fulcrum load`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum load http://127.0.0.1:8080/ --rate 2000 --duration 10s
  fulcrum load http://127.0.0.1:8080/ --connections 32 --requests 100000 --json
  fulcrum load https://127.0.0.1:8443/ --http3 --cacert ca.pem --connections 8 --streams 10 -d 10s
  fulcrum load http://127.0.0.1:8080/ --clients 10 --interval 100ms --requests-per-client 100 \\
      --client-start 1s --client-stagger 1ms

With --rate (open loop), latency counts from when each request was meant to be sent, so a \
stalled server shows in every request that should have gone out meanwhile (as in wrk2). \
Without --rate or --clients, --connections connections send back to back (closed loop). \
Without --duration or --requests, a run lasts 10 s.")]
pub struct Args {
    /// The URL to load (http:// or https://).
    url: String,

    /// Open loop: requests per second, latency from the intended send time.
    #[arg(long, value_name = "PER_SECOND", conflicts_with = "clients")]
    rate: Option<f64>,

    /// With --rate: exponential gaps between sends (Poisson arrivals, as
    /// from many independent users) instead of a fixed interval.
    #[arg(long, requires = "rate")]
    poisson: bool,

    /// Closed loop: the connections (default 10). Open loop: the most open
    /// at once (default 256). Clients: the most per client (default 16).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    connections: Option<u32>,

    /// Stop sending after this long (e.g. 10s, 500ms).
    #[arg(short, long, value_name = "DURATION", value_parser = fulcrum_config::parse_duration)]
    duration: Option<Duration>,

    /// Stop after this many requests.
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "clients", value_parser = clap::value_parser!(u64).range(1..))]
    requests: Option<u64>,

    /// Clients pattern: this many clients, each sending one request every
    /// --interval (open loop).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    clients: Option<u32>,

    /// Clients pattern: time between one client's requests.
    #[arg(long, value_name = "DURATION", requires = "clients", default_value = "100ms", value_parser = fulcrum_config::parse_duration)]
    interval: Duration,

    /// Clients pattern: requests each client sends.
    #[arg(long, value_name = "N", requires = "clients", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    requests_per_client: u64,

    /// Clients pattern: when the first client starts.
    #[arg(long, value_name = "DURATION", requires = "clients", default_value = "0s", value_parser = fulcrum_config::parse_duration)]
    client_start: Duration,

    /// Clients pattern: client i starts at --client-start + i × this.
    #[arg(long, value_name = "DURATION", requires = "clients", default_value = "1ms", value_parser = fulcrum_config::parse_duration)]
    client_stagger: Duration,

    /// Speak HTTP/2: h2c (prior knowledge) for http://, ALPN h2 for https://.
    #[arg(long, conflicts_with = "http3")]
    http2: bool,

    /// Speak HTTP/3 over QUIC (https:// only).
    #[arg(long)]
    http3: bool,

    /// HTTP/2 and HTTP/3: concurrent streams per connection.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    streams: u32,

    /// https://: verify the server against this CA bundle (PEM) instead of
    /// the built-in Mozilla roots.
    #[arg(long, value_name = "FILE")]
    cacert: Option<std::path::PathBuf>,

    /// Request method.
    #[arg(short = 'X', long, default_value = "GET")]
    method: String,

    /// Extra request header, `Name: value`; repeat for more.
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    headers: Vec<String>,

    /// Size of each request body.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    body_bytes: usize,

    /// Per-request limit, from the intended send time.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = fulcrum_config::parse_duration)]
    timeout: Duration,

    /// Threads sending the load (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: Option<u32>,

    /// Print the report as JSON on stdout (nothing else goes to stdout).
    #[arg(long)]
    json: bool,

    /// Draw the progress line even when stderr is not a terminal.
    #[arg(long, hide = true)]
    progress: bool,
}

/// Turn the flags into a run.
fn config(args: &Args) -> Result<LoadConfig, Failure> {
    let headers = args
        .headers
        .iter()
        .map(|h| match h.split_once(':') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => Err(Failure::input(format!("--header {h:?}: expected Name: value"))),
        })
        .collect::<Result<_, _>>()?;
    let pattern = match (args.rate, args.clients) {
        (Some(rate), _) => Pattern::OpenLoop { rate },
        (None, Some(clients)) => Pattern::Clients(Clients {
            clients: clients as usize,
            interval: args.interval,
            requests_per_client: args.requests_per_client,
            start: args.client_start,
            stagger: args.client_stagger,
        }),
        (None, None) => Pattern::ClosedLoop,
    };
    if args.streams > 1 && !(args.http2 || args.http3) {
        return Err(Failure::input("--streams needs --http2 or --http3 (HTTP/1.1 sends one request at a time)"));
    }
    let unbounded = args.duration.is_none() && args.requests.is_none() && args.clients.is_none();
    Ok(LoadConfig {
        url: args.url.clone(),
        method: args.method.clone(),
        headers,
        body_bytes: args.body_bytes,
        http2: args.http2,
        http3: args.http3,
        ca: args.cacert.clone(),
        pattern,
        connections: args.connections.map(|c| c as usize),
        streams: args.streams as usize,
        duration: if unbounded { Some(Duration::from_secs(10)) } else { args.duration },
        requests: args.requests,
        timeout: args.timeout,
        threads: args.threads.map_or(0, |t| t as usize),
        poisson: args.poisson,
    })
}

/// One line saying what the run does, above the table.
fn describe(c: &LoadConfig) -> String {
    let d = |d: Duration| humantime::format_duration(d).to_string();
    let what = match &c.pattern {
        Pattern::OpenLoop { rate } if c.poisson => format!("open loop at {rate} req/s (Poisson)"),
        Pattern::OpenLoop { rate } => format!("open loop at {rate} req/s"),
        Pattern::ClosedLoop => "closed loop".to_string(),
        Pattern::Clients(k) => format!(
            "{} clients × {} requests every {}, from {} ({} apart)",
            k.clients,
            k.requests_per_client,
            d(k.interval),
            d(k.start),
            d(k.stagger)
        ),
    };
    let mut bounds = Vec::new();
    if let Some(x) = c.duration {
        bounds.push(d(x));
    }
    if let Some(n) = c.requests {
        bounds.push(format!("{n} requests"));
    }
    let tls = c.url.starts_with("https:");
    let proto = match c.protocol() {
        fulcrum_load::Protocol::Http3 => "HTTP/3",
        fulcrum_load::Protocol::Http2 if tls => "HTTP/2 over TLS",
        fulcrum_load::Protocol::Http2 => "h2c",
        fulcrum_load::Protocol::Http1 if tls => "HTTP/1.1 over TLS",
        fulcrum_load::Protocol::Http1 => "HTTP/1.1",
    };
    let bounds = if bounds.is_empty() { String::new() } else { format!("; {}", bounds.join(", at most ")) };
    format!("{} {}: {what}{bounds}; {proto}", c.method, c.url)
}

/// Send the load, print the report.
pub fn run(args: Args) -> Result<(), Failure> {
    let config = config(&args)?;
    let control = Control::new();
    let stopper = control.clone();
    crate::signal::on_signals(move |n| match n {
        1 => {
            eprintln!("\nfulcrum: stopping; finishing requests in flight (Ctrl-C again to quit now)");
            stopper.stop();
        }
        _ => std::process::exit(130),
    })
    .map_err(|e| Failure::runtime(format!("cannot wait for signals: {e}")))?;

    let result = progress::while_running(progress::wanted(args.progress), status_line(&control), || {
        fulcrum_load::run_with(&config, &control)
    });
    let report = result.map_err(|e| match e {
        LoadError::Config(_) | LoadError::Resolve(_) => Failure::input(e.to_string()),
        LoadError::Io(_) => Failure::runtime(e.to_string()),
    })?;

    let text = if args.json { report.json() } else { format!("{}\n{}", describe(&config), report.table()) };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::runtime(format!("writing the report: {e}")))
}

/// The live totals of a run, with the request rate over the last second
/// or more.
fn status_line(control: &Control) -> impl FnMut(Duration) -> String + Send + '_ {
    let mut last = (Duration::ZERO, 0u64, 0.0f64);
    move |elapsed| {
        let requests = control.requests();
        if elapsed - last.0 >= Duration::from_secs(1) {
            last = (elapsed, requests, (requests - last.1) as f64 / (elapsed - last.0).as_secs_f64());
        }
        format!(
            "{:>6.1} s  {requests:>10} requests  {:>9.0} req/s  {:>8} errors",
            elapsed.as_secs_f64(),
            last.2,
            control.errors()
        )
    }
}
