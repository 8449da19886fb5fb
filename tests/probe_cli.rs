//! `srvprof probe` and `srvprof check` as a user runs them: the JSON contract, bad input,
//! a target that dies mid-run, Ctrl-C.

use std::process::Command;
use std::time::Duration;

use srvprof_integration::*;

const WORKLOAD: &str = env!("CARGO_BIN_EXE_srvprof-known-workload");

fn out_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("srvprof-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("probe.json")
}

/// Starts `srvprof probe --pid PID -d DURATION --format json --out DIR` (PATH is DIR/probe.json) in the background and
/// returns once its probes are attached (it says so on stderr).
fn spawn_probe(
    pid: u32,
    duration: &str,
    path: &std::path::Path,
    extra: &[&str],
) -> std::process::Child {
    let mut child = spawn_piped(
        probe_json(pid, duration, extra)
            .arg("--out")
            .arg(path.parent().expect("out_file's folder")),
    );
    wait_attached(&mut child, "watching PIDs");
    child
}

#[test]
fn check_passes_every_prerequisite_here() {
    require_root();
    let out = Command::new(srvprof_bin())
        .args(["check", "--json"])
        .output()
        .unwrap();
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = results.as_array().unwrap();
    let programs = results
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("program "))
        .count();
    // Every tracepoint program, the two stack programs `run` attaches, and the two
    // stop-the-world uprobes.
    assert_eq!(programs, srvprof::probes::PROGRAMS.len() + 4);
    for stack_program in ["program offcpu_switch", "program oncpu_sample"] {
        assert!(
            results.iter().any(|c| c["name"] == stack_program),
            "{stack_program} is checked"
        );
    }
    for c in results {
        assert_eq!(c["pass"], true, "{c}");
    }
    assert!(out.status.success());
}

