//! Watching does not stall the CPU it shares with the server. A thread that sleeps 100 µs at a
//! time on the CPU srvprof runs on, as a server's worker waits for its next request, wakes late
//! by more than STALL no more often with `srvprof probe` attached (default, sampled mode) than
//! beside nothing, within a bound. Each sleep is timed by the kernel's monotonic clock.
//!
//! The mechanism this guards: attaching a program to a tracepoint that has none, and detaching
//! the last, rewrites kernel text and waits for every CPU to acknowledge it, 150-200 µs of the
//! attaching CPU per program on these VMs, none of it preemptible (preempt=none). Attaching the
//! syscall and softirq programs for each of four windows a second stalled the CPU 0.3-1 ms eight
//! times a second (+45 late wakes in 5 s here); now the four come and go once an interval, with a
//! pause between programs (+8 to +14).
//!
//! These hold on a quiet host only, so `cargo xtask bench stalls` runs them, not CI: each patch of
//! kernel text waits for the other vCPU to answer, and how long depends on how the host runs it.
//! On one machine, an hour apart, the same build stalled a 2,000-thread server's CPU over 5 ms 2
//! to 9 times in 5 s, then 7 to 12, against none bare.

use srvprof_integration::*;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

/// The CPU the server, the sleeping thread and srvprof share.
const CPU: usize = 1;
/// A wake-up later than this counts as a stall (the bare machine wakes ~10 µs late).
const STALL: Duration = Duration::from_micros(500);
const MEASURE: Duration = Duration::from_secs(5);
/// Late wake-ups in MEASURE beyond the bare runs' (medians of the pairs): 0 to 15 measured, from
/// one syscall window's two edges and the interval's reading a second; the flips made it 45.
const EXTRA_STALLS: i64 = 25;

#[test]
#[ignore = "holds on a quiet host only: run by cargo xtask bench stalls"]
fn watching_stalls_the_cpu_it_shares_with_the_server_no_more_than_a_few_times_a_second_on_a_quiet_host()
 {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", &CPU.to_string()]);
    let worker = nginx.children(1)[0];
    let (bare, watched) = bare_and_watched(worker, &[], STALL, 3, || ());
    assert!(
        watched - bare <= EXTRA_STALLS,
        "with srvprof probe on its CPU a sleeping thread woke late {watched} times in {MEASURE:?}, \
         {bare} beside nothing (allowed {EXTRA_STALLS} more): something srvprof does holds the CPU"
    );
}

/// TIME_WAIT sockets the host holds in the next test, as a minute of runs without keep-alive
/// leaves them.
const TIME_WAIT_SOCKETS: u64 = 20_000;
/// A stall this long is what reading that many sockets in one go cost.
const LONG_STALL: Duration = Duration::from_millis(2);
/// Long stalls in MEASURE beyond the bare runs' in the next two tests: 0 to 2 measured; walking
/// the socket table at each reading made them 57 (one a reading: 13 ms with TIME_WAIT read, 2-9
/// ms without), reading every thread of 2,000 at each reading 94-97 of over 5 ms.
const EXTRA_LONG_STALLS: i64 = 10;

/// The host holding 20,000 TIME_WAIT sockets (/proc/net/sockstat counts them) does not make
/// srvprof's readings stall the CPU it shares with the server. The kernel walks every socket of
/// its table, without a break, even for a dump that asks for established ones only; srvprof
/// walks it only at the run's ends, and its programs follow the server's own connections.
/// Readings ten times a second make every reading's cost show.
#[test]
#[ignore = "holds on a quiet host only: run by cargo xtask bench stalls"]
fn thousands_of_time_wait_sockets_on_the_host_do_not_stall_the_servers_cpu_on_a_quiet_host() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", &CPU.to_string()]);
    let worker = nginx.children(1)[0];
    let (bare, watched) = bare_and_watched(worker, &["--interval", "100ms"], LONG_STALL, 2, || {
        let held = leave_time_wait(TIME_WAIT_SOCKETS);
        assert!(
            held >= TIME_WAIT_SOCKETS * 9 / 10,
            "only {held} sockets in TIME_WAIT after closing {TIME_WAIT_SOCKETS} connections first"
        );
    });
    assert!(
        watched - bare <= EXTRA_LONG_STALLS,
        "with {TIME_WAIT_SOCKETS} sockets in TIME_WAIT and srvprof probe on its CPU a sleeping \
         thread woke {LONG_STALL:?} late {watched} times in {MEASURE:?}, {bare} beside nothing \
         (allowed {EXTRA_LONG_STALLS} more): srvprof's socket readings hold the CPU"
    );
}

/// Threads the server of the next test holds, one per idle connection.
const SERVER_THREADS: usize = 2_000;
/// A stall this long is what reading every thread of it at once cost.
const THREADS_STALL: Duration = Duration::from_millis(5);

