//! `fulcrum reference`: the command-line reference in Markdown, made from
//! the same clap definitions as the parser (docs/reference/cli.md is its
//! output, and `tests/cli_reference.rs` fails when the two differ).
//!
//! Each command gets its description, its usage line, one list item per
//! argument (the whole help text of the argument, its default and its
//! values) and its examples: what `--help` says, in a form that reads as a
//! reference rather than a terminal.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::cli::HELP_WIDTH;

const HEADER: &str = "# Command-line reference\n\n\
    <!-- Generated from the code by `fulcrum reference`; do not edit. Regenerate with\n     \
    FULCRUM_BLESS=1 cargo test -p fulcrum --test cli_reference -->\n\n\
    Every command and option of `fulcrum`, from the same definitions as its `--help`.\n\
    Conventions: `--json` prints machine output (sim, fabric, load, ctl, lb); `--threads N`\n\
    is the number of threads doing the work; `--plot FILE.svg` draws a figure; `-c` is\n\
    `--config`. Global options of `ctl` and `lb` go before or after the subcommand. Run\n\
    `scripts/install` once for `fulcrum` on your PATH, its shell completions and\n\
    `man fulcrum`.\n\n";

/// Every visible command, in tree order, under a heading of its own, after
/// one line of links to them all.
pub fn markdown(cmd: clap::Command) -> String {
    let mut cmd = cmd.term_width(HELP_WIDTH).disable_help_subcommand(true);
    cmd.build();
    let mut sections = Vec::new();
    walk(&mut cmd, &BTreeSet::new(), &BTreeSet::new(), &mut sections);
    let mut out = String::from(HEADER);
    let mut links = Vec::new();
    for (i, section) in sections.iter().enumerate().filter(|(_, s)| s.depth == 1) {
        let subs: Vec<String> = sections[i + 1..]
            .iter()
            .take_while(|s| s.depth > 1)
            .map(|s| format!("[`{}`](#{})", s.path.rsplit(' ').next().unwrap_or(&s.path), anchor(&s.path)))
            .collect();
        let name = section.path.rsplit(' ').next().unwrap_or(&section.path);
        let link = format!("[`{name}`](#{})", anchor(&section.path));
        links.push(if subs.is_empty() { link } else { format!("{link} ({})", subs.join(", ")) });
    }
    let _ = writeln!(out, "Commands: {}.", links.join(", "));
    for section in &sections {
        out.push_str(&section.body);
    }
    out
}

/// One command's part of the page.
struct Section {
    path: String,
    /// 0 for `fulcrum`, 1 for its commands, 2 for their subcommands.
    depth: usize,
    body: String,
}

/// `cmd` and its visible subcommands; `globals` are the ids of the global
/// arguments an ancestor already lists, `shown` the example commands its
/// parent's section already gives (left out here).
fn walk(cmd: &mut clap::Command, globals: &BTreeSet<String>, shown: &BTreeSet<String>, out: &mut Vec<Section>) {
    let path = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
    let about = cmd.get_about().map(|a| one_line(&a.to_string())).unwrap_or_default();
    let mut body = format!("\n## {path}\n\n");
    if let Some(long) = cmd.get_long_about() {
        let _ = writeln!(body, "{}\n", long.to_string().trim_end());
    } else if !about.is_empty() {
        let _ = writeln!(body, "{about}.\n");
    }
    let usage = cmd.render_usage().to_string();
    let usage: Vec<&str> = usage.lines().map(|l| l.trim().trim_start_matches("Usage:").trim()).collect();
    // A usage line says more than the heading and the list of arguments only
    // when it names a required option or an optional positional argument.
    let says_more = |u: &&str| {
        u.strip_prefix(path.as_str()).unwrap_or(u).split_whitespace().any(|w| w != "[OPTIONS]" && !w.starts_with('<'))
    };
    if usage.iter().any(says_more) {
        let _ = writeln!(body, "Usage: `{}`\n", usage.join("`, `"));
    }
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !["help", "version"].contains(&a.get_id().as_str()))
        .filter(|a| !globals.contains(a.get_id().as_str()))
        .collect();
    if !args.is_empty() {
        for arg in &args {
            let _ = writeln!(body, "- {}{}: {}", spelling(arg), default(arg), meaning(arg));
        }
        body.push('\n');
    }
    let mut examples = BTreeSet::new();
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        examples = after_help(&after.to_string(), shown, &mut body);
    }
    let mut inherited = globals.clone();
    inherited.extend(args.iter().filter(|a| a.is_global_set()).map(|a| a.get_id().to_string()));
    let depth = path.matches(' ').count();
    // The top level's examples are a tour of the commands: each command's
    // section keeps its own.
    if depth == 0 {
        examples.clear();
    }
    let body = format!("{}\n", body.trim_end());
    out.push(Section { path, depth, body });
    for sub in cmd.get_subcommands_mut().filter(|s| !s.is_hide_set()) {
        walk(sub, &inherited, &examples, out);
    }
}

