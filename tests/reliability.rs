//! A profiler must never become the incident: every exit path detaches every program, files
//! belong to the invoking user and are never written through a planted link, and a real network
//! path (two network namespaces joined by a veth pair) is measured like loopback.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use srvprof_integration::*;

const WORKLOAD: &str = env!("CARGO_BIN_EXE_srvprof-known-workload");

/// Of these program ids, the ones still loaded after their last user is gone, and the links still
/// attached to them. The kernel frees programs after an RCU grace period: allow it 5 s.
fn left_behind(ids: &[u64]) -> (Vec<u64>, usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (loaded, links) = still_loaded(ids);
        if (loaded.is_empty() && links == 0) || std::time::Instant::now() > deadline {
            return (loaded, links);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The kernel's list of loaded BPF programs or links ("prog", "link"), as bpftool prints it.
fn bpftool_list(what: &str) -> serde_json::Value {
    let out = Command::new("bpftool")
        .args(["-j", what, "show"])
        .output()
        .expect("bpftool (cargo xtask setup installs it)");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// Of these program ids, the ones loaded now, and the links attached to them.
fn still_loaded(ids: &[u64]) -> (Vec<u64>, usize) {
    let progs = bpftool_list("prog");
    let loaded: Vec<u64> = progs
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["id"].as_u64())
                .filter(|id| ids.contains(id))
                .collect()
        })
        .unwrap_or_default();
    let links = bpftool_list("link");
    let links = links
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|l| ids.contains(&l["prog_id"].as_u64().unwrap_or(0)))
                .count()
        })
        .unwrap_or(0);
    (loaded, links)
}

#[test]
fn every_exit_path_detaches_every_program_and_link() {
    require_root();
    let w = Workload::start(WORKLOAD);
    for (how, signal) in [
        ("normal end", None),
        ("Ctrl-C", Some(libc::SIGINT)),
        ("SIGTERM", Some(libc::SIGTERM)),
        ("SIGKILL", Some(libc::SIGKILL)),
    ] {
        let duration = if signal.is_some() { "60s" } else { "2s" };
        let mut child = spawn_piped(&mut probe_json(w.pid(), duration, &[]));
        wait_attached(&mut child, "watching PIDs");
        let held = programs_held_by(child.id());
        let (loaded, links) = still_loaded(&held);
        // Sampled mode: the syscall and softirq programs are loaded, and linked only inside
        // their window (a twentieth of each interval), the accept program only while the server
        // takes new connections, the answer programs once it has an outbound connection, the
        // hold programs once answers are held; every other program is linked all along.
        let windowed = srvprof::probes::syscalls::PROGRAMS.len()
            + srvprof::probes::irq::SOFTIRQ_PROGRAMS.len()
            + 1
            + srvprof::probes::tcp::LATE_PROGRAMS.len();
        assert!(
            held.len() >= srvprof::probes::PROGRAMS.len()
                && loaded.len() == held.len()
                && links >= srvprof::probes::PROGRAMS.len() - windowed,
            "{how}: holds {held:?}, {links} links"
        );
        if let Some(sig) = signal {
            // 0.5 s in: a window may be open, and its links must go as well.
            std::thread::sleep(Duration::from_millis(500));
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, sig) };
        }
        child.wait().unwrap();
        let (after, links_after) = left_behind(&held);
        assert!(
            after.is_empty() && links_after == 0,
            "{how}: left behind programs {after:?} and {links_after} links"
        );
    }
    // An error after attaching (the load cannot reach its URL) also leaves nothing. srvprof may
    // give up and detach before its file descriptors can be read, so what it loaded is told by
    // the kernel's list instead: every program loaded from here on is srvprof's (the tests run
    // one at a time), and none may stay.
    let before = loaded_program_ids();
    let port = free_port();
    let mut child = RunArgs::pid(w.pid())
        .args(&["--url", &format!("http://127.0.0.1:{port}/")])
        .args(&["-d", "2s", "--stacks", "off"])
        .spawn();
    wait_attached(&mut child, "probes attached");
    let status = child.wait().unwrap();
    assert!(!status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (after, links_after) = loop {
        let new: Vec<u64> = loaded_program_ids()
            .into_iter()
            .filter(|id| !before.contains(id))
            .collect();
        let (loaded, links) = still_loaded(&new);
        if (loaded.is_empty() && links == 0) || std::time::Instant::now() > deadline {
            break (loaded, links);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        after.is_empty() && links_after == 0,
        "error path: left {after:?} and {links_after} links"
    );
}

/// The ids of every BPF program loaded now.
fn loaded_program_ids() -> Vec<u64> {
    bpftool_list("prog")
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["id"].as_u64()).collect())
        .unwrap_or_default()
}

