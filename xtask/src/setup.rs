//! Installs, idempotently, what a fresh machine lacks to build and test srvprof: the pinned
//! nightly (crates/ebpf/rust-toolchain.toml) with rust-src, bpf-linker linked against that
//! nightly's own LLVM, and Debian packages. A second run with everything present only checks.

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
    // syscount, runqlat, softirqs, hardirqs, offcputime: the peers tests/crosscheck.rs checks
    // srvprof against.
    "libbpf-tools",
    "erlang-base",
    "iproute2",
    // nft: tests/causes.rs drops packets on a veth path (this kernel has no netem).
    "nftables",
    "linux-perf",
    "chromium",
    // tests/stacks.rs compiles C programs without frame pointers and splits their debug info.
    "gcc",
    "binutils",
    // musl-gcc: the static srvprof (`cargo xtask dist`) links ring, rustls' crypto, which has C
    // and assembly.
    "musl-tools",
    // h2load: `cargo xtask bench loadgen` compares srvprof's HTTP/2 with it.
    "nghttp2-client",
    // tests/plan.rs installs PyPI's kubernetes-validate into a venv under the target dir.
    "python3-venv",
    // tests/remote_write.rs pushes to Prometheus's remote-write receiver and queries it back.
    "prometheus",
];

const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn run() -> Result<()> {
    bpf_build_tools()?;
    debian_packages()
}

/// The pinned nightly with rust-src and a bpf-linker for it in CARGO_HOME: what building
/// srvprof needs beyond stable Rust.
pub fn bpf_build_tools() -> Result<()> {
    let toolchain = bpf_toolchain()?;
    toolchain_with_rust_src(&toolchain)?;
    bpf_linker(&toolchain, &cargo_home())?;
    Ok(())
}

/// The dated nightly the BPF programs are built with: the channel named in
/// crates/ebpf/rust-toolchain.toml, the one place the pin is written.
pub fn bpf_toolchain() -> Result<String> {
    let file = crate::workspace_root().join("crates/ebpf/rust-toolchain.toml");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("reading the BPF toolchain pin {}", file.display()))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .find_map(|rest| rest.trim().strip_prefix('=')?.trim().split('"').nth(1))
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{} names no channel = \"...\"", file.display()))
}

fn toolchain_with_rust_src(toolchain: &str) -> Result<()> {
    let installed = Command::new("rustup")
        .args(["component", "list", "--toolchain", toolchain, "--installed"])
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("rust-src"))
        .unwrap_or(false);
    if installed {
        return Ok(());
    }
    run_cmd(Command::new("rustup").args([
        "toolchain",
        "install",
        toolchain,
        "--profile",
        "minimal",
        "--component",
        "rust-src",
    ]))
    .with_context(|| format!("installing {toolchain} with rust-src (it builds the BPF programs)"))
}

/// CARGO_HOME, where `cargo install` puts bpf-linker (its bin/ is on the PATH).
pub fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo")
        })
}

/// The pinned toolchain's lib folder, where it keeps its libLLVM.
fn toolchain_lib_dir(toolchain: &str) -> Result<PathBuf> {
    let out = Command::new("rustc")
        .arg(format!("+{toolchain}"))
        .args(["--print", "sysroot"])
        .output()
        .context("running rustc")?;
    if !out.status.success() {
        bail!("`rustc +{toolchain} --print sysroot` failed: is {toolchain} installed?");
    }
    Ok(Path::new(String::from_utf8(out.stdout)?.trim()).join("lib"))
}

/// bpf-linker in `cargo_home`/bin, built against the pinned toolchain's own LLVM unless one that
/// loads exactly that LLVM is already there. Returns its path.
pub fn bpf_linker(toolchain: &str, cargo_home: &Path) -> Result<PathBuf> {
    let linker = cargo_home.join("bin/bpf-linker");
    let lib_dir = toolchain_lib_dir(toolchain)?;
    if loads_llvm_from(&linker, &lib_dir) {
        return Ok(linker);
    }
    let llvm = crate::llvm::find(&lib_dir)?;
    // LLVM_PREFIX/lib/libLLVM.so is what llvm-sys links; it must be the ELF, not a script.
    let prefix = std::env::temp_dir().join(format!("srvprof-llvm-{toolchain}"));
    std::fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&llvm.path, &link)?;
    eprintln!(
        "xtask: building bpf-linker {BPF_LINKER_VERSION} against {} (LLVM {}) into {}",
        llvm.path.display(),
        llvm.major,
        cargo_home.display()
    );
    let started = std::time::Instant::now();
    run_cmd(
        Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
                "--force",
                "--no-default-features",
                "--features",
            ])
            .arg(format!("llvm-{}", llvm.major))
            .env("CARGO_HOME", cargo_home)
            .env("LLVM_PREFIX", &prefix),
    )
    .context("building bpf-linker (it links the BPF programs)")?;
    if !loads_llvm_from(&linker, &lib_dir) {
        bail!(
            "the bpf-linker just built ({}) does not load {}'s LLVM from {}",
            linker.display(),
            toolchain,
            lib_dir.display()
        );
    }
    eprintln!(
        "xtask: bpf-linker built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(linker)
}

/// Whether `linker` runs with the toolchain's lib folder on the library path, as `rustup run`
/// gives it, and its libLLVM resolves into that folder (a bpf-linker built for another nightly
/// fails this and is rebuilt).
fn loads_llvm_from(linker: &Path, lib_dir: &Path) -> bool {
    let run = |trace: bool| {
        let mut cmd = Command::new(linker);
        cmd.env("LD_LIBRARY_PATH", lib_dir);
        if trace {
            // The dynamic loader lists what it resolved, as ldd does, without running the program.
            cmd.env("LD_TRACE_LOADED_OBJECTS", "1");
        } else {
            cmd.arg("--version");
        }
        cmd.output().ok().filter(|o| o.status.success())
    };
    if !linker.exists() || run(false).is_none() {
        return false;
    }
    run(true).is_some_and(|out| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.trim_start().starts_with("libLLVM"))
            .any(|l| l.contains(&format!("=> {}/", lib_dir.display())))
    })
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
    eprintln!(
        "xtask {}: installing Debian packages {missing:?}",
        crate::elapsed()
    );
    if install(false) || install(true) {
        return Ok(());
    }
    bail!(
        "could not install {missing:?} with apt-get; run `apt-get update && apt-get install {}` as root",
        missing.join(" ")
    )
}
