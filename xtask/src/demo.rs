//! `cargo xtask demo`: the main job on the bundled server. Starts servers/rust-hyper pinned to
//! CPU 1 through `srvprof run --cmd`, drives it from CPU 0 and writes the run folder.

use std::process::Command;

use anyhow::{Result, bail};

use crate::{free_port, run_cmd, workspace_root};

pub fn run(args: &[String]) -> Result<()> {
    let root = workspace_root();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("srvprof loads eBPF programs and needs root: run `sudo cargo xtask demo`");
    }
    let srvprof = crate::release_srvprof()?;
    let port = free_port()?;
    let out = root.join("target/srvprof-demo");
    let server = root.join("servers/rust-hyper/run");
    let cmd = format!("{} --port {port} --cpus 1", server.display());
    run_cmd(
        Command::new(&srvprof)
            .args([
                "run", "--cmd", &cmd, "-c", "100", "-d", "10s", "--cpus", "0", "--force", "--out",
            ])
            .arg(&out)
            .args(args),
    )?;
    eprintln!(
        "xtask: the run is in {} (run.json, timeline.csv, report.html)",
        out.display()
    );
    Ok(())
}
