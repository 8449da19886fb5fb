//! Helpers shared by the integration tests: root check, the known workload, kernel counters.

pub mod go_h2c;
pub mod libbpf_tools;
pub mod side_by_side;
pub mod tls_nginx;
pub mod traffic;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
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
    built_srvprof("debug", "")
}

/// The release srvprof, for a test of what users run at full speed (`cargo xtask test` builds
/// it before the tests run).
pub fn srvprof_release_bin() -> PathBuf {
    built_srvprof("release", "--release ")
}

fn built_srvprof(profile: &str, flag: &str) -> PathBuf {
    let bin = target_dir().join(profile).join("srvprof");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build {flag}-p srvprof` (cargo xtask test does)",
        bin.display()
    );
    bin
}

/// Reads `child`'s stderr to its end, calling `on_line` with each line as it comes, then waits
/// for it and asserts it succeeded; returns all of its stderr.
pub fn follow_stderr(child: &mut Child, mut on_line: impl FnMut(&str)) -> String {
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut stderr = String::new();
    loop {
        let mut line = String::new();
        if lines.read_line(&mut line).unwrap() == 0 {
            break;
        }
        on_line(&line);
        stderr.push_str(&line);
    }
    assert!(child.wait().unwrap().success(), "{stderr}");
    stderr
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

/// The number a /proc status file gives for `name` (e.g. "VmRSS:", in kB, or
/// "voluntary_ctxt_switches:"), if it has that line.
pub fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// (voluntary, involuntary) switches of a thread, from /proc (the kernel's own nvcsw/nivcsw).
pub fn proc_ctxt_switches(pid: u32, tid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).expect("status");
    let field = |name: &str| status_field(&status, name).expect(name);
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

/// CPU `cpu`'s line of /proc/stat, in ticks: user nice system idle iowait irq softirq steal ...
fn cpu_stat_ticks(cpu: u32) -> Vec<u64> {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat
        .lines()
        .find(|l| l.starts_with(&format!("cpu{cpu} ")))
        .expect("the CPU's line");
    line.split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect()
}

/// Ticks CPU `cpu` spent running tasks (user + nice + system) by /proc/stat.
pub fn cpu_task_ticks(cpu: u32) -> u64 {
    cpu_stat_ticks(cpu)[..3].iter().sum()
}

/// Ticks CPU `cpu` was not idle by /proc/stat: tasks' time, interrupts' (on loopback much of a
/// server's network work) and time the hypervisor took.
pub fn cpu_busy_ticks(cpu: u32) -> u64 {
    let f = cpu_stat_ticks(cpu);
    f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
}

/// A process's user + system CPU time (ns) from /proc/PID/stat (fields 14 and 15, in clock
/// ticks), read here rather than with srvprof's parser, which is what is checked.
pub fn proc_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the name, which may hold spaces and parentheses: state is field 3.
    let after = &stat[stat.rfind(')').expect("a name in parentheses") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * 1_000_000_000 / hz
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

/// /proc/interrupts' numbered lines (device interrupts; not LOC, IPIs and the other named rows),
/// summed over CPUs, by handler name (the last column; irqs of the same name are added).
pub fn proc_interrupts_by_name() -> std::collections::BTreeMap<String, u64> {
    let text = std::fs::read_to_string("/proc/interrupts").expect("/proc/interrupts");
    let mut lines = text.lines();
    let ncpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut by_name = std::collections::BTreeMap::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let numbered = fields
            .first()
            .is_some_and(|l| l.trim_end_matches(':').parse::<u32>().is_ok());
        if !numbered || fields.len() < ncpus + 2 {
            continue;
        }
        let count: u64 = fields[1..=ncpus]
            .iter()
            .filter_map(|c| c.parse::<u64>().ok())
            .sum();
        *by_name
            .entry(fields[fields.len() - 1].to_string())
            .or_default() += count;
    }
    by_name
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The command that starts servers/faulty on `port` in `mode` (for `srvprof run --cmd`).
pub fn faulty_cmd(port: u16, mode: &[&str]) -> String {
    format!(
        "{}/servers/faulty/run --port {port} {}",
        workspace_root().display(),
        mode.join(" ")
    )
}

/// A run.json's count of failed requests of one kind (`reset`, `read_timeout`, ...).
pub fn errors_of(run: &serde_json::Value, kind: &str) -> u64 {
    run["load"]["errors_by_kind"][kind].as_u64().unwrap_or(0)
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Starts `cmd` (stdin closed) in a session and process group of its own, so that dropping the
/// [`Server`] that holds it kills the whole group (nginx's master and workers, say).
pub fn spawn_in_own_group(cmd: &mut Command) -> Child {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null());
    // SAFETY: setsid only.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", cmd.get_program()))
}

/// The processes whose parent is PID, by /proc/*/stat's fourth field.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut kids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            after.split_whitespace().nth(1) == Some(&pid.to_string())
        })
        .collect();
    kids.sort_unstable();
    kids
}

/// A reference or faulty server from servers/, in its own process group, killed on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    /// Starts servers/NAME/run --port P ARGS... and waits until it accepts connections.
    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::start_on(name, free_port(), args)
    }

    /// The same on a given port (a server restarted where the old one listened).
    pub fn start_on(name: &str, port: u16, args: &[&str]) -> Self {
        let child = spawn_in_own_group(
            Command::new(workspace_root().join("servers").join(name).join("run"))
                .arg("--port")
                .arg(port.to_string())
                .args(args)
                .stdout(Stdio::null()),
        );
        let server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(240);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "servers/{name} did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The server's N child processes (nginx's workers), waiting up to 10 s for them: a master
    /// listens before it forks, so its port answers before its workers exist (CI found none).
    pub fn children(&self, n: usize) -> Vec<u32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let kids = children_of(self.pid());
            if kids.len() >= n || Instant::now() > deadline {
                assert_eq!(kids.len(), n, "{n} child processes of {}", self.pid());
                return kids;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: killing the process group this test created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        // Its closed connections would stay in TIME_WAIT on the host for 60 s: tens of thousands
        // after a run of a connection per request, which slow the next tests' connects and
        // socket-table walks. Gone with the server (sock_diag's destroy, as `ss -K` asks).
        let filter = format!("( sport = :{p} or dport = :{p} )", p = self.port);
        let _ = Command::new("ss")
            .args(["-K", "-t", "state", "time-wait", &filter])
            .output();
    }
}

/// A process burning CPU on the given CPUs until dropped (servers/busy-thread --spin-fn).
pub struct CpuHog {
    _process: Server,
}

impl CpuHog {
    /// Returns once the hog spins (it prints "ready"; its first start builds it).
    pub fn on(cpus: &str) -> Self {
        let mut child = spawn_in_own_group(
            Command::new(workspace_root().join("servers/busy-thread/run"))
                .args(["--spin-fn", "--seconds", "120", "--cpus", cpus])
                .stdout(Stdio::piped()),
        );
        let stdout = child.stdout.take().expect("the hog's stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines.any(|l| l.is_ok_and(|l| l.trim() == "ready"));
            let _ = tx.send(ready);
        });
        let hog = CpuHog {
            _process: Server { child, port: 0 },
        };
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(240)),
            Ok(true),
            "servers/busy-thread did not say ready"
        );
        hog
    }

    /// The hog's process (servers/busy-thread execs its program).
    pub fn pid(&self) -> u32 {
        self._process.pid()
    }
}

/// A kernel MIB counter of this network namespace, e.g. ("TcpExt:", "ListenOverflows").
pub fn net_counter(prefix: &str, name: &str) -> u64 {
    for file in ["/proc/net/netstat", "/proc/net/snmp"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            if pair.len() == 2 && pair[0].starts_with(prefix) {
                let names: Vec<&str> = pair[0].split_whitespace().collect();
                let values: Vec<&str> = pair[1].split_whitespace().collect();
                if let Some(i) = names.iter().position(|n| *n == name) {
                    return values[i].parse().unwrap();
                }
            }
        }
    }
    panic!("no {prefix}{name}");
}

/// The folder a test's `srvprof run` called `name` writes to: srvprof-run-PID-NAME in the temp dir.
pub fn run_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("srvprof-run-{}-{name}", std::process::id()))
}

/// [`run_dir`], emptied of what an earlier run left there.
pub fn fresh_run_dir(name: &str) -> PathBuf {
    let dir = run_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A run's timed stacks of one kind and group (`stem`: `oncpu-server`): each row's interval start
/// (ms since the measured window started), the stack of its line in `{stem}.folded`, its value.
pub fn timed(dir: &Path, stem: &str) -> Vec<(i64, Vec<String>, u64)> {
    let lines = folded(dir, &format!("{stem}.folded"));
    let file = format!("{stem}.timed");
    let text = std::fs::read_to_string(dir.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    (text.lines())
        .filter(|l| !l.starts_with('#') && !l.starts_with("interval_ms "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let n: usize = f[1].parse().unwrap();
            (
                f[0].parse().unwrap(),
                lines[n - 1].0.clone(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// A folded-stacks file srvprof wrote (oncpu-server.folded...): each line's frames (thread name
/// first, leaf last) and value.
pub fn folded(dir: &Path, file: &str) -> Vec<(Vec<String>, u64)> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("folded line");
            (
                stack.split(';').map(str::to_string).collect(),
                n.parse().unwrap(),
            )
        })
        .collect()
}

/// The summed value of the folded lines whose frames satisfy `pred`.
pub fn weight(lines: &[(Vec<String>, u64)], pred: impl Fn(&[String]) -> bool) -> u64 {
    lines.iter().filter(|(f, _)| pred(f)).map(|(_, n)| n).sum()
}

/// A JSON file srvprof wrote (run.json, a probe's --out), parsed.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Asserts that a finished srvprof (or other command) exited 0, showing its stderr if not.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "expected exit status 0, got {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `cmd` in the background with stdout discarded and stderr piped, for [`wait_attached`]
/// or a test's own reading of srvprof's progress lines.
pub fn spawn_piped(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", cmd.get_program()))
}

/// `srvprof probe --pid PID -d DURATION --format json`, then `extra`; the caller runs it.
pub fn probe_json(pid: u32, duration: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(srvprof_bin());
    cmd.args(["probe", "--pid", &pid.to_string(), "-d", duration])
        .args(["--format", "json"])
        .args(extra);
    cmd
}

/// The arguments of one `srvprof run`, in the order they are given.
pub struct RunArgs(Vec<OsString>);

impl RunArgs {
    /// Against a process that already serves: `--pid PID`.
    pub fn pid(pid: u32) -> Self {
        Self(vec!["--pid".into(), pid.to_string().into()])
    }

    /// Against a command that srvprof starts and stops: `--cmd CMD`.
    pub fn cmd(cmd: &str) -> Self {
        Self(vec!["--cmd".into(), cmd.into()])
    }

    /// The load: `-c CONNECTIONS -d DURATION --warmup WARMUP`.
    pub fn load(self, connections: u64, duration: &str, warmup: &str) -> Self {
        let connections = connections.to_string();
        self.args(&["-c", &connections, "-d", duration, "--warmup", warmup])
    }

    /// More arguments, as given.
    pub fn args(mut self, more: &[&str]) -> Self {
        self.0.extend(more.iter().map(OsString::from));
        self
    }

    /// `--out DIR`.
    pub fn out(mut self, dir: &Path) -> Self {
        self.0.push("--out".into());
        self.0.push(dir.into());
        self
    }

    /// The arguments after `srvprof run`, for a test that starts srvprof through another command.
    pub fn list(&self) -> &[OsString] {
        &self.0
    }

    /// `srvprof run ARGS`, for the caller to start.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(srvprof_bin());
        cmd.arg("run").args(&self.0);
        cmd
    }

    /// Starts `srvprof run ARGS` in the background ([`spawn_piped`]).
    pub fn spawn(&self) -> Child {
        spawn_piped(&mut self.command())
    }

    /// Runs `srvprof run ARGS --out DIR` to its end, DIR being [`fresh_run_dir`]`(name)`:
    /// (exit status, stderr, run.json, or null where none was written).
    pub fn run(self, name: &str) -> (ExitStatus, String, serde_json::Value) {
        let dir = fresh_run_dir(name);
        let out = self.out(&dir).command().output().expect("srvprof run");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = std::fs::read_to_string(dir.join("run.json"))
            .map(|t| serde_json::from_str(&t).expect("run.json parses"))
            .unwrap_or(serde_json::Value::Null);
        (out.status, stderr, json)
    }

    /// [`RunArgs::run`], asserting that srvprof exited 0: its run.json.
    pub fn run_ok(self, name: &str) -> serde_json::Value {
        let (status, stderr, run) = self.run(name);
        assert!(
            status.success(),
            "srvprof run {name}: expected exit status 0, got {status}: {stderr}"
        );
        run
    }
}

/// The kinds of a run.json's findings, in their order.
pub fn finding_kinds(run: &serde_json::Value) -> Vec<String> {
    run["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["kind"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The run's finding of `kind`, which must be there.
pub fn expect_finding<'a>(run: &'a serde_json::Value, kind: &str) -> &'a serde_json::Value {
    finding(run, kind)
        .unwrap_or_else(|| panic!("expected a {kind} finding, got {:?}", finding_kinds(run)))
}

pub fn finding<'a>(run: &'a serde_json::Value, kind: &str) -> Option<&'a serde_json::Value> {
    run["findings"]
        .as_array()?
        .iter()
        .find(|f| f["kind"] == kind)
}

/// Ids of the BPF programs a process holds: the kernel lists them in /proc/PID/fdinfo
/// (`prog_id:` of every program and link descriptor).
pub fn programs_held_by(pid: u32) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Names of the BPF programs a process holds: its program ids (above) named by the kernel's list
/// of loaded programs (bpftool).
pub fn program_names_held_by(pid: u32) -> Vec<String> {
    let ids = programs_held_by(pid);
    let out = std::process::Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("bpftool runs (cargo xtask setup installs it)");
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    progs
        .as_array()
        .expect("a list of programs")
        .iter()
        .filter(|p| p["id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect()
}

/// Reads a spawned srvprof's stderr until a line contains `marker` (it says "probes attached",
/// "watching PIDs", ...), then keeps draining it so srvprof never blocks on a full pipe.
/// The lines after the marker arrive on the returned channel.
pub fn wait_attached(
    child: &mut std::process::Child,
    marker: &str,
) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        if line.contains(marker) {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in stderr.lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            return rx;
        }
        line.clear();
    }
    panic!("srvprof ended before '{marker}'");
}

/// servers/busy-thread, once it says `ready` (after a build on first use).
pub fn start_busy_thread(args: &[&str]) -> Server {
    let mut child = spawn_in_own_group(
        Command::new(workspace_root().join("servers/busy-thread/run"))
            .args(args)
            .stdout(Stdio::piped()),
    );
    // It prints `ready` once its threads run (after a build on first use).
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        if line.trim() == "ready" {
            break;
        }
        seen.push(line);
        assert!(
            n > 0 && seen.len() < 100,
            "busy-thread did not start: {seen:?}"
        );
    }
    Server { child, port: 0 }
}

/// Runs headless Chromium with a fresh profile; returns (stdout, stderr).
pub fn chromium(args: &[&str], url: &str) -> (String, String) {
    let profile = std::env::temp_dir().join(format!("srvprof-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).unwrap();
    let out = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run /usr/bin/chromium");
    let _ = std::fs::remove_dir_all(&profile);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Two network namespaces joined by a veth pair (10.231.0.1 the server's, 10.231.0.2 the
/// client's), made and removed by the test.
pub struct Netns {
    pub names: [String; 2],
}

impl Netns {
    pub fn create() -> Self {
        let id = std::process::id() % 10000;
        let names = [format!("srvprof-srv-{id}"), format!("srvprof-cli-{id}")];
        let ip = |args: &[&str]| {
            let st = Command::new("ip").args(args).status().expect("ip");
            assert!(st.success(), "ip {args:?}");
        };
        for n in &names {
            // A namespace a killed run left behind; none is the usual case.
            let _ = (Command::new("ip").args(["netns", "del", n]))
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", n]);
        }
        let (a, b) = (format!("vs{id}"), format!("vc{id}"));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "netns", &names[0]]);
        ip(&["link", "set", &b, "netns", &names[1]]);
        ip(&["-n", &names[0], "addr", "add", "10.231.0.1/24", "dev", &a]);
        ip(&["-n", &names[1], "addr", "add", "10.231.0.2/24", "dev", &b]);
        for (n, dev) in [(&names[0], &a), (&names[1], &b)] {
            ip(&["-n", n, "link", "set", dev, "up"]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        Netns { names }
    }

    /// The veth device on the server's side.
    pub fn server_device(&self) -> String {
        format!("vs{}", std::process::id() % 10000)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// A server network namespace and `hosts` more on one bridge (in the server's), as hosts on one
/// LAN (client hosts, or a balancer's backends): the server at 10.232.0.1, host i (from 1) at
/// 10.232.0.(i + 1). Every address lives only inside them; deleted when dropped.
pub struct BridgedNetns {
    pub server: String,
    pub hosts: Vec<String>,
}

impl BridgedNetns {
    pub fn create(hosts: usize) -> Self {
        let id = std::process::id() % 10000;
        let server = format!("srvprof-bs-{id}");
        let hosts: Vec<String> = (1..=hosts).map(|i| format!("srvprof-bc{i}-{id}")).collect();
        let ip = |args: &[&str]| {
            let st = Command::new("ip").args(args).status().expect("ip");
            assert!(st.success(), "ip {args:?}");
        };
        for n in std::iter::once(&server).chain(&hosts) {
            // A namespace a killed run left behind; none is the usual case.
            let _ = (Command::new("ip").args(["netns", "del", n]))
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        let bridge = format!("br{id}");
        ip(&["-n", &server, "link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "-n",
            &server,
            "addr",
            "add",
            "10.232.0.1/24",
            "dev",
            &bridge,
        ]);
        ip(&["-n", &server, "link", "set", &bridge, "up"]);
        for (i, n) in hosts.iter().enumerate() {
            let (port, end) = (format!("bp{}-{id}", i + 1), format!("bc{}-{id}", i + 1));
            ip(&["link", "add", &port, "type", "veth", "peer", "name", &end]);
            ip(&["link", "set", &port, "netns", &server]);
            ip(&["link", "set", &end, "netns", n]);
            ip(&["-n", &server, "link", "set", &port, "master", &bridge]);
            ip(&["-n", &server, "link", "set", &port, "up"]);
            let address = format!("10.232.0.{}/24", i + 2);
            ip(&["-n", n, "addr", "add", &address, "dev", &end]);
            ip(&["-n", n, "link", "set", &end, "up"]);
        }
        BridgedNetns { server, hosts }
    }
}

impl Drop for BridgedNetns {
    fn drop(&mut self) {
        for n in std::iter::once(&self.server).chain(&self.hosts) {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// nginx started by [`nginx_in_netns`]: stopped (SIGTERM to its master, then reaped) when
/// dropped, a failed assertion included.
pub struct NginxInNetns(Child);

impl NginxInNetns {
    /// Its master's pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for NginxInNetns {
    fn drop(&mut self) {
        // SAFETY: a signal to a child this process started and has not reaped; the master
        // stops its worker on SIGTERM.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// nginx (one worker, `return 200 "hello world"`) in the network namespace `ns`, listening on
/// `listen`, its files in a fresh temporary folder named for `name`; started 0.8 s ago.
pub fn nginx_in_netns(ns: &str, name: &str, listen: &str, worker_connections: u32) -> NginxInNetns {
    nginx_in_netns_serving(ns, name, listen, worker_connections, &[])
}

/// The same, serving `files` (name, size in bytes: random bytes) from its folder as well, each
/// at /NAME.
pub fn nginx_in_netns_serving(
    ns: &str,
    name: &str,
    listen: &str,
    worker_connections: u32,
    files: &[(&str, usize)],
) -> NginxInNetns {
    nginx_in_netns_with(ns, name, listen, worker_connections, files, false, "").0
}

/// nginx_in_netns, writing an access log of every request (`$msec $remote_addr $connection`:
/// when it was answered, by whom it was sent and on which of nginx's connections): its path.
pub fn nginx_in_netns_logging(
    ns: &str,
    name: &str,
    listen: &str,
    worker_connections: u32,
) -> (NginxInNetns, PathBuf) {
    nginx_in_netns_with(ns, name, listen, worker_connections, &[], true, "")
}

/// nginx in `ns` balancing its requests over `backends` (address, weight) by weighted round
/// robin, on keep-alive connections to them.
pub fn nginx_balancer_in_netns(
    ns: &str,
    name: &str,
    listen: &str,
    backends: &[(&str, u32)],
) -> NginxInNetns {
    let servers: String = (backends.iter())
        .map(|(address, weight)| format!("server {address} weight={weight}; "))
        .collect();
    let balance = format!(
        "upstream backends {{ {servers}keepalive 32; }}\n\
         server {{ listen {listen}; location / {{ proxy_pass http://backends; \
         proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}"
    );
    nginx_in_netns_with(ns, name, listen, 4096, &[], false, &balance).0
}

fn nginx_in_netns_with(
    ns: &str,
    name: &str,
    listen: &str,
    worker_connections: u32,
    files: &[(&str, usize)],
    log: bool,
    balance: &str,
) -> (NginxInNetns, PathBuf) {
    let state = std::env::temp_dir().join(format!("srvprof-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let root = state.join("html");
    std::fs::create_dir_all(&root).unwrap();
    let mut locations = String::new();
    for (file, size) in files {
        let mut bytes = vec![0u8; *size];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in &mut bytes {
            // xorshift: bytes no compression on the path could shrink.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        std::fs::write(root.join(file), bytes).unwrap();
        locations += &format!("location = /{file} {{ root {}; }}\n", root.display());
    }
    let conf = state.join("nginx.conf");
    let access = state.join("access.log");
    // The server block: a balancer's, or one answering "hello world" (and `files`).
    let server = match balance {
        "" => format!(
            "server {{ listen {listen}; {locations} location / {{ return 200 \"hello world\"; }} }}"
        ),
        balance => balance.to_string(),
    };
    let access_log = match log {
        true => format!(
            "log_format window '$msec $remote_addr $connection'; access_log {} window;",
            access.display()
        ),
        false => "access_log off;".into(),
    };
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
             events {{ worker_connections {worker_connections}; }}\n\
             http {{ {access_log} client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               {server} }}\n",
            d = state.display()
        ),
    )
    .unwrap();
    let nginx = Command::new("ip")
        .args(["netns", "exec", ns, "/usr/sbin/nginx", "-c"])
        .arg(&conf)
        .arg("-p")
        .arg(&state)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    (NginxInNetns(nginx), access)
}

/// Runs srvprof as `run` says, and `perf record PERF_ARGS -o DATA -p PID` (`-a` without a PID)
/// over the same seconds: perf starts when srvprof says its probes are attached and gets SIGINT
/// when srvprof starts reading stacks (perf's own start takes ~0.1 s). Asserts srvprof
/// succeeded; its stderr.
pub fn srvprof_beside_perf(
    run: &RunArgs,
    pid: Option<u32>,
    perf_args: &[&str],
    data: &Path,
) -> String {
    let target = match pid {
        Some(pid) => vec!["-p".to_string(), pid.to_string()],
        None => vec!["-a".to_string()],
    };
    let mut srvprof = run.spawn();
    let mut lines = BufReader::new(srvprof.stderr.take().expect("piped stderr"));
    let (mut perf, mut stderr): (Option<Child>, String) = (None, String::new());
    loop {
        let mut line = String::new();
        if lines.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if line.contains("probes attached") {
            perf = Some(
                Command::new("perf")
                    .arg("record")
                    .args(perf_args)
                    .arg("-o")
                    .arg(data)
                    // Bounded: this stops it if srvprof never says it is reading stacks.
                    .args(&target)
                    .args(["--", "sleep", "30"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("perf record (installed by cargo xtask setup)"),
            );
        }
        if line.contains("reading stacks")
            && let Some(p) = &perf
        {
            // SAFETY: signalling the perf process this test started.
            unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
        }
        stderr.push_str(&line);
    }
    assert!(srvprof.wait().unwrap().success(), "{stderr}");
    let _ = perf
        .expect("srvprof never said its probes were attached")
        .wait();
    stderr
}

/// A server-like thread on `cpu`: it sleeps 100 µs at a time for `measure`, as a worker waits
/// for its next request, and counts the wake-ups later than `stall` by the kernel's monotonic
/// clock. Anything holding that CPU unpreempted (a program attach, a real-time reading) shows as
/// late wake-ups; the bare machine wakes ~10 µs late. Panics when the CPU cannot be pinned.
pub fn late_wakeups(cpu: usize, stall: Duration, measure: Duration) -> u64 {
    const SLEEP: Duration = Duration::from_micros(100);
    std::thread::spawn(move || {
        // SAFETY: plain calls on this thread's own affinity and timer slack.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0,
                "pinning to CPU {cpu}"
            );
            // Without it a sleep ends up to 50 µs late by design.
            libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0);
        }
        let end = Instant::now() + measure;
        let mut late = 0;
        while Instant::now() < end {
            let t = Instant::now();
            std::thread::sleep(SLEEP);
            if t.elapsed() > SLEEP + stall {
                late += 1;
            }
        }
        late
    })
    .join()
    .expect("the sleeping thread")
}

/// Checks `value` against docs/run.schema.json's node `schema`: every key of an object is one
/// the schema lists (or the object is a map, `additionalProperties`), and every value has one of
/// its types. Returns where it does not.
pub fn schema_mismatches(
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
) -> Vec<String> {
    use serde_json::Value;
    let mut out = Vec::new();
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let allowed: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    // A key seen only as null when the schema was made has no type: any is allowed.
    if !allowed.is_empty() && kind != "null" && !allowed.contains(&kind) {
        out.push(format!("{at}: a {kind}, the schema says {allowed:?}"));
        return out;
    }
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let path = format!("{at}.{key}");
                match (
                    schema["properties"].get(key),
                    schema.get("additionalProperties"),
                ) {
                    (Some(s), _) | (None, Some(s)) => out.extend(schema_mismatches(s, v, &path)),
                    (None, None) if schema.get("properties").is_some() => {
                        out.push(format!("{path}: not in the schema"))
                    }
                    (None, None) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    out.extend(schema_mismatches(s, v, &format!("{at}[{i}]")));
                }
            }
        }
        _ => {}
    }
    out
}

/// run.json against docs/run.schema.json, the schema users validate with.
pub fn assert_run_json_matches_its_schema(run: &serde_json::Value) {
    let schema = read_json(&workspace_root().join("docs/run.schema.json"));
    let wrong = schema_mismatches(&schema, run, "run.json");
    assert!(
        wrong.is_empty(),
        "run.json and docs/run.schema.json differ (add the new keys to the schema):\n{}",
        wrong.join("\n")
    );
}

/// `srvprof merge DIRS... --out OUT`, OUT removed first: its output.
pub fn merge_into(dirs: &[PathBuf], out: &Path) -> Output {
    let _ = std::fs::remove_dir_all(out);
    Command::new(srvprof_bin())
        .arg("merge")
        .args(dirs)
        .arg("--out")
        .arg(out)
        .output()
        .expect("srvprof merge")
}
