//! Network namespaces for tests and benchmarks: [`Netns`] creates one with
//! `ip netns add`, runs commands inside it, moves the calling thread into it
//! (so sockets and `BPF_PROG_TEST_RUN` FIB lookups happen there) and deletes
//! it when dropped. Only namespaces made here are touched.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Output};

/// A network namespace that lives as long as this value.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// Run `program args…`, failing with its stderr when it fails.
pub fn run(program: &str, args: &[&str]) -> io::Result<Output> {
    let out = Command::new(program).args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

impl Netns {
    /// Create namespace `name` (replacing a leftover of the same name) with
    /// its loopback up.
    pub fn new(name: &str) -> io::Result<Self> {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        run("ip", &["netns", "add", name])?;
        let ns = Netns { name: name.to_owned() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on an existing namespace that is not deleted on drop.
    pub fn attach(name: &str) -> NetnsRef {
        NetnsRef { path: format!("/run/netns/{name}") }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME args…`.
    pub fn ip(&self, args: &[&str]) -> io::Result<Output> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Run a command inside the namespace (`nsenter --net`, which, unlike
    /// `ip netns exec`, keeps /sys and so the pinned BPF objects visible).
    pub fn exec(&self, program: &str, args: &[&str]) -> io::Result<Output> {
        let mut all = vec![format!("--net={}", self.path()), "--".into(), program.into()];
        all.extend(args.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run("nsenter", &refs)
    }

    /// Set a sysctl inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        self.exec("sysctl", &["-qw", &format!("{key}={value}")]).map(|_| ())
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Move the calling thread into the namespace (for good: run this on a
    /// thread of its own, or in a test, whose thread ends with it).
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.path())
    }
}

/// A namespace made by someone else (e.g. `scripts/xdp-topology`).
#[derive(Debug, Clone)]
pub struct NetnsRef {
    path: String,
}

impl NetnsRef {
    /// Move the calling thread into the namespace, as [`Netns::enter`].
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.path)
    }
}

fn enter(path: &str) -> io::Result<()> {
    let f = File::open(path)?;
    // SAFETY: a valid namespace fd; affects only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Netns {
    /// Delete the name now, saying why if that fails. The namespace itself
    /// lives on while a thread or process is inside it.
    pub fn delete(mut self) -> io::Result<()> {
        let name = std::mem::take(&mut self.name);
        run("ip", &["netns", "del", &name]).map(|_| ())
    }
}

impl Drop for Netns {
    /// Delete the name (also when a test panics). A failure cannot be
    /// returned from here, so it is written to stderr; `scripts/test`
    /// fails on any namespace left behind.
    fn drop(&mut self) {
        if self.name.is_empty() {
            return;
        }
        if let Err(e) = run("ip", &["netns", "del", &self.name]) {
            let _ = writeln!(io::stderr(), "could not delete network namespace {}: {e}", self.name);
        }
    }
}

/// Why BPF tests cannot run here, or `None` when they can: they need root,
/// the program (clang at build time), and `ip`/`nsenter`.
pub fn bpf_unavailable() -> Option<String> {
    if !crate::dataplane::built() {
        return Some(
            "the XDP program was not built (clang missing at build time; scripts/xdp-setup installs it)".into(),
        );
    }
    // SAFETY: no arguments, no side effects.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: loading BPF and making namespaces need CAP_BPF and CAP_NET_ADMIN".into());
    }
    for tool in ["ip", "nsenter"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` not found (iproute2, util-linux)"));
        }
    }
    None
}

/// Fail a BPF test, saying why, where it cannot run. These tests are
/// `#[ignore = "needs root …"]`, so they run only when asked for
/// (`cargo test -- --ignored`, as `scripts/test` does as root after
/// `scripts/xdp-setup`); asked for where they cannot run, they fail rather
/// than pass without having tested anything.
pub fn require_bpf(test: &str) {
    if let Some(why) = bpf_unavailable() {
        panic!("{test} cannot run: {why}. Run it as root after scripts/xdp-setup (scripts/test does both).");
    }
}
