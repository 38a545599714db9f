//! Writing reports: the JSON both simulators print and the CSV files they
//! write (`--csv DIR`), so that both quote and lay them out alike.

use std::fmt::{self, Write as _};
use std::io;
use std::path::Path;

use serde::Serialize;

/// `value` as one JSON line (a trailing newline included): reports that
/// append to a JSON-lines file.
pub fn json_line(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    text.push('\n');
    text
}

/// `value` as an indented JSON document (a trailing newline included).
pub fn json_document(value: &impl Serialize) -> String {
    let mut text =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    text.push('\n');
    text
}

/// One CSV file being written: a header line, then rows. A cell holding a
/// comma, a double quote or a line break is quoted, its quotes doubled
/// (RFC 4180); others are written as they display.
#[derive(Debug, Clone)]
pub struct Csv {
    text: String,
    columns: usize,
}

impl Csv {
    /// A file with these column names.
    pub fn new(header: &[&str]) -> Csv {
        let mut csv = Csv { text: String::new(), columns: header.len() };
        let cells: Vec<&dyn fmt::Display> = header.iter().map(|h| h as &dyn fmt::Display).collect();
        csv.row(&cells);
        csv
    }

    /// Append one row (as many cells as there are columns).
    pub fn row(&mut self, cells: &[&dyn fmt::Display]) {
        debug_assert_eq!(cells.len(), self.columns, "a row has one cell per column");
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                self.text.push(',');
            }
            let start = self.text.len();
            let _ = write!(self.text, "{cell}");
            if self.text[start..].contains([',', '"', '\n', '\r']) {
                let quoted = format!("\"{}\"", self.text[start..].replace('"', "\"\""));
                self.text.truncate(start);
                self.text.push_str(&quoted);
            }
        }
        self.text.push('\n');
    }

    /// The file's text so far.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Write the file at `path`.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, &self.text)
    }
}

/// What produced a report: Fulcrum's version, the git commit it was built
/// from (none when built outside a checkout), the digest of the resolved
/// scenario (`fulcrum_config::digest`), the seeds (`seed`, `seed + 1`, …,
/// `runs` of them) and the overrides (each `--set` as `KEY=VALUE`, then any
/// option that changed the scenario, as `--name=value`). The JSON reports
/// carry it as a top-level `provenance` object, the CSV files as leading
/// `# key=value` lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    pub fulcrum: String,
    pub commit: Option<String>,
    pub scenario_hash: String,
    pub seed: u64,
    pub runs: u64,
    pub overrides: Vec<String>,
}

impl Provenance {
    /// `digest` written as the `scenario_hash` field reads.
    pub fn hash_text(digest: u64) -> String {
        format!("xxh64:{digest:016x}")
    }

    /// The `# key=value` lines that open each CSV file (one `# override=` line
    /// per override, line breaks in a value turned into spaces).
    pub fn csv_comment(&self) -> String {
        let mut out = String::new();
        let mut line = |key: &str, value: &dyn fmt::Display| {
            let value = value.to_string().replace(['\n', '\r'], " ");
            let _ = writeln!(out, "# {key}={value}");
        };
        line("fulcrum", &self.fulcrum);
        line("commit", &self.commit.as_deref().unwrap_or(""));
        line("scenario_hash", &self.scenario_hash);
        line("seed", &self.seed);
        line("runs", &self.runs);
        for o in &self.overrides {
            line("override", o);
        }
        out
    }
}

/// Write each `(file name, csv)` into `dir`, creating it if needed, each
/// opened by the provenance's `# key=value` lines when there is one.
pub fn write_csv_files(dir: &Path, files: &[(&str, &Csv)], provenance: Option<&Provenance>) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let comment = provenance.map(Provenance::csv_comment).unwrap_or_default();
    files.iter().try_for_each(|(name, csv)| std::fs::write(dir.join(name), format!("{comment}{}", csv.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_quoted_only_when_they_must_be() {
        let mut csv = Csv::new(&["name", "value"]);
        csv.row(&[&"plain", &1.5]);
        csv.row(&[&"a,b", &format_args!("{:.2}", 2.0)]);
        csv.row(&[&"say \"hi\"", &"two\nlines"]);
        csv.row(&[&"", &None::<u64>.map_or(String::new(), |v| v.to_string())]);
        assert_eq!(csv.as_str(), "name,value\nplain,1.5\n\"a,b\",2.00\n\"say \"\"hi\"\"\",\"two\nlines\"\n,\n");
    }

    #[test]
    fn json_reports_end_with_a_newline() {
        #[derive(Serialize)]
        struct R {
            a: u32,
        }
        assert_eq!(json_line(&R { a: 1 }), "{\"a\":1}\n");
        assert_eq!(json_document(&R { a: 1 }), "{\n  \"a\": 1\n}\n");
    }

    #[test]
    fn provenance_opens_each_csv_file() {
        let p = Provenance {
            fulcrum: "1.2.3".into(),
            commit: None,
            scenario_hash: Provenance::hash_text(0xab),
            seed: 7,
            runs: 2,
            overrides: vec!["a.b=1".into(), "c=\"two\nlines\"".into()],
        };
        let dir = std::env::temp_dir().join(format!("fulcrum-provenance-{}", std::process::id()));
        let mut csv = Csv::new(&["x"]);
        csv.row(&[&1]);
        write_csv_files(&dir, &[("a.csv", &csv)], Some(&p)).unwrap();
        let text = std::fs::read_to_string(dir.join("a.csv")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            text,
            "# fulcrum=1.2.3\n# commit=\n# scenario_hash=xxh64:00000000000000ab\n# seed=7\n# runs=2\n\
             # override=a.b=1\n# override=c=\"two lines\"\nx\n1\n"
        );
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.starts_with("{\"fulcrum\":\"1.2.3\",\"commit\":null,\"scenario_hash\":\"xxh64:00000000000000ab\""));
    }
}
