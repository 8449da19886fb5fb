//! srvprof against libbpf-tools: one nginx worker under load, watched at once by
//! `srvprof probe` and by syscount, runqlat, softirqs and hardirqs over the same seconds, beside the
//! kernel's own counters (/proc/PID/status, /proc/softirqs, /proc/interrupts). See
//! support/side_by_side.rs for the order of events: srvprof attaches first and its window holds
//! every tool's, so no tool's bookkeeping lies between the two tools' stamps on a tracepoint.
//!
//! `--exact` must agree with them to the event where both count the same events, and within the
//! margins measured below where the tools' windows or their own probes differ. The default
//! (sampled) mode is measured against the same tools and printed, not asserted yet.
//!
//! Every comparison prints its figures to stderr (`--nocapture` shows them).

use srvprof_common::hist::{slot_lower_bound, slot_of};
use srvprof_integration::libbpf_tools::{Log2Bucket, log2_quantile_bucket, log2_rank_buckets};
use srvprof_integration::side_by_side::{Observed, Shape, observe};

#[test]
fn exact_mode_agrees_with_libbpf_tools_under_steady_load() {
    let o = observe(Shape::Steady, true);
    assert_exact_agreement("exact, steady", &o);
}

#[test]
fn exact_mode_agrees_with_libbpf_tools_under_bursty_load() {
    let o = observe(Shape::Bursty, true);
    assert!(o.load.bursts.len() >= 5, "only {:?}", o.load.bursts);
    assert_exact_agreement("exact, bursty", &o);
}

