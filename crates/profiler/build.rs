//! Builds crates/ebpf for bpfel-unknown-none (nightly + rust-src + bpf-linker, see `cargo xtask setup`).
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
    let package = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir: root_dir.as_str(),
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
        .context("building the BPF programs failed; run `cargo xtask setup` to install nightly, rust-src and bpf-linker")
}
