//! `cargo xtask fmt`: `cargo fmt`, and the probe families' files, which it does not reach: build
//! scripts declare their modules (crates/families), and rustfmt follows only `mod` lines it reads.
//! A unit test keeps those files formatted, since `cargo fmt --check` cannot see them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::{run_cmd, workspace_root};

/// The folders whose files may be a family's.
const FAMILY_DIRS: [&str; 4] = [
    "crates/common/src",
    "crates/ebpf/src",
    "crates/profiler/src/probes",
    "crates/analysis/src/kernel_report",
];

pub fn run() -> Result<()> {
    let root = workspace_root();
    run_cmd(
        Command::new("cargo")
            .current_dir(&root)
            .args(["fmt", "--all"]),
    )?;
    run_cmd(rustfmt(&root).args(family_files(&root)))
}

fn rustfmt(root: &Path) -> Command {
    let mut c = Command::new("rustfmt");
    c.current_dir(root).args(["--edition", "2024"]);
    c
}

fn family_files(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (FAMILY_DIRS.iter())
        .flat_map(|dir| {
            std::fs::read_dir(root.join(dir))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_families_files_are_formatted() {
        let root = workspace_root();
        let files = family_files(&root);
        assert!(files.len() > 20, "{} files found", files.len());
        let out = rustfmt(&root).arg("--check").args(&files).output();
        let out = out.expect("rustfmt runs");
        assert!(
            out.status.success(),
            "run `cargo xtask fmt`:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