/// The default (sampled) mode against the same tools. Without a load generator its syscall
/// counts are scaled by the server's read/write calls, which the kernel counts exactly per task
/// (/proc/PID/task/TID/io), in one window per interval, placed where those calls rise
/// (window_placement). It aims at 10 % bursty and 3 % steady; this asserts, with room for a
/// busy machine:
/// - a busy server never reads zero syscalls without saying so: either the windows caught it and
///   the total is above zero, or the report marks the figures unknown (`syscalls_missed`);
/// - no interrupt row reads a time of zero without saying it is unknown (`time_unknown`);
/// - the busiest syscall's count and time state their uncertainty when the total does;
/// - under steady load the total lands within STEADY_BOUND of syscount's (measured 0.941-1.014
///   over 24 runs, 0.949-1.022 with blind windows in earlier versions; 0.82-1.09 when scaled by
///   time): short of the 3 % aimed at, as epoll_wait's calls per request change while traced;
/// - under bursty load no interval in which the worker was on a CPU 2 % of the time or more
///   (the kernel's accounting) reads zero syscalls;
/// - under bursty load the windows catch the bursts and the total lands within BURSTY_BOUND,
///   every run (measured 0.952-1.034 over 23 runs with the windows placed by activity; 0.980-1.163
///   with blind windows, one run in five of which missed every burst);
/// - under bursty load the syscalls' summed time lands within BURSTY_TIME_BOUND: the worker
///   spends most of it asleep in epoll_wait, which the scheduler programs count exactly all
///   along (measured 0.993-1.010 over 15 runs);
/// - NET_RX time is timed per packet and lands within STEADY_NET_RX_BOUND of softirqs' under
///   steady load (1.022-1.087 over 24 runs: the windows read a few percent high; 1.034-1.036 in 2
///   runs on a CPU where `--exact` reads -3 to +6 ns of softirqs per event). Here srvprof's
///   programs are attached anew for each window, after softirqs', so softirqs' bookkeeping after
///   its stamps lies in srvprof's interval (-77 to +54 ns of 1.6-2.4 µs per event, measured on
///   two machines of this kind: up to ±4 %, inside the bound's room) and within
///   BURSTY_NET_RX_BOUND under bursty load (0.932-1.133 over 23 runs, stating up to ±44 % on one
///   CPU; a variant that counted packets over the softirq programs' own span read up to 1.289 in
///   2 of 18: the 10 % aimed at is not met there every time, and this bound is the guard against
///   blind windows' 1.459 and a missed burst); either bound widens to the uncertainty srvprof
///   states for the total (its rows' jackknife errors, plus 5 % for softirqs' bookkeeping): a
///   fresh machine read 1.163 in steady load, stating ±25 % and ±8 % on its two CPUs;
/// - hardirqs are counted as in `--exact` (their programs stay attached in both modes): the same
///   bounds against hardirqs -C as there.
#[test]
fn default_mode_against_libbpf_tools_is_measured_on_steady_and_bursty_load() {
    const STEADY_BOUND: (f64, f64) = (0.92, 1.05);
    const BURSTY_BOUND: (f64, f64) = (0.90, 1.10);
    const BURSTY_TIME_BOUND: (f64, f64) = (0.90, 1.10);
    const STEADY_NET_RX_BOUND: (f64, f64) = (0.90, 1.15);
    const BURSTY_NET_RX_BOUND: (f64, f64) = (0.85, 1.25);
    for (label, shape) in [
        ("default, steady", Shape::Steady),
        ("default, bursty", Shape::Bursty),
    ] {
        let o = observe(shape, false);
        print_default_mode_ratios(label, &o);
        hardirqs_agree(label, &o);
        let total = o.probe["totals"]["syscalls"].as_u64().unwrap();
        let tool_total: u64 = o.syscount.values().map(|s| s.count).sum();
        let missed = o.probe["syscalls_missed"].as_bool().unwrap_or(false);
        assert!(
            tool_total < 1000 || total > 0 || missed,
            "{label}: syscount saw {tool_total} syscalls, srvprof reported 0 and did not say it missed them"
        );
        if missed {
            let notes = o.probe["notes"].to_string();
            assert!(notes.contains("unknown, not zero"), "{label}: {notes}");
        }
        for row in o.probe["softirqs"].as_array().expect("softirqs[]") {
            assert!(
                row["total_ns"].as_u64() > Some(0) || row["time_unknown"] == true,
                "{label}: a softirq row reads no time without saying it is unknown: {row}"
            );
        }
        // Every estimate says how closely it is known: with the total's uncertainty stated, the
        // busiest syscall's count and time state theirs.
        if o.probe["syscalls_error"].is_f64() {
            let top = &o.probe["syscalls"][0];
            assert!(
                top["count_error"].is_f64() && top["time_error"].is_f64(),
                "{label}: the busiest syscall states no uncertainty: {top}"
            );
        }
        // NET_RX time per packet (the kernel's packet count, /proc/net/softnet_stat) against
        // softirqs' time over the same events.
        {
            let rows = o.probe_softirq_rows("NET_RX");
            assert!(
                !rows.is_empty() && rows.iter().all(|r| r["timed_per_packet"] == true),
                "{label}: NET_RX rows not timed per packet: {rows:?}"
            );
            let (count, ns) = o.probe_softirq("NET_RX");
            let tool = tool_net_rx_ns_in_window(&o, count);
            let bound = match shape {
                Shape::Steady => STEADY_NET_RX_BOUND,
                Shape::Bursty => BURSTY_NET_RX_BOUND,
            };
            assert_ratio(
                label,
                "NET_RX time",
                ns as f64,
                tool,
                widened_by_stated(bound, &rows),
            );
        }
        if let Shape::Bursty = shape {
            // No interval in which the worker was busy reads zero syscalls. Busy by the kernel's
            // own CPU accounting (/proc/PID/task/TID/stat): a 60 ms burst keeps the worker on a
            // CPU for a few percent of its second.
            let mut busy = 0;
            for row in o.probe["intervals"].as_array().expect("intervals[]") {
                let cpu = row["user_pct"].as_f64().unwrap_or(0.0)
                    + row["sys_pct"].as_f64().unwrap_or(0.0);
                if cpu >= 2.0 {
                    busy += 1;
                    assert!(
                        row["syscalls_per_s"].as_f64() > Some(0.0),
                        "{label}: an interval with the worker {cpu:.0} % on a CPU reads no syscalls: {row}"
                    );
                }
            }
            eprintln!("{label}: {busy} busy intervals, none reads zero syscalls");
            assert!(
                busy >= 3,
                "{label}: only {busy} intervals with bursts in them"
            );
            assert!(
                !missed,
                "{label}: no window caught any burst: {}",
                o.probe["notes"]
            );
            let ns: u64 = o.probe_syscalls().values().map(|(_, ns)| ns).sum();
            let tool_ns: f64 = o.syscount.values().map(|s| s.total_ns).sum();
            assert_ratio(label, "syscall time", ns as f64, tool_ns, BURSTY_TIME_BOUND);
        }
        let ratio = total as f64 / tool_total as f64;
        let bound = match shape {
            Shape::Steady => STEADY_BOUND,
            Shape::Bursty => BURSTY_BOUND,
        };
        assert!(
            missed || (bound.0..=bound.1).contains(&ratio),
            "{label}: {total} syscalls against syscount's {tool_total} ({ratio:.3}, allowed {bound:?}), scaled by {}",
            o.probe["scaled_by"]
        );
    }
}

