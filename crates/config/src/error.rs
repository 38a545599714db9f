//! The one error every configuration file and scenario reports.

use std::fmt;
use std::path::PathBuf;

/// A value a configuration file or a scenario does not accept, located
/// where it was written.
///
/// It reads `file:line:column: field: message`, e.g.
/// `scenarios/x.toml:12:8: workload.load: must be above 0 and below 1, not 1.2`.
/// A value that came from the command line's `--set KEY=VALUE` is located
/// there instead: `--set workload.load=1.2: workload.load: …`. Without a
/// known position (a table that is missing altogether) the file stands
/// alone: `scenarios/x.toml: servers: at least one [[servers]] is needed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The file (or `<command line>`).
    pub file: PathBuf,
    /// 1-based line of the offending value (0 when unknown, or from `--set`).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The `--set KEY=VALUE` the offending value came from, if it did.
    pub set: Option<String>,
    /// Dotted path of the field, e.g. `cluster[0].endpoints[1].weight`
    /// (`(syntax)` for text that is not TOML).
    pub field: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl Error {
    /// An error about `field` of `file`, at no particular position.
    pub fn new(file: impl Into<PathBuf>, field: impl Into<String>, message: impl Into<String>) -> Error {
        Error { file: file.into(), line: 0, column: 0, set: None, field: field.into(), message: message.into() }
    }

    /// Where the value was written: `file:line:column`, `file`, or `--set KEY=VALUE`.
    pub fn location(&self) -> String {
        match &self.set {
            Some(set) => format!("--set {set}"),
            None if self.line == 0 => self.file.display().to_string(),
            None => format!("{}:{}:{}", self.file.display(), self.line, self.column),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.location())?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_file_line_column_field_message() {
        let mut e = Error::new("x.toml", "workload.load", "must be below 1");
        assert_eq!(e.to_string(), "x.toml: workload.load: must be below 1");
        (e.line, e.column) = (12, 8);
        assert_eq!(e.to_string(), "x.toml:12:8: workload.load: must be below 1");
        e.set = Some("workload.load=1.2".into());
        assert_eq!(e.to_string(), "--set workload.load=1.2: workload.load: must be below 1");
    }
}
