//! The run folder's pprof export read by `go tool pprof` itself: the same samples and the same
//! hottest function as the folded stacks it was made from, and the server's executable with the
//! build-id its ELF note holds (read by readelf).

use std::path::Path;
use std::process::Command;

use srvprof_integration::*;

/// `go tool pprof ARGS`'s standard output (Go is at /usr/local/go on the test machines).
fn go_pprof(args: &[&str]) -> String {
    let go = ["/usr/local/go/bin/go", "go"]
        .into_iter()
        .find(|g| !g.starts_with('/') || Path::new(g).exists())
        .unwrap();
    let out = Command::new(go)
        .args(["tool", "pprof"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{go} tool pprof: {e}"));
    assert_success(&out);
    String::from_utf8(out.stdout).unwrap()
}

/// `-raw`'s samples: one row of values per sample (`samples cpu off_cpu: location ids`).
fn raw_sample_values(raw: &str) -> Vec<Vec<u64>> {
    raw.lines()
        .skip_while(|l| !l.starts_with("samples/count"))
        .skip(1)
        .take_while(|l| l.starts_with(' ') && l.contains(':'))
        .map(|l| {
            let (values, _locations) = l.split_once(':').unwrap();
            values
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn go_tool_pprof_reads_the_same_samples_and_hottest_function_as_the_folded_file() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "0"]);
    let busy = start_busy_thread(&["--spin-fn", "--block-fn", "--seconds", "60", "--cpus", "1"]);
    let dir = run_dir("pprof");
    RunArgs::pid(busy.pid())
        .args(&["--url", &nginx.url()])
        .load(2, "3s", "1s")
        .args(&["--cpus", "0"])
        .run_ok("pprof");
    let oncpu = folded(&dir, "oncpu-server.folded");
    let offcpu = folded(&dir, "offcpu-server.folded");
    let samples: u64 = oncpu.iter().map(|(_, n)| n).sum();
    let offcpu_us: u64 = offcpu.iter().map(|(_, us)| us).sum();
    let mut by_leaf = std::collections::BTreeMap::<&str, u64>::new();
    for (frames, n) in &oncpu {
        *by_leaf.entry(frames.last().unwrap()).or_default() += n;
    }
    let (hottest, _) = by_leaf.iter().max_by_key(|(_, n)| **n).unwrap();
    assert_eq!(*hottest, "srvprof_busy_spin", "{by_leaf:?}");

    let profile = dir.join("profile-server.pb.gz");
    let profile = profile.to_str().unwrap();
    let raw = go_pprof(&["-raw", profile]);
    let rows = raw_sample_values(&raw);
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    let total = |i: usize| rows.iter().map(|r| r[i]).sum::<u64>();
    assert_eq!(total(0), samples, "samples/count in\n{raw}");
    assert_eq!(total(2), offcpu_us * 1000, "off_cpu/nanoseconds in\n{raw}");

    // The top function by flat samples: the row under `top`'s column header.
    let top = go_pprof(&["-top", "-sample_index=samples", profile]);
    let first = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap_or_else(|| panic!("no rows in\n{top}"));
    assert_eq!(first.split_whitespace().last(), Some(*hottest), "{top}");
    assert!(top.contains(&format!("of {samples} total")), "{top}");

    // The server's executable among the mappings, with the build-id readelf finds in it.
    let exe = std::fs::read_link(format!("/proc/{}/exe", busy.pid())).unwrap();
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(&exe)
        .output()
        .unwrap();
    let notes = String::from_utf8(notes.stdout).unwrap();
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build-id in {}: {notes}", exe.display()));
    let mapping = raw
        .lines()
        .find(|l| l.contains(exe.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no mapping of {} in\n{raw}", exe.display()));
    assert!(mapping.contains(build_id), "{mapping}: build-id {build_id}");
    // The spinning function's location points at that mapping.
    let mapping_id = mapping.trim().split(':').next().unwrap();
    let location = raw
        .lines()
        .skip_while(|l| !l.starts_with("Locations"))
        .find(|l| l.contains(" srvprof_busy_spin "))
        .unwrap_or_else(|| panic!("no location of srvprof_busy_spin in\n{raw}"));
    assert!(
        location.contains(&format!("M={mapping_id} ")),
        "{location}: mapping {mapping_id}"
    );
}
