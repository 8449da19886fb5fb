//! The cause of a tail, produced by construction and named by the top finding: the cause, its
//! culprit and its size checked against the kernel's own counters, and the same server without
//! the cause in the same test has no such finding.

use std::fs;
use std::path::{Path, PathBuf};

use srvprof::cgroup::{CpuHierarchy, cpu_hierarchies};
use srvprof_integration::*;

/// A control group made for the test in the machine's cpu hierarchy, with a CPU quota; moves the
/// processes it was given back to the root group and removes itself when dropped.
struct QuotaGroup {
    hierarchy: CpuHierarchy,
    name: String,
    pids: Vec<u32>,
}

impl QuotaGroup {
    fn new(quota_us: u64, period_us: u64) -> Self {
        let hierarchy = cpu_hierarchies()
            .into_iter()
            .next()
            .expect("a cpu controller (cgroup v1 or v2) mounted");
        let name = format!("srvprof-test-quota-{}", std::process::id());
        let g = QuotaGroup {
            hierarchy,
            name,
            pids: Vec::new(),
        };
        let _ = fs::create_dir(g.dir());
        if g.hierarchy.version == 2 {
            g.write("cpu.max", &format!("{quota_us} {period_us}"));
        } else {
            g.write("cpu.cfs_period_us", &period_us.to_string());
            g.write("cpu.cfs_quota_us", &quota_us.to_string());
        }
        g
    }

    fn dir(&self) -> PathBuf {
        self.hierarchy.mount.join(&self.name)
    }

    fn path(&self) -> String {
        format!("/{}", self.name)
    }

    fn write(&self, file: &str, text: &str) {
        write_to(&self.dir().join(file), text);
    }

    fn add(&mut self, pid: u32) {
        self.write("cgroup.procs", &pid.to_string());
        self.pids.push(pid);
    }

    /// Every process back in the root group: the same server, no quota.
    fn release(&mut self) {
        for pid in self.pids.drain(..) {
            let _ = fs::write(self.hierarchy.mount.join("cgroup.procs"), pid.to_string());
        }
    }

    /// The kernel's cpu.stat: (nr_periods, nr_throttled, throttled seconds).
    fn stat(&self) -> (u64, u64, f64) {
        let (p, t, ns) = srvprof::cgroup::throttling(&self.hierarchy, &self.path())
            .expect("the test group's cpu.stat");
        (p, t, ns as f64 / 1e9)
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        self.release();
        let _ = fs::remove_dir(self.dir());
    }
}

fn write_to(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// One nginx worker under a 30 % CPU quota (30 ms per 100 ms): the kernel throttles it in most
/// periods once the load asks for more. The top finding is cpu_throttled, naming the test's
/// group, with throttled time within 10 % of the kernel's cpu.stat over the run; released from
/// the quota, the same server has no such finding.
#[test]
fn a_cpu_quota_is_the_top_finding_with_its_cgroup_and_the_kernels_throttled_time() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let mut group = QuotaGroup::new(30_000, 100_000);
    for pid in srvprof::discover::with_descendants(&[nginx.pid()]) {
        group.add(pid);
    }
    let before = group.stat();
    let run = RunArgs::pid(nginx.pid())
        .load(50, "6s", "0s")
        .args(&["--cpus", "0", "--stacks", "off"])
        .run_ok("cpu-quota");
    let after = group.stat();
    let kernel = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    let kinds = finding_kinds(&run);
    let f = expect_finding(&run, "cpu_throttled");
    eprintln!(
        "kernel: {} of {} periods throttled, {:.3} s; findings {kinds:?}; {}",
        kernel.1, kernel.0, kernel.2, f["summary"]
    );
    assert!(kernel.1 * 2 >= kernel.0, "the quota barely bit: {kernel:?}");
    assert_eq!(kinds[0], "cpu_throttled", "{kinds:?}");
    let summary = f["summary"].as_str().unwrap();
    assert!(summary.contains(&group.path()), "{summary}");
    assert!(summary.contains("0.30 CPUs"), "{summary}");
    let throttled_s = f["evidence"]["throttled_s"].as_f64().unwrap();
    assert!(
        (throttled_s - kernel.2).abs() <= 0.10 * kernel.2,
        "srvprof {throttled_s:.3} s throttled, the kernel's cpu.stat {:.3} s",
        kernel.2
    );
    let share = f["evidence"]["throttled_share"].as_f64().unwrap();
    let kernel_share = kernel.1 as f64 / kernel.0 as f64;
    assert!(
        (share - kernel_share).abs() <= 0.10,
        "{share} against {kernel_share}"
    );
    // The timeline's intervals add up to the window's figure.
    let per_interval: f64 = run["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["server"]["throttled_ms"].as_f64().unwrap())
        .sum();
    assert!(
        (per_interval / 1e3 - throttled_s).abs() <= 0.05 * throttled_s + 0.01,
        "{per_interval} ms"
    );

    group.release();
    let clean = RunArgs::pid(nginx.pid())
        .load(50, "3s", "0s")
        .args(&["--cpus", "0", "--stacks", "off"])
        .run_ok("cpu-quota-released");
    assert!(
        finding(&clean, "cpu_throttled").is_none(),
        "{:?}",
        finding_kinds(&clean)
    );
}

/// CPU time (user + system) a process has used, in clock ticks: /proc/PID/stat fields 14 and 15.
fn process_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<u64> = after_comm
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    f[11] + f[12]
}

