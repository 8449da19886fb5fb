//! run.json is the contract: the same recorded samples and load report must give the same run.json
//! byte for byte. fixtures/run.json was written by the analysis before it became this crate
//! (srvprof 72e78fa, `srvprof::analysis::run_report::build`) from the inputs below, so a change
//! to any figure, key, finding or sentence shows here.
//!
//! The inputs are made by `inputs()`: six samples one second apart of a server that saturates a
//! thread, overflows its accept queue, resets connections, takes its NET_RX on one CPU and loses a
//! worker to SIGSEGV, in sampled mode, and a load report with a 1 s tail and an error burst.
//! fixtures/samples.json, load.json and exits.json hold them as the old code read them: at 72e78fa a
//! test deserialized them into `srvprof::sampler::Sample`s (now `Reading`), pushed them into
//! `ReadingSeries::on_grid(100 s, 1 s)` and wrote `build(..)` as fixtures/run.json
//! (`SRVPROF_WRITE_FIXTURE_INPUTS=1` rewrites the inputs from `inputs()`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use srvprof_analysis::record::{
    CountNs, CpuUse, ExitRecord, KernelCounters, Reading, TcpResetCount, ThreadCounters, WakePair,
};
use srvprof_analysis::run_report::{TargetInfo, build};
use srvprof_analysis::series::ReadingSeries;
use srvprof_analysis::with_findings;
use srvprof_common::{GROUP_CLIENT, GROUP_SERVER, hist, tcp};
use srvprof_loadgen::{LatencySummary, LoadReport, LoadRow};

