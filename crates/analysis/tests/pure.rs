//! The analysis stays pure: no kernel, no /proc. Cargo keeps the profiler out (this crate cannot
//! depend on it); these keep the kernel out of its dependencies and its code.

use std::path::Path;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn depends_on_nothing_that_reaches_the_kernel() {
    let manifest = std::fs::read_to_string(Path::new(DIR).join("Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    let names: Vec<&str> = deps
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| l.split('=').next().unwrap().trim())
        .collect();
    let allowed = ["serde", "srvprof-common", "srvprof-loadgen", "syscalls"];
    for name in &names {
        assert!(
            allowed.contains(name),
            "srvprof-analysis depends on {name}: the analysis must not read the kernel; put the reading in the profiler and pass plain data in record/"
        );
    }
    // srvprof-common's "user" feature brings in aya; the load generator's "engine" (on by
    // default) tokio and sockets: only their data types are wanted here.
    assert!(!deps.contains("user"), "{deps}");
    let loadgen = deps
        .lines()
        .find(|l| l.starts_with("srvprof-loadgen"))
        .unwrap();
    assert!(loadgen.contains("default-features = false"), "{loadgen}");
}

#[test]
fn no_source_file_reads_the_machine() {
    let mut files = vec![Path::new(DIR).join("src")];
    let mut checked = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Tests may write fixtures; the code may not read files, /proc, /sys or the clock.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for needle in [
            "std::fs",
            "\"/proc",
            "\"/sys",
            "File::open",
            "Instant::now",
            "SystemTime",
        ] {
            assert!(
                !code.contains(needle),
                "{} uses {needle}: the analysis must work on recorded data alone",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} files checked");
}
