//! Command-line surface: one subcommand per job.
//!
//! The conventions every command follows (tested below, over the whole
//! command tree): `--json` prints machine output (the older `-o json` /
//! `--output json` is a hidden alias); `--threads N` is the number of
//! threads doing the work; `--plot FILE` writes an SVG figure; `-c` means
//! `--config` and nothing else; a parent's options marked global are listed
//! once, under "Global options" in the parent's help, and accepted before
//! or after the subcommand; every command's help ends with examples.
//!
//! The same [`command`] definition drives the parser, the shell completions
//! (`fulcrum completions SHELL`), the man pages (`fulcrum man --dir DIR`)
//! and the Markdown reference (`fulcrum reference`, checked against
//! docs/reference/cli.md by `tests/cli_reference.rs`).

use std::io::Write;
use std::process::ExitCode;

use clap::{Arg, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// The widest a help line gets (clap wraps to the terminal, at most this).
pub const HELP_WIDTH: usize = 100;

/// The heading of options a parent command passes to its subcommands.
pub const GLOBAL_HEADING: &str = "Global options";

/// How the note at the end of a subcommand's help that names its inherited
/// global options begins.
pub const GLOBAL_NOTE: &str = "Global options (";

/// Fulcrum: load-balancing algorithms, a simulator to compare them, and the
/// proxies that run them.
#[derive(Debug, Parser)]
#[command(
    name = "fulcrum",
    version,
    about,
    long_about = None,
    max_term_width = HELP_WIDTH,
    after_help = "\
Examples:
  fulcrum demo --quick                       # every algorithm live and simulated, about 25 s
  fulcrum sim scenarios/seed-000.toml        # compare the algorithms in the simulator
  fulcrum serve -c fulcrum.toml              # run the proxy
  fulcrum load http://127.0.0.1:8080/ --rate 1000 --duration 10s
  fulcrum help sim                           # one command's options and examples"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Try every algorithm live: ten test backends, the proxy and clients on loopback (about 80 s),
    /// each algorithm's latency next to the simulator's prediction for the same setup.
    Demo(crate::demo::Args),
    /// List the load-balancing algorithms with their default parameters, as TOML.
    Algorithms(crate::algorithms::Args),
    /// Simulate clients, balancers and servers from a scenario file and compare the algorithms'
    /// latency and request spread.
    Sim(crate::sim::Args),
    /// Simulate a datacenter network (leaf-spine, DCTCP, ECN marking) and report flow completion
    /// times.
    Fabric(crate::fabric::Args),
    /// Run the HTTP/TCP load-balancing proxy, from a configuration file or from flags.
    Serve(crate::serve::Args),
    /// Make a running `fulcrum serve --config FILE` read FILE again, without dropping a connection.
    Reload(crate::serve::ReloadArgs),
    /// Change a running proxy's endpoints: list, drain, undrain, weigh, add, remove.
    Ctl(crate::ctl::Args),
    /// Start test HTTP servers with chosen service times, status codes and body sizes.
    Backend(crate::backend::Args),
    /// Send HTTP load to a URL and report latency percentiles and errors.
    Load(crate::load::Args),
    /// Run the XDP (in-kernel) L4 load balancer: services, interfaces, counters, BGP announcements,
    /// and a model of fleet changes. Needs root.
    Lb(crate::lb::Args),
    /// Print a shell completion script on stdout (scripts/install installs them).
    #[command(hide = true)]
    Completions(CompletionsArgs),
    /// Write the man pages, one per command, into a directory (scripts/install installs them).
    #[command(hide = true)]
    Man(ManArgs),
    /// Print the command-line reference in Markdown (docs/reference/cli.md is this output).
    #[command(hide = true)]
    Reference,
}

#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
struct ManArgs {
    /// The directory the pages go into (fulcrum.1, fulcrum-sim.1, …); it must exist.
    #[arg(long, value_name = "DIR")]
    dir: std::path::PathBuf,
}

/// The whole command tree, as parsed, completed, documented: each
/// subcommand accepts its ancestors' global options but does not list them
/// (its parent's help does, under [`GLOBAL_HEADING`]).
pub fn command() -> clap::Command {
    hide_inherited_globals(Cli::command())
}

