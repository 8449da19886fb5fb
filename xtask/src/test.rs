//! `cargo xtask test`: every test, eBPF ones included (they need root and really run).

use std::process::Command;

use anyhow::{Result, bail};

use crate::{run_cmd, workspace_root};

pub fn run(args: &[String]) -> Result<()> {
    let root = workspace_root();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        bail!(
            "the eBPF tests load programs into the kernel and need root: run `sudo cargo xtask test`"
        );
    }
    let cargo = || {
        let mut c = Command::new("cargo");
        c.current_dir(&root);
        c
    };
    // The binary the end-to-end tests run.
    run_cmd(cargo().args(["build", "-p", "srvprof", "--bins"]))?;
    // Unit tests of every crate, then the integration tests one at a time: they share 2 CPUs
    // and the kernel, and assert on counts that concurrent tests would disturb.
    run_cmd(
        cargo()
            // crates/ebpf is built for the BPF target by build.rs, never for the host.
            .args([
                "test",
                "--workspace",
                "--exclude",
                "srvprof-integration",
                "--exclude",
                "srvprof-ebpf",
            ])
            .args(args),
    )?;
    run_cmd(
        cargo()
            .args(["test", "-p", "srvprof-integration"])
            .args(args)
            .args(["--", "--test-threads=1"]),
    )?;
    crate::dist::from_scratch()?;
    // The reference servers under the release srvprof: every cell must complete requests.
    crate::bench::run(&["--quick".to_string()])?;
    // The overhead bench, one short round: every watcher still attaches and nginx still serves.
    crate::bench_overhead::run(true)?;
    Ok(())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
