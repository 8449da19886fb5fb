//! libbpf-tools (Debian package `libbpf-tools`, installed by `cargo xtask setup`) run beside
//! srvprof, and their summaries parsed: syscount, runqlat, softirqs, hardirqs.
//!
//! Each tool prints a "Tracing ..." line once its programs are attached and its summary when it
//! gets SIGINT. Both go to its stdout, which a pipe would buffer until exit, so the tools run
//! under `stdbuf -oL` and a test can wait for the ready line.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Where Debian's libbpf-tools put the tools.
const TOOLS_DIR: &str = "/usr/sbin";
const TRACEFS: &str = "/sys/kernel/tracing";

/// Mounts tracefs at /sys/kernel/tracing unless it is mounted there already (a fresh machine of
/// this project's kind has it unmounted; syscount attaches classic tracepoints, which need it).
pub fn mount_tracefs() {
    if tracefs_mounted() {
        return;
    }
    let out = Command::new("mount")
        .args(["-t", "tracefs", "nodev", TRACEFS])
        .output()
        .expect("run mount");
    // Another process may have mounted it between the check and here: that is fine too.
    assert!(
        out.status.success() || tracefs_mounted(),
        "mount -t tracefs nodev {TRACEFS} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tracefs_mounted(),
        "tracefs is still not mounted at {TRACEFS}"
    );
}

fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, kind) = (f.next(), f.next(), f.next());
            dir == Some(TRACEFS) && kind == Some("tracefs")
        })
}

/// The path of a libbpf tool; a clear failure (never a skip) when setup has not installed it.
pub fn tool_path(name: &str) -> PathBuf {
    let path = Path::new(TOOLS_DIR).join(name);
    assert!(
        path.exists(),
        "{} is missing: the cross-check needs Debian's libbpf-tools \
         (`cargo xtask setup` installs it; by hand: apt-get install libbpf-tools)",
        path.display()
    );
    path
}

/// A libbpf tool running in the background, its programs attached.
pub struct Tool {
    name: String,
    child: Child,
    lines: Receiver<String>,
    /// When its ready line arrived: it counts from (a little before) then.
    pub ready_at: Instant,
}

impl Tool {
    /// Starts `/usr/sbin/NAME ARGS` and returns once it has printed its "Tracing" line.
    pub fn start(name: &str, args: &[&str]) -> Tool {
        let mut tool = Tool::spawn(name, args);
        tool.wait_ready();
        tool
    }

    /// Starts `/usr/sbin/NAME ARGS`; [`Tool::wait_ready`] waits until it traces (several tools
    /// load their programs faster side by side than one after the other).
    pub fn spawn(name: &str, args: &[&str]) -> Tool {
        let mut child = Command::new("stdbuf")
            .arg("-oL")
            .arg(tool_path(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Tool {
            name: name.to_string(),
            child,
            lines,
            ready_at: Instant::now(),
        }
    }

    /// offcputime on `pid`, loaded, with 65536 stack slots: at its default 1024, distinct stacks
    /// collide in its stack map, and a period whose kernel stack did not fit reads
    /// [Missed Kernel Stack] without the frames the cross-checks look for (CI: a quarter of the
    /// futex waits once).
    pub fn offcputime(pid: u32) -> Tool {
        let pid = pid.to_string();
        let mut tool = Tool::spawn("offcputime", &["-p", &pid, "--stack-storage-size", "65536"]);
        tool.wait_loaded();
        tool
    }

    /// Waits (30 s at most) for the tool's "Tracing" line: its programs are attached.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with("Tracing") => break,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{} printed no 'Tracing' line within 30 s", self.name)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let out = self.child.wait_with_output_lossy();
                    panic!("{} ended before it was tracing: {out}", self.name)
                }
            }
        }
        self.ready_at = Instant::now();
    }

    /// Waits (30 s at most) until the tool holds BPF programs, for a tool that prints no
    /// "Tracing" line (offcputime), and a little more for their attach, which follows the load.
    pub fn wait_loaded(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while crate::programs_held_by(self.child.id()).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{} loaded no BPF program in 30 s",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        self.ready_at = Instant::now();
    }

    /// Stops the tool with SIGINT, as Ctrl-C does, and returns the summary it prints then.
    pub fn stop(mut self) -> String {
        // SAFETY: signalling the child this Tool started (stdbuf execs the tool, same pid).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut text = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    text.push_str(&line);
                    text.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{} did not end within 20 s of SIGINT", self.name)
                }
            }
        }
        let status = self.child.wait().expect("wait for the tool");
        assert!(
            status.success(),
            "{} exited with {status}: {}",
            self.name,
            self.child.wait_with_output_lossy()
        );
        text
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait StderrLossy {
    fn wait_with_output_lossy(&mut self) -> String;
}

