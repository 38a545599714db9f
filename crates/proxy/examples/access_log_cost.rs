//! The cost of formatting access-log lines, for counting instructions per
//! line with callgrind (deterministic, unlike time on a busy machine):
//!
//! ```text
//! cargo build --release -p fulcrum-proxy --example access_log_cost
//! valgrind --tool=callgrind target/release/examples/access_log_cost json 100000
//! valgrind --tool=callgrind target/release/examples/access_log_cost json 0
//! ```
//!
//! The difference of the two totals over 100000 is the instructions one
//! line costs. The record is a typical proxied request (pooled connection,
//! no flags); the format is `json` or `text` (the default text format).

use std::time::{Duration, SystemTime};

use fulcrum_proxy::access_log::{Flags, Format, Record, Trace, DEFAULT_FORMAT};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: access_log_cost json|text LINES";
    let format = match args.next().as_deref() {
        Some("json") => Format::Json,
        Some("text") => Format::parse(DEFAULT_FORMAT)?,
        _ => return Err(usage.into()),
    };
    let lines: u64 = args.next().and_then(|n| n.parse().ok()).ok_or(usage)?;
    let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
    let mut record = Record {
        time: start,
        client: "127.0.0.1:51234".parse().map_err(|e| format!("{e}"))?,
        method: http::Method::GET,
        authority: Some("127.0.0.1:8080".into()),
        path: "/api/v1/items?page=2".into(),
        protocol: http::Version::HTTP_11,
        status: 200,
        bytes_in: 0,
        bytes_out: 1432,
        duration: Duration::from_micros(1_234),
        cluster: Some("web".into()),
        trace: Trace {
            route: None,
            cluster: Some(0),
            addr: Some("127.0.0.1:9001".parse().map_err(|e| format!("{e}"))?),
            endpoint: Some(1),
            retries: 0,
            connect: None,
            response: Some(Duration::from_micros(1_002)),
            flags: Flags::default(),
        },
        grpc_status: None,
        client_cert: None,
        request_id: None,
        trace_id: None,
    };
    let mut line = String::with_capacity(256);
    let mut total = 0usize;
    for i in 0..lines {
        // Requests 37 µs apart, so that the time changes as in a log.
        record.time = start + Duration::from_micros(37 * i);
        line.clear();
        record.line(&format, &mut line);
        total += line.len();
    }
    println!("{lines} lines, {total} bytes");
    Ok(())
}
