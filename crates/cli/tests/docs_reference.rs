//! The reference cannot drift from the code: every configuration and
//! scenario key the code deserialises, every metric family the proxy
//! exports and every path of its admin API is named in the reference pages
//! under `docs/reference/`. (The command line's reference is generated from
//! clap and checked by `cli_reference.rs`.)
//!
//! Keys are read from the source: every field of a struct that derives
//! `Deserialize` (with its `rename` or the struct's `rename_all`), and every
//! variant of such an enum (the values a key takes). A key is documented when
//! it appears in backticks in one of the pages named for its source file —
//! alone (`` `key` ``), as the last part of a dotted path
//! (`` `cluster.health.interval` ``), as a TOML table (`` `[key]` ``) or as
//! a quoted value (`` `"key"` ``).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn read(path: &str) -> String {
    let full = root().join(path);
    fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// `snake_case`, `kebab-case`, `lowercase` and `UPPERCASE` spellings of a
/// Rust identifier, as serde's `rename_all` makes them.
fn rename(ident: &str, rule: Option<&str>) -> String {
    let ident = ident.trim_start_matches("r#");
    let words = || {
        let mut words: Vec<String> = Vec::new();
        for (i, c) in ident.char_indices() {
            if c == '_' {
                words.push(String::new());
            } else if c.is_ascii_uppercase() && i > 0 {
                words.push(c.to_ascii_lowercase().to_string());
            } else {
                match words.last_mut() {
                    Some(w) => w.push(c.to_ascii_lowercase()),
                    None => words.push(c.to_ascii_lowercase().to_string()),
                }
            }
        }
        words.retain(|w| !w.is_empty());
        words
    };
    match rule {
        Some("kebab-case") => words().join("-"),
        Some("snake_case") => words().join("_"),
        Some("lowercase") => ident.to_ascii_lowercase(),
        Some("UPPERCASE") => ident.to_ascii_uppercase(),
        Some("SCREAMING_SNAKE_CASE") => words().join("_").to_ascii_uppercase(),
        _ => ident.to_string(),
    }
}

/// The value of `name = "…"` inside a `#[serde(…)]` attribute line.
fn attr(line: &str, name: &str) -> Option<String> {
    let at = line.find(&format!("{name} = \""))?;
    let rest = &line[at + name.len() + 4..];
    Some(rest[..rest.find('"')?].to_string())
}

/// Every key and value name a source file deserialises.
fn deserialised_names(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    // Unit tests' own types are no keys of the format.
    let lines: Vec<&str> = source.lines().take_while(|l| l.trim() != "#[cfg(test)]").collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if !(line.starts_with("#[derive(") && line.contains("Deserialize")) {
            i += 1;
            continue;
        }
        // The attributes between the derive and the item.
        let mut rule = None;
        let mut untagged = false;
        let mut j = i + 1;
        while j < lines.len() && lines[j].trim().starts_with("#[") {
            if let Some(r) = attr(lines[j], "rename_all") {
                rule = Some(r);
            }
            untagged |= lines[j].contains("untagged");
            j += 1;
        }
        while j < lines.len() && lines[j].trim().starts_with("///") {
            j += 1;
        }
        let item = lines.get(j).map_or("", |l| l.trim());
        let is_enum = item.contains("enum ");
        // An untagged enum's variants are shapes of a value, not names.
        if !(item.contains("struct ") || is_enum) || item.ends_with(';') || item.contains('(') || (is_enum && untagged)
        {
            i = j + 1;
            continue;
        }
        // The item's body: depth-one lines until its closing brace.
        let mut depth = item.matches('{').count() as i32 - item.matches('}').count() as i32;
        let mut pending_rename: Option<String> = None;
        let mut skip = false;
        let mut k = j + 1;
        while k < lines.len() && depth > 0 {
            let l = lines[k].trim();
            if depth == 1 {
                if l.starts_with("#[serde(") {
                    if let Some(r) = attr(l, "rename") {
                        pending_rename = Some(r);
                    }
                    skip |= l.contains("skip") || l.contains("flatten") || l.contains("other");
                } else if !l.starts_with("//") && !l.starts_with("#[") && !l.is_empty() {
                    let ident: String = l
                        .trim_start_matches("pub(crate) ")
                        .trim_start_matches("pub ")
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '#')
                        .collect();
                    let is_member = if is_enum {
                        ident.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    } else {
                        l.contains(':')
                    };
                    if is_member && !ident.is_empty() && !skip {
                        names.insert(pending_rename.take().unwrap_or_else(|| rename(&ident, rule.as_deref())));
                    }
                    pending_rename = None;
                    skip = false;
                }
            }
            depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
            k += 1;
        }
        i = k;
    }
    names
}

