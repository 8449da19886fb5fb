//! Helpers shared by the integration tests: root check, the known workload, kernel counters.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// These tests load eBPF programs: they must run, never skip. Without root they fail loudly.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "integration tests load eBPF programs and must run as root (cargo xtask test does)"
    );
}

pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("target")
}

/// The srvprof binary (built by `cargo xtask test` before the tests run).
pub fn srvprof_bin() -> PathBuf {
    let bin = target_dir().join("debug/srvprof");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p srvprof` (cargo xtask test does)",
        bin.display()
    );
    bin
}

/// The known workload, driven command by command.
pub struct Workload {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Workload {
    pub fn start(bin: &str) -> Self {
        let mut child = Command::new(bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the known workload");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let w = Self {
            child,
            stdin,
            stdout,
        };
        w.wait_blocked();
        w
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command and returns its answer, once the workload is blocked again on stdin.
    pub fn command(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").expect("write command");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read answer");
        assert!(
            line.starts_with("ok"),
            "workload answered {line:?} to {cmd:?}"
        );
        self.wait_blocked();
        line.trim().to_string()
    }

    /// Sends a command after which the process is expected to exit.
    pub fn send_final(&mut self, cmd: &str) {
        let _ = writeln!(self.stdin, "{cmd}");
        let _ = self.stdin.flush();
    }

    /// Waits until the main thread sleeps in its stdin read, so no switch is in flight.
    pub fn wait_blocked(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let path = format!("/proc/{}/stat", self.pid());
        while Instant::now() < deadline {
            let stat = std::fs::read_to_string(&path).unwrap_or_default();
            let state = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next());
            if state == Some('S') {
                let wchan = std::fs::read_to_string(format!("/proc/{}/wchan", self.pid()))
                    .unwrap_or_default();
                if !wchan.is_empty() && wchan != "0" {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("the workload did not block on stdin within 10 s");
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (voluntary, involuntary) switches of a thread, from /proc (the kernel's own nvcsw/nivcsw).
pub fn proc_ctxt_switches(pid: u32, tid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).expect("status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .expect(name)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// (on-CPU ns, run-queue wait ns, timeslices) from /proc/PID/task/TID/schedstat: the scheduler's own accounting.
pub fn proc_schedstat(pid: u32, tid: u32) -> (u64, u64, u64) {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).expect("schedstat");
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (v[0], v[1], v[2])
}

/// Per-CPU counts of one /proc/softirqs row.
pub fn proc_softirq(vector: &str) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/softirqs").expect("softirqs");
    for line in text.lines().skip(1) {
        let mut parts = line.split_whitespace();
        if parts.next().map(|n| n.trim_end_matches(':')) == Some(vector) {
            return parts.filter_map(|p| p.parse().ok()).collect();
        }
    }
    panic!("no {vector} in /proc/softirqs");
}