/// The bound, or wider where srvprof states a wider uncertainty for the rows' total time: their
/// stated 95 % uncertainties combined as independent (each CPU's windows are its own), plus
/// NET_RX_BOOKKEEPING. How much NET_RX time a packet costs varies with what else runs on the CPU
/// (a neighbour, a busy host), and the windows measure that spread: the figure must hold within
/// what the run itself says of it, on any machine.
fn widened_by_stated(bound: (f64, f64), rows: &[&serde_json::Value]) -> (f64, f64) {
    let total: f64 = rows.iter().filter_map(|r| r["total_ns"].as_f64()).sum();
    let errors: Option<Vec<f64>> = (rows.iter())
        .map(|r| Some(r["total_ns"].as_f64()? * r["time_error"].as_f64()?))
        .collect();
    let Some(errors) = errors.filter(|_| total > 0.0) else {
        return bound;
    };
    let stated = errors.iter().map(|e| e * e).sum::<f64>().sqrt() / total;
    let room = stated + NET_RX_BOOKKEEPING;
    eprintln!(
        "NET_RX: srvprof states ±{:.1} % for its total",
        stated * 100.0
    );
    (bound.0.min(1.0 - room), bound.1.max(1.0 + room))
}

/// softirqs' bookkeeping after its stamps, inside srvprof's windows: up to ±4 % of a packet's
/// NET_RX time measured on two machines of this kind (see the default-mode test).
const NET_RX_BOOKKEEPING: f64 = 0.05;

/// softirqs' NET_RX time (ns) scaled to srvprof's window by the kernel's event counts: srvprof
/// saw `count` of them in its window.
fn tool_net_rx_ns_in_window(o: &Observed, count: u64) -> f64 {
    let (_, tools_window) = o.kernel.before_tools.until(&o.kernel.after_tools);
    let tool_net_rx = o.softirqs_ns.get("net_rx").copied().unwrap_or(0) as f64;
    tool_net_rx * count as f64 / tools_window as f64
}

/// srvprof's time (ns) against a tool's, their ratio within `bound`.
fn assert_ratio(label: &str, what: &str, srvprof_ns: f64, tool_ns: f64, bound: (f64, f64)) {
    let ratio = srvprof_ns / tool_ns;
    assert!(
        (bound.0..=bound.1).contains(&ratio),
        "{label}: {what} {:.1} ms against the tool's {:.1} ms ({ratio:.3}, allowed {bound:?})",
        srvprof_ns / 1e6,
        tool_ns / 1e6
    );
}

