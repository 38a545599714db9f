//! Explicit flow lists: a CSV file with one flow per line,
//! `start,src,dst,bytes[,class[,delay]]`, for replaying a trace or writing
//! a scenario flow by flow (e.g. the flow list an ns-3 run generated, to
//! compare the two models on the same flows: `bench/ns3/`).
//!
//! - `start` is a duration (`10us`, `1.5ms`) or a whole number of
//!   nanoseconds; `src` and `dst` are host numbers; `bytes` is the payload;
//!   `class`, optional, is the scheduler class of the flow's packets
//!   (0 when left out); `delay`, optional, is the flow's host delay class,
//!   an index into `hosts.delay_classes` (0 when left out), as the original's
//!   per-flow TOS picks it.
//! - A first line starting with `start` is a header and skipped; blank
//!   lines and lines starting with `#` are skipped.
//! - Every error names the file, the line, the column (1-based, in
//!   characters) and the column's name, as every configuration error does
//!   (`fulcrum_config::Error`), e.g.
//!   `flows.csv:3:9: bytes: "12k" is not a whole number`.

use std::path::Path;

use fulcrum_config::{parse_nanos, Error};

use crate::packet::Nanos;
use crate::workload::FlowSpec;

/// The columns, in order.
const COLUMNS: [&str; 6] = ["start", "src", "dst", "bytes", "class", "delay"];

/// Parse the flow list `text` read from `file` (named in errors). Hosts
/// must be below `hosts` and differ; classes below `classes`; delay classes
/// below `delays` (a scenario without delay classes accepts only 0).
pub fn parse(text: &str, file: &Path, hosts: u32, classes: u32, delays: u32) -> Result<Vec<FlowSpec>, Error> {
    let mut flows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || (flows.is_empty() && t.starts_with("start")) {
            continue;
        }
        let cells: Vec<&str> = t.split(',').map(str::trim).collect();
        // Where each cell starts in the line, in characters (1-based).
        let mut starts = Vec::with_capacity(cells.len());
        let mut at = line.len() - line.trim_start().len();
        for raw in t.split(',') {
            starts.push(line[..at + raw.len() - raw.trim_start().len()].chars().count() + 1);
            at += raw.len() + 1;
        }
        let fail = |col: usize, message: String| Error {
            line: i + 1,
            column: starts.get(col).copied().unwrap_or(line.chars().count() + 1),
            field: COLUMNS[col.min(5)].to_string(),
            ..Error::new(file, "", message)
        };
        if !(4..=6).contains(&cells.len()) {
            return Err(fail(
                cells.len().min(5),
                format!("expected start,src,dst,bytes[,class[,delay]]: found {} columns", cells.len()),
            ));
        }
        let start: Nanos = match cells[0].parse::<u64>() {
            Ok(ns) => ns,
            Err(_) => parse_nanos(cells[0]).map_err(|e| fail(0, e))?,
        };
        let number = |col: usize| -> Result<u64, Error> {
            cells[col].parse::<u64>().map_err(|_| fail(col, format!("{:?} is not a whole number", cells[col])))
        };
        let host = |col: usize| -> Result<u32, Error> {
            let h = number(col)?;
            if h < hosts as u64 {
                Ok(h as u32)
            } else {
                Err(fail(col, format!("there is no host {h} (hosts are 0 to {})", hosts - 1)))
            }
        };
        let (src, dst) = (host(1)?, host(2)?);
        if src == dst {
            return Err(fail(2, format!("a flow from host {src} to itself")));
        }
        let bytes = number(3)?;
        if bytes == 0 {
            return Err(fail(3, "must be above 0".into()));
        }
        let class = if cells.len() >= 5 { number(4)? } else { 0 };
        if class >= classes as u64 {
            return Err(fail(4, format!("the scheduler has no such class (found {class})")));
        }
        let delay = if cells.len() == 6 { number(5)? } else { 0 };
        if delay >= u64::from(delays.max(1)) {
            return Err(fail(5, format!("hosts.delay_classes has no such class (found {delay})")));
        }
        flows.push(FlowSpec { src, dst, bytes, start, class: delay as u8, prio: class as u8 });
    }
    if flows.is_empty() {
        return Err(Error::new(file, "", "no flows"));
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<FlowSpec>, String> {
        parse(text, Path::new("flows.csv"), 4, 2, 3).map_err(|e| e.to_string())
    }

    #[test]
    fn lines_become_flows() {
        let f = p("start,src,dst,bytes,class\n# a comment\n0,0,1,1000\n\n1.5ms, 2, 3, 28000, 1\n2500,3,0,5\n").unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0], FlowSpec { src: 0, dst: 1, bytes: 1000, start: 0, class: 0, prio: 0 });
        assert_eq!((f[1].start, f[1].src, f[1].dst, f[1].bytes, f[1].prio), (1_500_000, 2, 3, 28_000, 1));
        assert_eq!(f[2].start, 2500);
        let f = p("0,0,1,1000,1,2\n5us,1,0,10,0\n").unwrap();
        assert_eq!((f[0].class, f[0].prio, f[1].class), (2, 1, 0));
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = p("0,0,1,1000\n0,0,1,12k\n").unwrap_err();
        assert_eq!(e, "flows.csv:2:7: bytes: \"12k\" is not a whole number");
        let e = p("0, 0, 9, 1\n").unwrap_err();
        assert!(e.starts_with("flows.csv:1:7: dst: there is no host 9"), "{e}");
        let e = p("soon,0,1,1\n").unwrap_err();
        assert!(e.starts_with("flows.csv:1:1: start: "), "{e}");
        let e = p("0,0,1\n").unwrap_err();
        assert!(e.starts_with("flows.csv:1:6: bytes: ") && e.contains("found 3 columns"), "{e}");
        let e = p("0,1,1,5\n").unwrap_err();
        assert!(e.starts_with("flows.csv:1:5: dst: ") && e.contains("to itself"), "{e}");
        let e = p("0,0,1,5,2\n").unwrap_err();
        assert!(e.starts_with("flows.csv:1:9: class: ") && e.contains("no such class"), "{e}");
        let e = p("0,0,1,5,0,3\n").unwrap_err();
        assert!(e.starts_with("flows.csv:1:11: delay: ") && e.contains("delay_classes has no such class"), "{e}");
        let e = p("0,0,1,5,0,1,9\n").unwrap_err();
        assert!(e.contains("found 7 columns"), "{e}");
        assert!(p("# nothing\n").unwrap_err().contains("no flows"));
    }
}