impl StderrLossy for Child {
    /// What the child wrote on stderr, once it has ended (for failure messages).
    fn wait_with_output_lossy(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut stderr) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        }
        err
    }
}

/// One syscall's line of `syscount -L`: how many returned, and their total time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SyscallStat {
    pub count: u64,
    pub total_ns: f64,
}

/// `syscount -L` (per syscall name: COUNT and TIME (us), the total latency) by name.
pub fn parse_syscount(text: &str) -> BTreeMap<String, SyscallStat> {
    let mut stats = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"SYSCALL") {
            assert!(
                line.contains("TIME (us)"),
                "syscount was not run with -L (latency in microseconds): {line}"
            );
            in_table = true;
            continue;
        }
        if !in_table || fields.len() != 3 {
            continue;
        }
        let (Ok(count), Ok(us)) = (fields[1].parse::<u64>(), fields[2].parse::<f64>()) else {
            panic!("syscount line not understood: {line:?}");
        };
        stats.insert(
            fields[0].to_string(),
            SyscallStat {
                count,
                total_ns: us * 1e3,
            },
        );
    }
    stats
}

/// One bucket of a log2 histogram as the tools print it: `LO -> HI : COUNT`, in microseconds
/// (values from LO to HI inclusive, after the tool's integer division to µs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Log2Bucket {
    pub lo_us: u64,
    pub hi_us: u64,
    pub count: u64,
}

/// The histogram runqlat prints (one, without -P/-L), in microseconds.
pub fn parse_log2_hist(text: &str) -> Vec<Log2Bucket> {
    let mut buckets = Vec::new();
    for line in text.lines() {
        let Some((range, rest)) = line.split_once(':') else {
            continue;
        };
        let Some((lo, hi)) = range.split_once("->") else {
            continue;
        };
        let count = rest.split_whitespace().next().and_then(|c| c.parse().ok());
        if let (Ok(lo_us), Ok(hi_us), Some(count)) = (lo.trim().parse(), hi.trim().parse(), count) {
            buckets.push(Log2Bucket {
                lo_us,
                hi_us,
                count,
            });
        }
    }
    buckets
}

/// The bucket that holds the value of rank ceil(q * total) (srvprof's quantile rank).
pub fn log2_quantile_bucket(buckets: &[Log2Bucket], q: f64) -> Option<Log2Bucket> {
    log2_rank_buckets(buckets, q, 0).into_iter().next()
}

/// The buckets holding the values ranked within `spread` of quantile q's rank (ceil(q * n)),
/// lowest first, each once: where q's value may lie when either tool timed `spread` of the
/// waits near it into a neighbouring bucket.
pub fn log2_rank_buckets(buckets: &[Log2Bucket], q: f64, spread: u64) -> Vec<Log2Bucket> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    if total == 0 {
        return Vec::new();
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let ranks = rank.saturating_sub(spread).max(1)..=(rank + spread).min(total);
    let mut out: Vec<Log2Bucket> = Vec::new();
    for r in ranks {
        let mut seen = 0;
        if let Some(b) = buckets.iter().copied().find(|b| {
            seen += b.count;
            seen >= r
        }) && out.last() != Some(&b)
        {
            out.push(b);
        }
    }
    out
}

/// offcputime's output (not folded): each stack ends in a line with its microseconds alone.
pub fn offcputime_total_us(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let t = l.trim();
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse::<u64>().ok())
        })
        .flatten()
        .sum()
}