/// Ticks CPU `cpu` spent running tasks (user + nice + system) by /proc/stat.
fn cpu_task_ticks(cpu: u32) -> u64 {
    let stat = fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat
        .lines()
        .find(|l| l.starts_with(&format!("cpu{cpu} ")))
        .expect("the CPU's line");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    f[0] + f[1] + f[2]
}

/// A CPU hog pinned to the nginx worker's CPU: the top finding is noisy_neighbour naming the
/// hog's PID, with a share of the worker's run-queue wait within 10 points of the hog's share of
/// the time other tasks ran on that CPU (/proc/stat's task time on CPU 1 less the worker's, both
/// kernel counts); with the hog gone, the same server has no such finding.
#[test]
fn a_cpu_hog_on_the_servers_cpu_is_the_top_finding_by_its_pid() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let worker = *srvprof::discover::with_descendants(&[nginx.pid()])
        .iter()
        .find(|p| **p != nginx.pid())
        .expect("a worker process");
    let hog = CpuHog::on("1");
    let (cpu0, hog0, worker0) = (
        cpu_task_ticks(1),
        process_ticks(hog.pid()),
        process_ticks(worker),
    );
    let run = RunArgs::pid(nginx.pid())
        .load(50, "5s", "0s")
        .args(&["--cpus", "0", "--stacks", "off"])
        .run_ok("noisy-neighbour");
    let (cpu1, hog1, worker1) = (
        cpu_task_ticks(1),
        process_ticks(hog.pid()),
        process_ticks(worker),
    );
    let others = (cpu1 - cpu0).saturating_sub(worker1 - worker0);
    let expected = (hog1 - hog0) as f64 / others.max(1) as f64;
    let kinds = finding_kinds(&run);
    let f = expect_finding(&run, "noisy_neighbour");
    eprintln!(
        "hog {} of {others} ticks other tasks ran on CPU 1 ({expected:.3}); findings {kinds:?}; {}",
        hog1 - hog0,
        f["summary"]
    );
    assert_eq!(kinds[0], "noisy_neighbour", "{kinds:?}");
    assert_eq!(f["evidence"]["holder_pid"].as_f64(), Some(hog.pid() as f64));
    let summary = f["summary"].as_str().unwrap();
    assert!(summary.contains(&format!("pid {}", hog.pid())), "{summary}");
    let share = f["evidence"]["share_of_wait"].as_f64().unwrap();
    assert!(
        (share - expected).abs() <= 0.10,
        "srvprof: the hog held {share:.3} of the wait; /proc: {expected:.3} of other tasks' time"
    );

    drop(hog);
    let clean = RunArgs::pid(nginx.pid())
        .load(50, "3s", "0s")
        .args(&["--cpus", "0", "--stacks", "off"])
        .run_ok("noisy-neighbour-gone");
    assert!(
        finding(&clean, "noisy_neighbour").is_none(),
        "{:?}",
        finding_kinds(&clean)
    );
}
