//! `--hdr-log` read by an independent reader, HdrHistogram's own Java tools: HistogramLogProcessor
//! (HistogramLogReader underneath) adds up the intervals of the log that `srvprof load` and
//! `srvprof run` wrote against nginx, and its totals and percentiles must be the report's, in the
//! same microseconds.
//!
//! The jar comes from Maven Central (pinned version and SHA-1), cached in the target dir. Without
//! it, or without `java`, the test fails: it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use srvprof_integration::{RunArgs, Server, assert_success, read_json, require_root, srvprof_bin};

const JAR_VERSION: &str = "2.2.2";
/// Maven Central's HdrHistogram-2.2.2.jar.sha1.
const JAR_SHA1: &str = "7959933ebcc0f05b2eaa5af0a0c8689fa257b15c";

/// HdrHistogram's jar, fetched once into target/hdrhistogram-java.
pub(crate) fn hdrhistogram_jar() -> PathBuf {
    let dir = srvprof_integration::target_dir().join("hdrhistogram-java");
    let jar = dir.join(format!("HdrHistogram-{JAR_VERSION}.jar"));
    if jar.exists() && sha1(&jar) == JAR_SHA1 {
        return jar;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!(
        "https://repo1.maven.org/maven2/org/hdrhistogram/HdrHistogram/{JAR_VERSION}/HdrHistogram-{JAR_VERSION}.jar"
    );
    let part = dir.join("HdrHistogram.jar.part");
    let fetched = Command::new("curl")
        .args(["-fsSL", "--retry", "3", "-m", "120", "-o"])
        .arg(&part)
        .arg(&url)
        .output();
    match fetched {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "cannot fetch HdrHistogram's Java tools from {url} ({}): this test needs network access to Maven Central, or the jar at {}",
            String::from_utf8_lossy(&out.stderr).trim(),
            jar.display()
        ),
        Err(e) => panic!(
            "cannot run curl to fetch HdrHistogram's Java tools from {url} ({e}): install curl, or put the jar at {}",
            jar.display()
        ),
    }
    let got = sha1(&part);
    assert_eq!(
        got, JAR_SHA1,
        "{url} has SHA-1 {got}, not Maven Central's {JAR_SHA1}: a broken or altered download"
    );
    std::fs::rename(&part, &jar).unwrap();
    jar
}

fn sha1(path: &Path) -> String {
    let out = Command::new("sha1sum")
        .arg(path)
        .output()
        .expect("sha1sum (coreutils)");
    assert_success(&out);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// One row of HistogramLogProcessor's CSV interval output (values in the log's unit, us).
#[derive(Debug)]
pub(crate) struct Row {
    /// End of the interval, seconds after StartTime.
    end_s: f64,
    count: u64,
    p50: u64,
    max: u64,
    pub(crate) total_count: u64,
    pub(crate) total_p50: u64,
    total_p90: u64,
    pub(crate) total_p99: u64,
    total_p999: u64,
    total_p9999: u64,
    pub(crate) total_max: u64,
}

/// `java -cp HdrHistogram.jar org.HdrHistogram.HistogramLogProcessor -i LOG -csv
/// -outputValueUnitRatio 1 -o OUT`: one row per interval, with the running totals.
pub(crate) fn java_log_processor(jar: &Path, log: &Path) -> Vec<Row> {
    java_log_processor_of(jar, log, &[])
}

/// The same, reading the intervals `extra` selects (`-tag HOST`: a split run's host's).
pub(crate) fn java_log_processor_of(jar: &Path, log: &Path, extra: &[&str]) -> Vec<Row> {
    let out = log.with_extension("processed");
    let java = Command::new("java")
        .arg("-cp")
        .arg(jar)
        .arg("org.HdrHistogram.HistogramLogProcessor")
        .arg("-i")
        .arg(log)
        .args(extra)
        .args(["-csv", "-outputValueUnitRatio", "1", "-o"])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run java ({e}): install a JDK (17 or later)"));
    assert_success(&java);
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(out.with_extension("processed.hgrm"));
    let us = |f: &str| {
        let v: f64 = f.parse().unwrap();
        assert_eq!(v.fract(), 0.0, "a whole number of us: {f}");
        v as u64
    };
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('"'))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 12, "{l}");
            Row {
                end_s: f[0].parse().unwrap(),
                count: f[1].parse().unwrap(),
                p50: us(f[2]),
                max: us(f[4]),
                total_count: f[5].parse().unwrap(),
                total_p50: us(f[6]),
                total_p90: us(f[7]),
                total_p99: us(f[8]),
                total_p999: us(f[9]),
                total_p9999: us(f[10]),
                total_max: us(f[11]),
            }
        })
        .collect()
}

