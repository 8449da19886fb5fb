//! How the build scripts find the probe families, so that a new family is its files and nothing
//! else. A family is a file of crates/common/src that declares its map and global names
//! (`names!`); on each other layer it is the file of the same name (crates/ebpf/src/X.rs,
//! crates/profiler/src/probes/X.rs, crates/analysis/src/kernel_report/X.rs) where there is one.
//! Each crate's build script declares its family modules from this list and generates the code
//! that joins them up, included by the crate (`include!(concat!(env!("OUT_DIR"), ...))`).

use std::path::{Path, PathBuf};

/// One family's file on one layer.
pub struct Module {
    pub name: String,
    pub path: PathBuf,
    text: String,
}

impl Module {
    /// Whether a line of the file starts with `item` ("pub struct Reader"): what the build
    /// script joins up is what the family's file declares.
    pub fn declares(&self, item: &str) -> bool {
        self.text.lines().any(|l| l.starts_with(item))
    }
}

/// Every family's name, in order: the files of crates/common/src that declare their names.
pub fn names() -> Vec<String> {
    let common = workspace().join("crates/common/src");
    println!("cargo:rerun-if-changed={}", common.display());
    let mut out: Vec<String> = (rust_files(&common).into_iter())
        .filter(|(_, text)| text.lines().any(|l| l.starts_with("names! {")))
        .map(|(path, _)| stem(&path))
        .collect();
    out.sort();
    out
}

/// The families' files in `dir` (relative to the crate being built), in the order of `names`.
pub fn modules(dir: &str, names: &[String]) -> Vec<Module> {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join(dir);
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut out: Vec<Module> = (rust_files(&dir).into_iter())
        .map(|(path, text)| Module {
            name: stem(&path),
            path,
            text,
        })
        .filter(|m| names.contains(&m.name))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A module declaration for each, `vis` ("pub ", "") in front.
pub fn declarations(modules: &[Module], vis: &str) -> String {
    (modules.iter())
        .map(|m| format!("#[path = {:?}]\n{vis}mod {};\n", m.path.display(), m.name))
        .collect()
}

/// Writes the generated code to OUT_DIR/`file`.
pub fn write(file: &str, code: &str) {
    let out = Path::new(&std::env::var("OUT_DIR").expect("run by cargo")).join(file);
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

fn workspace() -> PathBuf {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo"));
    (manifest.ancestors())
        .find(|d| d.join("crates/common/src").is_dir())
        .expect("a crate of the srvprof workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    (entries.flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|text| (p, text)))
        .collect()
}

fn stem(path: &Path) -> String {
    (path.file_stem().and_then(|s| s.to_str()))
        .expect("a file name in UTF-8")
        .to_string()
}
