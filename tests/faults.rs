//! Servers that misbehave by construction, profiled with `srvprof run`: the run counts what went
//! wrong by kind, never panics, and leaves a complete run.json.

use std::time::Duration;

use srvprof_integration::*;

/// `srvprof run` of servers/faulty in `mode` on a free port, without a warmup: `-c CONNECTIONS
/// -d DURATION`, then `extra`, stacks off.
fn run_faulty(
    mode: &[&str],
    connections: u64,
    duration: &str,
    extra: &[&str],
    name: &str,
) -> (std::process::ExitStatus, String, serde_json::Value) {
    RunArgs::cmd(&faulty_cmd(free_port(), mode))
        .load(connections, duration, "0s")
        .args(extra)
        .args(&["--stacks", "off"])
        .run(name)
}

#[test]
fn a_server_that_never_answers_gives_read_timeouts() {
    require_root();
    let (status, stderr, run) = run_faulty(
        &["--mode", "never-answer"],
        5,
        "3s",
        &["--timeout", "1s"],
        "never",
    );
    assert!(
        !status.success(),
        "no request succeeded, so the exit status says so: {stderr}"
    );
    assert_eq!(run["load"]["completed"], 0);
    let timeouts = errors_of(&run, "read_timeout");
    // 5 connections, each timing out after 1 s, over 3 s: about 15.
    assert!(
        (5..=20).contains(&timeouts),
        "{timeouts} read timeouts: {}",
        run["load"]["errors_by_kind"]
    );
    expect_finding(&run, "no_success");
}

#[test]
fn malformed_http_is_counted_as_protocol_errors_without_a_panic() {
    require_root();
    let (status, stderr, run) = run_faulty(&["--mode", "malformed"], 4, "2s", &[], "malformed");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!status.success());
    let n = errors_of(&run, "protocol_error");
    assert!(
        n > 0 && n == run["load"]["errors"].as_u64().unwrap(),
        "{}",
        run["load"]["errors_by_kind"]
    );
}

#[test]
fn a_connection_closed_mid_response_is_an_error_not_a_success() {
    require_root();
    let mode = ["--mode", "close-mid-response"];
    let (_, stderr, run) = run_faulty(&mode, 4, "2s", &[], "midclose");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        run["load"]["completed"], 0,
        "a 10-byte body of a 100-byte response is no success"
    );
    assert!(
        run["load"]["errors"].as_u64().unwrap() > 0,
        "{}",
        run["load"]["errors_by_kind"]
    );
}

#[test]
fn a_slow_server_gets_correct_latency() {
    require_root();
    // A ~40-byte response written one byte every 5 ms: at least ~200 ms per request.
    let mode = ["--mode", "slow", "--byte-delay-ms", "5"];
    let (status, stderr, run) = run_faulty(&mode, 4, "3s", &[], "slow");
    assert!(status.success(), "{stderr}");
    let p50 = run["load"]["latency_us"]["p50"].as_u64().unwrap();
    assert!((150_000..2_000_000).contains(&p50), "p50 {p50} us");
}

