//! One nginx worker under load, watched at once by `srvprof probe` and by libbpf-tools (syscount,
//! runqlat, softirqs, hardirqs) plus the kernel's own switch counters, over the same seconds.
//!
//! Order of events, so that srvprof's window holds every tool's:
//! 1. the worker's /proc status switch counts are read; srvprof starts and says "watching";
//! 2. the tools start, and each prints its "Tracing" line (programs attached);
//! 3. the load runs (steady or bursty);
//! 4. the tools get SIGINT and print; srvprof ends; the switch counts are read again.
//!
//! srvprof attaches first on purpose. Programs on one tracepoint run in the order they were
//! attached, so each tool's interval holds whatever the other tool's programs do between its two
//! stamps. With srvprof first, what libbpf-tools do after their stamp (syscount's hash update at
//! entry, softirqs' atomic adds at exit) lies outside both intervals, and srvprof's time is
//! compared with theirs net of their bookkeeping (docs/benchmarks.md, "Two tools on one
//! tracepoint").
//!
//! The worker is idle (blocked in epoll_wait) before the load and after it, so the per-process
//! tools (syscount -p, runqlat -p) and the /proc deltas see nothing outside the tools' window; the
//! system-wide ones (softirqs, hardirqs) miss the machine's background in the seconds srvprof
//! watched beyond them, [`Observed::extra_probe_time`].

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::libbpf_tools::{
    Log2Bucket, SyscallStat, Tool, mount_tracefs, parse_log2_hist, parse_name_totals,
    parse_syscount,
};
use crate::traffic::{LoadDone, Rng, ab_burst_size, ab_bursts, steady_wrk};
use crate::{
    Server, probe_json, proc_ctxt_switches, proc_interrupts_by_name, proc_softirq, require_root,
    wait_attached,
};

/// srvprof's window: the tools' start (well under 1 s), at most [`LOAD_BUDGET`] of load,
/// [`TOOLS_IDLE_TAIL`] and the tools' stop fit in it with room to spare.
pub const PROBE_SECONDS: u64 = 9;
pub const LOAD_BUDGET: Duration = Duration::from_millis(5_500);

/// How long after the load the tools keep tracing: the worker's last responses and the client's
/// closes take well under this.
pub const TOOLS_IDLE_TAIL: Duration = Duration::from_millis(300);

/// How long before srvprof's last sample is due the kernel's counters are read: more than its
/// first sample and its "watching" line take (a few ms), less than the idle tail after the load.
pub const LAST_SAMPLE_MARGIN: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// wrk, 1 thread, 50 keep-alive connections, 5 s.
    Steady,
    /// Bursts of `ab -k -c 20` (sized for about 60 ms untraced, 70-100 ms traced) after idle gaps
    /// of 100-800 ms drawn at random, up to 10 of them within the load budget.
    Bursty,
}

/// What srvprof and the tools measured over the same seconds.
pub struct Observed {
    pub worker: u32,
    /// `srvprof probe --format json` (with `--exact` or not).
    pub probe: serde_json::Value,
    /// `syscount -L -p WORKER`: per syscall name, count and total time.
    pub syscount: BTreeMap<String, SyscallStat>,
    /// `runqlat -p WORKER`: the log2 histogram of run-queue waits, µs.
    pub runqlat: Vec<Log2Bucket>,
    /// `softirqs -N`: nanoseconds per softirq name (net_rx, timer, ...), system-wide.
    pub softirqs_ns: BTreeMap<String, u64>,
    /// `hardirqs -C`: handler invocations per irq action name, system-wide.
    pub hardirqs: BTreeMap<String, u64>,
    /// (voluntary, involuntary) switch deltas of the worker from /proc/PID/status.
    pub proc_switches: (u64, u64),
    pub load: LoadDone,
    /// How much longer srvprof watched than the tools traced: from its "watching" line to the last
    /// tool's ready line, plus from the first tool's SIGINT to srvprof's last sample.
    pub extra_probe_time: Duration,
    /// The kernel's own interrupt counters around srvprof's window and the tools' windows.
    /// srvprof's lies between `probe_spawn` and `probe_exit`, and holds all of `probe_watching`
    /// to `probe_nearly_done`; every tool's lies between `before_tools` and `after_tools`, and
    /// holds all of `tools_ready` to `tools_stopping`.
    pub kernel: KernelSnapshots,
    pub seed: u64,
}