#[test]
fn json_contract_and_known_counts() {
    require_root();
    let mut w = Workload::start(WORKLOAD);
    let path = out_file("contract");
    let mut probe = spawn_probe(w.pid(), "3s", &path, &["--interval", "500ms", "--exact"]);
    w.command("syscalls 12345");
    assert!(probe.wait().unwrap().success());
    let j = read_json(&path);
    for key in [
        "duration_s",
        "threads",
        "totals",
        "runq_latency_us",
        "syscalls",
        "softirqs",
        "hardirqs",
        "exits",
        "tcp",
        "host_tcp",
        "intervals",
    ] {
        assert!(j.get(key).is_some(), "missing {key}");
    }
    for key in [
        "tid",
        "pid",
        "comm",
        "voluntary_switches",
        "involuntary_switches",
        "oncpu_ns",
        "offcpu_ns",
        "user_ns",
        "sys_ns",
    ] {
        assert!(
            j["threads"][0].get(key).is_some(),
            "threads[] missing {key}"
        );
    }
    for key in [
        "voluntary_switches",
        "involuntary_switches",
        "migrations",
        "syscalls",
        "user_ns",
        "sys_ns",
    ] {
        assert!(j["totals"].get(key).is_some(), "totals missing {key}");
    }
    for key in [
        "listen_overflows",
        "listen_drops",
        "syn_retransmits",
        "retransmits",
        "resets_sent",
        "resets_received",
        "resets",
    ] {
        assert!(j["tcp"].get(key).is_some(), "tcp missing {key}");
    }
    for key in ["listen_overflows", "resets_sent", "other_resets_sent"] {
        assert!(j["host_tcp"].get(key).is_some(), "host_tcp missing {key}");
    }
    let getppid = j["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "getppid")
        .expect("getppid counted");
    assert_eq!(getppid["count"], 12345);
    assert!(j["traced_fraction"].is_null(), "--exact traces all along");
    assert!(j["duration_s"].as_f64().unwrap() >= 2.5);
    assert!(j["intervals"].as_array().unwrap().len() >= 5);
}

#[test]
fn bad_pids_get_one_clear_sentence() {
    require_root();
    let out = Command::new(srvprof_bin())
        .args(["probe", "--pid", "999999999", "-d", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no process with PID 999999999 exists"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1);

    let out = Command::new(srvprof_bin())
        .args(["probe", "--pid", "2", "-d", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kernel thread"));

    // Some PIDs gone: the others are watched and the run says so.
    let w = Workload::start(WORKLOAD);
    let out = Command::new(srvprof_bin())
        .args(["probe", "--pid", &w.pid().to_string(), "999999999"])
        .args(["-d", "1s", "--format", "json"])
        .output()
        .unwrap();
    assert_success(&out);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["notes"].to_string().contains("999999999"));
}

/// `srvprof check`'s privileges line as `setpriv ARGS` runs it, its wrapped lines joined.
fn privileges_line(setpriv: &[&str]) -> String {
    let out = Command::new("setpriv")
        .args(setpriv)
        .arg(srvprof_bin())
        .arg("check")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().skip_while(|l| !l.contains(" privileges "));
    let mut joined = lines.next().unwrap_or_default().to_string();
    for more in lines.take_while(|l| l.starts_with(' ')) {
        joined.push(' ');
        joined.push_str(more.trim());
    }
    assert!(!joined.is_empty(), "no privileges line in: {text}");
    joined
}

/// `check` reads the capabilities in effect, not the uid: root in a container that dropped
/// them fails it, each named; a user granted two of three is told the third; a user granted all
/// three passes; `probe` as that root is refused before it starts.
#[test]
fn check_names_the_capabilities_not_in_effect_whatever_the_uid() {
    require_root();
    let dropped = privileges_line(&["--inh-caps=-all", "--bounding-set=-all"]);
    assert!(
        dropped.starts_with("FAIL")
            && dropped.contains("CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE not in effect"),
        "{dropped}"
    );
    let user = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let granted = |caps: &str| {
        let (inh, ambient) = (
            format!("--inh-caps={caps}"),
            format!("--ambient-caps={caps}"),
        );
        privileges_line(&[user[0], user[1], user[2], &inh, &ambient])
    };
    let two = granted("+bpf,+perfmon");
    assert!(
        two.starts_with("FAIL") && two.contains(" CAP_SYS_PTRACE not in effect"),
        "{two}"
    );
    let three = granted("+bpf,+perfmon,+sys_ptrace");
    assert!(three.starts_with("PASS"), "{three}");
    let w = Workload::start(WORKLOAD);
    let out = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-all"])
        .arg(srvprof_bin())
        .args(["probe", "--pid", &w.pid().to_string(), "-d", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run it with sudo"));
}

#[test]
fn without_privileges_it_says_to_use_sudo() {
    require_root();
    let w = Workload::start(WORKLOAD);
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(srvprof_bin())
        .args(["probe", "--pid", &w.pid().to_string(), "-d", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run it with sudo"));
}

#[test]
fn a_target_killed_mid_run_is_reported_and_everything_is_written() {
    require_root();
    let w = Workload::start(WORKLOAD);
    let pid = w.pid();
    let path = out_file("killed");
    let probe = spawn_probe(pid, "20s", &path, &[]);
    std::thread::sleep(Duration::from_millis(2000));
    // SAFETY: killing our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let started = std::time::Instant::now();
    let out = probe.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run ends soon after its only target dies"
    );
    let j = read_json(&path);
    let exit = j["exits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tid"] == pid)
        .expect("exit recorded");
    assert_eq!(exit["signal"], 9);
    drop(w);
}

#[test]
fn ctrl_c_still_writes_the_report() {
    require_root();
    let w = Workload::start(WORKLOAD);
    let path = out_file("sigint");
    let probe = spawn_probe(w.pid(), "60s", &path, &[]);
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(probe.id() as i32, libc::SIGINT) };
    let out = probe.wait_with_output().unwrap();
    assert!(out.status.success());
    let j = read_json(&path);
    assert!(j["notes"].to_string().contains("interrupted"));
    assert!(j["duration_s"].as_f64().unwrap() < 30.0);
}

#[test]
fn syscalls_off_leaves_the_syscall_tracepoints_alone() {
    require_root();
    let mut w = Workload::start(WORKLOAD);
    let pid = w.pid();
    for (setting, attached) in [("on", true), ("off", false)] {
        let path = out_file(&format!("syscalls-{setting}"));
        let probe = spawn_probe(pid, "60s", &path, &["--syscalls", setting, "--exact"]);
        let held = program_names_held_by(probe.id());
        assert!(
            held.iter().any(|n| n == "sched_switch"),
            "--syscalls {setting}: the kernel lists {held:?}"
        );
        for name in ["sys_enter", "sys_exit"] {
            assert_eq!(
                held.iter().any(|n| n == name),
                attached,
                "--syscalls {setting}: {name} in the kernel's list {held:?}"
            );
        }
        let (j, proc_switches) = getppid_and_sleeps_under(&mut w, probe, &path);
        assert_eq!(j["syscalls_off"], !attached, "{setting}");
        let getppid = j["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "getppid")
            .map(|s| s["count"].as_u64().unwrap());
        assert_eq!(getppid, attached.then_some(3000), "--syscalls {setting}");
        // Everything else is still measured: switches against the kernel's own count.
        switches_as_proc_counts(&j, pid, proc_switches, &format!("--syscalls {setting}"));
    }
}

/// The workload makes 3,000 getppid calls and 20 sleeps of 1 ms under `probe`, which is then
/// stopped: its JSON report, and the workload's voluntary switches meanwhile by /proc.
fn getppid_and_sleeps_under(
    w: &mut Workload,
    probe: std::process::Child,
    path: &std::path::Path,
) -> (serde_json::Value, u64) {
    let pid = w.pid();
    let (v0, _) = proc_ctxt_switches(pid, pid);
    w.command("syscalls 3000");
    w.command("sleep 20 1");
    let (v1, _) = proc_ctxt_switches(pid, pid);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(probe.id() as i32, libc::SIGINT) };
    assert!(probe.wait_with_output().unwrap().status.success());
    (read_json(path), v1 - v0)
}

/// The probe counted the thread `pid`'s voluntary switches as /proc did (at least the 20 sleeps).
fn switches_as_proc_counts(j: &serde_json::Value, pid: u32, proc_switches: u64, what: &str) {
    let thread = (j["threads"].as_array().unwrap().iter())
        .find(|t| t["tid"] == pid)
        .expect("the workload's thread");
    let switches = thread["voluntary_switches"].as_u64().unwrap();
    assert!(
        switches + 2 >= proc_switches && proc_switches >= 20,
        "{what}: probe {switches} voluntary switches, /proc {proc_switches} in the commands"
    );
}

/// `--empty-window-programs`, the bench's measure of the kernel's traced path alone: the syscall
/// and softirq programs are attached (the kernel lists them) but count nothing, while the
/// scheduler's programs still count the switches /proc counts.
#[test]
fn empty_window_programs_are_attached_and_count_nothing() {
    require_root();
    let mut w = Workload::start(WORKLOAD);
    let pid = w.pid();
    let path = out_file("empty-window-programs");
    let probe = spawn_probe(pid, "60s", &path, &["--exact", "--empty-window-programs"]);
    let held = program_names_held_by(probe.id());
    for name in [
        "sys_enter",
        "sys_exit",
        "softirq_entry",
        "softirq_exit",
        "sched_switch",
    ] {
        assert!(held.iter().any(|n| n == name), "{name} not in {held:?}");
    }
    let (j, proc_switches) = getppid_and_sleeps_under(&mut w, probe, &path);
    let syscalls = j["syscalls"].as_array().unwrap();
    assert!(
        !syscalls.iter().any(|s| s["name"] == "getppid"),
        "{syscalls:?}"
    );
    let softirq_ns: u64 = (j["softirqs"].as_array().unwrap().iter())
        .map(|s| s["total_ns"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(softirq_ns, 0, "{}", j["softirqs"]);
    switches_as_proc_counts(&j, pid, proc_switches, "--empty-window-programs");
}

/// The default, sampled mode: the syscall programs are attached a twentieth of the time and the
/// counts scaled up. Against a syscall rate fixed by construction (K getppid every millisecond),
/// the estimate must land near the true count; were the programs attached all along, or never,
/// it would be twenty times too high, or zero.
#[test]
fn sampled_syscall_counts_estimate_a_paced_rate() {
    require_root();
    let mut w = Workload::start(WORKLOAD);
    let path = out_file("sampled");
    let mut probe = spawn_probe(w.pid(), "5s", &path, &[]);
    // Outlasts the probe, so the whole window sees the same rate.
    w.command("paced 7 20");
    assert!(probe.wait().unwrap().success());
    let j = read_json(&path);
    let fraction = j["traced_fraction"].as_f64().expect("sampled by default");
    assert!((0.04..=0.06).contains(&fraction), "traced {fraction}");
    let duration_s = j["duration_s"].as_f64().unwrap();
    let count = |name: &str| {
        j["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map_or(0, |s| s["count"].as_u64().unwrap()) as f64
    };
    for (name, per_s) in [("getppid", 20_000.0), ("clock_nanosleep", 1_000.0)] {
        let truth = per_s * duration_s;
        let estimate = count(name);
        assert!(
            (estimate - truth).abs() <= truth * 0.1,
            "{name}: estimated {estimate:.0} over {duration_s:.2} s, paced at {truth:.0}"
        );
    }
    assert!(
        j["notes"].to_string().contains("estimates"),
        "the report says which figures are estimates: {}",
        j["notes"]
    );
}

/// The default, sampled mode counts a syscall's sleeps exactly: the scheduler programs, attached
/// all along, give each voluntary switch inside a syscall and its time to that syscall. 30
/// nanosleeps of 20 ms are 30 sleeps in clock_nanosleep of at least 600 ms, each longer than
/// any window (scaled from the windows, they were timed by chance or not at all), and the
/// kernel's own count of the thread's voluntary switches covers them.
#[test]
fn sampled_mode_counts_a_syscalls_sleeps_exactly() {
    require_root();
    let mut w = Workload::start(WORKLOAD);
    let pid = w.pid();
    let path = out_file("sleeps");
    let mut probe = spawn_probe(pid, "3s", &path, &[]);
    let (v0, _) = proc_ctxt_switches(pid, pid);
    w.command("sleep 30 20");
    let (v1, _) = proc_ctxt_switches(pid, pid);
    assert!(probe.wait().unwrap().success());
    let j = read_json(&path);
    assert!(j["traced_fraction"].is_f64(), "sampled by default");
    let row = j["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "clock_nanosleep")
        .unwrap_or_else(|| panic!("clock_nanosleep counted: {}", j["syscalls"]))
        .clone();
    let field = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("{k} in {row}"));
    assert!(v1 - v0 >= 30, "/proc: {} voluntary switches", v1 - v0);
    assert_eq!(field("blocked"), 30, "{row}");
    assert_eq!(
        field("count"),
        30,
        "every one slept: nothing to scale: {row}"
    );
    let asleep_ms = field("blocked_ns") as f64 / 1e6;
    assert!(
        (600.0..=690.0).contains(&asleep_ms),
        "30 sleeps of 20 ms took {asleep_ms:.1} ms by srvprof: {row}"
    );
    let total_ms = field("total_ns") as f64 / 1e6;
    assert!(
        (asleep_ms..=asleep_ms * 1.02).contains(&total_ms),
        "time {total_ms:.1} ms, asleep {asleep_ms:.1} ms: {row}"
    );
    assert!(
        j["syscalls_blocked"].as_u64() >= Some(30),
        "{}",
        j["syscalls_blocked"]
    );
}

/// `srvprof probe --start-at T`, the server's side of a split run: attached at once, it watches
/// from T on the wall clock (not before: the run ends no sooner than T plus its duration) for
/// its duration, in as many rows as that holds, and probe.json records T, the run's id from it
/// (as the load agents given T record it), this host's name and its clock. A T already passed is
/// one sentence and no report.
#[test]
fn probe_given_a_start_time_watches_from_it_and_records_the_runs_id() {
    use srvprof_loadgen::start::StartAt;
    require_root();
    let w = Workload::start(WORKLOAD);
    let path = out_file("start-at");
    let at = StartAt(std::time::SystemTime::now() + Duration::from_secs(3));
    let text = at.to_rfc3339();
    // This test machine's clock need not be synchronised; the report says how it is.
    let probe = spawn_probe(
        w.pid(),
        "2s",
        &path,
        &["--start-at", &text, "--allow-unsynced"],
    );
    let out = probe.wait_with_output().unwrap();
    let ended = std::time::SystemTime::now();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let watched = ended
        .duration_since(at.0)
        .expect("ended after the start time");
    assert!(
        watched >= Duration::from_secs(2),
        "ended {watched:?} after the start time"
    );
    let j = read_json(&path);
    assert_eq!(j["start_at"], text.as_str());
    assert_eq!(j["run_id"], format!("start-{text}").as_str());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(j["host"], host.trim());
    assert!(j["clock"]["max_error_us"].is_u64(), "{}", j["clock"]);
    assert_eq!(
        j["intervals"].as_array().unwrap().len(),
        2,
        "{}",
        j["intervals"]
    );
    let duration_s = j["duration_s"].as_f64().unwrap();
    assert!((1.9..2.2).contains(&duration_s), "{duration_s}");

    let passed = StartAt(std::time::SystemTime::now() - Duration::from_secs(5)).to_rfc3339();
    let late = out_file("start-at-passed");
    let out = probe_json(w.pid(), "2s", &["--start-at", &passed, "--allow-unsynced"])
        .arg("--out")
        .arg(late.parent().unwrap())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("passed") && stderr.contains("still ahead"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!late.exists());
    drop(w);
}