const SEC: u64 = 1_000_000_000;
const START: u64 = 100 * SEC;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Reading k of 6 (k = 0..=5), due at START + k s, read 3 ms late.
fn sample(k: u64) -> Reading {
    let mut kernel = KernelCounters::empty(2);
    let t = START + k * SEC + 3_000_000;
    kernel.monotonic_ns = t;
    // Sampled mode: the programs were attached 50 ms of each second.
    kernel.traced_ns = Some(k * 50_000_000);
    let thread = |tid: u32, group: u32, comm: &str, busy: u64| ThreadCounters {
        tid,
        pid: if group == GROUP_SERVER { 10 } else { 20 },
        group,
        comm: comm.into(),
        voluntary_switches: k * 900 * busy,
        involuntary_switches: k * 40 * busy,
        oncpu_ns: k * busy * 300_000_000,
        offcpu_ns: k * (1000 - busy * 300) * 1_000_000,
        runq_ns: k * busy * 2_000_000,
        runq_count: k * 500,
        migrations: k * 3,
        syscalls: k * 200 * busy,
        syscall_ns: k * busy * 9_000_000,
        cpu_mask: 0b11,
        ..Default::default()
    };
    kernel.threads = vec![
        thread(10, GROUP_SERVER, "nginx", 3),
        thread(11, GROUP_SERVER, "nginx", 1),
        thread(20, GROUP_CLIENT, "srvprof-load", 2),
    ];
    for (g, hist_k) in [(0usize, 1u64), (1, 2)] {
        for (v, n) in [(20_000u64, 400), (900_000, 30), (3_000_000, 4)] {
            kernel.offcpu_hist[g].slots[hist::slot_of(v) as usize] += k * n * hist_k;
            kernel.runq_hist[g].slots[hist::slot_of(v / 10) as usize] += k * n;
        }
    }
    kernel.syscalls = vec![
        (
            GROUP_SERVER,
            20,
            CountNs {
                count: k * 60,
                total_ns: k * 600_000,
            },
        ),
        (
            GROUP_SERVER,
            232,
            CountNs {
                count: k * 30,
                total_ns: k * 900_000,
            },
        ),
        (
            GROUP_CLIENT,
            1,
            CountNs {
                count: k * 50,
                total_ns: k * 200_000,
            },
        ),
    ];
    kernel.wakeups = vec![WakePair {
        waker_pid: 0,
        waker_tid: 0,
        waker_comm: "swapper/1".into(),
        wakee_tid: 10,
        wakee_group: GROUP_SERVER,
        count: k * 700,
    }];
    // NET_RX (vector 3) mostly on CPU 1.
    kernel.softirqs[1][3] = CountNs {
        count: k * 400,
        total_ns: k * 800_000,
    };
    kernel.softirqs[0][3] = CountNs {
        count: k * 10,
        total_ns: k * 20_000,
    };
    kernel.hardirqs = vec![(
        9999,
        vec![
            CountNs {
                count: k * 5,
                total_ns: k * 5_000
            };
            2
        ],
    )];
    let at = |side, counter| tcp::index(side, counter) as usize;
    kernel.tcp[at(tcp::SIDE_CLIENT, tcp::SYN_RETRANSMITS)] = k * 7;
    kernel.tcp[at(tcp::SIDE_SERVER, tcp::RETRANSMITS)] = k * 2;
    kernel.tcp[at(tcp::SIDE_SERVER, tcp::RESETS_SENT)] = k * 30;
    kernel.tcp[at(tcp::SIDE_CLIENT, tcp::RESETS_RECEIVED)] = k * 30;
    kernel.tcp[at(tcp::SIDE_OTHER, tcp::RESETS_SENT)] = k;
    kernel.tcp_resets = vec![
        TcpResetCount {
            side: tcp::SIDE_SERVER,
            sent: true,
            state: "CLOSE".into(),
            reason: Some("TCP_ABORT_ON_CLOSE".into()),
            count: k * 25,
        },
        TcpResetCount {
            side: tcp::SIDE_SERVER,
            sent: true,
            state: "ESTABLISHED".into(),
            reason: Some("TCP_STATE".into()),
            count: k * 5,
        },
        TcpResetCount {
            side: tcp::SIDE_CLIENT,
            sent: false,
            state: "ESTABLISHED".into(),
            reason: None,
            count: k * 30,
        },
    ];
    kernel.lost[1] = if k >= 4 { 3 } else { 0 };
    let cpu = |pid: u32, tid: u32, group: u32, comm: &str, user: u64, sys: u64| CpuUse {
        pid,
        tid,
        group,
        comm: comm.into(),
        user_ns: k * user,
        sys_ns: k * sys,
    };
    let net_mib: BTreeMap<String, u64> = [
        ("TcpExt:ListenOverflows", 40),
        ("TcpExt:ListenDrops", 45),
        ("TcpExt:TCPSynRetrans", 8),
        ("Tcp:RetransSegs", 12),
        ("Tcp:OutRsts", 31),
        ("Tcp:EstabResets", 6),
        ("TcpExt:TCPAbortOnClose", 25),
    ]
    .into_iter()
    .map(|(name, per_s)| (name.to_string(), k * per_s))
    .collect();
    Reading {
        monotonic_ns: t,
        due_ns: Some(START + k * SEC),
        kernel,
        thread_cpu: vec![
            cpu(10, 10, GROUP_SERVER, "nginx", 400_000_000, 550_000_000),
            cpu(10, 11, GROUP_SERVER, "nginx", 100_000_000, 150_000_000),
            cpu(
                20,
                20,
                GROUP_CLIENT,
                "srvprof-load",
                300_000_000,
                200_000_000,
            ),
        ],
        process_cpu: vec![
            cpu(10, 0, GROUP_SERVER, "nginx", 500_000_000, 700_000_000),
            cpu(
                20,
                0,
                GROUP_CLIENT,
                "srvprof-load",
                300_000_000,
                200_000_000,
            ),
        ],
        net_mib,
        listen_socket_drops: Some(k * 42),
        cgroups: Vec::new(),
        time_wait: None,
        rto_us: None,
        outbound: None,
        parents: BTreeMap::new(),
        major_faults: BTreeMap::new(),
        softirq_counts: vec![
            [0, 1000, 5, k * 200, 0, 0, 0, 0, 0, 0].to_vec(),
            [0, 1000, 5, k * 8000, 0, 0, 0, 0, 0, 0].to_vec(),
        ],
        irq_names: BTreeMap::new(),
        responses: Some(k * 20_000),
        traced_responses: Some(k * 1_000),
        traced_switches: None,
        oncpu_ns: None,
        traced_oncpu_ns: None,
        io_calls: None,
        traced_io_calls: None,
        rx_packets: None,
        traced_rx_packets: None,
    }
}