/// An example line's command without its comment, or `None` for a line
/// that is no whole command (a continuation, or one continued).
fn example_command(line: &str) -> Option<String> {
    let command = line.split(" #").next().unwrap_or(line).trim();
    (command.starts_with("fulcrum ") && !command.ends_with('\\')).then(|| command.to_string())
}

/// The text after the options: its examples as a shell block (but for those
/// in `shown`), its other paragraphs as text. The note on inherited global
/// options is left out: the page says once where they go, and the parent's
/// section lists them. Returns the example commands.
fn after_help(text: &str, shown: &BTreeSet<String>, body: &mut String) -> BTreeSet<String> {
    let mut parts = Vec::new();
    let mut commands = BTreeSet::new();
    for paragraph in text.trim_end().split("\n\n") {
        if let Some(examples) = paragraph.strip_prefix("Examples:\n") {
            let lines: Vec<&str> = examples
                .lines()
                .map(|l| l.strip_prefix("  ").unwrap_or(l))
                .filter(|l| example_command(l).is_none_or(|c| !shown.contains(&c)))
                .collect();
            commands.extend(lines.iter().filter_map(|l| example_command(l)));
            if !lines.is_empty() {
                parts.push(format!("```sh\n{}\n```", lines.join("\n")));
            }
        } else if !paragraph.starts_with(crate::cli::GLOBAL_NOTE) {
            parts.push(paragraph.trim_end().to_string());
        }
    }
    if !parts.is_empty() {
        let _ = writeln!(body, "{}", parts.join("\n\n"));
    }
    commands
}

/// `-c, --config <FILE>` or `<SCENARIO>`, in backticks.
fn spelling(arg: &clap::Arg) -> String {
    let value = arg.get_value_names().map(|v| v.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "));
    let takes_value = arg.get_action().takes_values();
    let mut s = String::new();
    if let Some(short) = arg.get_short() {
        let _ = write!(s, "-{short}");
    }
    if let Some(long) = arg.get_long() {
        if !s.is_empty() {
            s.push_str(", ");
        }
        let _ = write!(s, "--{long}");
    }
    match (s.is_empty(), takes_value) {
        (true, _) => s = value.unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase())),
        (false, true) => {
            let name = value.unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
            let _ = write!(s, " {name}");
        }
        (false, false) => {}
    }
    format!("`{s}`")
}

/// The argument's whole help, on one line, with its possible values.
fn meaning(arg: &clap::Arg) -> String {
    let help = arg.get_long_help().or(arg.get_help()).map(|h| one_line(&h.to_string())).unwrap_or_default();
    let values: Vec<String> =
        arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| format!("`{}`", v.get_name())).collect();
    if values.is_empty() || !arg.get_action().takes_values() {
        help
    } else {
        format!("{help} Values: {}.", values.join(", "))
    }
}

/// The default of an option that takes a value (a flag's `false` says nothing).
fn default(arg: &clap::Arg) -> String {
    if !arg.get_action().takes_values() {
        return String::new();
    }
    let values: Vec<String> = arg.get_default_values().iter().map(|v| format!("`{}`", v.to_string_lossy())).collect();
    if values.is_empty() {
        String::new()
    } else {
        format!(" (default {})", values.join(", "))
    }
}

/// Paragraphs joined into one line (one list item each).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// GitHub's anchor for a heading: lower case, spaces to dashes.
fn anchor(heading: &str) -> String {
    heading.to_lowercase().replace(' ', "-")
}