/// offcputime's stacks: its output is one block per stack, frames then the task's line then its
/// time (us), blocks apart by blank lines. Each block's trimmed lines and its time.
fn offcputime_blocks(text: &str) -> impl Iterator<Item = (Vec<&str>, u64)> {
    text.split("\n\n").filter_map(|block| {
        let lines: Vec<&str> = block
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let us = lines.last()?.parse::<u64>().ok()?;
        Some((lines, us))
    })
}

/// offcputime's microseconds in the stacks that have `frame` among their frames.
pub fn offcputime_us_with_frame(text: &str, frame: &str) -> u64 {
    offcputime_blocks(text)
        .filter(|(lines, _)| lines.contains(&frame))
        .map(|(_, us)| us)
        .sum()
}

/// offcputime's microseconds in the stacks of threads named `thread` that have `frame` among
/// their frames.
pub fn offcputime_us_of_thread_with_frame(text: &str, thread: &str, frame: &str) -> u64 {
    offcputime_blocks(text)
        .filter(|(lines, _)| {
            // The task's line: "-                conn (19889)".
            let named = lines.iter().any(|l| {
                l.strip_prefix('-')
                    .and_then(|t| t.trim().rsplit_once(" ("))
                    .is_some_and(|(name, _)| name == thread)
            });
            named && lines.contains(&frame)
        })
        .map(|(_, us)| us)
        .sum()
}

/// A `NAME VALUE` table as `softirqs -N` (TOTAL_nsecs) and `hardirqs -C` (TOTAL_count) print it,
/// by name; the header and the "Tracing" line are skipped.
pub fn parse_name_totals(text: &str) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 2 {
            continue;
        }
        // The name may hold spaces (hardirqs prints irqaction names); the value is last.
        let (value, name) = fields.split_last().unwrap();
        if let Ok(v) = value.parse::<u64>() {
            *totals.entry(name.join(" ")).or_default() += v;
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offcputime_blocks_with_a_frame() {
        let text = "    schedule\n    io_schedule\n    folio_wait_bit_common\n    -                nginx (7)\n        81209\n\n    schedule\n    do_epoll_wait\n    -                nginx (7)\n        5000\n";
        assert_eq!(offcputime_us_with_frame(text, "io_schedule"), 81209);
        assert_eq!(offcputime_total_us(text), 86209);
    }

    #[test]
    fn syscount_latency_table() {
        let text = "Tracing syscalls, printing top 500... Ctrl+C to quit.\n[08:14:54]\n\
            SYSCALL                   COUNT        TIME (us)\n\
            writev                     5000        41044.374\n\
            epoll_wait                  294         3906.875\n";
        let s = parse_syscount(text);
        assert_eq!(s["writev"].count, 5000);
        assert!((s["epoll_wait"].total_ns - 3_906_875.0).abs() < 1e-3);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn runqlat_histogram() {
        let text = "Tracing run queue latency... Hit Ctrl-C to end.\n\n\
            \x20    usecs               : count    distribution\n\
            \x20        0 -> 1          : 0        |          |\n\
            \x20        2 -> 3          : 8        |          |\n\
            \x20        4 -> 7          : 833      |**********|\n";
        let h = parse_log2_hist(text);
        assert_eq!(h.len(), 3);
        assert_eq!(
            h[2],
            Log2Bucket {
                lo_us: 4,
                hi_us: 7,
                count: 833
            }
        );
        assert_eq!(log2_quantile_bucket(&h, 0.5).unwrap().lo_us, 4);
        assert_eq!(log2_quantile_bucket(&h, 0.001).unwrap().lo_us, 2);
    }

    #[test]
    fn name_tables() {
        let text = "Tracing soft irq event time... Hit Ctrl-C to end.\n\n\
            SOFTIRQ          TOTAL_nsecs\ntimer                8669136\nnet_rx             602167130\n";
        let t = parse_name_totals(text);
        assert_eq!(t["net_rx"], 602_167_130);
        assert_eq!(t.len(), 2);
    }
}
