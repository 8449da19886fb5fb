//! A run split over hosts, on the real kernel: a server namespace and three client namespaces
//! on one bridge, nginx logging every request, three load agents given one start time, the
//! server's probe, and `srvprof merge` of their folders, checked against nginx's own log, Java's
//! HdrHistogram and the kernel's counters.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use srvprof_integration::{
    BridgedNetns, assert_run_json_matches_its_schema, assert_success, children_of, merge_into,
    nginx_balancer_in_netns, nginx_in_netns_logging, proc_ctxt_switches, read_json, require_root,
    srvprof_bin,
};

use crate::hdr_log::{hdrhistogram_jar, java_log_processor, java_log_processor_of};

const AGENTS: usize = 3;
const CONNECTIONS: u64 = 12;

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("srvprof-split-{}-{name}", std::process::id()))
}

/// The voluntary and involuntary switches of every thread of nginx's processes.
fn nginx_switches(pids: &[u32]) -> u64 {
    let mut sum = 0;
    for pid in pids {
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            let tid: u32 = task.file_name().to_string_lossy().parse().unwrap();
            let (v, i) = proc_ctxt_switches(*pid, tid);
            sum += v + i;
        }
    }
    sum
}

/// Three agents (`--segment I/3`, one `--start-at`) load nginx from their own namespaces while
/// `srvprof probe --start-at` watches it; `srvprof merge` makes one run of the four folders.
/// Each agent had its share of the connections, by its own report and by nginx's log (the
/// connections it saw from each client's address); the merged requests are the agents' sum, and
/// nginx answered as many in the window, give or take one in flight per connection at each
/// end; the merged p50, p99 and max are those Java's HdrHistogram finds reading the three logs as
/// one; the merged run.json joins the probe's kernel figures (no more switches than the kernel
/// counted for nginx over the whole test) to the load, and has a report; a merge missing one
/// segment is refused in one sentence.
#[test]
fn three_client_hosts_and_a_probed_server_merge_into_one_run() {
    require_root();
    let jar = hdrhistogram_jar();
    let net = BridgedNetns::create(AGENTS);
    let (nginx, access) = nginx_in_netns_logging(&net.server, "lan", "10.232.0.1:8080", 4096);
    let mut nginx_pids = vec![nginx.pid()];
    nginx_pids.extend(children_of(nginx.pid()));
    let switches_before = nginx_switches(&nginx_pids);
    let start = SystemTime::now() + Duration::from_secs(3);
    let at = srvprof_loadgen::start::StartAt(start).to_rfc3339();
    let server_dir = temp_path("server");
    let _ = std::fs::remove_dir_all(&server_dir);
    // The probe watches the load's measured window: from the agents' start and warm-up on.
    let watch_from = srvprof_loadgen::start::StartAt(start + Duration::from_millis(500));
    let (pyroscope, pushed) = crate::pyroscope::receiver();
    let probe = Command::new(srvprof_bin())
        .args(["probe", "--pid", &nginx.pid().to_string(), "-d", "3s"])
        .args(["--stacks", "on", "--pyroscope", &pyroscope])
        .args([
            "--interval",
            "500ms",
            "--start-at",
            &watch_from.to_rfc3339(),
        ])
        .args(["--run-id", &format!("start-{at}"), "--allow-unsynced"])
        .arg("--out")
        .arg(&server_dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("srvprof probe");
    let dirs: Vec<PathBuf> = (1..=AGENTS)
        .map(|i| temp_path(&format!("agent-{i}")))
        .collect();
    let agents: Vec<_> = (net.hosts.iter().zip(&dirs).enumerate())
        .map(|(i, (ns, dir))| {
            let _ = std::fs::remove_dir_all(dir);
            Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(srvprof_bin())
                .args([
                    "load",
                    "http://10.232.0.1:8080/",
                    "-c",
                    &CONNECTIONS.to_string(),
                ])
                // Three times the rate in the middle second: a row joined to the wrong interval shows.
                .args(["--rate", "1200:1500ms,3600:1s,1200:1s"])
                .args(["-d", "3s", "--warmup", "500ms"])
                .args(["--interval", "500ms", "--start-at", &at])
                .args(["--segment", &format!("{}/{AGENTS}", i + 1)])
                // This test machine's clock need not be synchronised.
                .arg("--allow-unsynced")
                .arg("--out")
                .arg(dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("srvprof load")
        })
        .collect();
    for mut a in agents {
        assert!(a.wait().unwrap().success());
    }
    let probed = probe.wait_with_output().unwrap();
    assert!(probed.status.success());
    let switches = nginx_switches(&nginx_pids) - switches_before;
    drop(nginx);
    let merged = temp_path("merged");
    let with_server: Vec<PathBuf> = dirs.iter().chain([&server_dir]).cloned().collect();
    let out = merge_into(&with_server, &merged);
    assert_success(&out);
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let reports: Vec<serde_json::Value> = (dirs.iter())
        .map(|d| read_json(&d.join("load.json")))
        .collect();
    let load = read_json(&merged.join("load.json"));
    for r in &reports {
        assert_eq!(n(&r["config"]["connections"]), CONNECTIONS / AGENTS as u64);
        assert_eq!(r["config"]["run_id"], format!("start-{at}").as_str());
        assert_eq!(r["errors"], 0, "nginx answers every request");
    }
    assert_eq!(
        n(&load["completed"]),
        reports.iter().map(|r| n(&r["completed"])).sum::<u64>()
    );
    assert_eq!(n(&load["config"]["connections"]), CONNECTIONS);
    assert_eq!(load["hosts"].as_array().unwrap().len(), AGENTS);

    // nginx's log of the measured window: each request's answer time, its client, its connection.
    let from = watch_from
        .0
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let to = from + load["duration_s"].as_f64().unwrap();
    let log = std::fs::read_to_string(&access).unwrap();
    let mut by_client: BTreeMap<String, (u64, BTreeSet<u64>)> = BTreeMap::new();
    let mut by_row = vec![0u64; 6];
    for line in log.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let t: f64 = f[0].parse().unwrap();
        if (from..to).contains(&t) {
            by_row[(((t - from) / 0.5) as usize).min(5)] += 1;
            let entry = by_client.entry(f[1].to_string()).or_default();
            entry.0 += 1;
            entry.1.insert(f[2].parse().unwrap());
        }
    }
    eprintln!(
        "nginx's window: {:?}",
        (by_client.iter())
            .map(|(a, (r, c))| (a, r, c.len()))
            .collect::<Vec<_>>()
    );
    for (i, r) in reports.iter().enumerate() {
        let address = format!("10.232.0.{}", i + 2);
        let (answered, connections) = by_client.get(&address).expect("nginx answered the agent");
        assert_eq!(
            connections.len() as u64,
            CONNECTIONS / AGENTS as u64,
            "{address}"
        );
        let completed = n(&r["completed"]);
        // At each end of the window, a request in flight on each connection may fall either side.
        assert!(
            completed.abs_diff(*answered) <= 2 * CONNECTIONS / AGENTS as u64,
            "{address}: the agent counted {completed}, nginx answered {answered} in the window"
        );
    }

    // The three agents' intervals in one log, read by Java as one: its totals are the merge's.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let all = temp_path("all.hlog");
    let mut text = std::fs::read_to_string(dirs[0].join("latency.hlog")).unwrap();
    for d in &dirs[1..] {
        let more = std::fs::read_to_string(d.join("latency.hlog")).unwrap();
        text.extend(
            more.lines()
                .filter(|l| l.starts_with("Tag="))
                .map(|l| format!("{l}\n")),
        );
    }
    std::fs::write(&all, text).unwrap();
    let added = java_log_processor_of(&jar, &all, &["-tag", host.trim()]);
    let _ = std::fs::remove_file(&all);
    let total = added.last().expect("intervals read");
    let latency = &load["latency_us"];
    eprintln!("merged {latency}; Java's three logs added: {total:?}");
    assert_eq!(total.total_count, n(&latency["count"]));
    assert_eq!(total.total_p99, n(&latency["p99"]));
    assert_eq!(total.total_p50, n(&latency["p50"]));
    assert_eq!(total.total_max, n(&latency["max"]));
    let rows = java_log_processor(&jar, &merged.join("latency.hlog"));
    crate::hdr_log::assert_java_reads_the_report(&rows, &load);

    // The run on the servers' side, as `srvprof run` writes it.
    let run = read_json(&merged.join("run.json"));
    assert_run_json_matches_its_schema(&run);
    assert_eq!(run["load"]["completed"], load["completed"]);
    assert_eq!(run["load"]["latency_us"]["p99"], latency["p99"]);
    assert!(
        (run["target"]["pids"].as_array().unwrap()).contains(&serde_json::json!(nginx_pids[0]))
    );
    assert_eq!(
        run["timeline"].as_array().unwrap().len(),
        6,
        "3 s in 500 ms rows"
    );
    // Row by row, the merged load is what nginx answered then, and the probe's rows are the
    // same intervals: nginx switched most in the rows of the most requests.
    let timeline = run["timeline"].as_array().unwrap();
    let mean = n(&load["completed"]) / timeline.len() as u64;
    let (mut busy, mut quiet) = (Vec::new(), Vec::new());
    for (row, answered) in timeline.iter().zip(&by_row) {
        let completed = n(&row["completed"]);
        assert!(
            completed.abs_diff(*answered) <= 2 * CONNECTIONS,
            "row at {}: the agents counted {completed}, nginx answered {answered}",
            row["t_s"]
        );
        let switches = row["server"]["voluntary_switches_per_s"].as_f64().unwrap();
        match completed > mean {
            true => busy.push(switches),
            false => quiet.push(switches),
        }
    }
    eprintln!("nginx's switches a second in busy rows {busy:?}, in quiet rows {quiet:?}");
    assert_eq!((busy.len(), quiet.len()), (2, 4), "{by_row:?}");
    let least_busy = busy.iter().copied().fold(f64::MAX, f64::min);
    assert!(quiet.iter().all(|q| *q < least_busy), "{busy:?} {quiet:?}");
    let totals = &run["server"]["totals"];
    let seen = n(&totals["voluntary_switches"]) + n(&totals["involuntary_switches"]);
    eprintln!("probe: {seen} switches of nginx in the window; /proc: {switches} over the test");
    assert!(seen <= switches, "{seen} > the kernel's {switches}");
    assert!(
        seen * 2 >= switches,
        "{seen}: most of the kernel's {switches} fell in the window"
    );
    assert!(run["per_request"]["cpu_us"].as_f64().unwrap() > 0.0);
    // The client side: the agents' own CPU and switches, added.
    let client_switches: u64 = (reports.iter())
        .map(|r| n(&r["client_cpu"]["voluntary_switches"]))
        .sum();
    assert!(client_switches > 0);
    assert_eq!(
        n(&run["client"]["totals"]["voluntary_switches"]),
        client_switches
    );
    assert!(run["per_request"]["client"]["cpu_us"].as_f64().unwrap() > 0.0);
    assert!(run["findings"].is_array());
    let html = std::fs::read_to_string(merged.join("report.html")).unwrap();
    for i in 1..=AGENTS {
        assert!(
            html.contains(&format!(">{i}/{AGENTS}<")),
            "each client host in the report"
        );
    }
    // The probe's stacks: the merged run's flamegraphs and its account of p99, and the profile
    // the probe pushed to Pyroscope, labelled with the run and over the window it watched.
    assert!(merged.join("oncpu-server.folded").exists());
    assert!(merged.join("flamegraph-oncpu-server.svg").exists());
    assert!(run["tail_account"].is_object(), "{}", run["notes"]);
    let request = pushed
        .recv_timeout(Duration::from_secs(10))
        .expect("the probe pushed its profile");
    assert_eq!(
        request.body,
        std::fs::read(server_dir.join("profile-server.pb.gz")).unwrap()
    );
    let query = request.request_line.split_once('?').unwrap().1;
    let query = query.split_once(' ').unwrap().0;
    let params = crate::pyroscope::query_params(query);
    let param = |name: &str| (params.iter().find(|(n, _)| n == name)).map(|(_, v)| v.clone());
    assert!(
        param("name").unwrap().contains(&format!("run=start-{at}")),
        "{params:?}"
    );
    let watched = watch_from.0.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(param("from"), Some(watched.to_string()), "{params:?}");
    assert!(merged.join("timeline.csv").exists());

    let two = [dirs[0].clone(), dirs[1].clone(), server_dir.clone()];
    let refused = merge_into(&two, &temp_path("merged-two"));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("segment 3/3 is missing"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for d in dirs.iter().chain([&merged, &server_dir]) {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A load agent drives a balancer that sends its requests 3:1 to two backends, each on a host
/// of its own (a network and a UTS namespace: its own address and name), each watched by
/// `srvprof probe`; `srvprof merge` of the three folders sets the backends side by side. By
/// nginx's own logs the backends answered 3:1; the merged run says the busy one did about
/// three times the other's work (its CPU over the mean server host's above 1, the other's
/// below), counts no more switches for either than the kernel did, and costs a request what
/// both hosts' costs add up to.
#[test]
fn two_server_hosts_behind_a_balancer_merge_side_by_side_with_their_imbalance() {
    require_root();
    let net = BridgedNetns::create(3);
    let backends = [
        ("backend-a", "10.232.0.3:8080"),
        ("backend-b", "10.232.0.4:8080"),
    ];
    let servers: Vec<_> = (backends.iter().zip(&net.hosts[1..]))
        .map(|((name, address), ns)| nginx_in_netns_logging(ns, name, address, 4096))
        .collect();
    let _balancer = nginx_balancer_in_netns(
        &net.server,
        "balancer",
        "10.232.0.1:8080",
        &[(backends[0].1, 3), (backends[1].1, 1)],
    );
    let pids: Vec<Vec<u32>> = (servers.iter())
        .map(|(nginx, _)| {
            let mut pids = vec![nginx.pid()];
            pids.extend(children_of(nginx.pid()));
            pids
        })
        .collect();
    let before: Vec<u64> = pids.iter().map(|p| nginx_switches(p)).collect();
    let start = SystemTime::now() + Duration::from_secs(3);
    let at = srvprof_loadgen::start::StartAt(start).to_rfc3339();
    let dirs: Vec<PathBuf> = ["agent", backends[0].0, backends[1].0]
        .iter()
        .map(|name| temp_path(name))
        .collect();
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    let probes: Vec<_> = (backends.iter().zip(&servers).zip(&dirs[1..]))
        .map(|(((name, _), (nginx, _)), dir)| {
            Command::new("unshare")
                .args(["--uts", "sh", "-c"])
                .arg(format!("hostname {name} && exec \"$0\" \"$@\""))
                .arg(srvprof_bin())
                .args(["probe", "--pid", &nginx.pid().to_string(), "-d", "3s"])
                .args(["--interval", "500ms", "--start-at", &at, "--allow-unsynced"])
                .arg("--out")
                .arg(dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("srvprof probe")
        })
        .collect();
    let agent = Command::new("ip")
        .args(["netns", "exec", &net.hosts[0]])
        .arg(srvprof_bin())
        .args([
            "load",
            "http://10.232.0.1:8080/",
            "-c",
            "8",
            "--rate",
            "2000",
        ])
        .args(["-d", "3s", "--interval", "500ms", "--start-at", &at])
        .arg("--allow-unsynced")
        .arg("--out")
        .arg(&dirs[0])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("srvprof load");
    assert!(agent.success());
    for p in probes {
        assert!(p.wait_with_output().unwrap().status.success());
    }
    let switches: Vec<u64> = (pids.iter().zip(&before))
        .map(|(p, b)| nginx_switches(p) - b)
        .collect();
    let merged = temp_path("balanced");
    let out = merge_into(&dirs, &merged);
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    let run = read_json(&merged.join("run.json"));
    assert_run_json_matches_its_schema(&run);
    let from = start.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let to = from + run["load"]["duration_s"].as_f64().unwrap();
    let answered: Vec<u64> = (servers.iter())
        .map(|(_, log)| {
            (std::fs::read_to_string(log).unwrap().lines())
                .filter(|l| {
                    let t: f64 = l.split_whitespace().next().unwrap().parse().unwrap();
                    (from..to).contains(&t)
                })
                .count() as u64
        })
        .collect();
    let hosts = run["servers"].as_array().expect("servers side by side");
    eprintln!("nginx's logs: {answered:?}; the kernel's switches {switches:?}; {hosts:#?}");
    assert_eq!(hosts.len(), 2);
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let completed = run["load"]["completed"].as_u64().unwrap();
    assert!(
        completed.abs_diff(answered[0] + answered[1]) <= 16,
        "{completed}"
    );
    let share = answered[0] as f64 / answered[1] as f64;
    assert!(
        (2.8..3.2).contains(&share),
        "the balancer's 3:1: {answered:?}"
    );
    for ((h, (name, _)), kernel) in hosts.iter().zip(&backends).zip(&switches) {
        assert_eq!(h["host"], *name);
        let seen = h["context_switches"].as_u64().unwrap();
        assert!(
            seen <= *kernel && seen * 2 >= *kernel,
            "{name}: {seen} of {kernel}"
        );
        assert!(stdout.contains(&format!("server {name}:")), "{stdout}");
    }
    let work = f(&hosts[0]["cpu_s"]) / f(&hosts[1]["cpu_s"]);
    assert!(
        (2.0..4.5).contains(&work),
        "backend-a did {work}x backend-b's work"
    );
    assert!(f(&hosts[0]["cpu_vs_mean"]) > 1.2 && f(&hosts[1]["cpu_vs_mean"]) < 0.8);
    let html = std::fs::read_to_string(merged.join("report.html")).unwrap();
    assert!(html.contains(">backend-a<") && html.contains(">backend-b<"));
    let fleet = f(&hosts[0]["cpu_us_per_request"]) + f(&hosts[1]["cpu_us_per_request"]);
    assert!((f(&run["per_request"]["cpu_us"]) - fleet).abs() < 1e-6 * fleet);
    for d in dirs.iter().chain([&merged]) {
        let _ = std::fs::remove_dir_all(d);
    }
}
