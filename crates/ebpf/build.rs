/// Declares the probe families' modules (crates/families says how they are found). The BPF object
/// depends on bpf-linker, which cargo does not know about: rebuild when it changes.
fn main() {
    let modules = srvprof_families::modules("src", &srvprof_families::names());
    srvprof_families::write("families.rs", &srvprof_families::declarations(&modules, ""));
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(_) => println!("cargo:warning=bpf-linker not found: run `cargo xtask setup`"),
    }
}
