//! Request traces: a CSV file of requests, replayed as the clients'
//! arrivals (`clients.loop = "trace"`, `clients.trace = "FILE"`).
//!
//! One request per line, `time,key,size[,service]`, read as every CSV
//! input is (`fulcrum_config::csv`: a header line starting with `time`,
//! blank lines and `#` comments skipped, errors naming the file, line,
//! column and column name):
//!
//! - `time`: when the request is sent, from `clients.start`: a duration
//!   (`1.5ms`) or a whole number of nanoseconds; never before the line
//!   above it;
//! - `key`: text, whose xxh64 is the key hash-based algorithms hash (the
//!   same text, the same key);
//! - `size`: the request's size in bytes (`1500`, `64KiB`), checked; the
//!   simulator has no bandwidth, so it does not change the run;
//! - `service`, optional (or empty): the time the server takes for this
//!   request, instead of a draw from its `service` distribution (a cold
//!   start still multiplies it).
//!
//! Lines are dealt to the clients in turn: line *i* is sent by client
//! *i* mod `clients.count`, through that client's balancer. The columns
//! are kept apart so that a trace costs 16 bytes a request (24 with
//! service times).

use std::path::Path;

use fulcrum_balance::hash::xxh64;
use fulcrum_balance::Nanos;
use fulcrum_config::{csv, parse_nanos, parse_size, Error};

/// A service-time cell left empty: the server draws one.
pub const DRAWN: Nanos = Nanos::MAX;

/// The columns, in order.
const COLUMNS: [&str; 4] = ["time", "key", "size", "service"];

/// A request trace, one entry per request in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// When each request is sent, from the clients' start.
    pub times: Vec<Nanos>,
    /// Each request's key (the xxh64 of the `key` cell).
    pub keys: Vec<u64>,
    /// Each request's service time ([`DRAWN`] where the cell is empty);
    /// empty when no line gives one.
    pub service: Vec<Nanos>,
}

impl Trace {
    /// Requests in the trace.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// Whether the trace has no request (never true of a loaded trace).
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// The service time of request `row`, if the trace gives it.
    #[inline]
    pub fn service(&self, row: usize) -> Option<Nanos> {
        self.service.get(row).copied().filter(|&t| t != DRAWN)
    }

    /// Read the trace at `path`.
    pub fn load(path: &Path) -> Result<Trace, Error> {
        let text = fulcrum_config::read_input(path)
            .map_err(|e| Error::new(path, "(file)", format!("cannot read the trace: {e}")))?;
        Trace::parse(&text, path)
    }

    /// Parse trace `text` read from `file` (named in errors).
    pub fn parse(text: &str, file: &Path) -> Result<Trace, Error> {
        let mut t = Trace { times: Vec::new(), keys: Vec::new(), service: Vec::new() };
        for row in csv::rows(text, COLUMNS[0]) {
            let cells = &row.cells;
            let fail = |col: usize, message: String| row.error(file, col, COLUMNS[col.min(3)], message);
            if !(3..=4).contains(&cells.len()) {
                let message = format!("expected time,key,size[,service]: found {} columns", cells.len());
                return Err(fail(cells.len().min(3), message));
            }
            let time = |col: usize| match cells[col].parse::<u64>() {
                Ok(ns) => Ok(ns),
                Err(_) => parse_nanos(cells[col]).map_err(|e| fail(col, e)),
            };
            let at = time(0)?;
            if let Some(&last) = t.times.last() {
                if at < last {
                    return Err(fail(
                        0,
                        format!("{} is before the line above ({last} ns): sort the trace by time", cells[0]),
                    ));
                }
            }
            parse_size(cells[2]).map_err(|e| fail(2, e))?;
            let service = match cells.get(3) {
                Some(s) if !s.is_empty() => Some(time(3)?).filter(|&s| s != DRAWN),
                _ => None,
            };
            if let Some(s) = service {
                // The first line with a service time: the lines above draw theirs.
                t.service.resize(t.times.len(), DRAWN);
                t.service.push(s);
            } else if !t.service.is_empty() {
                t.service.push(DRAWN);
            }
            t.times.push(at);
            t.keys.push(xxh64(cells[1].as_bytes(), 0));
        }
        if t.is_empty() {
            return Err(Error::new(file, "", "no requests"));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Trace, String> {
        Trace::parse(text, Path::new("t.csv")).map_err(|e| e.to_string())
    }

    #[test]
    fn lines_become_requests() {
        let t = p("time,key,size,service\n# c\n0,a,100\n1.5ms, b ,64KiB,2ms\n1500000,a,1,\n").unwrap();
        assert_eq!(t.times, [0, 1_500_000, 1_500_000]);
        assert_eq!(t.keys, [xxh64(b"a", 0), xxh64(b"b", 0), xxh64(b"a", 0)]);
        assert_eq!(t.service, [DRAWN, 2_000_000, DRAWN]);
        assert_eq!((t.service(0), t.service(1), t.service(2)), (None, Some(2_000_000), None));
        let t = p("0,a,1\n5,b,2\n").unwrap();
        assert!(t.service.is_empty(), "no service column costs nothing");
        assert_eq!(t.service(1), None);
    }

    #[test]
    fn errors_name_file_line_column_and_column_name() {
        assert!(p("0,a,1\nsoon,b,2\n").unwrap_err().starts_with("t.csv:2:1: time: "));
        assert_eq!(
            p("5ms,a,1\n1ms,b,2\n").unwrap_err(),
            "t.csv:2:1: time: 1ms is before the line above (5000000 ns): sort the trace by time"
        );
        assert!(p("0,a,12 parsecs\n").unwrap_err().starts_with("t.csv:1:5: size: "));
        assert!(p("0,a,1,fast\n").unwrap_err().starts_with("t.csv:1:7: service: "));
        assert_eq!(p("0,a\n").unwrap_err(), "t.csv:1:4: size: expected time,key,size[,service]: found 2 columns");
        assert!(p("0,a,1,2,3\n").unwrap_err().contains("found 5 columns"));
        assert_eq!(p("# nothing\n").unwrap_err(), "t.csv: no requests");
    }
}
