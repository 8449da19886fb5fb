//! `cargo xtask test`: every test, eBPF ones included (they need root and really run).

use std::process::Command;

use anyhow::{Result, bail};

use crate::{run_cmd, workspace_root};

pub fn run(args: &[String]) -> Result<()> {
    let mut args = args.to_vec();
    let noisy = crate::noise::take_flag(&mut args)?;
    let args = args.as_slice();
    let root = workspace_root();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "the eBPF tests load programs into the kernel and need root: run `sudo cargo xtask test`"
        );
    }
    let cargo = || {
        let mut c = Command::new("cargo");
        c.current_dir(&root);
        c
    };
    build_stops_with_one_sentence(&root)?;
    // The analysis builds alone, with the load generator's types but not its engine: nothing
    // there can reach the kernel or a socket (crates/analysis/tests/pure.rs checks the rest).
    run_cmd(cargo().args(["check", "-p", "srvprof-analysis", "--all-targets"]))?;
    // The binary the end-to-end tests run, and the release one that tests of what users run at
    // full speed use (the bench below needs it too).
    run_cmd(cargo().args(["build", "-p", "srvprof", "--bins"]))?;
    crate::release_srvprof()?;
    // From here on every phase runs even when an earlier one failed, and every test binary runs
    // even when another failed (--no-fail-fast): one run shows every failure, and still fails.
    let mut failed: Vec<String> = Vec::new();
    let mut phase = |name: &str, result: Result<()>| {
        if let Err(e) = result {
            eprintln!("xtask {}: FAILED: {name}: {e:#}", crate::elapsed());
            failed.push(name.to_string());
        }
    };
    // Unit tests of every crate, then the integration tests one at a time: they share 2 CPUs
    // and the kernel, and assert on counts that concurrent tests would disturb.
    phase(
        "unit tests",
        run_cmd(
            cargo()
                // crates/ebpf is built for the BPF target by build.rs, never for the host.
                .args([
                    "test",
                    "--no-fail-fast",
                    "--workspace",
                    "--exclude",
                    "srvprof-integration",
                    "--exclude",
                    "srvprof-ebpf",
                ])
                .args(args),
        ),
    );
    // With --noisy, a neighbour shares every CPU while they run: bounds must hold on a busy host.
    let noise = noisy.map(crate::noise::Noise::start);
    phase(
        "integration tests",
        run_cmd(
            cargo()
                .args(["test", "--no-fail-fast", "-p", "srvprof-integration"])
                .args(args)
                .args(["--", "--test-threads=1"]),
        ),
    );
    drop(noise);
    phase(
        "the dist binary built from scratch",
        crate::dist::from_scratch(),
    );
    // The reference servers under the release srvprof: every cell must complete requests.
    phase("bench --quick", crate::bench::run(&["--quick".to_string()]));
    // The overhead bench, one short round: every watcher still attaches and nginx still serves.
    phase(
        "bench overhead (one round)",
        crate::bench::overhead::run(true).map(|_| ()),
    );
    if !failed.is_empty() {
        bail!(
            "{} of 5 test phases failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// `cargo build` of srvprof with a BPF toolchain that is not installed must stop at once with one
/// `error:` line naming it and `cargo xtask setup`, not a backtrace from deep inside aya-build.
fn build_stops_with_one_sentence(root: &std::path::Path) -> Result<()> {
    const ABSENT: &str = "nightly-2000-01-01";
    eprintln!(
        "xtask {}: cargo build with the BPF toolchain {ABSENT}, which is not installed",
        crate::elapsed()
    );
    let out = Command::new("cargo")
        .current_dir(root)
        .args(["build", "-p", "srvprof", "--bins"])
        .env("SRVPROF_BPF_TOOLCHAIN", ABSENT)
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: srvprof@"))
        .collect();
    let named = errors.len() == 1
        && errors[0].contains(ABSENT)
        && errors[0].contains("is not installed")
        && errors[0].contains("cargo xtask setup");
    // A build script that fails instead of logging the error makes cargo print this, then the
    // script's whole output and any backtrace.
    let dumped =
        stderr.contains("failed to run custom build command") || stderr.contains("panicked");
    if out.status.success() || !named || dumped {
        bail!(
            "a build without the BPF toolchain did not stop with one sentence naming it:\n{stderr}"
        );
    }
    eprintln!("xtask {}: it stopped with: {}", crate::elapsed(), errors[0]);
    Ok(())
}
