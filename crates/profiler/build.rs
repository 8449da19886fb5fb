//! Builds crates/ebpf for bpfel-unknown-none with the pinned nightly (crates/ebpf/rust-toolchain.toml),
//! its rust-src and bpf-linker; `cargo xtask setup` installs all three. When one is missing the
//! build stops with one sentence naming it, not a backtrace from deep inside the BPF build.
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    join_up_probe_families();
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

/// Declares the probe families' modules of src/probes (crates/families says how they are found)
/// and joins up the `Reader` of each that declares one (probes/family.rs says what it does).
fn join_up_probe_families() {
    let modules = srvprof_families::modules("src/probes", &srvprof_families::names());
    let readers: Vec<&str> = (modules.iter())
        .filter(|m| m.declares("pub struct Reader"))
        .map(|m| m.name.as_str())
        .collect();
    let each = |f: &dyn Fn(&str) -> String| -> String { readers.iter().map(|r| f(r)).collect() };
    let mut code = srvprof_families::declarations(&modules, "pub ");
    code += &format!(
        "/// Every family's Reader, found by build.rs.\n\
         pub(crate) struct Readers {{\n{}}}\n\n\
         impl Readers {{\n\
         \x20   /// Each family's programs attached by the loop, with the switch that leaves them detached.\n\
         \x20   pub(crate) const FAMILIES: &[(Option<Family>, &[&str])] = &[\n{}    ];\n\n\
         \x20   /// Each family's programs it attaches its own way, with their sections, and its switch.\n\
         \x20   pub(crate) const OWN_PROGRAMS: &[(Option<Family>, OwnPrograms)] = &[\n{}    ];\n\n\
         \x20   pub(crate) fn attach(at: &mut Attaching<'_>) -> Result<Self, SrvprofError> {{\n\
         \x20       Ok(Self {{\n{}        }})\n    }}\n\n\
         \x20   pub(crate) fn read(&mut self, ebpf: &mut Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {{\n\
         \x20       let mut pace = crate::realtime::Pace::new();\n\
         {}        Ok(())\n    }}\n}}\n",
        each(&|r| format!("    pub {r}: {r}::Reader,\n")),
        each(&|r| format!(
            "        (<{r}::Reader as FamilyReader>::SKIP, <{r}::Reader as FamilyReader>::PROGRAMS),\n"
        )),
        each(&|r| format!(
            "        (<{r}::Reader as FamilyReader>::SKIP, <{r}::Reader as FamilyReader>::OWN_PROGRAMS),\n"
        )),
        each(&|r| format!("            {r}: FamilyReader::attach(at)?,\n")),
        // The families' maps in pieces: the server runs between them (the sampler is real-time).
        each(&|r| format!("        self.{r}.read(ebpf, counters)?;\n        pace.tick();\n")),
    );
    srvprof_families::write("probe_families.rs", &code);
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
