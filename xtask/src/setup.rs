//! Installs, idempotently, what a fresh machine lacks to build and test srvprof:
//! nightly + rust-src, bpf-linker linked against nightly's own LLVM, and Debian packages.
//! A second run with everything present only checks.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};

use crate::{run_cmd, succeeds};

/// Debian packages the tests, the demo and the benchmarks use.
pub const DEBIAN_PACKAGES: &[&str] = &[
    "nginx-light",
    "libnginx-mod-http-lua",
    "wrk",
    "apache2-utils",
    "bpftrace",
    "bpftool",
    "erlang-base",
    "iproute2",
    "linux-perf",
    "chromium",
];

const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn run() -> Result<()> {
    nightly_with_rust_src()?;
    bpf_linker()?;
    debian_packages()?;
    Ok(())
}

fn nightly_with_rust_src() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["component", "list", "--toolchain", "nightly", "--installed"])
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("rust-src"))
        .unwrap_or(false);
    if installed {
        return Ok(());
    }
    run_cmd(Command::new("rustup").args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
        "--component",
        "rust-src",
    ]))
    .context("installing the nightly toolchain with rust-src (needed to build the BPF programs)")
}

fn cargo_bin_dir() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo")
        })
        .join("bin")
}

fn bpf_linker() -> Result<()> {
    // bpf-linker loads nightly's libLLVM, which `rustup run nightly` puts on the library path,
    // as aya-build does when it links the BPF programs.
    let linker = cargo_bin_dir().join("bpf-linker");
    if succeeds(
        Command::new("rustup")
            .args(["run", "nightly"])
            .arg(&linker)
            .arg("--version"),
    ) {
        return Ok(());
    }
    // bpf-linker must use an LLVM of nightly's major version; nightly ships its own libLLVM.
    let sysroot = String::from_utf8(
        Command::new("rustc")
            .args(["+nightly", "--print", "sysroot"])
            .output()?
            .stdout,
    )?;
    let lib_dir = Path::new(sysroot.trim()).join("lib");
    let llvm = std::fs::read_dir(&lib_dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("libLLVM.so.")
                || (name.starts_with("libLLVM-") && name.ends_with(".so"))
        })
        .ok_or_else(|| anyhow!("no libLLVM in {}; reinstall nightly", lib_dir.display()))?;
    let major = llvm_major(llvm.file_name().and_then(|n| n.to_str()).unwrap_or(""))
        .ok_or_else(|| anyhow!("cannot read the LLVM version from {}", llvm.display()))?;
    let prefix = std::env::temp_dir().join(format!("srvprof-llvm-{major}"));
    std::fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&llvm, &link)?;
    run_cmd(
        Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
            ])
            .arg(format!("llvm-{major}"))
            .env("LLVM_PREFIX", &prefix),
    )
    .context("installing bpf-linker (needed to link the BPF programs)")
}

/// 22 from "libLLVM.so.22.1-rust-1.97.0-nightly" or "libLLVM-22-rust-1.97.0-nightly.so".
fn llvm_major(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("libLLVM.so.")
        .or_else(|| name.strip_prefix("libLLVM-"))?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn debian_packages() -> Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = |update: bool| -> bool {
        if update && !succeeds(Command::new("apt-get").arg("update")) {
            return false;
        }
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    eprintln!("xtask: installing Debian packages {missing:?}");
    if install(false) || install(true) {
        return Ok(());
    }
    bail!(
        "could not install {missing:?} with apt-get; run `apt-get update && apt-get install {}` as root",
        missing.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::llvm_major;

    #[test]
    fn llvm_major_from_nightly_library_names() {
        assert_eq!(llvm_major("libLLVM.so.22.1-rust-1.97.0-nightly"), Some(22));
        assert_eq!(llvm_major("libLLVM-22-rust-1.97.0-nightly.so"), Some(22));
        assert_eq!(llvm_major("libfoo.so"), None);
    }
}
