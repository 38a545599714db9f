//! The documentation's relative links resolve: every `[text](path#anchor)` in
//! the README and the Markdown files under `docs/`, `bench/`, `fuzz/` and
//! `scenarios/` names a file of the repository and, when it has an anchor, a
//! heading of that file. Pages move and headings get renamed; a link that
//! silently points nowhere is the failure this catches. Anchors are made the
//! way GitHub makes them: the heading lower-cased, punctuation other than
//! `-` and `_` dropped, spaces turned into `-`, and `-1`, `-2`, … appended to
//! repeats.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The Markdown files whose links are checked.
fn markdown_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "bench", "fuzz", "scenarios"] {
        collect(&root.join(dir), &mut files);
    }
    files
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            // Build output and the fuzzer's inputs hold no documentation.
            if name != "target" && name != "corpus" && name != "artifacts" {
                collect(&path, files);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
}

/// Lines outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of inline links `](target)` on one line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !target.contains(char::is_whitespace) {
            out.push(target);
        }
        rest = &rest[end..];
    }
    out
}

fn is_external(target: &str) -> bool {
    target
        .split_once(':')
        .is_some_and(|(scheme, _)| !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphabetic()))
}

/// Every broken relative link in `file`, as `file:line: target: why`.
fn broken_links(file: &Path) -> Vec<String> {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut broken = Vec::new();
    for (number, line) in prose(&text) {
        for target in link_targets(line) {
            if is_external(target) {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
            let at = format!("{}:{number}: {target}", file.display());
            if !resolved.exists() {
                broken.push(format!("{at}: no such file"));
                continue;
            }
            if anchor.is_empty() || resolved.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let linked = fs::read_to_string(&resolved).unwrap_or_else(|e| panic!("{}: {e}", resolved.display()));
            if !anchors(&linked).iter().any(|a| a == anchor) {
                broken.push(format!("{at}: no heading makes #{anchor}"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_resolves() {
    let files = markdown_files();
    assert!(files.iter().any(|f| f.ends_with("docs/reference/sim-scenario.md")), "docs/ not found: {files:?}");
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_github() {
    let text = "# Fulcrum\n## The `Balancer` trait\n```\n## not a heading\n```\n## What `scripts/test` runs\n## Tests\n## Tests\n";
    assert_eq!(anchors(text), ["fulcrum", "the-balancer-trait", "what-scriptstest-runs", "tests", "tests-1"]);
}

#[test]
fn a_broken_link_is_reported() {
    let dir = std::env::temp_dir().join(format!("fulcrum-docs-links-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.md");
    fs::write(&page, "# Page\n## Here\n[ok](#here) [gone](#there) [none](missing.md) [web](https://example.com/x)\n")
        .unwrap();
    let broken = broken_links(&page);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].ends_with("#there: no heading makes #there"), "{broken:?}");
    assert!(broken[1].ends_with("missing.md: no such file"), "{broken:?}");
}
