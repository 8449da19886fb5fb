//! `cargo xtask dist`: one statically linked srvprof (musl, BPF object inside) for hosts with no
//! Rust at all, written with its checksum to target/dist/. `smoke` proves such a file works
//! outside the repository with an empty environment: `check` passes and `run` serves requests.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{free_port, run_cmd, workspace_root};

pub const TARGET: &str = "x86_64-unknown-linux-musl";
/// The cargo profile (Cargo.toml): release without debug info.
const PROFILE: &str = "portable";

/// A built distribution file.
pub struct Dist {
    pub binary: PathBuf,
    pub sha256: String,
    pub size_bytes: u64,
}

/// `cargo xtask dist [--smoke]`: `--smoke` then runs the file as `cargo xtask test` does.
pub fn run(args: &[String]) -> Result<()> {
    let dist = build(&workspace_root().join("target"), None)?;
    report(&dist);
    if args.iter().any(|a| a == "--smoke") {
        smoke(&dist)?;
    }
    Ok(())
}

pub fn report(dist: &Dist) {
    eprintln!(
        "xtask dist: {} ({:.1} MiB, static, sha256 {}); copy this one file to the host to profile",
        dist.binary.display(),
        dist.size_bytes as f64 / (1024.0 * 1024.0),
        dist.sha256
    );
}

/// Builds the static srvprof into `target_dir`, with bpf-linker taken first from
/// `linker_bin_dir` when given, and writes `target_dir/dist/srvprof` and its `.sha256`.
pub fn build(target_dir: &Path, linker_bin_dir: Option<&Path>) -> Result<Dist> {
    musl_target()?;
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(workspace_root())
        .args(["build", "--profile", PROFILE, "--target", TARGET])
        .args(["-p", "srvprof", "--bin", "srvprof", "--target-dir"])
        .arg(target_dir);
    // ring (rustls' crypto) compiles C and assembly: for musl with Debian's musl-gcc
    // (musl-tools), unless the caller named a compiler.
    let cc_var = "CC_x86_64_unknown_linux_musl";
    if std::env::var_os(cc_var).is_none() {
        if !crate::succeeds(Command::new("musl-gcc").arg("--version")) {
            bail!(
                "musl-gcc is missing, which the static srvprof needs for ring's C code: run `cargo xtask setup` (it installs Debian's musl-tools), or set {cc_var} to a musl C compiler"
            );
        }
        cargo.env(cc_var, "musl-gcc");
    }
    if let Some(dir) = linker_bin_dir {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        cargo.env("PATH", std::env::join_paths(dirs)?);
    }
    run_cmd(&mut cargo).context("building the static srvprof")?;
    let built = target_dir.join(TARGET).join(PROFILE).join("srvprof");
    if has_interpreter(&built)? {
        bail!(
            "{} asks for a dynamic loader: it is not static",
            built.display()
        );
    }
    let out_dir = target_dir.join("dist");
    std::fs::create_dir_all(&out_dir)?;
    let binary = out_dir.join("srvprof");
    std::fs::copy(&built, &binary)
        .with_context(|| format!("copying {} to {}", built.display(), binary.display()))?;
    let sum = Command::new("sha256sum")
        .arg("srvprof")
        .current_dir(&out_dir)
        .output()
        .context("running sha256sum")?;
    if !sum.status.success() {
        bail!("sha256sum failed on {}", binary.display());
    }
    std::fs::write(out_dir.join("srvprof.sha256"), &sum.stdout)?;
    let sha256 = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    Ok(Dist {
        size_bytes: std::fs::metadata(&binary)?.len(),
        binary,
        sha256,
    })
}

fn musl_target() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == TARGET)
        })
        .unwrap_or(false);
    if installed {
        return Ok(());
    }
    run_cmd(Command::new("rustup").args(["target", "add", TARGET]))
        .with_context(|| format!("adding the {TARGET} target to the stable toolchain"))
}

/// Whether an ELF executable names a dynamic loader (a PT_INTERP program header).
fn has_interpreter(elf: &Path) -> Result<bool> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 {
        bail!("{} is not a 64-bit ELF file", elf.display());
    }
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into()?) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    Ok((0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        bytes
            .get(at..at + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) == PT_INTERP)
    }))
}

/// Copies the file to a folder outside the repository and runs it there with an empty
/// environment (no Rust, no cargo on the PATH): `check` must pass and a short `run` against the
/// bundled nginx must complete requests, with the probes counting the server's syscalls.
pub fn smoke(dist: &Dist) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("srvprof-dist-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let binary = dir.join("srvprof");
    std::fs::copy(&dist.binary, &binary)?;
    let bare = |args: &[&str]| {
        let mut c = Command::new(&binary);
        c.args(args)
            .current_dir(&dir)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", &dir);
        c
    };
    let check = bare(&["check"]).output()?;
    let check_text = String::from_utf8_lossy(&check.stdout);
    eprintln!(
        "xtask dist smoke: `srvprof check` of {}:\n{check_text}",
        binary.display()
    );
    if !check.status.success() {
        bail!(
            "the dist binary's `check` failed ({}): {check_text}{}",
            check.status,
            String::from_utf8_lossy(&check.stderr)
        );
    }
    let port = free_port()?;
    let server = workspace_root().join("servers/nginx-hello/run");
    let cmd = format!("{} --port {port} --cpus 1", server.display());
    let out = dir.join("run");
    let mut run = bare(&[
        "run", "--cmd", &cmd, "-c", "20", "-d", "3s", "--warmup", "1s", "--cpus", "0", "--out",
    ]);
    run_cmd(run.arg(&out)).context("the dist binary's `run` against nginx")?;
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("run.json"))?)?;
    let requests = run["load"]["requests"].as_u64().unwrap_or(0);
    let errors = run["load"]["errors"].as_u64().unwrap_or(u64::MAX);
    let switches = run["server"]["totals"]["voluntary_switches"]
        .as_u64()
        .unwrap_or(0);
    eprintln!(
        "xtask dist smoke: run completed {requests} requests, {errors} errors; the probes saw {switches} voluntary switches of nginx"
    );
    // musl's sched_* wrappers are stubs: the sampler's real-time priority must still be had.
    let notes = run["notes"].to_string();
    if notes.contains("normal priority") {
        bail!("the dist binary's sampler could not run in real time: {notes}");
    }
    if requests < 1000 || errors != 0 || switches == 0 {
        bail!(
            "the dist binary's run is wrong: {requests} requests (want >= 1000), {errors} errors (want 0), {switches} server switches seen (want > 0); see {}",
            out.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The bpf-linker part of setup in an empty CARGO_HOME, so bpf-linker is really built against the
/// pinned toolchain's LLVM; then the static dist binary, built with that linker in a target folder
/// of its own, is run outside the repository with an empty environment (`dist::smoke`).
pub fn from_scratch() -> Result<()> {
    let scratch = std::env::temp_dir().join("srvprof-setup-from-scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    let toolchain = crate::setup::bpf_toolchain()?;
    let started = std::time::Instant::now();
    let linker = crate::setup::bpf_linker(&toolchain, &scratch.join("cargo-home"))?;
    let linker_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let dist = build(&scratch.join("target"), linker.parent())?;
    let dist_s = started.elapsed().as_secs_f64();
    report(&dist);
    smoke(&dist)?;
    eprintln!(
        "xtask: setup from scratch: bpf-linker for {toolchain} built in {linker_s:.0} s, the static srvprof with its BPF object in {dist_s:.0} s; it checks and runs outside the repository"
    );
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
