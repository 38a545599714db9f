//! The user documentation stays written for users: the README and every page
//! under `docs/` outside `docs/results/` carry no commit hashes, clock times,
//! load averages or references to issue numbers (git keeps the history;
//! results pages carry one provenance line per figure, itself without
//! commits, clock times or load averages), the README stays
//! short, and `docs/` outside `docs/results/` stays within its size budget.
//! A line that breaks a rule is reported with its file and line number.

use std::fs;
use std::path::{Path, PathBuf};

/// The README's limit, in lines.
const README_LINES: usize = 150;
/// The limit for `docs/` outside `docs/results/`, in lines.
const DOCS_LINES: usize = 6_000;

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The README and the Markdown pages under `docs/` outside `docs/results/`.
fn user_pages() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    collect(&root.join("docs"), Some(&root.join("docs/results")), &mut files);
    files.sort();
    files
}

fn collect(dir: &Path, skip: Option<&Path>, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if Some(path.as_path()) == skip {
            continue;
        }
        if path.is_dir() {
            collect(&path, skip, files);
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
}

/// A word of 7 to 40 hexadecimal digits with at least one digit and one
/// letter: what `git log --oneline` prints. `0x…` constants are not words
/// here (the `x` joins them to the prefix).
fn commit_hash(line: &str) -> Option<&str> {
    line.split(|c: char| !c.is_ascii_alphanumeric()).find(|w| {
        (7..=40).contains(&w.len())
            && w.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars().any(|c| c.is_ascii_alphabetic())
    })
}

/// A clock time `H:MM` or `HH:MM` (optionally `:SS`) standing alone: not part
/// of an address (`127.0.0.1:8080`, `[::1]:80`) or a longer number.
fn clock_time(line: &str) -> Option<String> {
    let b = line.as_bytes();
    for i in 0..b.len() {
        if b[i] != b':' || i == 0 {
            continue;
        }
        // Hours: one or two digits right before the colon.
        let mut start = i;
        while start > 0 && b[start - 1].is_ascii_digit() && i - start < 3 {
            start -= 1;
        }
        let hours = i - start;
        if !(1..=2).contains(&hours) {
            continue;
        }
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b"._:[/-".contains(&b[start - 1])) {
            continue;
        }
        // Minutes: exactly two digits, not followed by another digit, a dot
        // or a colon-and-digit that is not seconds.
        if i + 2 >= b.len() || !b[i + 1].is_ascii_digit() || !b[i + 2].is_ascii_digit() {
            continue;
        }
        let after = b.get(i + 3).copied();
        if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.') {
            continue;
        }
        let hour: u32 = line[start..i].parse().unwrap_or(99);
        let minute: u32 = line[i + 1..i + 3].parse().unwrap_or(99);
        if hour < 24 && minute < 60 {
            return Some(line[start..i + 3].to_string());
        }
    }
    None
}

/// `#123` standing alone (after a space, a parenthesis or at the start), or
/// the word "issue" before a number: a reference to an issue the reader of a
/// clone cannot see. `owner/repo#123` (another project's tracker) is allowed.
fn issue_reference(line: &str) -> Option<String> {
    let b = line.as_bytes();
    for i in 0..b.len() {
        if b[i] == b'#' && b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
            let before = if i == 0 { b' ' } else { b[i - 1] };
            if before == b' ' || before == b'(' {
                let end = (i + 1..b.len()).find(|&j| !b[j].is_ascii_digit()).unwrap_or(b.len());
                return Some(line[i..end].to_string());
            }
        }
    }
    let lower = line.to_ascii_lowercase();
    for (at, _) in lower.match_indices("issue ") {
        let rest = &lower[at + 6..];
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(line[at..at + 6 + rest.chars().take_while(char::is_ascii_digit).count()].to_string());
        }
    }
    None
}

/// The results pages, which carry figures and their provenance lines.
fn results_pages() -> Vec<PathBuf> {
    let root = root();
    let mut files = Vec::new();
    collect(&root.join("docs/results"), None, &mut files);
    files.sort();
    files
}

/// The lines of `files` that carry history: commit hashes, clock times,
/// load averages and, when `issues`, issue references.
fn history(files: Vec<PathBuf>, issues: bool) -> Vec<String> {
    let root = root();
    let mut problems = Vec::new();
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else { continue };
        let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            let at = format!("{name}:{}", i + 1);
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if let Some(hash) = commit_hash(line) {
                problems.push(format!("{at}: a commit hash `{hash}`"));
            }
            if let Some(time) = clock_time(line) {
                problems.push(format!("{at}: a clock time `{time}`"));
            }
            if line.to_ascii_lowercase().contains("load average") {
                problems.push(format!("{at}: a load average"));
            }
            // In a program's output `#3` is a server's index, not an issue.
            if let Some(issue) = issue_reference(line).filter(|_| issues && !fenced) {
                problems.push(format!("{at}: an issue reference `{issue}`"));
            }
        }
    }
    problems
}

#[test]
fn user_pages_carry_no_history() {
    let problems = history(user_pages(), true);
    assert!(
        problems.is_empty(),
        "user documentation carries history (move figures to docs/results/, delete the rest):\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_and_docs_stay_within_their_size() {
    let root = root();
    let lines = |path: &Path| fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0);
    let readme = lines(&root.join("README.md"));
    assert!(readme <= README_LINES, "README.md has {readme} lines, the limit is {README_LINES}");
    let docs: usize = user_pages().iter().filter(|p| p.starts_with(root.join("docs"))).map(|p| lines(p)).sum();
    assert!(docs <= DOCS_LINES, "docs/ outside docs/results/ has {docs} lines, the limit is {DOCS_LINES}");
}

#[test]
fn the_detectors_find_what_they_look_for() {
    assert_eq!(commit_hash("at main e10060d, quiet"), Some("e10060d"));
    assert_eq!(commit_hash("the map 0xdeadbeef1 and 1234567"), None);
    assert_eq!(commit_hash("a feedbeef word"), None);
    assert_eq!(clock_time("2026-11-24 15:50–15:52 UTC"), Some("15:50".into()));
    assert_eq!(clock_time("run at 9:05"), Some("9:05".into()));
    assert_eq!(clock_time("listen 127.0.0.1:8080 and [::1]:80, weights 2:1:1"), None);
    assert_eq!(clock_time("--endpoints 10.0.0.1:1,10.0.0.2:25"), None);
    assert_eq!(clock_time("`key = \"a:bc\"`, ratio 3:20x"), None);
    assert_eq!(issue_reference("as issue #14 asked"), Some("#14".into()));
    assert_eq!(issue_reference("(#27)"), Some("#27".into()));
    assert_eq!(issue_reference("see issue 13"), Some("issue 13".into()));
    assert_eq!(issue_reference("cilium/cilium#23033, ## Heading, a#1"), None);
}

/// A results page's provenance line says the day, the machine and the
/// command: not the commit, the clock time or how busy the machine was.
#[test]
fn results_pages_carry_no_commits_clock_times_or_load_averages() {
    let problems = history(results_pages(), false);
    assert!(problems.is_empty(), "results pages carry history:\n{}", problems.join("\n"));
}
