//! Builds the load generator and the sink counter (`bpf/*.c`) with clang
//! into OUT_DIR. Fails with a clear message if clang is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAMS: &[&str] = &["gen", "sink"];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let src = Path::new("bpf");
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let arch_inc = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => Some("/usr/include/x86_64-linux-gnu"),
        Ok("aarch64") => Some("/usr/include/aarch64-linux-gnu"),
        _ => None,
    };
    for name in PROGRAMS {
        let c = src.join(format!("{name}.c"));
        let o = out.join(format!("{name}.o"));
        let mut cmd = Command::new(&clang);
        cmd.args(["-target", "bpf", "-O2", "-g", "-mcpu=v3", "-Wall", "-Werror"]);
        if let Some(inc) = arch_inc.filter(|p| Path::new(p).exists()) {
            cmd.arg("-I").arg(inc);
        }
        cmd.arg("-c").arg(&c).arg("-o").arg(&o);
        let status = cmd.status().unwrap_or_else(|e| {
            panic!(
                "mobicore-dpbench: running `{clang}`: {e}; install clang, llvm and libbpf-dev (scripts/bootstrap.sh)"
            )
        });
        if !status.success() {
            panic!("mobicore-dpbench: clang failed to build {}", c.display());
        }
    }
}