/// A server of 2,000 threads (servers/threaded, a thread per connection, holding 2,000 idle
/// connections) does not make srvprof's readings stall the CPU it shares with it, and each of
/// its threads is in the report (as /proc/PID/task lists them). A reading takes the programs'
/// thread table in batches, reads /proc again only for the threads the programs saw switch or
/// run since the last one and lists /proc/PID/task only at the first; the windows' edges read a
/// file per process and the programs' on-CPU sum. Reading a few files per thread at every
/// reading and window edge made 50-90 stalls of over 2 ms in 5 s, up to 150 ms each, and wrk's
/// p99 on the server 77-90 ms against 0.2-0.4 beside nothing (0.6-0.9 now).
#[test]
#[ignore = "holds on a quiet host only: run by cargo xtask bench stalls"]
fn a_server_of_thousands_of_threads_is_read_without_stalling_its_cpu_on_a_quiet_host() {
    require_root();
    let server = Server::start("threaded", &["--cpus", &CPU.to_string()]);
    let held: Vec<TcpStream> = (0..SERVER_THREADS)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).expect("connect"))
        .collect();
    let task = format!("/proc/{}/task", server.pid());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&task).unwrap().count() < SERVER_THREADS {
        assert!(
            std::time::Instant::now() < deadline,
            "servers/threaded started no thread per connection"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = probe_json(server.pid(), "1s", &[])
        .output()
        .expect("srvprof probe");
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe's JSON");
    let listed = |key: &str| report[key].as_array().map_or(0, Vec::len);
    let threads = std::fs::read_dir(&task).unwrap().count();
    assert_eq!(
        listed("threads") + listed("quiet_threads"),
        threads,
        "threads in the report against /proc/{}/task",
        server.pid()
    );
    let (bare, watched) = bare_and_watched(
        server.pid(),
        &["--interval", "100ms"],
        THREADS_STALL,
        2,
        || (),
    );
    drop(held);
    assert!(
        watched - bare <= EXTRA_LONG_STALLS,
        "with srvprof probe on the CPU of a server of {SERVER_THREADS} threads a sleeping thread \
         woke {THREADS_STALL:?} late {watched} times in {MEASURE:?}, {bare} beside nothing \
         (allowed {EXTRA_LONG_STALLS} more): srvprof's reading of its threads holds the CPU"
    );
}

/// Late wake-ups (beyond `stall`) of a thread sleeping 100 µs at a time on CPU, beside nothing
/// and beside `srvprof probe ARGS` on the same CPU watching `pid`, in `rounds` pairs that
/// alternate which goes first, each after `before`: the medians, bare then watched.
fn bare_and_watched(
    pid: u32,
    args: &[&str],
    stall: Duration,
    rounds: usize,
    before: impl Fn(),
) -> (i64, i64) {
    let (mut bare, mut watched) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for probe in if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            before();
            let late = if probe {
                let mut child = spawn_piped(
                    Command::new("taskset")
                        .args(["-c", &CPU.to_string()])
                        .arg(srvprof_release_bin())
                        .args(["probe", "--pid", &pid.to_string(), "-d", "8s"])
                        .args(["--format", "json"])
                        .args(args),
                );
                let _lines = wait_attached(&mut child, "watching PIDs");
                // Past the first interval's reading of every thread, as in a long run.
                std::thread::sleep(Duration::from_millis(1200));
                let late = late_wakeups(CPU, stall, MEASURE) as i64;
                let status = child.wait().expect("srvprof probe");
                assert!(status.success(), "srvprof probe: {status}");
                late
            } else {
                late_wakeups(CPU, stall, MEASURE) as i64
            };
            eprintln!(
                "round {round}, {}: {late} wake-ups late by more than {stall:?} in {MEASURE:?}",
                if probe { "srvprof probe" } else { "bare" }
            );
            if probe {
                watched.push(late);
            } else {
                bare.push(late);
            }
        }
    }
    (median(&mut bare), median(&mut watched))
}

/// Opens connections on loopback until the host holds `n` sockets in TIME_WAIT: their server
/// end closes first, so that end waits there for 60 s, on a port below the ephemeral range (none
/// holds a port connect() may pick). The server listens on a hundred ports: a SYN from a client
/// port used before to the same server port would end the TIME_WAIT socket it meets. Returns the
/// host's TIME_WAIT sockets then, as /proc/net/sockstat counts them.
fn leave_time_wait(n: u64) -> u64 {
    let missing = n.saturating_sub(time_wait_sockets());
    let listeners: Vec<TcpListener> = (20_000..32_000)
        .filter_map(|port| TcpListener::bind(("127.0.0.1", port)).ok())
        .take(100)
        .collect();
    assert!(
        !listeners.is_empty(),
        "no free port below the ephemeral range"
    );
    for i in 0..missing as usize {
        let listener = &listeners[i % listeners.len()];
        let mut c =
            TcpStream::connect(listener.local_addr().unwrap()).expect("connect on loopback");
        let (server_end, _) = listener.accept().expect("accept");
        drop(server_end);
        // The server's FIN: closed after it, this end does not wait in TIME_WAIT.
        let _ = c.read(&mut [0u8; 1]);
    }
    time_wait_sockets()
}

/// TIME_WAIT sockets in this network namespace: the `tw` of /proc/net/sockstat's TCP line.
fn time_wait_sockets() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").expect("/proc/net/sockstat");
    let line = text
        .lines()
        .find(|l| l.starts_with("TCP:"))
        .expect("a TCP line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = fields
        .iter()
        .position(|f| *f == "tw")
        .expect("tw in the TCP line");
    fields[at + 1].parse().expect("a count after tw")
}

fn median(v: &mut [i64]) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}