/// /proc/interrupts and /proc/softirqs at the points of an observation.
pub struct KernelSnapshots {
    pub probe_spawn: IrqCounters,
    pub probe_watching: IrqCounters,
    pub before_tools: IrqCounters,
    /// Once the last tool printed its ready line.
    pub tools_ready: IrqCounters,
    /// Before the first tool got SIGINT.
    pub tools_stopping: IrqCounters,
    pub after_tools: IrqCounters,
    /// [`LAST_SAMPLE_MARGIN`] before srvprof's last sample was due.
    pub probe_nearly_done: IrqCounters,
    pub probe_exit: IrqCounters,
}

/// The kernel's interrupt counts at one moment, summed over CPUs.
#[derive(Clone, Debug)]
pub struct IrqCounters {
    /// /proc/interrupts' numbered lines by handler name.
    pub hardirqs: BTreeMap<String, u64>,
    /// /proc/softirqs' NET_RX row.
    pub net_rx: u64,
}

impl IrqCounters {
    pub fn now() -> Self {
        IrqCounters {
            hardirqs: proc_interrupts_by_name(),
            net_rx: proc_softirq("NET_RX").iter().sum(),
        }
    }

    /// Counts from `self` to `later`: (hardirqs by name, NET_RX).
    pub fn until(&self, later: &IrqCounters) -> (BTreeMap<String, u64>, u64) {
        let hardirqs = later
            .hardirqs
            .iter()
            .map(|(name, n)| {
                (
                    name.clone(),
                    n - self.hardirqs.get(name).copied().unwrap_or(0),
                )
            })
            .collect();
        (hardirqs, later.net_rx - self.net_rx)
    }
}

/// Runs one side-by-side observation of a fresh one-worker nginx on CPU 1 (load on CPU 0).
pub fn observe(shape: Shape, exact: bool) -> Observed {
    require_root();
    mount_tracefs();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let worker = only_child(nginx.pid());
    let w = worker.to_string();
    let seed = Rng::seed_from_env_or_clock();
    // Sized before anything traces the worker (it then idles in epoll_wait again).
    let burst_requests = match shape {
        Shape::Bursty => ab_burst_size(&nginx.url(), Duration::from_millis(60), "0"),
        Shape::Steady => 0,
    };

    let args: &[&str] = if exact { &["--exact"] } else { &[] };
    // A worker just started may still be handling the readiness check's connection.
    let switches0 = wait_idle(worker);
    let probe_spawn = IrqCounters::now();
    // The report comes on stdout, not in a file: srvprof writing a file after its last sample
    // would raise disk interrupts that the kernel's counters at its exit would hold.
    let mut probe = KilledOnDrop(
        probe_json(worker, &format!("{PROBE_SECONDS}s"), args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start srvprof probe"),
    );
    let report = read_all_in_background(probe.0.stdout.take().unwrap());
    let stderr = wait_attached(&mut probe.0, "watching PIDs");
    let probe_watching = IrqCounters::now();
    let watching_at = Instant::now();

    let before_tools = IrqCounters::now();
    let mut tools = [
        Tool::spawn("syscount", &["-L", "-T", "1000", "-p", &w]),
        Tool::spawn("runqlat", &["-p", &w]),
        Tool::spawn("softirqs", &["-N"]),
        Tool::spawn("hardirqs", &["-C"]),
    ];
    for tool in &mut tools {
        tool.wait_ready();
    }
    let tools_ready = IrqCounters::now();
    let last_ready = tools.iter().map(|t| t.ready_at).max().unwrap();

    let load = match shape {
        Shape::Steady => steady_wrk(&nginx.url(), 50, 5, "0"),
        Shape::Bursty => {
            let mut rng = Rng::new(seed);
            ab_bursts(
                &nginx.url(),
                10,
                burst_requests,
                (100.0, 800.0),
                LOAD_BUDGET,
                "0",
                &mut rng,
            )
        }
    };
    // The last responses and the client's closes, handled before the tools stop.
    std::thread::sleep(TOOLS_IDLE_TAIL);

    let tools_stopping = IrqCounters::now();
    let first_stop = Instant::now();
    let outputs: Vec<String> = tools.into_iter().map(Tool::stop).collect();
    let after_tools = IrqCounters::now();

    // Just before srvprof's last sample: it took its first one (its window was open) before it
    // said "watching", so everything the kernel counts from then to here is in its window.
    let last_sample_due = watching_at + Duration::from_secs(PROBE_SECONDS);
    assert!(
        Instant::now() + LAST_SAMPLE_MARGIN < last_sample_due,
        "the tools and the load overran srvprof's window"
    );
    std::thread::sleep(
        (last_sample_due - LAST_SAMPLE_MARGIN).saturating_duration_since(Instant::now()),
    );
    let probe_nearly_done = IrqCounters::now();
    assert!(
        Instant::now() < last_sample_due,
        "reading the kernel's counters overran srvprof's window"
    );
    let deadline = Instant::now() + Duration::from_secs(PROBE_SECONDS + 20);
    let status = loop {
        if let Some(status) = probe.0.try_wait().expect("wait for srvprof") {
            break status;
        }
        assert!(Instant::now() < deadline, "srvprof probe did not end");
        std::thread::sleep(Duration::from_millis(10));
    };
    let probe_exit = IrqCounters::now();
    assert!(
        status.success(),
        "srvprof probe exited with {status}: {}",
        stderr.try_iter().collect::<Vec<_>>().join("\n")
    );
    let switches1 = proc_ctxt_switches(worker, worker);

    let extra_probe_time =
        last_ready.duration_since(watching_at) + last_sample_due.duration_since(first_stop);
    let report = report.join().expect("srvprof's stdout");
    let probe = serde_json::from_str(&report)
        .unwrap_or_else(|e| panic!("srvprof probe's report is not JSON ({e}): {report}"));
    Observed {
        worker,
        probe,
        syscount: parse_syscount(&outputs[0]),
        runqlat: parse_log2_hist(&outputs[1]),
        softirqs_ns: parse_name_totals(&outputs[2]),
        hardirqs: parse_name_totals(&outputs[3]),
        proc_switches: (switches1.0 - switches0.0, switches1.1 - switches0.1),
        load,
        extra_probe_time,
        kernel: KernelSnapshots {
            probe_spawn,
            probe_watching,
            before_tools,
            tools_ready,
            tools_stopping,
            after_tools,
            probe_nearly_done,
            probe_exit,
        },
        seed,
    }
}

/// Waits (10 s at most) until the thread's switch counts stay the same for 300 ms, and returns
/// them: the thread is blocked, and /proc's deltas from here count only what srvprof can see.
fn wait_idle(tid: u32) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = proc_ctxt_switches(tid, tid);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = proc_ctxt_switches(tid, tid);
        if now == last {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "thread {tid} was still switching after 10 s: {last:?} then {now:?}"
        );
        last = now;
    }
}

