//! `fulcrum reference`: the command-line reference in Markdown, made from
//! the same clap definitions as the parser (docs/reference/cli.md is its
//! output, and `tests/cli_reference.rs` fails when the two differ).

use std::fmt::Write;

use crate::cli::HELP_WIDTH;

/// Every visible command's `--help`, in tree order, under a heading of its
/// own, at a fixed width so that the text does not depend on the terminal.
pub fn markdown(cmd: clap::Command) -> String {
    let mut cmd = cmd.term_width(HELP_WIDTH).disable_help_subcommand(true);
    cmd.build();
    let mut out = String::from(
        "# Command-line reference\n\n\
         <!-- Generated from the code by `fulcrum reference`; do not edit. Regenerate with\n     \
         FULCRUM_BLESS=1 cargo test -p fulcrum --test cli_reference -->\n\n\
         Every command and option of `fulcrum`, as each command's `--help` prints it (`-h` prints\n\
         a shorter one). Conventions: `--json` prints machine output (sim, fabric, load, ctl,\n\
         lb); `--threads N` is the number of threads doing the work; `--plot FILE.svg` draws a\n\
         figure; `-c` is `--config`. Options under \"Global options\" go before or after the\n\
         subcommand. Run `scripts/install` once for `fulcrum` on your PATH, its shell completions\n\
         and `man fulcrum`.\n\n",
    );
    let mut commands = Vec::new();
    walk(&mut cmd, &mut commands);
    out.push_str("| Command | What it does |\n| --- | --- |\n");
    for (path, about, _) in &commands {
        let _ = writeln!(out, "| [`{path}`](#{}) | {about} |", anchor(path));
    }
    for (path, _, help) in &commands {
        let _ = write!(out, "\n## {path}\n\n```text\n{}\n```\n", help.trim_end());
    }
    out
}

/// (path, one-line description, long help) of `cmd` and its visible
/// subcommands.
fn walk(cmd: &mut clap::Command, out: &mut Vec<(String, String, String)>) {
    let path = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    let help = cmd.render_long_help().to_string();
    let help: Vec<&str> = help.lines().map(str::trim_end).collect();
    out.push((path, about, help.join("\n")));
    for sub in cmd.get_subcommands_mut().filter(|s| !s.is_hide_set()) {
        walk(sub, out);
    }
}

/// GitHub's anchor for a heading: lower case, spaces to dashes.
fn anchor(heading: &str) -> String {
    heading.to_lowercase().replace(' ', "-")
}
