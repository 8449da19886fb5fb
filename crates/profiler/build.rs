//! Builds crates/ebpf for bpfel-unknown-none with the pinned nightly (crates/ebpf/rust-toolchain.toml),
//! its rust-src and bpf-linker; `cargo xtask setup` installs all three. When one is missing the
//! build stops with one sentence naming it, not a backtrace from deep inside the BPF build.
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "srvprof-ebpf")
        .ok_or_else(|| anyhow!("srvprof-ebpf package not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    let pin = Path::new(root_dir.as_str()).join("rust-toolchain.toml");
    println!("cargo:rerun-if-changed={}", pin.display());
    // A developer may try another nightly before moving the pin (xtask test also uses it to see
    // the build stop on a toolchain that is not installed).
    println!("cargo:rerun-if-env-changed=SRVPROF_BPF_TOOLCHAIN");
    let toolchain = match std::env::var("SRVPROF_BPF_TOOLCHAIN") {
        Ok(t) if !t.is_empty() => t,
        _ => pinned_channel(&pin)?,
    };
    if let Err(missing) = preflight(&toolchain) {
        // cargo prints this as one `error:` line and fails the build.
        println!(
            "cargo::error={missing}: run `cargo xtask setup` in the srvprof repository, then build again"
        );
        return Ok(());
    }
    let package = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir: root_dir.as_str(),
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))
        .context("building the BPF programs failed (the messages above say where)")
}

/// The `channel = "..."` of a rust-toolchain.toml.
fn pinned_channel(file: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .find_map(|rest| rest.trim().strip_prefix('=')?.trim().split('"').nth(1))
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{} names no channel", file.display()))
}

/// What the BPF build needs and is missing, said in one sentence.
fn preflight(toolchain: &str) -> Result<(), String> {
    let sysroot = Command::new("rustc")
        .arg(format!("+{toolchain}"))
        .args(["--print", "sysroot"])
        // Newer rustup installs a missing toolchain on first use; a build must not.
        .env("RUSTUP_AUTO_INSTALL", "0")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .ok_or_else(|| {
            format!("srvprof's BPF programs build with the Rust toolchain {toolchain} (through rustup), which is not installed")
        })?;
    let sysroot = Path::new(&sysroot);
    if !sysroot.join("lib/rustlib/src/rust/library/core").exists() {
        return Err(format!(
            "the {toolchain} toolchain lacks its rust-src component, which the BPF programs need"
        ));
    }
    let linker = which::which("bpf-linker").map_err(|_| {
        "bpf-linker, which links srvprof's BPF programs, is not on the PATH".to_string()
    })?;
    println!("cargo:rerun-if-changed={}", linker.display());
    let runs = Command::new(&linker)
        .arg("--version")
        .env("LD_LIBRARY_PATH", sysroot.join("lib"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        return Err(format!(
            "{} does not run with {toolchain}'s LLVM (it was built for another toolchain)",
            linker.display()
        ));
    }
    Ok(())
}
