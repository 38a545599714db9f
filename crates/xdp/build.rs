//! Compiles `bpf/lb.bpf.c` into `$OUT_DIR/lb.bpf.o` when clang is installed
//! and sets `cfg(fulcrum_bpf)` so the crate embeds it; also into
//! `lb_bench.bpf.o` with `-DFULCRUM_BENCH` (`bpf/bench.h`), the variant that
//! only the per-packet cost benchmark loads, and `bpf/peer_pass.bpf.c` (an
//! empty program: the benchmark's floor). Without clang the
//! crate still builds and tests pass: the loader then reports that the data
//! plane was not built (and the BPF tests, ignored unless asked for, fail
//! saying so). The first build after clang appears compiles the program.
//! `FULCRUM_CLANG` names another clang; `scripts/xdp-setup` installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fulcrum_bpf)");
    println!("cargo::rerun-if-changed=bpf/lb.bpf.c");
    println!("cargo::rerun-if-changed=bpf/bench.h");
    println!("cargo::rerun-if-changed=bpf/peer_pass.bpf.c");
    println!("cargo::rerun-if-env-changed=FULCRUM_CLANG");
    let clang = std::env::var("FULCRUM_CLANG").unwrap_or_else(|_| "clang".into());
    let Some(clang_path) = find(&clang) else {
        // Rebuild once clang appears. Watching the file it would be is not
        // enough: a package installs it with the package's timestamp, older
        // than this build, so cargo would not see a change. The directories
        // it may appear in do change (an entry is added), and so may PATH.
        for dir in search_dirs(&clang) {
            println!("cargo::rerun-if-changed={}", dir.display());
        }
        println!("cargo::rerun-if-env-changed=PATH");
        println!("cargo::warning=clang not found: the XDP data plane is not built (run scripts/xdp-setup)");
        return;
    };
    println!("cargo::rerun-if-changed={}", clang_path.display());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch_include = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let compile = |source: &str, defines: &[&str], object: &str| {
        Command::new(&clang_path)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", &arch_include])
            .args(defines)
            .args(["-c", source, "-o"])
            .arg(out_dir.join(object))
            .status()
            .map_err(|e| format!("cannot run {}: {e}", clang_path.display()))
            .and_then(|s| s.success().then_some(()).ok_or(format!("clang failed on {source} ({s})")))
    };
    let built = [
        ("bpf/lb.bpf.c", &[][..], "lb.bpf.o"),
        ("bpf/lb.bpf.c", &["-DFULCRUM_BENCH"][..], "lb_bench.bpf.o"),
        ("bpf/peer_pass.bpf.c", &[][..], "peer_pass.bpf.o"),
    ]
    .into_iter()
    .try_for_each(|(source, defines, object)| compile(source, defines, object));
    match built {
        Ok(()) => println!("cargo::rustc-cfg=fulcrum_bpf"),
        // A machine with clang but without the BPF headers (libbpf-dev) is
        // treated like one without clang, loudly.
        Err(e) => println!("cargo::warning={e}: the XDP data plane is not built"),
    }
}

/// The existing directories `program` would be found in: its own for a
/// path, otherwise those of PATH. (A directory that does not exist cannot
/// be watched: cargo would take it as changed on every build.)
fn search_dirs(program: &str) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = if program.contains('/') {
        Path::new(program).parent().map(Path::to_path_buf).into_iter().collect()
    } else {
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default()
    };
    let mut dirs: Vec<PathBuf> = dirs.into_iter().filter(|d| d.is_dir()).collect();
    dirs.dedup();
    dirs
}

fn find(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}