fn load() -> LoadReport {
    let row = |i: u64, errors: u64, p99_us: u64| LoadRow {
        t_s: i as f64,
        completed: 20_000 - errors,
        errors,
        p50_us: 800 + i * 10,
        p99_us,
        max_us: p99_us + 100,
        throughput_rps: (20_000 - errors) as f64,
    };
    let mut load = LoadReport {
        throughput_rps: 19_800.0,
        requests: 100_000,
        completed: 99_000,
        errors: 1_200,
        duration_s: 5.0,
        latency_us: LatencySummary {
            p50: 850,
            p99: 1_020_000,
            max: 3_100_000,
            mean: 1_900.0,
            count: 99_000,
            ..Default::default()
        },
        timeline: vec![
            row(0, 0, 2_000),
            row(1, 1_100, 1_030_000),
            row(2, 40, 9_000),
            row(3, 30, 1_010_000),
            row(4, 30, 3_000),
        ],
        connections_opened: 1_200,
        idle_closed_by_server: 150,
        ..Default::default()
    };
    load.errors_by_kind.insert("reset".into(), 1_000);
    load.errors_by_kind.insert("read_timeout".into(), 200);
    load.config.connections = 1_000;
    load.config.timeout_s = 2.0;
    load.config.warmup_s = 1.0;
    load.client_cpu.max_thread_utilization = 0.5;
    load
}

fn exits() -> Vec<ExitRecord> {
    vec![ExitRecord {
        pid: 10,
        tid: 11,
        group: GROUP_SERVER,
        comm: "nginx".into(),
        exit_code: None,
        signal: Some(11),
        t_s: 3.2,
        monotonic_ns: START + 3_200_000_000,
    }]
}

/// The samples, load report and exits as fixtures/ holds them (what the old code read).
fn inputs() -> (Vec<Reading>, LoadReport, Vec<ExitRecord>) {
    ((0..=5).map(sample).collect(), load(), exits())
}