/// A child process killed (if still running) when a failing test unwinds past it.
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads a pipe to its end on a thread of its own (so the writer never blocks on it).
fn read_all_in_background(
    mut pipe: impl std::io::Read + Send + 'static,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).expect("read pipe");
        text
    })
}

/// The one child of a process (nginx's only worker, which the master forks after it listens),
/// from /proc/PID/task/PID/children; waits up to 10 s for it.
pub fn only_child(pid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_else(|e| panic!("children of {pid}: {e}"));
        let kids: Vec<u32> = text
            .split_whitespace()
            .filter_map(|k| k.parse().ok())
            .collect();
        match kids[..] {
            [kid] => return kid,
            [] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => panic!("expected one child of {pid}, got {kids:?}"),
        }
    }
}

impl Observed {
    /// srvprof's syscalls by name: (count, total ns).
    pub fn probe_syscalls(&self) -> BTreeMap<String, (u64, u64)> {
        self.probe["syscalls"]
            .as_array()
            .expect("syscalls[]")
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    (
                        s["count"].as_u64().unwrap(),
                        s["total_ns"].as_u64().unwrap(),
                    ),
                )
            })
            .collect()
    }

    /// srvprof's softirqs of one vector (NET_RX, ...), summed over CPUs: (count, total ns).
    pub fn probe_softirq(&self, vector: &str) -> (u64, u64) {
        self.probe_softirq_rows(vector)
            .into_iter()
            .fold((0, 0), |(n, ns), s| {
                (
                    n + s["count"].as_u64().unwrap(),
                    ns + s["total_ns"].as_u64().unwrap(),
                )
            })
    }

    /// srvprof's softirq rows of one vector, one per CPU.
    pub fn probe_softirq_rows(&self, vector: &str) -> Vec<&serde_json::Value> {
        self.probe["softirqs"]
            .as_array()
            .expect("softirqs[]")
            .iter()
            .filter(|s| s["vector"] == vector)
            .collect()
    }

    /// srvprof's hardirq counts by action name, summed over CPUs.
    pub fn probe_hardirqs(&self) -> BTreeMap<String, u64> {
        let mut by_name = BTreeMap::new();
        for h in self.probe["hardirqs"].as_array().expect("hardirqs[]") {
            *by_name
                .entry(h["name"].as_str().unwrap().to_string())
                .or_default() += h["count"].as_u64().unwrap();
        }
        by_name
    }

    /// The worker's row in srvprof's threads[].
    pub fn probe_worker(&self) -> &serde_json::Value {
        self.probe["threads"]
            .as_array()
            .expect("threads[]")
            .iter()
            .find(|t| t["tid"] == self.worker)
            .expect("the worker is in srvprof's threads[]")
    }
}