/// Give every subcommand a hidden copy of the global options of the
/// commands above it. clap propagates a global option to a subcommand only
/// when the subcommand has none of that name, and shows a propagated copy in
/// the subcommand's help; the hidden copy is parsed the same way (the value
/// reaches the parent's field) but stays out of that help. A line at the end
/// of the subcommand's help says where they are described.
fn hide_inherited_globals(cmd: clap::Command) -> clap::Command {
    fn walk(mut cmd: clap::Command, inherited: &[(String, Arg)]) -> clap::Command {
        let mut globals = inherited.to_vec();
        let path = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
        for a in cmd.get_arguments().filter(|a| a.is_global_set()) {
            globals.push((path.clone(), a.clone()));
        }
        if !inherited.is_empty() {
            for (_, a) in inherited {
                cmd = cmd.arg(a.clone().hide(true));
            }
            let mut owners: Vec<&str> = inherited.iter().map(|(owner, _)| owner.as_str()).collect();
            owners.dedup();
            let flags: Vec<String> = inherited
                .iter()
                .filter(|(_, a)| !a.is_hide_set())
                .filter_map(|(_, a)| a.get_long())
                .map(|l| format!("--{l}"))
                .collect();
            let note = format!(
                "{GLOBAL_NOTE}{}) are described in `{} --help`; they go before or after the subcommand.",
                flags.join(", "),
                owners.join("`, `")
            );
            let after = match cmd.get_after_help() {
                Some(text) => format!("{text}\n\n{note}"),
                None => note,
            };
            cmd = cmd.after_help(after);
        }
        let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
        for name in names {
            let bin = format!("{path} {name}");
            cmd = cmd.mut_subcommand(&name, |sub| walk(sub.bin_name(bin.clone()), &globals));
        }
        cmd
    }
    walk(cmd.bin_name("fulcrum"), &[])
}

/// Parse `std::env::args`, exiting with a usage message on error.
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Run the chosen subcommand. Errors are printed to stderr; the exit code is
/// 0 on success, 1 on a runtime failure and 2 on bad input (clap's convention).
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Demo(args) => crate::demo::run(args),
        Command::Algorithms(args) => crate::algorithms::run(args),
        Command::Sim(args) => crate::sim::run(args),
        Command::Fabric(args) => crate::fabric::run(args),
        Command::Serve(args) => crate::serve::run(args),
        Command::Reload(args) => crate::serve::reload(args),
        Command::Ctl(args) => crate::ctl::run(args),
        Command::Backend(args) => crate::backend::run(args),
        Command::Load(args) => crate::load::run(args),
        Command::Lb(args) => crate::lb::run(args),
        Command::Completions(args) => {
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut command(), "fulcrum", &mut script);
            print_all(&script)
        }
        Command::Man(args) => clap_mangen::generate_to(command(), &args.dir)
            .map_err(|e| Failure::runtime(format!("--dir {}: {e}", args.dir.display()))),
        Command::Reference => print_all(crate::reference::markdown(command()).as_bytes()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fulcrum: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

/// Write `bytes` to stdout; a closed pipe is a failure, not a panic.
fn print_all(bytes: &[u8]) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(|e| Failure::runtime(format!("writing: {e}")))
}

/// The old spelling of `--json`: `-o json` or `-o table` (hidden).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// `--json` on a command that prints a table by default, with its hidden
/// alias `-o json` / `--output json`.
#[derive(Debug, clap::Args)]
pub struct JsonOutput {
    /// Print the result as JSON on stdout instead of a table (for scripts).
    #[arg(long)]
    json: bool,
    /// Older spelling of --json.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT", hide = true)]
    output: Option<OutputFormat>,
}

impl JsonOutput {
    /// Whether the user asked for JSON, in either spelling.
    pub fn wanted(&self) -> bool {
        json_wanted(self.json, self.output)
    }
}

/// `--json`, or `-o json` (the last one given wins for `-o`).
pub fn json_wanted(json: bool, output: Option<OutputFormat>) -> bool {
    json || output == Some(OutputFormat::Json)
}