fn read<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let text = std::fs::read_to_string(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_fixture_inputs_are_what_inputs_makes() {
    let (samples, load, exits) = inputs();
    if std::env::var_os("SRVPROF_WRITE_FIXTURE_INPUTS").is_some() {
        let write = |name: &str, v: serde_json::Value| {
            std::fs::write(fixture(name), serde_json::to_string_pretty(&v).unwrap()).unwrap()
        };
        write("samples.json", serde_json::to_value(&samples).unwrap());
        write("load.json", serde_json::to_value(&load).unwrap());
        write("exits.json", serde_json::to_value(&exits).unwrap());
    }
    assert_eq!(read::<Vec<Reading>>("samples.json"), samples);
    assert_eq!(
        serde_json::to_value(read::<LoadReport>("load.json")).unwrap(),
        serde_json::to_value(&load).unwrap()
    );
    assert_eq!(read::<Vec<ExitRecord>>("exits.json"), exits);
}

/// What run.json was changed to say since fixtures/run.json was written, on purpose: keys added
/// (the end of the path `differences` prints), and why. Anything else that differs fails.
const CHANGED_ON_PURPOSE: &[(&str, &str)] = &[
    (
        ".precharged_ns",
        "added: the part of the scheduler's CPU charge before a thread's switch-ins",
    ),
    (
        ".runq_preempted_ns",
        "added: a thread's run-queue waits that began with a preemption, mid-run",
    ),
    (".runq_preempted_waits", "added: how many of those"),
    (
        ".run_walls",
        "added: each side's runs by the wall clock, their waits after preemptions included",
    ),
    (
        ".runq_preempted",
        "added: each side's run-queue waits that began with a preemption",
    ),
    (
        ".oncpu_ticks",
        "added: where the on-CPU sampler's late ticks went (taken at a switch-out, not theirs, skipped)",
    ),
    (
        ".oncpu_untimed_samples",
        "added: each side's on-CPU samples the user-stack ring had no room for, kept without a time",
    ),
    (
        ".oncpu_runs",
        "added: each side's on-CPU runs, a thread's CPU from a wakeup to its next sleep",
    ),
    (".load.config.protocol", "added: http/1.1, h2 or h2c"),
    (
        ".client_cpu.voluntary_switches",
        "added: the load threads' own context switches, by getrusage",
    ),
    (
        ".client_cpu.involuntary_switches",
        "added: the same, preempted",
    ),
    (
        ".load.tls",
        "added: the TLS handshakes of an https run (null for http)",
    ),
    (
        ".syn_cookies_sent",
        "added: the host's SYN cookies in the window (TcpExt:SyncookiesSent)",
    ),
    (
        ".pauses",
        "added: stop-the-world pauses of each side's Go and Java processes",
    ),
    (
        ".memory",
        "added: major faults, their waits and reclaim of each side's threads",
    ),
    (
        ".locks",
        "added: the futex words several threads waited on, with their holders",
    ),
    (
        ".lost_events.lock_waits_map_full",
        "added: lock waits the kernel's map had no room for",
    ),
    (
        ".lost_events.send_held_map_full",
        "added: answers held unsent the kernel's map had no room for",
    ),
    (
        ".lost_events.outbound_map_full",
        "added: outbound connections the kernel's maps had no room for",
    ),
    (
        ".lost_events.accept_map_full",
        "added: new connections' waits to be taken the kernel's maps had no room for",
    ),
    (
        ".tail_share",
        "added: the share of p99 each finding's cause explains, which ranks them",
    ),
    (
        ".evidence.tail_ms",
        "added: the time a finding's cause adds to a request in the tail",
    ),
    (
        ".correlations[0].p_value",
        "added: the permutation test's chance that the correlation is a coincidence",
    ),
    (
        ".scaled_by",
        "added: what each side's sampled syscall counts were scaled by",
    ),
    (
        ".syscalls_error",
        "added: the sampled syscall totals' 95 % uncertainty",
    ),
    (
        ".syscall_time_error",
        "added: the sampled syscall time's 95 % uncertainty",
    ),
    (
        ".count_error",
        "added: each sampled syscall count's 95 % uncertainty",
    ),
    (
        ".time_error",
        "added: each sampled syscall's and interrupt row's time's 95 % uncertainty",
    ),
    (
        ".stacks",
        "added: how well the stacks were unwound, per group and kind",
    ),
    (
        ".cpu_limits",
        "added: the CPU quotas over each side's processes, and their throttling",
    ),
    (
        ".throttled_periods",
        "added: per interval, periods in which a CPU quota ran out",
    ),
    (
        ".throttled_ms",
        "added: per interval, time a CPU quota held the side's tasks back",
    ),
    (
        ".runq_holders",
        "added: who held the CPU when each side's waits for one ended",
    ),
    (
        ".runq_holders_map_full",
        "added: waits whose CPU holder found the holders' map full",
    ),
    (
        ".disk_waits",
        "added: each side's uninterruptible sleeps by syscall and file",
    ),
    (
        ".disk_waits_map_full",
        "added: sleeps whose (process, syscall, fd) found the disk waits' map full",
    ),
    (
        ".time_wait_at_start",
        "added: sockets in TIME_WAIT when the window opened",
    ),
    (
        ".time_wait_at_end",
        "added: sockets in TIME_WAIT when the window closed",
    ),
    (
        ".rto_ms",
        "added: the retransmission timeout of the connections on the server's port",
    ),
    (
        ".outbound",
        "added: the server's connections to its dependencies",
    ),
    (
        ".quiet_threads",
        "added: the threads that did nothing in the window, by name",
    ),
    (
        ".wakers",
        "added: every waker of each side's threads, by name (a pipe's other end, a pool's feeder)",
    ),
    (".parents", "added: each watched process's parent"),
    (
        ".syscalls_missed",
        "added: busy, but no window caught it, so its syscalls are unknown",
    ),
];

/// Values that changed on purpose (the key stays, its figure is now computed differently).
const VALUES_CHANGED_ON_PURPOSE: &[(&str, &str)] = &[
    (
        "hardirqs[",
        "the hardirq programs stay attached in sampled mode too, so the inputs' \
         probe counts (25 an interval) are reported rather than /proc/interrupts' (500)",
    ),
    ("hardirqs_per_s[", "the same, per second of each interval"),
    (
        "notes[1]",
        "the sampling note names softirq times as the estimated ones, hardirqs traced \
         all along, and the share of the work the windows saw (they are placed where the server \
         is busy)",
    ),
];

/// Findings of kinds added since fixtures/run.json was written that these inputs make, on
/// purpose, and why; they are taken out of the run before it is compared.
const FINDINGS_ADDED_ON_PURPOSE: &[(&str, &str)] = &[(
    "worker_imbalance",
    "added: the inputs' two nginx threads split their CPU 79/21 with the busy one at 95 %",
)];

#[test]
fn run_json_is_what_the_analysis_wrote_before_it_was_a_crate() {
    let (samples, load, exits) = inputs();
    let mut series = ReadingSeries::on_grid(START, std::time::Duration::from_secs(1));
    for s in samples {
        series.push(s);
    }
    let target = TargetInfo {
        pids: vec![10],
        url: "http://127.0.0.1:8080/".into(),
        cmd: None,
    };
    let run = with_findings(build(
        target,
        load,
        &series,
        &exits,
        vec!["a note".into()],
        Default::default(),
    ));
    let mut got = serde_json::to_value(&run).unwrap();
    if let Some(findings) = got["findings"].as_array_mut() {
        findings.retain(|f| {
            !FINDINGS_ADDED_ON_PURPOSE
                .iter()
                .any(|(kind, _)| f["kind"] == *kind)
        });
    }
    let want: serde_json::Value = read("run.json");
    let mut changed = Vec::new();
    differences(&want, &got, String::new(), &mut changed);
    changed.retain(|d| {
        let path = d.split(':').next().unwrap_or_default();
        !CHANGED_ON_PURPOSE
            .iter()
            .any(|(key, _)| path.ends_with(key))
            && !VALUES_CHANGED_ON_PURPOSE
                .iter()
                .any(|(key, _)| path.contains(key) && !d.ends_with("(key added or removed)"))
    });
    assert!(
        changed.is_empty(),
        "run.json changed (was -> now): {changed:#?}; if on purpose, say so and rewrite fixtures/run.json"
    );
    // The inputs make the findings worth guarding.
    let kinds: Vec<&str> = run.findings.iter().map(|f| f.kind.name()).collect();
    for kind in [
        "target_died",
        "server_resets",
        "syn_retransmit_tail",
        "error_burst",
    ] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
}

/// Every path where `now` differs from `was`, with both values.
fn differences(
    was: &serde_json::Value,
    now: &serde_json::Value,
    path: String,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (was, now) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                if !a.contains_key(k) || !b.contains_key(k) {
                    out.push(format!("{path}.{k}: {x} -> {y} (key added or removed)"));
                } else {
                    differences(x, y, format!("{path}.{k}"), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, format!("{path}[{i}]"), out);
            }
        }
        // serde_json reads floats to within one ulp (no float_roundtrip): the same figure.
        (Value::Number(a), Value::Number(b))
            if a.as_f64()
                .zip(b.as_f64())
                .is_some_and(|(a, b)| (a - b).abs() <= 1e-12 * a.abs().max(b.abs())) => {}
        _ if was != now => out.push(format!("{path}: {was} -> {now}")),
        _ => {}
    }
}