fn assert_exact_agreement(label: &str, o: &Observed) {
    eprintln!(
        "{label}: {} requests in {} burst(s) of {:?} ms, seed {}; srvprof watched {:.2} s longer than the tools traced",
        o.load.requests,
        o.load.bursts.len(),
        o.load
            .bursts
            .iter()
            .map(|(_, len)| len.as_millis())
            .collect::<Vec<_>>(),
        o.seed,
        o.extra_probe_time.as_secs_f64()
    );
    assert!(
        o.probe["traced_fraction"].is_null(),
        "--exact reports no traced fraction"
    );
    syscalls_agree(label, o);
    runq_waits_agree(label, o);
    switches_agree(label, o);
    net_rx_agrees(label, o);
    hardirqs_agree(label, o);
}

/// syscount -L -p WORKER counts a syscall when it returns, if it saw it enter. srvprof counts every
/// return in its window. The worker is idle outside the load, blocked in one epoll_wait that it
/// entered before syscount attached: syscount never counts that one call, srvprof counts it on its
/// return. So the counts must be equal name by name, except epoll_wait, where srvprof may count
/// that one call more (it did, and nothing else differed, in each of 42 runs, 21 per shape).
///
/// Times cannot be equal: both stamp on the same tracepoints, each inside its own program, srvprof's
/// first (see [`SYSCALL_NS_PER_CALL`]).
fn syscalls_agree(label: &str, o: &Observed) {
    let srvprof = o.probe_syscalls();
    let total: u64 = o.probe["totals"]["syscalls"].as_u64().unwrap();
    let tool_total: u64 = o.syscount.values().map(|s| s.count).sum();
    let ns: u64 = srvprof.values().map(|(_, ns)| ns).sum();
    let tool_ns: f64 = o.syscount.values().map(|s| s.total_ns).sum();
    let per_call_ns = (tool_ns - ns as f64) / total.max(1) as f64;
    eprintln!(
        "{label}: syscalls srvprof {total} syscount {tool_total} (ratio {:.6}); time {:.1} ms vs {:.1} ms (ratio {:.4}, syscount {per_call_ns:+.0} ns per call)",
        total as f64 / tool_total as f64,
        ns as f64 / 1e6,
        tool_ns / 1e6,
        ns as f64 / tool_ns
    );
    assert_eq!(
        srvprof.values().map(|(count, _)| count).sum::<u64>(),
        total,
        "syscalls[] adds up to totals.syscalls"
    );
    assert!(
        total >= tool_total && total - tool_total <= 1,
        "srvprof counted {total} syscalls, syscount {tool_total}"
    );
    assert_per_call_gap("all syscalls", per_call_ns);
    let names: std::collections::BTreeSet<&String> =
        srvprof.keys().chain(o.syscount.keys()).collect();
    for name in names {
        let (count, ns) = srvprof.get(name).copied().unwrap_or((0, 0));
        let tool = o.syscount.get(name).copied().unwrap_or_default();
        let per_call_ns = (tool.total_ns - ns as f64) / count.max(1) as f64;
        eprintln!(
            "{label}:   {name}: count {count} vs {}, time {:.3} ms vs {:.3} ms (ratio {:.4}, syscount {per_call_ns:+.0} ns per call)",
            tool.count,
            ns as f64 / 1e6,
            tool.total_ns / 1e6,
            ns as f64 / tool.total_ns
        );
        let edge = u64::from(name == "epoll_wait");
        assert!(
            count >= tool.count && count - tool.count <= edge,
            "{name}: srvprof counted {count}, syscount {}",
            tool.count
        );
        // epoll_wait blocks for the idle time between bursts: one call the two tools time
        // differently at an edge moves its per-call gap by hundreds of ns over ~3,000 calls
        // (CI read +404 and a rerun -28, against +197 to +211 otherwise); its gap is asserted
        // once there are enough calls to dilute that, and it is in the total's gap either way.
        let enough = if edge == 1 { 10_000 } else { 1000 };
        if count >= enough {
            assert_per_call_gap(name, per_call_ns);
        } else if count >= 1000 {
            // Fewer calls, each a long wait: the two tools' times agree to 0.2 % (0.9996-1.0000
            // in 4 bursty runs, the +404 ns one included).
            assert_ratio(label, name, ns as f64, tool.total_ns, (0.998, 1.002));
        }
    }
}

