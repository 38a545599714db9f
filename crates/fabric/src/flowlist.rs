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
//! - Lines are read as every CSV input is (`fulcrum_config::csv`): a
//!   first line starting with `start` is a header; blank lines and lines
//!   starting with `#` are skipped; every error names the file, the line,
//!   the column and the column's name, e.g.
//!   `flows.csv:3:9: bytes: "12k" is not a whole number`.
//!
//! [`parse_ns3`] reads the other format the field's flows are published
//! in: the flow files of the HPCC simulator and the ns-3 datacenter forks
//! built on it (its `traffic_gen.py` writes them). The first line is the
//! number of flows; then one flow per line, separated by spaces:
//! `src dst priority_group dst_port bytes start_seconds`. The priority
//! group and the port have no counterpart here and are read and ignored:
//! every flow gets scheduler class 0 and host delay class 0.

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
    for row in fulcrum_config::csv::rows(text, COLUMNS[0]) {
        let cells = &row.cells;
        let fail = |col: usize, message: String| row.error(file, col, COLUMNS[col.min(5)], message);
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

/// The columns of an ns-3 (HPCC) flow file, in order.
const NS3_COLUMNS: [&str; 6] = ["src", "dst", "priority_group", "dst_port", "bytes", "start"];

/// Parse an ns-3 (HPCC) flow file `text` read from `file` (named in
/// errors); hosts must be below `hosts` and differ. The count on the first
/// line must match the flows that follow (a truncated file is an error,
/// not a shorter run).
pub fn parse_ns3(text: &str, file: &Path, hosts: u32) -> Result<Vec<FlowSpec>, Error> {
    // `column` is 1-based, in characters.
    let at = |line: usize, column: usize, field: &str, message: String| Error {
        line: line + 1,
        column,
        field: field.to_string(),
        ..Error::new(file, "", message)
    };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((first, count)) = lines.next() else {
        return Err(Error::new(file, "", "no flows"));
    };
    let count: usize = count.trim().parse().map_err(|_| {
        at(first, 1, "count", format!("the first line must be the number of flows, found {:?}", count.trim()))
    })?;
    let mut flows = Vec::with_capacity(count.min(1 << 24));
    for (i, line) in lines {
        let mut cells = [""; 7];
        let mut n = 0;
        for cell in line.split_whitespace().take(7) {
            cells[n] = cell;
            n += 1;
        }
        // The column of cell `col` (the end of the line for a missing one).
        let column = |col: usize| match cells.get(col).filter(|c| !c.is_empty()) {
            Some(c) => line[..c.as_ptr() as usize - line.as_ptr() as usize].chars().count() + 1,
            None => line.chars().count() + 1,
        };
        let fail = |col: usize, message: String| at(i, column(col), NS3_COLUMNS[col.min(5)], message);
        if n != 6 {
            let message = format!("expected src dst priority_group dst_port bytes start: found {n} columns");
            return Err(fail(n.min(6).saturating_sub(usize::from(n > 6)), message));
        }
        let number = |col: usize| -> Result<u64, Error> {
            cells[col].parse::<u64>().map_err(|_| fail(col, format!("{:?} is not a whole number", cells[col])))
        };
        let (src, dst) = (number(0)?, number(1)?);
        for (col, h) in [(0, src), (1, dst)] {
            if h >= u64::from(hosts) {
                return Err(fail(col, format!("there is no host {h} (hosts are 0 to {})", hosts - 1)));
            }
        }
        if src == dst {
            return Err(fail(1, format!("a flow from host {src} to itself")));
        }
        number(2)?;
        number(3)?;
        let bytes = number(4)?;
        if bytes == 0 {
            return Err(fail(4, "must be above 0".into()));
        }
        let start = cells[5]
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1.8e10)
            .ok_or_else(|| fail(5, format!("{:?} is not a time in seconds", cells[5])))?;
        let start = (start * 1e9).round() as Nanos;
        flows.push(FlowSpec { src: src as u32, dst: dst as u32, bytes, start, class: 0, prio: 0 });
    }
    if flows.len() != count {
        return Err(at(first, 1, "count", format!("the first line says {count} flows, the file has {}", flows.len())));
    }
    if flows.is_empty() {
        return Err(Error::new(file, "", "no flows"));
    }
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ns3_flow_files_as_hpcc_writes_them() {
        let text = "3\n0 3 3 100 20000 2.000000100\n1 3 3 100 30000 2.000001\n2 0 3 100 1 2.5\n";
        let flows = parse_ns3(text, Path::new("flow.txt"), 4).unwrap();
        assert_eq!(flows.len(), 3);
        assert_eq!((flows[0].src, flows[0].dst, flows[0].bytes, flows[0].start), (0, 3, 20_000, 2_000_000_100));
        assert_eq!(flows[1].start, 2_000_001_000);
        assert_eq!((flows[2].bytes, flows[2].class, flows[2].prio), (1, 0, 0));
        let e = |t: &str| parse_ns3(t, Path::new("flow.txt"), 4).unwrap_err().to_string();
        assert!(
            e("2\n0 3 3 100 20000 2.0\n")
                .starts_with("flow.txt:1:1: count: the first line says 2 flows, the file has 1"),
            "{}",
            e("2\n0 3 3 100 20000 2.0\n")
        );
        assert!(e("x\n").contains("count: the first line must be the number of flows"));
        assert!(e("1\n0 9 3 100 20000 2.0\n").starts_with("flow.txt:2:3: dst: there is no host 9"));
        assert!(e("1\n0 3 3 100 0 2.0\n").contains("bytes: must be above 0"));
        assert!(e("1\n0 3 3 100 10 -1\n").contains("start: \"-1\" is not a time"));
        assert!(
            e("1\n0 3 3 100 10\n").starts_with("flow.txt:2:13: start: expected src dst"),
            "{}",
            e("1\n0 3 3 100 10\n")
        );
        assert!(e("1\n0 3 3 100 x 1\n").starts_with("flow.txt:2:11: bytes: \"x\" is not"));
        assert!(e("1\n0 0 3 100 10 1\n").contains("to itself"));
        assert!(e("1\n0 1 3 100 10 1 7\n").contains("found 7 columns"));
        assert!(e("").contains("no flows"));
    }

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