/// A failure the binary reports: what went wrong and which exit code it earns.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    /// The user gave something we cannot use (a bad file, name or value).
    pub fn input(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: 2 }
    }

    /// Something failed while running.
    pub fn runtime(message: impl Into<String>) -> Self {
        Failure { message: message.into(), code: 1 }
    }

    /// The user stopped it (SIGINT/SIGTERM): the shell's 128 + 2.
    pub fn interrupted() -> Self {
        Failure { message: "interrupted".into(), code: 130 }
    }

    fn exit_code(&self) -> u8 {
        self.code
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Every command of the tree with its path, hidden ones included.
    fn all(cmd: &clap::Command) -> Vec<(String, clap::Command)> {
        fn walk(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
            out.push((path.clone(), cmd.clone()));
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                walk(sub, format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut out = Vec::new();
        let mut cmd = cmd.clone();
        cmd.build();
        walk(&cmd, "fulcrum".into(), &mut out);
        out
    }

    /// The visible commands.
    fn visible() -> Vec<(String, clap::Command)> {
        all(&command()).into_iter().filter(|(_, c)| !c.is_hide_set()).collect()
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let matches = command().try_get_matches_from(std::iter::once("fulcrum").chain(args.iter().copied()))?;
        Cli::from_arg_matches(&matches)
    }

    fn help(path: &str, long: bool) -> String {
        let mut args: Vec<&str> = path.split(' ').skip(1).collect();
        args.push(if long { "--help" } else { "-h" });
        match parse(&args) {
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.to_string(),
            other => panic!("{path}: expected help, got {other:?}"),
        }
    }

    #[test]
    fn the_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn a_short_flag_means_one_thing_across_the_binary() {
        let mut meanings: BTreeMap<char, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for (path, cmd) in all(&command()) {
            for a in cmd.get_arguments() {
                if let Some(short) = a.get_short() {
                    let long = a.get_long().unwrap_or("(none)").to_string();
                    meanings.entry(short).or_default().entry(long).or_default().push(path.clone());
                }
            }
        }
        for (short, longs) in &meanings {
            assert_eq!(longs.len(), 1, "-{short} means several things: {longs:?}");
        }
        assert_eq!(meanings[&'c'].keys().collect::<Vec<_>>(), ["config"]);
    }

    #[test]
    fn every_command_has_examples_and_every_line_fits() {
        for (path, cmd) in visible() {
            for long in [false, true] {
                let text = help(&path, long);
                assert!(text.contains("\nExamples:\n"), "{path} has no examples:\n{text}");
                // Indented lines (examples) are laid out by hand: clap must not wrap them.
                let raw = cmd.get_after_help().map(|t| t.to_string()).unwrap_or_default();
                for line in raw.lines().filter(|l| l.starts_with("  ")) {
                    assert!(line.chars().count() < HELP_WIDTH, "{path}: an example too wide to fit:\n{line}");
                }
                for line in text.lines() {
                    assert!(line.chars().count() <= HELP_WIDTH, "{path}: a line of {} chars:\n{line}", line.len());
                }
            }
        }
    }

    #[test]
    fn every_visible_subcommand_is_listed_in_its_parents_help() {
        for (path, cmd) in visible() {
            let text = help(&path, false);
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                let listed = text.lines().any(|l| l.trim_start().starts_with(&format!("{} ", sub.get_name())));
                assert!(listed, "{path} --help does not list {}:\n{text}", sub.get_name());
            }
        }
    }

    #[test]
    fn global_options_are_listed_once_under_their_heading() {
        for (parent, flags) in [("fulcrum lb", ["--pin-dir", "--bird-include"]), ("fulcrum ctl", ["--admin", "--json"])]
        {
            let text = help(parent, false);
            let heading = text.find(&format!("{GLOBAL_HEADING}:")).unwrap_or_else(|| panic!("{text}"));
            for flag in flags {
                assert!(text[heading..].contains(flag), "{flag} not under {GLOBAL_HEADING} in\n{text}");
            }
            for (path, _) in visible().into_iter().filter(|(p, _)| p.starts_with(&format!("{parent} "))) {
                let text = help(&path, true);
                let options = &text[..text.find("Examples:").unwrap()];
                for flag in flags {
                    assert!(!options.contains(&format!("{flag} ")), "{path} repeats {flag}:\n{text}");
                }
                assert!(text.contains(&format!("`{parent} --help`")), "{path} does not point at {parent}:\n{text}");
            }
        }
    }

    #[test]
    fn global_options_are_accepted_after_the_subcommand() {
        let cli = parse(&["lb", "list", "--pin-dir", "/tmp/x"]).unwrap();
        let Command::Lb(lb) = cli.command else { panic!() };
        assert_eq!(lb.pin_dir(), std::path::Path::new("/tmp/x"));
        let cli = parse(&["lb", "--pin-dir", "/tmp/y", "stats"]).unwrap();
        let Command::Lb(lb) = cli.command else { panic!() };
        assert_eq!(lb.pin_dir(), std::path::Path::new("/tmp/y"));
        for args in
            [&["ctl", "clusters", "--json"][..], &["ctl", "--json", "clusters"], &["ctl", "-o", "json", "clusters"]]
        {
            let Command::Ctl(ctl) = parse(args).unwrap().command else { panic!() };
            assert!(ctl.json(), "{args:?}");
        }
        let Command::Ctl(ctl) = parse(&["ctl", "clusters", "--output", "table"]).unwrap().command else { panic!() };
        assert!(!ctl.json());
    }

    #[test]
    fn old_spellings_still_parse_and_stay_hidden() {
        // Each pair: the old spelling, and a line of the help it must not appear in.
        for args in [
            &["serve", "--workers", "2", "--listen", "127.0.0.1:0", "--backends", "127.0.0.1:1"][..],
            &["lb", "list", "-o", "json"],
            &["lb", "stats", "--output=json"],
            &["lb", "simulate", "-o", "json"],
            &["ctl", "-o", "json", "clusters"],
            &["fabric", "--plot-sweep", "x.jsonl", "--out", "x.svg"],
        ] {
            parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
        for (path, hidden) in [
            ("fulcrum serve", "--workers"),
            ("fulcrum lb list", "--output"),
            ("fulcrum ctl", "--output"),
            ("fulcrum fabric", "--out "),
        ] {
            assert!(!help(path, true).contains(hidden), "{path} shows {hidden}");
        }
        assert!(parse(&["load", "http://127.0.0.1:1/", "-c", "4"]).is_err(), "load -c is gone");
    }

    #[test]
    fn completions_and_man_pages_cover_every_visible_command() {
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command(), "fulcrum", &mut script);
            let script = String::from_utf8(script).unwrap();
            let flag = |name: &str| match shell {
                clap_complete::Shell::Fish => format!("-l {name}"),
                _ => format!("--{name}"),
            };
            assert!(script.contains("bird-config"), "{shell}: no bird-config");
            for name in ["plot-sweep", "threads", "json", "pin-dir"] {
                assert!(script.contains(&flag(name)), "{shell}: no {}", flag(name));
            }
            assert!(!script.contains(&flag("workers")), "{shell} completes a hidden alias");
        }
        let dir = std::env::temp_dir().join(format!("fulcrum-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        clap_mangen::generate_to(command(), &dir).unwrap();
        let mut pages: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        pages.sort();
        let create = std::fs::read_to_string(dir.join("fulcrum-lb-create.1")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let mut expected: Vec<String> =
            visible().iter().map(|(path, _)| format!("{}.1", path.replace(' ', "-"))).collect();
        expected.sort();
        assert_eq!(pages, expected);
        assert!(create.contains("Examples:") && create.contains("IP[:WEIGHT]"), "{create}");
    }

    #[test]
    fn json_threads_and_plot_are_spelled_alike_everywhere() {
        let has = |path: &str, flag: &str| help(path, true).contains(flag);
        for path in ["sim", "fabric", "load", "ctl", "lb list", "lb stats", "lb simulate"] {
            assert!(has(&format!("fulcrum {path}"), "--json"), "{path} has no --json");
        }
        for path in ["sim", "fabric", "load", "serve", "backend"] {
            let text = help(&format!("fulcrum {path}"), true);
            let at = text.find("--threads <N>").unwrap_or_else(|| panic!("{path} has no --threads <N>:\n{text}"));
            let entry = &text[at..at + text[at..].find("\n\n").unwrap_or(text.len() - at)];
            assert!(entry.contains("default"), "{path} does not say the default of --threads:\n{entry}");
        }
        for path in ["sim", "fabric"] {
            assert!(has(&format!("fulcrum {path}"), "--plot <FILE.svg>"), "{path}");
        }
    }
}