/// How much longer (first) or shorter (second) syscount may time a call than srvprof, in ns.
///
/// srvprof's programs run first on sys_enter and sys_exit (attached first). So srvprof's interval
/// holds the gap between the two entry stamps: one dispatch and syscount's pid filter. syscount's
/// holds the gap between the two exit stamps: one dispatch, what srvprof does after its stamp
/// (a few stores to the thread's slot and a per-CPU table) and what syscount does before its own:
/// its pid filter and up to two hash-map lookups (its start and its per-syscall entry). The
/// dispatch cancels, so syscount may read longer by about two hash lookups and a few stores (well
/// under 200 ns even when each lookup misses the cache) and shorter by no more than its pid
/// filter (100 ns leaves room for a cache miss). Measured here: -14 to +11 ns per call over all
/// names, -43 to +65 ns for single names with 1000 calls or more (3 steady and 2 bursty runs).
/// In the other order, syscount's entry hash update sat in its interval: +95 to +232 ns per call.
const SYSCALL_NS_PER_CALL: (f64, f64) = (200.0, 100.0);

fn assert_per_call_gap(name: &str, per_call_ns: f64) {
    assert!(
        (-SYSCALL_NS_PER_CALL.1..=SYSCALL_NS_PER_CALL.0).contains(&per_call_ns),
        "{name}: syscount timed {per_call_ns:+.0} ns per call more than srvprof, \
         outside -{}..+{} ns",
        SYSCALL_NS_PER_CALL.1,
        SYSCALL_NS_PER_CALL.0
    );
}

/// runqlat -p WORKER and srvprof time a run-queue wait the same way (wakeup or preemption to
/// switch-in); the worker has none in flight at either edge. The counts must be equal (they were
/// in 42 of 42 runs: 224-758 waits bursty, 1,787-6,150 steady); the
/// quantiles srvprof reports (the upper bound of a log-linear slot) must lie in the log2 bucket
/// runqlat has for the same rank, give or take 1 µs for the two probes' stamps and runqlat's
/// truncation to whole µs, and RUNQLAT_LATER_NS more below it: srvprof's programs, attached
/// first, stamp the switch-in before the rest of srvprof's work on sched_switch runs, and
/// runqlat's after it.
fn runq_waits_agree(label: &str, o: &Observed) {
    let runq = &o.probe["runq_latency_us"];
    let count = runq["count"].as_u64().unwrap();
    let tool_count: u64 = o.runqlat.iter().map(|b| b.count).sum();
    eprintln!("{label}: run-queue waits srvprof {count} runqlat {tool_count}; srvprof {runq}");
    assert!(count > 100, "too few run-queue waits to compare: {count}");
    assert_eq!(count, tool_count, "run-queue waits: srvprof vs runqlat");
    for (key, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        let value_ns = (runq[key].as_f64().unwrap() * 1e3).round() as u64;
        let slot = (slot_lower_bound(slot_of(value_ns)), value_ns);
        // One wait the two tools timed on either side of a bucket's edge moves a tail
        // quantile of a few hundred waits by one rank (CI: 235 waits, runqlat's 233rd in
        // 64..127 us, srvprof's in 41..49 us, every count equal): q's rank, give or take one.
        let buckets = log2_rank_buckets(&o.runqlat, q, 1);
        let bucket = log2_quantile_bucket(&o.runqlat, q).unwrap();
        eprintln!(
            "{label}:   {key}: srvprof slot {:.3}..{:.3} µs, runqlat bucket {}..{} µs",
            slot.0 as f64 / 1e3,
            slot.1 as f64 / 1e3,
            bucket.lo_us,
            bucket.hi_us
        );
        assert!(
            buckets
                .iter()
                .any(|b| overlaps(slot, *b, 1_000 + RUNQLAT_LATER_NS, 1_000)),
            "run-queue {key}: srvprof's slot {slot:?} ns is outside runqlat's buckets {buckets:?} (ranks around q's)"
        );
    }
}

