//! `--remote-write` read back by the store users have: Debian's Prometheus, started by the test
//! as its remote-write receiver with native histograms on, takes two load agents' pushes (one
//! split run's segments 1/2 and 2/2), and its HTTP API must give back what each agent's load.json
//! says: the requests counter, the latency histogram's count, its p99 within one native bucket,
//! the run, segment and host labels; and summed over the agents, what `srvprof merge` makes of
//! their folders. A receiver that is not there is one note in the report, not a failed run.
//!
//! Prometheus comes from Debian's `prometheus` package (`cargo xtask setup` installs it);
//! without it the test fails: it never skips.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use srvprof_integration::{
    RunArgs, Server, assert_run_json_matches_its_schema, assert_success, free_port, read_json,
    require_root, srvprof_bin,
};

/// A native histogram bucket's width at the schema pushed (5): a quantile lands within one.
const BUCKET_RATIO: f64 = 1.021_897_148_654_116_7; // 2^(1/32)

/// Prometheus with its remote-write receiver on a free loopback port, its data in a folder of its
/// own; killed and removed on drop.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    fn start() -> Prometheus {
        let dir = temp_path("prometheus");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        // No scrape at all: every series comes from the pushes.
        std::fs::write(
            dir.join("prometheus.yml"),
            "global:\n  scrape_interval: 1m\n",
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg("--web.enable-remote-write-receiver")
            .arg("--enable-feature=native-histograms")
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start prometheus ({e}): install Debian's prometheus package (`cargo xtask setup` does)"
                )
            });
        let prometheus = Prometheus { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(port, "/-/ready").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready in 60 s: {}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    fn write_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/write", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query's result: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let (status, body) = http_get(
            self.port,
            &format!(
                "/api/v1/query?query={}",
                srvprof_loadgen::http_push::percent_encode(promql)
            ),
        );
        assert_eq!(status, 200, "{promql}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["data"]["resultType"], "vector", "{promql}: {body}");
        (answer["data"]["result"].as_array().unwrap().iter())
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// The one value of a query that yields one series.
    fn value(&self, promql: &str) -> f64 {
        let result = self.query(promql);
        assert_eq!(result.len(), 1, "{promql}: {result:?}\n{}", self.log());
        result[0].1
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// GET over HTTP/1.0 (the server closes the connection after its answer): status and body.
fn http_get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    if stream.read_to_string(&mut answer).is_err() {
        return (0, answer);
    }
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "srvprof-remote-write-{}-{name}",
        std::process::id()
    ))
}