#[test]
fn a_server_killed_and_restarted_on_its_port_mid_run() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let port = nginx.port;
    let dir = fresh_run_dir("restart");
    let child = RunArgs::pid(nginx.pid())
        .load(10, "8s", "0s")
        .args(&["--timeout", "1s", "--stacks", "off"])
        .out(&dir)
        .spawn();
    std::thread::sleep(Duration::from_secs(3));
    drop(nginx); // SIGKILL to the whole group: master and worker die
    std::thread::sleep(Duration::from_secs(1));
    let restarted = Server::start_on("nginx-hello", port, &["--cpus", "1"]);
    let out = child.wait_with_output().unwrap();
    drop(restarted);
    assert_success(&out);
    let run = read_json(&dir.join("run.json"));
    let timeline = run["timeline"].as_array().unwrap();
    let first = timeline.first().unwrap()["completed"].as_u64().unwrap();
    let last = timeline.last().unwrap()["completed"].as_u64().unwrap();
    assert!(
        first > 0 && last > 0,
        "served before the kill and again after the restart: {first} / {last}"
    );
    assert!(
        run["load"]["errors"].as_u64().unwrap() > 0,
        "the gap shows as errors"
    );
    let died = run["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "target_died")
        .count();
    assert!(
        died >= 1,
        "the killed processes are reported: {:?}",
        run["findings"]
    );
    assert!(
        run["server"]["exits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["signal"] == 9)
    );
}

#[test]
fn sigterm_in_any_phase_leaves_only_complete_files() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    // Into attach, warmup, measurement and the end of the run; after attach, timed from srvprof's
    // own "probes attached" line so a slow attach does not shift the phase.
    for (phase, after_attach_ms) in [
        ("attach", None),
        ("warmup", Some(1000)),
        ("measurement", Some(3500)),
        ("late", Some(5900)),
    ] {
        let dir = fresh_run_dir(&format!("term-{phase}"));
        let mut child = RunArgs::pid(nginx.pid())
            .load(10, "4s", "2s")
            .out(&dir)
            .spawn();
        let mut stderr_lines = std::io::BufReader::new(child.stderr.take().unwrap());
        match after_attach_ms {
            None => std::thread::sleep(Duration::from_millis(100)),
            Some(ms) => {
                let mut line = String::new();
                while std::io::BufRead::read_line(&mut stderr_lines, &mut line).unwrap() > 0
                    && !line.contains("probes attached")
                {
                    line.clear();
                }
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr_lines, &mut rest);
        let status = child.wait().unwrap();
        assert!(!rest.contains("panicked"), "{phase}: {rest}");
        // Ended by the signal's handler (status 0 or 1), not killed by it.
        assert!(status.code().is_some(), "{phase}: {status:?}");
        // Whatever exists is whole: JSON parses, no temporary file is left.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                assert!(
                    !name.contains("srvprof-tmp"),
                    "{phase}: temporary file {name} left"
                );
                if name.ends_with(".json") {
                    let text = std::fs::read_to_string(e.path()).unwrap();
                    serde_json::from_str::<serde_json::Value>(&text)
                        .unwrap_or_else(|err| panic!("{phase}: {name} is not whole JSON: {err}"));
                }
            }
        }
        if phase == "measurement" {
            let run = read_json(&dir.join("run.json"));
            assert!(
                run["load"]["completed"].as_u64().unwrap() > 0,
                "measured until the signal"
            );
            assert!(run["notes"].to_string().contains("interrupted"));
            // The stacks sampled until the signal are kept, with their times: the measured
            // window had run about 1.5 s of its 4.
            let total = weight(&folded(&dir, "oncpu-server.folded"), |_| true);
            let rows = timed(&dir, "oncpu-server");
            let timed_total: u64 = rows.iter().map(|r| r.2).sum();
            assert!(
                total > 0 && timed_total > 0 && timed_total <= total,
                "{phase}: {total} samples, {timed_total} of them timed"
            );
            assert!(
                rows.iter().any(|r| r.0 >= 0) && rows.iter().all(|r| r.0 < 4000),
                "{phase}: timed rows {:?}",
                rows.iter()
                    .map(|r| r.0)
                    .collect::<std::collections::BTreeSet<_>>()
            );
        }
    }
}

/// nginx with worker_connections 10240 cannot hold 10,000 keep-alive connections: whenever fewer
/// than 1/16 are free it closes idle ones (and logs so). Replacing each at once was a storm
/// (214,224 connections opened in 25 s, seconds without a response); replaced after a backoff,
/// the opens stay a small multiple of -c, every interval has responses, and the finding names
/// the server's limit.
#[test]
fn nginx_shedding_idle_connections_is_no_storm_and_is_named() {
    require_root();
    let connections: u64 = 10_000;
    let nginx = Server::start(
        "nginx-hello",
        &[
            "--cpus",
            "1",
            "--worker-connections",
            "10240",
            "--keepalive-timeout",
            "600",
        ],
    );
    let opens_before = net_counter("Tcp:", "ActiveOpens");
    let run = RunArgs::pid(nginx.pid())
        .args(&["-c", &connections.to_string(), "-d", "15s"])
        .args(&["--cpus", "0", "--stacks", "off"])
        .run_ok("shed");
    let opens = net_counter("Tcp:", "ActiveOpens") - opens_before;
    // nginx's own word that it shed connections: the independent source for the cause.
    let log = std::fs::read_to_string(
        std::path::Path::new(&std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into())).join(
            format!("srvprof-servers/nginx-hello-{}/error.log", nginx.port),
        ),
    )
    .unwrap_or_default();
    let shed_warnings = log.matches("worker_connections are not enough").count();
    assert!(shed_warnings > 0, "nginx did not shed: {log}");
    let idle_closed = run["load"]["idle_closed_by_server"].as_u64().unwrap();
    eprintln!(
        "shed: {opens} opens for -c {connections}, {idle_closed} idle connections closed by nginx, {shed_warnings} nginx warnings, {} req/s, errors {}",
        run["load"]["throughput_rps"], run["load"]["errors_by_kind"]
    );
    // Before the backoff: 214,224 opens in 25 s. Each replacement is an accept that makes nginx
    // close more, so without a backoff the opens run away.
    assert!(
        opens <= 4 * connections,
        "{opens} connections opened for -c {connections}: a reconnect storm"
    );
    let timeline = run["timeline"].as_array().unwrap();
    assert!(timeline.len() >= 14, "{} intervals", timeline.len());
    for row in timeline {
        assert!(
            row["completed"].as_u64().unwrap() > 0,
            "an interval without responses at {} s",
            row["t_s"]
        );
    }
    assert_eq!(
        errors_of(&run, "other"),
        0,
        "{}",
        run["load"]["errors_by_kind"]
    );
    let f = expect_finding(&run, "server_closed_idle");
    assert!(idle_closed >= 100, "{idle_closed}");
    let summary = f["summary"].as_str().unwrap();
    assert!(summary.contains("worker_connections"), "{summary}");
}