/// Every word written in backticks in the pages, however the key is
/// written there: `key`, `a.b.key`, `[a.key]`, `"key"`, `key = 1`,
/// `{ dist = "log-normal" }`, `header:NAME`; and a whole quoted value such as `"1.2"`.
fn documented(pages: &[&str]) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for page in pages {
        let text = read(page);
        for (n, span) in text.split('`').enumerate() {
            if n % 2 == 1 {
                let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
                words.extend(span.split(|c: char| !word(c)).filter(|w| !w.is_empty()).map(String::from));
                // A value that is not a word, such as `"1.2"`, as a whole.
                words.insert(span.trim_matches('"').to_string());
            }
        }
    }
    words
}

fn assert_documented(sources: &[&str], pages: &[&str]) {
    let docs = documented(pages);
    let mut missing = Vec::new();
    for source in sources {
        for name in deserialised_names(&read(source)) {
            if !docs.contains(&name) {
                missing.push(format!("{source}: `{name}`"));
            }
        }
    }
    assert!(missing.is_empty(), "in the code but not in {}:\n{}", pages.join(", "), missing.join("\n"));
}

#[test]
fn proxy_configuration_keys_are_in_the_reference() {
    assert_documented(
        &[
            "crates/proxy/src/config.rs",
            "crates/resilience/src/outlier.rs",
            "crates/resilience/src/rate_limit.rs",
            "crates/resilience/src/retry_budget.rs",
            "crates/resilience/src/retry_policy.rs",
            "crates/resilience/src/slow_start.rs",
        ],
        &["docs/reference/proxy-config.md"],
    );
}

#[test]
fn algorithm_parameters_are_in_the_reference() {
    assert_documented(
        &["crates/balance/src/config.rs", "crates/balance/src/hash.rs", "crates/balance/src/peak_ewma.rs"],
        &["docs/reference/algorithms.md"],
    );
}

#[test]
fn request_scenario_keys_are_in_the_reference() {
    assert_documented(
        &["crates/sim/src/scenario.rs", "crates/sim/src/resilience.rs", "crates/workload/src/dist.rs"],
        &["docs/reference/sim-scenario.md", "docs/explanation/statistics.md"],
    );
}

#[test]
fn fabric_scenario_keys_are_in_the_reference() {
    assert_documented(
        &[
            "crates/fabric/src/scenario.rs",
            "crates/fabric/src/metrics.rs",
            // Each scheme's parameters are defined next to it.
            "crates/fabric/src/lb/drb.rs",
            "crates/fabric/src/lb/letflow.rs",
            "crates/fabric/src/lb/drill.rs",
            "crates/fabric/src/lb/conga.rs",
            "crates/fabric/src/lb/clove.rs",
            "crates/fabric/src/lb/flowbender.rs",
            "crates/fabric/src/lb/hermes.rs",
            // So are each queue discipline's and congestion control's.
            "crates/fabric/src/aqm/threshold.rs",
            "crates/fabric/src/aqm/ecn_sharp.rs",
            "crates/fabric/src/aqm/pie.rs",
            "crates/fabric/src/codel.rs",
            "crates/fabric/src/cc.rs",
        ],
        &["docs/reference/fabric-scenario.md", "docs/reference/input-files.md"],
    );
}

#[test]
fn metric_families_are_in_the_reference() {
    let text = read("crates/proxy/src/metrics.rs");
    let source = text.split("#[cfg(test)]").next().unwrap_or_default();
    let docs = documented(&["docs/reference/metrics.md"]);
    let mut missing = Vec::new();
    for (n, literal) in source.split('"').enumerate() {
        let name: String = literal.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if n % 2 == 1 && name.starts_with("fulcrum_") && name.len() == literal.len() && !docs.contains(&name) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "metric families not in docs/reference/metrics.md: {missing:?}");
}

#[test]
fn admin_paths_are_in_the_reference() {
    let docs = read("docs/reference/admin-api.md");
    let mut missing = Vec::new();
    for source in ["crates/proxy/src/admin.rs", "crates/proxy/src/runtime.rs"] {
        let text = read(source);
        // Paths in unit tests are examples, not the API.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, literal) in code.split('"').enumerate() {
            let is_path = literal.starts_with('/')
                && literal.len() > 1
                && literal.chars().all(|c| c.is_ascii_alphanumeric() || "/_-".contains(c));
            if n % 2 == 1 && is_path && !docs.contains(literal) {
                missing.push(format!("{source}: {literal}"));
            }
        }
    }
    assert!(missing.is_empty(), "admin API paths not in docs/reference/admin-api.md: {missing:?}");
}

#[test]
fn the_scanner_reads_structs_and_enums() {
    let source = r#"
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThing {
    /// Docs.
    max_connections: Option<u32>,
    #[serde(rename = "listener")]
    listeners: Vec<RawListener>,
    #[serde(flatten)]
    rest: Other,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Round robin.
    RoundRobin,
    PeakEwma { decay: u32 },
}
"#;
    let names = deserialised_names(source);
    let expected: BTreeSet<String> =
        ["max_connections", "listener", "round-robin", "peak-ewma"].into_iter().map(String::from).collect();
    assert_eq!(names, expected);
    assert_eq!(rename("HttpTwo", Some("kebab-case")), "http-two");
    assert_eq!(rename("max_body", Some("kebab-case")), "max-body");
}
