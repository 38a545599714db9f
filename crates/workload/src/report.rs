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

/// Write each `(file name, csv)` into `dir`, creating it if needed.
pub fn write_csv_files(dir: &Path, files: &[(&str, &Csv)]) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    files.iter().try_for_each(|(name, csv)| csv.write(&dir.join(name)))
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
}