/// A quantile Prometheus computed (seconds) against HdrHistogram's (µs): within one bucket.
fn assert_within_a_bucket(prometheus_s: f64, hdr_us: u64, what: &str) {
    let ratio = prometheus_s * 1e6 / hdr_us as f64;
    eprintln!(
        "{what}: p99 {:.1} us from Prometheus, {hdr_us} us in load.json",
        prometheus_s * 1e6
    );
    // HdrHistogram's own 3 digits on top of the bucket.
    let slack = BUCKET_RATIO * 1.002;
    assert!(
        ratio <= slack && ratio >= 1.0 / slack,
        "{what}: Prometheus says {:.1} us, load.json {hdr_us} us: more than a native bucket apart",
        prometheus_s * 1e6
    );
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Two agents of one run (segments 1/2 and 2/2, one --start-at, 4 connections and 500 requests a
/// second each against nginx on loopback for 3 s) push to Prometheus: each agent's series hold
/// its load.json's figures, and their sums over the agents the merged run's.
#[test]
fn prometheus_holds_each_agents_figures_and_their_sum_is_the_merged_run() {
    let prometheus = Prometheus::start();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let run = format!("remote-write-test-{nanos}");
    let at =
        srvprof_loadgen::start::StartAt(SystemTime::now() + Duration::from_secs(2)).to_rfc3339();
    let dirs: Vec<PathBuf> = (1..=2).map(|i| temp_path(&format!("agent-{i}"))).collect();
    let agents: Vec<Child> = (dirs.iter().enumerate())
        .map(|(i, dir)| {
            let _ = std::fs::remove_dir_all(dir);
            Command::new(srvprof_bin())
                .args([
                    "load",
                    &nginx.url(),
                    "-c",
                    "8",
                    "--rate",
                    "1000",
                    "-d",
                    "3s",
                ])
                .args(["--interval", "500ms", "--run-id", &run])
                .args(["--segment", &format!("{}/2", i + 1), "--start-at", &at])
                // This test machine's clock need not be synchronised.
                .arg("--allow-unsynced")
                .args(["--remote-write", &prometheus.write_url()])
                .arg("--out")
                .arg(dir)
                .stdout(Stdio::piped())
                .spawn()
                .expect("srvprof load")
        })
        .collect();
    for agent in agents {
        let out = agent.wait_with_output().unwrap();
        assert_success(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Remote write: "), "{text}");
    }
    let reports: Vec<serde_json::Value> = dirs
        .iter()
        .map(|d| read_json(&d.join("load.json")))
        .collect();

    let mut agents_p99 = Vec::new();
    for (i, report) in reports.iter().enumerate() {
        let segment = format!("{}/2", i + 1);
        let pushes = &report["remote_write"];
        assert_eq!(pushes["failed"], 0, "{pushes}\n{}", prometheus.log());
        assert!(n(&pushes["pushes"]) >= 1, "{pushes}");
        assert_eq!(n(&report["errors"]), 0, "nginx answers every request");
        assert_eq!(n(&report["carried_in"]), 0, "no warmup");
        let completed = n(&report["completed"]);
        assert!(completed > 1_000, "about 1,500 requests each: {completed}");
        assert_eq!(n(&report["latency_us"]["count"]), completed);

        let this = format!("run=\"{run}\",segment=\"{segment}\"");
        let counter = prometheus.query(&format!("srvprof_requests_completed_total{{{this}}}"));
        assert_eq!(counter.len(), 1, "{counter:?}");
        let (labels, value) = &counter[0];
        assert_eq!(*value, completed as f64, "segment {segment}: {labels}");
        assert_eq!(labels["run"], run.as_str());
        assert_eq!(labels["segment"], segment.as_str());
        assert_eq!(labels["host"], report["config"]["host"], "{labels}");

        let latency = format!("srvprof_latency_seconds{{{this}}}");
        let count = prometheus.value(&format!("histogram_count({latency})"));
        assert_eq!(count, completed as f64, "segment {segment}");
        let sum_s = prometheus.value(&format!("histogram_sum({latency})"));
        let mean_us = report["latency_us"]["mean"].as_f64().unwrap();
        let mean_pushed_us = sum_s * 1e6 / count;
        assert!(
            (mean_pushed_us / mean_us - 1.0).abs() < 0.002,
            "segment {segment}: mean {mean_pushed_us} us pushed, {mean_us} us in load.json"
        );
        let p99 = prometheus.value(&format!("histogram_quantile(0.99, {latency})"));
        assert_within_a_bucket(p99, n(&report["latency_us"]["p99"]), &segment);
        agents_p99.push(p99);
        let throughput = prometheus.value(&format!("srvprof_throughput_rps{{{this}}}"));
        assert!(
            throughput > 0.0,
            "segment {segment}: last interval's throughput"
        );
    }

    // Summed over the agents: the merged run's figures.
    let merged = temp_path("merged");
    let out = srvprof_integration::merge_into(&dirs, &merged);
    assert_success(&out);
    let load = read_json(&merged.join("load.json"));
    let both = format!("{{run=\"{run}\"}}");
    let completed = prometheus.value(&format!("sum(srvprof_requests_completed_total{both})"));
    assert_eq!(completed, n(&load["completed"]) as f64);
    let latency = format!("sum(srvprof_latency_seconds{both})");
    let count = prometheus.value(&format!("histogram_count({latency})"));
    assert_eq!(count, n(&load["latency_us"]["count"]) as f64);
    let p99 = prometheus.value(&format!("histogram_quantile(0.99, {latency})"));
    assert_within_a_bucket(p99, n(&load["latency_us"]["p99"]), "summed");
    // The live query docs/across-hosts.md gives: a sum of the agents' rates, each Prometheus's
    // estimate from its points, so its p99 lies between theirs (a mix of histograms).
    let live = |run_or_segment: &str| {
        let q = "histogram_quantile(0.99, sum(rate(srvprof_latency_secondsSEL[1m])))";
        prometheus.value(&q.replace("SEL", run_or_segment))
    };
    let p99 = live(&format!("{{run=\"{run}\"}}"));
    let each: Vec<f64> = ["1/2", "2/2"]
        .iter()
        .map(|s| live(&format!("{{run=\"{run}\",segment=\"{s}\"}}")))
        .collect();
    let (low, high) = (each[0].min(each[1]), each[0].max(each[1]));
    eprintln!(
        "summed rate: p99 {:.1} us; each agent's rate {low:?} and {high:?} s; their whole runs' {agents_p99:?} s",
        p99 * 1e6
    );
    assert!(
        p99 >= low / BUCKET_RATIO && p99 <= high * BUCKET_RATIO,
        "the live p99 {p99} s is not between the agents' ({low} s, {high} s)"
    );

    for dir in dirs.iter().chain([&merged]) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `srvprof run` pushes its load's figures as `load` does: Prometheus's counter is run.json's
/// completed (warmup answers carried in included), and run.json with its `remote_write` matches
/// the schema.
#[test]
fn the_run_command_pushes_its_loads_figures() {
    require_root();
    let prometheus = Prometheus::start();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let run_id = format!("remote-write-run-{}", std::process::id());
    let run = RunArgs::pid(nginx.pid())
        .load(4, "2s", "500ms")
        .args(&[
            "--interval",
            "500ms",
            "--stacks",
            "off",
            "--run-id",
            &run_id,
        ])
        .args(&["--remote-write", &prometheus.write_url()])
        .run_ok("remote-write");
    assert_run_json_matches_its_schema(&run);
    let load = &run["load"];
    assert_eq!(
        load["remote_write"]["failed"], 0,
        "{}",
        load["remote_write"]
    );
    let counter = format!("srvprof_requests_completed_total{{run=\"{run_id}\"}}");
    assert_eq!(prometheus.value(&counter), n(&load["completed"]) as f64);
    let count = format!("histogram_count(srvprof_latency_seconds{{run=\"{run_id}\"}})");
    assert_eq!(
        prometheus.value(&count),
        n(&load["latency_us"]["count"]) as f64
    );
}

/// A receiver that is not there: the run goes on and succeeds, and its report says in one
/// sentence what failed and what to check.
#[test]
fn a_push_that_fails_is_a_note_not_a_failed_run() {
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let nobody = free_port();
    let dir = temp_path("unreachable");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(srvprof_bin())
        .args([
            "load",
            &nginx.url(),
            "-c",
            "2",
            "-d",
            "1s",
            "--interval",
            "250ms",
        ])
        .args([
            "--remote-write",
            &format!("http://127.0.0.1:{nobody}/api/v1/write"),
        ])
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("srvprof load");
    assert_success(&out);
    let report = read_json(&dir.join("load.json"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(n(&report["completed"]) > 0);
    let pushes = &report["remote_write"];
    assert_eq!(pushes["pushes"], 0, "{pushes}");
    assert!(n(&pushes["failed"]) >= 1, "{pushes}");
    let error = pushes["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("cannot connect to 127.0.0.1:{nobody}"))
            && error.contains("/api/v1/write"),
        "{error}"
    );
    // A run id was made for the series, and recorded with the host.
    let id = report["config"]["run_id"].as_str().unwrap();
    assert!(id.starts_with("load-"), "{id}");
    assert!(report["config"]["host"].is_string());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pushes failed"), "{text}");
}