/// srvprof's work on sched_switch after its stamp and before runqlat's: the rest of the
/// scheduler program and the off-CPU stacks' program (932-3,500 ns a run measured,
/// docs/benchmarks.md). A p90 of 223 waits at 24.6-28.7 µs stood against runqlat's 32-63 µs
/// bucket in one fresh-clone run of the suite.
const RUNQLAT_LATER_NS: u64 = 4_000;

/// Whether [lo, hi] ns meets runqlat's bucket (LO..HI whole µs, i.e. [LO, HI + 1) µs) widened by
/// `below_ns` under it and `above_ns` over it.
fn overlaps((lo, hi): (u64, u64), b: Log2Bucket, below_ns: u64, above_ns: u64) -> bool {
    let b_lo = (b.lo_us * 1000).saturating_sub(below_ns);
    let b_hi = (b.hi_us + 1) * 1000 + above_ns;
    lo < b_hi && hi >= b_lo
}

/// The kernel's own nvcsw/nivcsw: srvprof counts every sched_switch of the worker, and the worker
/// does not switch while idle (before the load, after it).
fn switches_agree(label: &str, o: &Observed) {
    let w = o.probe_worker();
    let srvprof = (
        w["voluntary_switches"].as_u64().unwrap(),
        w["involuntary_switches"].as_u64().unwrap(),
    );
    eprintln!(
        "{label}: switches (voluntary, involuntary) srvprof {srvprof:?} /proc {:?}",
        o.proc_switches
    );
    assert_eq!(
        srvprof, o.proc_switches,
        "switches: srvprof vs /proc/PID/status"
    );
}

/// /proc/softirqs may count a few NET_RX runs that no program sees. Measured: inside srvprof's
/// window it counted 1-9 more than srvprof under steady load (of 400,000-900,000) and 0-3 more
/// under bursty load, while a second `softirqs -d` beside it counted exactly srvprof's number each
/// time it was run (422,315 = 422,315; 423,820 = 423,820; 80,640; 60,480; 70,560): the
/// softirq_entry tracepoint does not report every run the kernel counts. So srvprof may trail the
/// kernel by this share of its count, plus this many.
const NET_RX_UNTRACED: (f64, u64) = (5e-5, 2);

/// NET_RX is system-wide. Its count: srvprof's programs against the kernel's /proc/softirqs, read
/// from before srvprof started to after it exited (its window is inside) and from its "watching"
/// line to just before its last sample (inside its window). Its time: softirqs -N traced inside
/// srvprof's window, so both are compared per event, softirqs' over the kernel's count for its
/// window, as a difference in ns (see [`NET_RX_NS_PER_EVENT`]).
fn net_rx_agrees(label: &str, o: &Observed) {
    let (count, ns) = o.probe_softirq("NET_RX");
    let k = &o.kernel;
    let (_, inner) = k.probe_watching.until(&k.probe_nearly_done);
    let (_, outer) = k.probe_spawn.until(&k.probe_exit);
    let (_, tools_window) = k.before_tools.until(&k.after_tools);
    let (_, tools_inner) = k.tools_ready.until(&k.tools_stopping);
    let tool_ns = o.softirqs_ns.get("net_rx").copied().unwrap_or(0);
    let per_event = ns as f64 / count as f64;
    let tool_per_event = tool_ns as f64 / tools_window as f64;
    let gap = per_event - tool_per_event;
    // The share of srvprof's events that softirqs did not trace (the machine's background while
    // the tools attached and stopped; well under 1 % on a quiet machine): they enter srvprof's
    // mean, not softirqs'. If they cost up to 4 times the load's, they move srvprof's mean by up
    // to 3 times their share of it.
    let foreign = outer.saturating_sub(tools_inner) as f64 / count as f64;
    let allowance = 3.0 * foreign * tool_per_event;
    let (lo, hi) = (
        -NET_RX_NS_PER_EVENT - allowance,
        NET_RX_NS_PER_EVENT + allowance,
    );
    eprintln!(
        "{label}: NET_RX srvprof {count} events in {:.1} ms ({per_event:.1} ns each); /proc/softirqs {inner} inside its window, {outer} around it; softirqs {:.1} ms over {tools_window} events ({tool_per_event:.1} ns each); srvprof {gap:+.1} ns per event (ratio {:.4}; bounds {lo:+.1}..{hi:+.1} ns, {:.2} % of srvprof's events outside softirqs' window)",
        ns as f64 / 1e6,
        tool_ns as f64 / 1e6,
        per_event / tool_per_event,
        foreign * 100.0
    );
    assert!(
        count <= outer
            && count + (inner as f64 * NET_RX_UNTRACED.0) as u64 + NET_RX_UNTRACED.1 >= inner,
        "srvprof counted {count} NET_RX softirqs; the kernel {inner} inside its window, {outer} around it"
    );
    assert!(
        (lo..=hi).contains(&gap),
        "NET_RX time per event: srvprof {per_event:.1} ns, softirqs {tool_per_event:.1} ns: {gap:+.1} ns, outside {lo:+.1}..{hi:+.1} ns"
    );
}

