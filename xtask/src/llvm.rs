//! Finds the LLVM shared library a nightly toolchain ships in `$(rustc --print sysroot)/lib`, so
//! bpf-linker can be built against the same LLVM as the rustc that emits the BPF bitcode.
//!
//! Two layouts are known: 1.97 has `libLLVM.so.22.1-rust-1.97.0-nightly` (the library) and
//! `libLLVM-22-rust-1.97.0-nightly.so` (another copy of it); 1.101 has
//! `libLLVM.so.23.1-rust-1.101.0-nightly` (the library) and `libLLVM-23-rust-1.101.0-nightly.so`,
//! which is a linker script (`INPUT(libLLVM.so.23.1-...)`). rust-lld cannot resolve such a script
//! when it is linked through a symlink, so only a file that starts with the ELF magic is chosen.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

/// The LLVM library to link bpf-linker against.
#[derive(Debug, PartialEq, Eq)]
pub struct LlvmLibrary {
    /// An ELF shared object, never a linker script.
    pub path: PathBuf,
    /// LLVM's major version, for bpf-linker's `llvm-NN` feature.
    pub major: u32,
}

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

/// The ELF libLLVM in a toolchain's `lib` folder.
pub fn find(lib_dir: &Path) -> Result<LlvmLibrary> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(lib_dir)
        .map_err(|e| anyhow!("cannot read {}: {e}", lib_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| file_name(p).is_some_and(|n| major_from_name(n).is_some()))
        .collect();
    // read_dir's order is the file system's: sort so the choice never depends on it, with the
    // name the library's SONAME has (libLLVM.so.NN.M-...) first.
    candidates.sort_by_key(|p| {
        (
            !file_name(p).unwrap_or("").starts_with("libLLVM.so."),
            p.clone(),
        )
    });
    let mut scripts = Vec::new();
    for path in &candidates {
        if is_elf(path) {
            let major = major_from_name(file_name(path).unwrap_or("")).expect("filtered above");
            return Ok(LlvmLibrary {
                path: path.clone(),
                major,
            });
        }
        scripts.push(path.display().to_string());
    }
    if candidates.is_empty() {
        bail!(
            "no libLLVM in {}; reinstall the toolchain (`rustup toolchain uninstall` it, then `cargo xtask setup`)",
            lib_dir.display()
        )
    }
    bail!(
        "every libLLVM in {} is a linker script or not a shared object ({}); reinstall the toolchain",
        lib_dir.display(),
        scripts.join(", ")
    )
}

fn file_name(path: &Path) -> Option<&str> {
    path.file_name().and_then(|n| n.to_str())
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == ELF_MAGIC
}

/// 22 from "libLLVM.so.22.1-rust-1.97.0-nightly" or "libLLVM-22-rust-1.97.0-nightly.so".
pub fn major_from_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("libLLVM.so.").or_else(|| {
        name.strip_prefix("libLLVM-")
            .filter(|_| name.ends_with(".so"))
    })?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder laid out like a toolchain's lib/, removed when dropped.
    struct Fixture(PathBuf);

    impl Fixture {
        fn new(name: &str, files: &[(&str, &[u8])]) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "srvprof-llvm-fixture-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (file, contents) in files {
                std::fs::write(dir.join(file), contents).unwrap();
            }
            Fixture(dir)
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const ELF: &[u8] = b"\x7fELF\x02\x01\x01\0 a shared object";

    #[test]
    fn nightly_1_97_layout_picks_the_soname_file_of_llvm_22() {
        // As described when 1.97 was first used: two ELF copies.
        let f = Fixture::new(
            "1.97",
            &[
                ("libLLVM-22-rust-1.97.0-nightly.so", ELF),
                ("libLLVM.so.22.1-rust-1.97.0-nightly", ELF),
                ("librustc_driver-b5a965480ee51f9a.so", ELF),
            ],
        );
        assert_eq!(
            find(&f.0).unwrap(),
            LlvmLibrary {
                path: f.0.join("libLLVM.so.22.1-rust-1.97.0-nightly"),
                major: 22
            }
        );
    }

    #[test]
    fn nightly_1_97_as_installed_here_has_a_script_too() {
        // nightly-2026-05-19 as rustup installed it on this project's machines (November 2026).
        let f = Fixture::new(
            "1.97-script",
            &[
                (
                    "libLLVM-22-rust-1.97.0-nightly.so",
                    b"INPUT(libLLVM.so.22.1-rust-1.97.0-nightly)",
                ),
                ("libLLVM.so.22.1-rust-1.97.0-nightly", ELF),
            ],
        );
        let llvm = find(&f.0).unwrap();
        assert_eq!(llvm.path, f.0.join("libLLVM.so.22.1-rust-1.97.0-nightly"));
        assert_eq!(llvm.major, 22);
    }

    #[test]
    fn an_elf_under_the_other_name_is_taken_when_the_soname_file_is_missing() {
        let f = Fixture::new("other-name", &[("libLLVM-21-rust-1.93.0-nightly.so", ELF)]);
        assert_eq!(find(&f.0).unwrap().major, 21);
    }

    #[test]
    fn nightly_1_101_layout_never_picks_the_linker_script() {
        let f = Fixture::new(
            "1.101",
            &[
                (
                    "libLLVM-23-rust-1.101.0-nightly.so",
                    b"INPUT(libLLVM.so.23.1-rust-1.101.0-nightly)\n",
                ),
                ("libLLVM.so.23.1-rust-1.101.0-nightly", ELF),
                ("librustc_driver-23e18013e8e3f5f8.so", ELF),
            ],
        );
        let llvm = find(&f.0).unwrap();
        assert_eq!(
            llvm,
            LlvmLibrary {
                path: f.0.join("libLLVM.so.23.1-rust-1.101.0-nightly"),
                major: 23
            }
        );
    }

    #[test]
    fn a_folder_with_only_a_linker_script_is_an_error_naming_it() {
        let f = Fixture::new(
            "script-only",
            &[(
                "libLLVM-23-rust-1.101.0-nightly.so",
                b"INPUT(libLLVM.so.23.1-rust-1.101.0-nightly)\n",
            )],
        );
        let err = find(&f.0).unwrap_err().to_string();
        assert!(err.contains("linker script"), "{err}");
        assert!(err.contains("libLLVM-23-rust-1.101.0-nightly.so"), "{err}");
    }

    #[test]
    fn a_folder_without_llvm_is_an_error() {
        let f = Fixture::new("empty", &[("librustc_driver-x.so", ELF)]);
        assert!(find(&f.0).unwrap_err().to_string().contains("no libLLVM"));
    }

    #[test]
    fn major_from_both_naming_schemes() {
        assert_eq!(
            major_from_name("libLLVM.so.22.1-rust-1.97.0-nightly"),
            Some(22)
        );
        assert_eq!(
            major_from_name("libLLVM-22-rust-1.97.0-nightly.so"),
            Some(22)
        );
        assert_eq!(
            major_from_name("libLLVM.so.23.1-rust-1.101.0-nightly"),
            Some(23)
        );
        assert_eq!(
            major_from_name("libLLVM-23-rust-1.101.0-nightly.so"),
            Some(23)
        );
        assert_eq!(major_from_name("libfoo.so"), None);
        assert_eq!(major_from_name("libLLVM-23.txt"), None);
    }
}
