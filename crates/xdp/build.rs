//! Compiles `bpf/lb.bpf.c` into `$OUT_DIR/lb.bpf.o` when clang is installed
//! and sets `cfg(fulcrum_bpf)` so the crate embeds it. Without clang the
//! crate still builds and tests pass: the loader then reports that the data
//! plane was not built, and the BPF tests say they were skipped and why.
//! `FULCRUM_CLANG` names another clang; `scripts/xdp-setup` installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fulcrum_bpf)");
    println!("cargo::rerun-if-changed=bpf/lb.bpf.c");
    println!("cargo::rerun-if-env-changed=FULCRUM_CLANG");
    let clang = std::env::var("FULCRUM_CLANG").unwrap_or_else(|_| "clang".into());
    let Some(clang_path) = find(&clang) else {
        // Rebuild once clang appears (a missing file counts as changed).
        println!("cargo::rerun-if-changed=/usr/bin/clang");
        println!("cargo::warning=clang not found: the XDP data plane is not built (run scripts/xdp-setup)");
        return;
    };
    println!("cargo::rerun-if-changed={}", clang_path.display());
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("lb.bpf.o");
    let arch_include = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let status = Command::new(&clang_path)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", &arch_include, "-c", "bpf/lb.bpf.c", "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => println!("cargo::rustc-cfg=fulcrum_bpf"),
        // A machine with clang but without the BPF headers (libbpf-dev) is
        // treated like one without clang, loudly.
        Ok(s) => println!("cargo::warning=clang failed on bpf/lb.bpf.c ({s}): the XDP data plane is not built"),
        Err(e) => println!("cargo::warning=cannot run {}: {e}", clang_path.display()),
    }
}

fn find(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}