/// How far srvprof's NET_RX time per event may lie from softirqs', in ns, either way.
///
/// Both stamp on softirq_entry and softirq_exit, srvprof's programs first (attached first), so
/// srvprof's interval holds the gap between the two entry stamps and softirqs' the gap between
/// the two exit stamps. Each gap is one dispatch from one program to the next plus a few
/// instructions on per-CPU data, no map update and no atomic: srvprof's store of its start (entry)
/// or its sum (exit), softirqs' filter check and, at exit, its per-CPU start lookup. The dispatch
/// is in both and cancels; the instructions differ by a few ns. Measured +1 to +3 ns (6 runs);
/// in the other order the gap held softirqs' hash update and atomic adds and read -70 to -77 ns
/// here and +54 ns on another machine of this kind (docs/benchmarks.md, "Two tools on one
/// tracepoint"). 25 ns is some 40 cycles of a 2 GHz CPU: more than those instructions take.
const NET_RX_NS_PER_EVENT: f64 = 25.0;

/// hardirqs -C counts handler invocations system-wide over a window inside srvprof's, on the same
/// tracepoint: hardirqs <= srvprof, name by name. What srvprof counted beyond hardirqs must lie
/// outside hardirqs' window: at most what the kernel's /proc/interrupts counted over srvprof's
/// window less what it counted inside the tools'. (Neither is held to the kernel's own count: in 3
/// of 42 runs, and 2 of 12 earlier ones, /proc/interrupts counted 1-3 virtio3-tx interrupts that
/// neither srvprof nor hardirqs saw.)
fn hardirqs_agree(label: &str, o: &Observed) {
    let srvprof = o.probe_hardirqs();
    let k = &o.kernel;
    let (outer, _) = k.probe_spawn.until(&k.probe_exit);
    let (tools_inner, _) = k.tools_ready.until(&k.tools_stopping);
    let names: std::collections::BTreeSet<&String> =
        srvprof.keys().chain(o.hardirqs.keys()).collect();
    for name in names {
        let get = |m: &std::collections::BTreeMap<String, u64>| m.get(name).copied().unwrap_or(0);
        let (n, tool) = (get(&srvprof), get(&o.hardirqs));
        let (k_outer, k_inner) = (get(&outer), get(&tools_inner));
        eprintln!(
            "{label}: hardirq {name}: srvprof {n}, hardirqs {tool}; /proc/interrupts {k_inner} inside the tools' window, {k_outer} over srvprof's"
        );
        assert!(tool <= n, "{name}: hardirqs {tool}, srvprof {n}");
        assert!(
            n - tool <= k_outer.saturating_sub(k_inner),
            "{name}: srvprof counted {} more than hardirqs, but the kernel only {} outside the tools' window ({k_outer} over srvprof's, {k_inner} inside the tools')",
            n - tool,
            k_outer.saturating_sub(k_inner)
        );
    }
}

