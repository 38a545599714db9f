//! Compiles `bpf/lb.bpf.c` into `$OUT_DIR/lb.bpf.o` when clang is installed
//! and sets `cfg(fulcrum_bpf)` so the crate embeds it; also into
//! `lb_bench.bpf.o` with `-DFULCRUM_BENCH` (`bpf/bench.h`), the variant that
//! only the per-packet cost benchmark loads, and `bpf/peer_pass.bpf.c` (an
//! empty program: the benchmark's floor). Without clang the
//! crate still builds and tests pass: the loader then reports that the data
//! plane was not built, and the BPF tests say they were skipped and why.
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
        // Rebuild once clang appears (a missing file counts as changed).
        println!("cargo::rerun-if-changed=/usr/bin/clang");
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

fn find(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}
