//! The comma-separated input files (the fabric's flow lists, the request
//! simulator's traces), read line by line into cells that know where they
//! were written, so that a bad cell is reported as every configuration
//! error is: `flows.csv:3:9: bytes: "12k" is not a whole number`.
//!
//! Blank lines and lines starting with `#` are skipped; a first line
//! starting with the first column's name is a header and skipped too.
//! Cells are trimmed; there is no quoting (no cell holds a comma).

use std::path::Path;

use crate::Error;

/// One data line of a CSV file.
pub struct Row<'a> {
    /// 1-based line number.
    pub line: usize,
    /// The trimmed cells.
    pub cells: Vec<&'a str>,
    /// Where each cell starts, 1-based, in characters.
    starts: Vec<usize>,
    /// The line's length in characters, plus one: where a missing cell is.
    end: usize,
}

impl Row<'_> {
    /// An error about cell `col`, named `field` (the end of the line when
    /// the row has no such cell).
    pub fn error(&self, file: &Path, col: usize, field: &str, message: impl Into<String>) -> Error {
        Error {
            line: self.line,
            column: self.starts.get(col).copied().unwrap_or(self.end),
            ..Error::new(file, field, message)
        }
    }
}

/// The data lines of `text`, whose first column is named `first` (a line
/// starting with it before any data is the header).
pub fn rows<'a>(text: &'a str, first: &'a str) -> impl Iterator<Item = Row<'a>> + 'a {
    let mut data = false;
    text.lines().enumerate().filter_map(move |(i, line)| {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || (!data && t.starts_with(first)) {
            return None;
        }
        data = true;
        let mut cells = Vec::with_capacity(8);
        let mut starts = Vec::with_capacity(8);
        let (mut at, mut chars) = (0, 0);
        for raw in line.split(',') {
            let lead = raw.len() - raw.trim_start().len();
            starts.push(chars + line[at..at + lead].chars().count() + 1);
            chars += raw.chars().count() + 1;
            at += raw.len() + 1;
            cells.push(raw.trim());
        }
        Some(Row { line: i + 1, cells, starts, end: line.chars().count() + 1 })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_skip_comments_blanks_and_the_header_and_locate_cells() {
        let text = "time,key\n# note\n\n 1ms , é,x\ntime,2\n";
        let rows: Vec<Row> = rows(text, "time").collect();
        assert_eq!(rows.len(), 2, "a header after data is data");
        assert_eq!((rows[0].line, rows[0].cells.clone()), (4, vec!["1ms", "é", "x"]));
        let e = |r: &Row, col| r.error(Path::new("t.csv"), col, "f", "bad").to_string();
        assert_eq!(e(&rows[0], 0), "t.csv:4:2: f: bad");
        assert_eq!(e(&rows[0], 2), "t.csv:4:10: f: bad", "columns count characters");
        assert_eq!(e(&rows[0], 5), "t.csv:4:11: f: bad", "a missing cell is at the end");
        assert_eq!(rows[1].cells, ["time", "2"]);
    }
}
