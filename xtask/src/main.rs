//! Developer tasks: `cargo xtask setup | test [--noisy[=PERCENT]] | demo | bench | dist | fmt`.

mod bench;
mod demo;
mod dist;
mod fmt;
#[cfg(test)]
mod imports;
#[cfg(test)]
mod links;
mod llvm;
mod noise;
mod prog_time;
mod setup;
mod test;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <setup [--from-scratch] | test [--noisy[=PERCENT]] | demo | bench [loadgen | overhead | samples | conns | stalls] | dist [--smoke] | fmt>";

fn main() -> Result<()> {
    STARTED.get_or_init(std::time::Instant::now);
    forget_cargo_run_env();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(task) = args.first() else {
        bail!("{USAGE}")
    };
    let rest = &args[1..];
    match task.as_str() {
        "setup" => {
            setup::run()?;
            // Proves the bpf-linker part from an empty CARGO_HOME, as `cargo xtask test` does.
            if rest.iter().any(|a| a == "--from-scratch") {
                dist::from_scratch()?;
            }
            Ok(())
        }
        "test" => {
            setup::run()?;
            test::run(rest)
        }
        "demo" => {
            setup::run()?;
            demo::run(rest)
        }
        "dist" => {
            setup::bpf_build_tools()?;
            dist::run(rest)
        }
        "bench" => {
            // The release srvprof needs the eBPF toolchain; --render only reads old runs.
            if !rest.iter().any(|a| a == "--render") {
                setup::run()?;
            }
            bench::run(rest)
        }
        "fmt" => fmt::run(),
        other => bail!("unknown task '{other}'; {USAGE}"),
    }
}

/// When this xtask started: every echoed command carries the time since, so a log cut short
/// still shows where the time went.
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// `[MmSSs]` since this xtask started.
pub fn elapsed() -> String {
    let s = STARTED
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs();
    format!("[{}m{:02}s]", s / 60, s % 60)
}

/// Runs a command, echoing it with the time since xtask started, failing with its status.
pub fn run_cmd(cmd: &mut std::process::Command) -> Result<()> {
    eprintln!("xtask {}: {cmd:?}", elapsed());
    let began = std::time::Instant::now();
    let status = cmd.status()?;
    let took = began.elapsed().as_secs();
    if took >= 10 {
        eprintln!(
            "xtask {}: that took {}m{:02}s",
            elapsed(),
            took / 60,
            took % 60
        );
    }
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// `cargo xtask` is `cargo run`, which sets xtask's own package variables (CARGO_MANIFEST_DIR,
/// CARGO_PKG_NAME, ...). Passed on to the cargos xtask starts, they make build scripts that watch
/// them (ring's) rerun, so a hand build and an xtask build would each rebuild ring and all above.
fn forget_cargo_run_env() {
    let ours: Vec<std::ffi::OsString> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| {
            let k = k.to_string_lossy();
            k.starts_with("CARGO_PKG_")
                || matches!(
                    k.as_ref(),
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_MANIFEST_LINKS"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_BIN_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                )
        })
        .collect();
    for k in ours {
        // SAFETY: called first thing in main, before any thread is started.
        unsafe { std::env::remove_var(k) };
    }
}

/// Runs a command quietly, returning whether it succeeded.
pub fn succeeds(cmd: &mut std::process::Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Builds the release `srvprof` binary of this tree and returns its path.
pub fn release_srvprof() -> Result<std::path::PathBuf> {
    let root = workspace_root();
    run_cmd(
        std::process::Command::new("cargo")
            .current_dir(&root)
            .args(["build", "--release", "-p", "srvprof", "--bins"]),
    )?;
    Ok(root.join("target/release/srvprof"))
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the listener that found it is closed).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// The workspace root: the folder above xtask's own manifest, fixed when xtask is compiled.
/// `cargo xtask` always compiles the xtask of the workspace it is run in, so this is that
/// workspace from any folder inside it, whatever the current directory.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent")
        .to_path_buf()
}