#[test]
fn files_belong_to_the_sudo_user_and_planted_links_are_refused() {
    require_root();
    let w = Workload::start(WORKLOAD);
    let dir = std::env::temp_dir().join(format!("srvprof-owner-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // `probe --out DIR` writes DIR/probe.json, the folder made if need be.
    let out = dir.join("probe.json");
    let status = probe_json(w.pid(), "1s", &["--out"])
        .arg(&dir)
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (65534, 65534),
        "owned by the user who ran sudo"
    );

    // A symlink planted where the report goes: refused, its target untouched.
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let planted_dir = dir.join("planted");
    std::fs::create_dir_all(&planted_dir).unwrap();
    std::os::unix::fs::symlink(&victim, planted_dir.join("probe.json")).unwrap();
    let o = probe_json(w.pid(), "1s", &["--force", "--out"])
        .arg(&planted_dir)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("symbolic link"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    // A file srvprof did not write is not overwritten without --force.
    let mine_dir = dir.join("mine");
    std::fs::create_dir_all(&mine_dir).unwrap();
    let mine = mine_dir.join("probe.json");
    std::fs::write(&mine, "mine").unwrap();
    let o = probe_json(w.pid(), "1s", &["--out"])
        .arg(&mine_dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine");
}

/// The same `srvprof run --out DIR` twice: the second replaces the first (its timeline.csv,
/// folded stacks and flamegraphs carry no marker; the folder's run.json vouches for them), and
/// a folder whose files srvprof did not write is still refused.
#[test]
fn a_run_repeated_into_the_same_folder_replaces_it() {
    require_root();
    let server = Server::start("nginx-hello", &["--cpus", "1"]);
    let dir = fresh_run_dir("twice");
    let mut starts = Vec::new();
    for _ in 0..2 {
        let o = RunArgs::pid(server.pid())
            .load(5, "1s", "0s")
            .args(&["--cpus", "0"])
            .out(&dir)
            .command()
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let run = read_json(&dir.join("run.json"));
        starts.push(
            run["load"]["start_monotonic_ns"]
                .as_f64()
                .expect("start_monotonic_ns"),
        );
    }
    assert!(
        starts[1] > starts[0],
        "the second run's run.json: {starts:?}"
    );
    let foreign = fresh_run_dir("twice-foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("timeline.csv"), "mine").unwrap();
    let o = RunArgs::pid(server.pid())
        .load(5, "1s", "0s")
        .out(&foreign)
        .command()
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(
        std::fs::read_to_string(foreign.join("timeline.csv")).unwrap(),
        "mine"
    );
}

#[test]
fn a_veth_path_between_namespaces_is_measured_like_loopback() {
    require_root();
    let ns = Netns::create();
    // nginx in the server namespace, listening on its veth address.
    let nginx = nginx_in_netns(&ns.names[0], "veth", "10.231.0.1:8080", 4096);
    let master = nginx.pid();
    let before = proc_softirq("NET_RX");
    // srvprof (and so its load generator) in the client namespace; the URL is found from nginx's socket.
    let dir = fresh_run_dir("veth");
    let srvprof = RunArgs::pid(master)
        .load(20, "3s", "1s")
        .args(&["--stacks", "off"])
        // The probes' own softirq counts, checked against /proc below (sampled mode would take
        // them from /proc).
        .args(&["--exact"])
        .out(&dir);
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.names[1]])
        .arg(srvprof_bin())
        .arg("run")
        .args(srvprof.list())
        .output()
        .unwrap();
    let after = proc_softirq("NET_RX");
    drop(nginx);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("10.231.0.1:8080"),
        "the URL came from nginx's own listening socket: {stderr}"
    );
    let run = read_json(&dir.join("run.json"));
    let completed = run["load"]["completed"].as_u64().unwrap();
    assert!(completed > 1000, "{completed} requests crossed the veth");
    // NET_RX per CPU: the probe's window lies inside the /proc window read around the run.
    let mut probe_total = 0;
    for s in run["server"]["softirqs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["vector"] == "NET_RX")
    {
        let cpu = s["cpu"].as_u64().unwrap() as usize;
        let n = s["count"].as_u64().unwrap();
        assert!(
            n <= after[cpu] - before[cpu],
            "cpu{cpu}: probe {n} > /proc {}",
            after[cpu] - before[cpu]
        );
        probe_total += n;
    }
    // Every request crosses the veth both ways: at least one NET_RX softirq per response received.
    assert!(
        probe_total as f64 >= completed as f64 * 0.5,
        "{probe_total} NET_RX for {completed} requests"
    );
    assert!(run["per_request"]["net_softirqs"].as_f64().unwrap() > 0.0);
    assert!(
        run["per_request"]["syscalls"].as_f64().unwrap() >= 1.0,
        "nginx's syscalls are attributed across namespaces"
    );
}

/// srvprof's resident memory, from /proc (kB).
fn rss_kb(pid: u32) -> Option<u64> {
    status_field(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        "VmRSS:",
    )
}

/// Holds -c 10000 against nginx for SRVPROF_SOAK_SECS (30 s in CI; 600 s is the benchmark), all
/// connections opened at once (no --ramp-up): opens at most c + 1 % by the kernel's own count,
/// memory flat after the first third, no kernel record lost, every interval in the timeline.
#[test]
fn thousands_of_connections_held_with_flat_memory_and_nothing_lost() {
    require_root();
    let secs: u64 = std::env::var("SRVPROF_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let connections: u64 = std::env::var("SRVPROF_SOAK_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let opens_before = net_counter("Tcp:", "ActiveOpens");
    let dir = fresh_run_dir("soak");
    let mut child = RunArgs::pid(nginx.pid())
        .load(connections, &format!("{secs}s"), "2s")
        .args(&["--cpus", "0"])
        .out(&dir)
        .spawn();
    let later_lines = wait_attached(&mut child, "probes attached");
    let pid = child.id();
    // One RSS reading a second over the measured part of the run: until srvprof says the load is
    // done (then it reads and symbolizes stacks, a one-off after the connections are closed).
    std::thread::sleep(Duration::from_secs(4));
    let mut rss = Vec::new();
    while let Some(kb) = rss_kb(pid) {
        if child.try_wait().unwrap().is_some()
            || later_lines.try_iter().any(|l| l.contains("load done"))
        {
            break;
        }
        rss.push(kb);
        std::thread::sleep(Duration::from_secs(1));
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    // Only srvprof opens connections here (nginx accepts them): the kernel's count is srvprof's.
    let opens = net_counter("Tcp:", "ActiveOpens") - opens_before;
    let run = read_json(&dir.join("run.json"));
    assert!(
        opens * 100 <= connections * 101,
        "{opens} TCP connections opened for -c {connections} (kernel's TcpActiveOpens)"
    );
    // Memory: after the first third of the run (connections open, histograms warm), growth under 5 %.
    assert!(
        rss.len() as u64 >= secs * 2 / 3,
        "{} RSS readings",
        rss.len()
    );
    let settled = rss[rss.len() / 3];
    let peak = *rss[rss.len() / 3..].iter().max().unwrap();
    assert!(
        peak * 100 <= settled * 105,
        "RSS grew from {settled} kB to {peak} kB"
    );
    // Nothing lost in the kernel, every interval there, every connection served.
    let lost: u64 = run["server"]["lost_events"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(lost, 0, "{}", run["server"]["lost_events"]);
    let intervals = run["timeline"].as_array().unwrap().len() as u64;
    assert!(
        intervals + 1 >= secs,
        "{intervals} timeline intervals for {secs} s"
    );
    assert!(run["load"]["completed"].as_u64().unwrap() > 0);
    assert_eq!(
        run["load"]["errors"], 0,
        "{}",
        run["load"]["errors_by_kind"]
    );
    assert!(
        run["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["completed"].as_u64().unwrap() > 0),
        "a dead interval"
    );
    eprintln!(
        "soak: {connections} connections ({opens} opened) for {secs} s, RSS {settled} -> {peak} kB, {intervals} intervals, {} req/s",
        run["load"]["throughput_rps"]
    );
}

/// Runs srvprof with ARGS where the kernel shows no BTF: in a mount namespace of its own with an
/// empty tmpfs over /sys/kernel/btf. Returns (exit code, stdout, stderr).
fn srvprof_without_btf(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs none /sys/kernel/btf && test ! -e /sys/kernel/btf/vmlinux && exec "$0" "$@""#)
        .arg(srvprof_bin())
        .args(args)
        .output()
        .expect("unshare (util-linux)");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Ids of the loaded BPF programs that carry one of srvprof's program names.
fn srvprof_named_programs() -> Vec<u64> {
    let progs = bpftool_list("prog");
    let names: Vec<&str> = srvprof::probes::PROGRAMS.to_vec();
    progs
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["name"].as_str().is_some_and(|n| names.contains(&n)))
                .filter_map(|p| p["id"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_kernel_without_btf_gets_one_sentence_exit_3_and_nothing_started_or_attached() {
    require_root();
    let before = srvprof_named_programs();
    let sentence = srvprof::error::SrvprofError::NoKernelBtf.to_string();
    // run --cmd: the server command would leave a mark; it must never be started.
    let mark = std::env::temp_dir().join(format!("srvprof-no-btf-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let server = workspace_root().join("servers/nginx-hello/run");
    let cmd = format!(
        "touch {} && exec {} --port {}",
        mark.display(),
        server.display(),
        free_port()
    );
    let w = Workload::start(WORKLOAD);
    let pid = w.pid().to_string();
    for args in [
        vec!["run", "--cmd", cmd.as_str(), "-d", "2s"],
        vec!["probe", "--pid", pid.as_str(), "-d", "1s"],
    ] {
        let (code, _, stderr) = srvprof_without_btf(&args);
        assert_eq!(code, Some(3), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim(),
            format!("srvprof: {sentence}"),
            "{args:?}: one sentence, nothing else"
        );
    }
    assert!(
        !mark.exists(),
        "run --cmd started the server on a kernel it cannot probe"
    );
    let (code, stdout, _) = srvprof_without_btf(&["check"]);
    assert_eq!(code, Some(3), "{stdout}");
    // Each check is a line, its detail wrapped under itself: joined back into one.
    let mut checks: Vec<String> = Vec::new();
    for line in stdout.lines() {
        match checks.last_mut() {
            Some(last) if line.starts_with(' ') => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => checks.push(line.to_string()),
        }
    }
    assert!(
        checks
            .iter()
            .any(|l| l.starts_with("FAIL") && l.contains("kernel BTF") && l.contains(&sentence)),
        "{stdout}"
    );
    assert!(
        checks
            .iter()
            .any(|l| l.starts_with("FAIL") && l.contains("not tried")),
        "check must not try to load programs without BTF: {stdout}"
    );
    let new: Vec<u64> = srvprof_named_programs()
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(new.is_empty(), "programs left loaded: {new:?}");
}