/// Java's reading of the log against the report (`load` of run.json, or `srvprof load --json`).
pub(crate) fn assert_java_reads_the_report(rows: &[Row], load: &serde_json::Value) {
    let timeline = load["timeline"].as_array().unwrap();
    let latency = &load["latency_us"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    assert_eq!(load["errors"], 0, "nginx answers every request");
    assert_eq!(
        rows.len(),
        timeline.len(),
        "one histogram per interval: {rows:?}"
    );
    let interval_s = load["config"]["interval_s"].as_f64().unwrap();
    let duration_s = load["duration_s"].as_f64().unwrap();
    for (i, (row, entry)) in rows.iter().zip(timeline).enumerate() {
        let end_s = (entry["t_s"].as_f64().unwrap() + interval_s).min(duration_s);
        assert!((row.end_s - end_s).abs() < 0.002, "interval {i}: {row:?}");
        // Warmup requests answered in the first interval are counted there, not in latency.
        let carried_in = if i == 0 { n(&load["carried_in"]) } else { 0 };
        assert_eq!(
            row.count,
            n(&entry["completed"]) - carried_in,
            "interval {i}"
        );
        assert_eq!(row.p50, n(&entry["p50_us"]), "interval {i} p50");
        assert_eq!(row.max, n(&entry["max_us"]), "interval {i} max");
    }
    let total = rows.last().unwrap();
    assert_eq!(total.total_count, n(&latency["count"]));
    assert_eq!(
        total.total_count,
        n(&load["completed"]) - n(&load["carried_in"])
    );
    assert_eq!(total.total_p50, n(&latency["p50"]));
    assert_eq!(total.total_p90, n(&latency["p90"]));
    assert_eq!(total.total_p99, n(&latency["p99"]));
    assert_eq!(total.total_p999, n(&latency["p999"]));
    assert_eq!(total.total_p9999, n(&latency["p9999"]));
    assert_eq!(total.total_max, n(&latency["max"]));
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("srvprof-hdrlog-{}-{name}", std::process::id()))
}

#[test]
fn java_hdrhistogram_reads_the_load_commands_log_as_its_report() {
    let jar = hdrhistogram_jar();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let log = temp_path("load.hlog");
    let report_dir = temp_path("load-out");
    let report_path = report_dir.join("load.json");
    let out = Command::new(srvprof_bin())
        .args(["load", &nginx.url()])
        .args(["-c", "8", "-d", "3s", "--warmup", "500ms"])
        .args(["--interval", "500ms", "--hdr-log"])
        .arg(&log)
        .arg("--out")
        .arg(&report_dir)
        .output()
        .expect("srvprof load");
    assert_success(&out);
    let report = read_json(&report_path);
    let rows = java_log_processor(&jar, &log);
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&report_path);
    assert_eq!(rows.len(), 6, "3 s in 500 ms intervals");
    assert_java_reads_the_report(&rows, &report);
    assert!(report["carried_in"].as_u64().unwrap() > 0);
}

#[test]
fn java_hdrhistogram_reads_the_run_commands_log_as_its_run_json() {
    require_root();
    let jar = hdrhistogram_jar();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let log = temp_path("run.hlog");
    let log_arg = log.to_str().unwrap();
    let run = RunArgs::pid(nginx.pid())
        .load(8, "2s", "500ms")
        .args(&[
            "--interval",
            "500ms",
            "--stacks",
            "off",
            "--hdr-log",
            log_arg,
        ])
        .run_ok("hdr-log");
    let rows = java_log_processor(&jar, &log);
    let _ = std::fs::remove_file(&log);
    assert_java_reads_the_report(&rows, &run["load"]);
}

/// `srvprof load --out DIR` writes its latency log into the folder beside load.json
/// (DIR/latency.hlog), as a split run's merge reads it: Java's HdrHistogram reads it as the
/// report says.
#[test]
fn the_load_commands_folder_holds_its_latency_log() {
    let jar = hdrhistogram_jar();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let dir = temp_path("load-folder");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(srvprof_bin())
        .args(["load", &nginx.url()])
        .args([
            "-c",
            "4",
            "-d",
            "2s",
            "--warmup",
            "500ms",
            "--interval",
            "500ms",
        ])
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("srvprof load");
    assert_success(&out);
    let report = read_json(&dir.join("load.json"));
    let rows = java_log_processor(&jar, &dir.join("latency.hlog"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(rows.len(), 4, "2 s in 500 ms intervals");
    assert_java_reads_the_report(&rows, &report);
}
