/// The BPF object depends on bpf-linker, which cargo does not know about: rebuild when it changes.
fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(_) => println!("cargo:warning=bpf-linker not found: run `cargo xtask setup`"),
    }
}
