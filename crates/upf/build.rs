//! Builds the XDP programs of `bpf/` with clang into OUT_DIR (one object per
//! `.c` file). Fails with a clear message if clang is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAMS: &[&str] = &["upf", "decap_min", "encap_min", "redirect", "pass"];

fn multiarch_include() -> Option<PathBuf> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").ok()?;
    let triple = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "riscv64" => "riscv64-linux-gnu",
        _ => return None,
    };
    let p = PathBuf::from("/usr/include").join(triple);
    p.exists().then_some(p)
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let src = Path::new("bpf");
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    if Command::new(&clang).arg("--version").output().is_err() {
        panic!(
            "mobicore-upf: `{clang}` not found; the XDP fast path needs clang with the BPF target \
             and libbpf headers (apt-get install clang llvm libbpf-dev, or run scripts/bootstrap.sh; \
             set CLANG=/path/to/clang to use another one)"
        );
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        panic!("mobicore-upf: /usr/include/bpf/bpf_helpers.h missing; install libbpf-dev (scripts/bootstrap.sh)");
    }
    for name in PROGRAMS {
        let c = src.join(format!("{name}.c"));
        let o = out.join(format!("{name}.o"));
        let mut cmd = Command::new(&clang);
        cmd.args(["-target", "bpf", "-O2", "-g", "-mcpu=v3", "-Wall", "-Werror", "-Wno-pass-failed"]);
        if let Some(inc) = multiarch_include() {
            cmd.arg("-I").arg(inc);
        }
        cmd.arg("-I").arg(src).arg("-c").arg(&c).arg("-o").arg(&o);
        let status = cmd.status().unwrap_or_else(|e| panic!("mobicore-upf: running {clang}: {e}"));
        if !status.success() {
            panic!("mobicore-upf: clang failed to build {}", c.display());
        }
    }
}