/// Default mode against the same tools: the ratios, printed (the test above asserts its bounds).
fn print_default_mode_ratios(label: &str, o: &Observed) {
    let srvprof = o.probe_syscalls();
    let total = o.probe["totals"]["syscalls"].as_u64().unwrap();
    let tool_total: u64 = o.syscount.values().map(|s| s.count).sum();
    let ns: u64 = srvprof.values().map(|(_, ns)| ns).sum();
    let tool_ns: f64 = o.syscount.values().map(|s| s.total_ns).sum();
    let (net_rx_count, net_rx_ns) = o.probe_softirq("NET_RX");
    let tool_net_rx_in_window = tool_net_rx_ns_in_window(o, net_rx_count);
    eprintln!(
        "{label}: traced_fraction {}, traced_share {} (scaled by {}), {} requests in {} burst(s) at {:?} (start+length), seed {}",
        o.probe["traced_fraction"],
        o.probe["traced_share"],
        o.probe["scaled_by"],
        o.load.requests,
        o.load.bursts.len(),
        o.load
            .bursts
            .iter()
            .map(|(at, len)| format!("{:.2}s+{}ms", at.as_secs_f64(), len.as_millis()))
            .collect::<Vec<_>>(),
        o.seed
    );
    eprintln!(
        "{label}: RATIO syscalls {:.3} ({total} / {tool_total}, stated {}); syscall time {:.3} ({:.1} / {:.1} ms); NET_RX time {:.3} ({:.1} / {:.1} ms, stated per CPU {})",
        total as f64 / tool_total as f64,
        o.probe["syscalls_error"]
            .as_f64()
            .map_or("±?".to_string(), |e| format!("±{:.0} %", e * 100.0)),
        ns as f64 / tool_ns,
        ns as f64 / 1e6,
        tool_ns / 1e6,
        net_rx_ns as f64 / tool_net_rx_in_window,
        net_rx_ns as f64 / 1e6,
        tool_net_rx_in_window / 1e6,
        o.probe_softirq_rows("NET_RX")
            .into_iter()
            .map(|s| format!(
                "{}{}",
                s["time_error"]
                    .as_f64()
                    .map_or("±?".to_string(), |e| format!("±{:.0} %", e * 100.0)),
                if s["timed_per_packet"] == true {
                    " per packet"
                } else {
                    " per softirq"
                }
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut top: Vec<_> = o.syscount.iter().collect();
    top.sort_by_key(|(_, s)| std::cmp::Reverse(s.count));
    for (name, tool) in top.into_iter().take(5) {
        let (count, ns) = srvprof.get(name).copied().unwrap_or((0, 0));
        let row = o.probe["syscalls"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["name"] == name.as_str()));
        let stated = |key: &str| {
            row.and_then(|r| r[key].as_f64())
                .map_or("±?".to_string(), |e| format!("±{:.0} %", e * 100.0))
        };
        let counted = |key: &str| row.and_then(|r| r[key].as_u64()).unwrap_or(0);
        eprintln!(
            "{label}:   RATIO {name}: count {:.3} ({count} / {}, stated {}, {} sleeps counted), time {:.3} ({:.2} / {:.2} ms, stated {}, {:.2} ms asleep)",
            count as f64 / tool.count as f64,
            tool.count,
            stated("count_error"),
            counted("blocked"),
            ns as f64 / tool.total_ns,
            ns as f64 / 1e6,
            tool.total_ns / 1e6,
            stated("time_error"),
            counted("blocked_ns") as f64 / 1e6
        );
    }
    let w = o.probe_worker();
    eprintln!(
        "{label}: run-queue waits srvprof {} runqlat {}; switches srvprof ({}, {}) /proc {:?}",
        o.probe["runq_latency_us"]["count"],
        o.runqlat.iter().map(|b| b.count).sum::<u64>(),
        w["voluntary_switches"],
        w["involuntary_switches"],
        o.proc_switches
    );
}
