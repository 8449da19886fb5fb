//! The account of constructed runs: waits told apart, parts named, shares split.

use super::compose::hottest_function;
use super::*;
use crate::kernel_report::KernelReport;
use crate::stacks::{FoldedLine, FoldedStacks, StackKind};
use srvprof_common::GROUP_SERVER;
use srvprof_loadgen::LoadReport;

/// The account of a run whose server and client used 20 and 10 us of CPU a request.
fn account_of(
    load: &LoadReport,
    server: &KernelReport,
    client: &KernelReport,
    stacks: &FoldedStacks,
) -> TailAccount {
    account(inputs(load, server, client, stacks)).unwrap()
}

pub(super) fn cost(place: Place, ms: f64, uniform: bool) -> Cost {
    Cost {
        part: TailPart {
            place,
            per_request_ms: ms,
            ..Default::default()
        },
        uniform,
        affected: None,
        each_ms: None,
        pinned_ms: None,
        lengths: None,
    }
}

/// `completed` requests in 5 s at 2,000 a second, p50 0.1 ms and p99 30 ms, the mean `mean_us`.
fn load_at(completed: u64, mean_us: f64) -> LoadReport {
    LoadReport {
        completed,
        duration_s: 5.0,
        throughput_rps: 2_000.0,
        latency_us: srvprof_loadgen::LatencySummary {
            p50: 100,
            p99: 30_000,
            mean: mean_us,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Adds a server stack (`;`-separated frames) of `us` off-CPU, drawn as `periods` periods.
fn add_drawn(off: &mut crate::stacks::LineSet, stack: &str, us: u64, periods: u64) {
    let line = off.add(GROUP_SERVER, frames(stack), us);
    off.add_periods(line, periods);
}

pub(super) fn frames(s: &str) -> Vec<String> {
    s.split(';').map(str::to_string).collect()
}

/// A thread-per-connection server, as its stacks and the scheduler's counts show it: each
/// connection thread reads its next request from its socket (idle) and, for some requests,
/// an answer from a pipe (in a request); a "ticket" thread reads its pipe of asks (never a
/// request's); a cache refresher sleeps (no request thread).
fn threaded(socket_us: u64, pipe_us: u64) -> (LoadReport, KernelReport, FoldedStacks) {
    use crate::stacks::LineSet;
    let read = |thread: &str, caller: &str, wait: &str| -> Vec<String> {
        frames(&format!(
            "{thread};conn_main;{caller};read;do_syscall_64_[k];ksys_read_[k];vfs_read_[k];{wait}_[k];schedule_[k]"
        ))
    };
    let mut off = LineSet::default();
    let socket = off.add(
        GROUP_SERVER,
        read("conn", "conn_main", "sk_wait_data"),
        socket_us,
    );
    off.add_periods(socket, 10_000);
    // The drawn periods: 30 ms each.
    let pipe = off.add(
        GROUP_SERVER,
        read("conn", "wait_for_ticket", "pipe_read"),
        pipe_us,
    );
    off.add_periods(pipe, pipe_us / 30_000);
    off.add(
        GROUP_SERVER,
        read("ticket", "ticket_main", "pipe_read"),
        5_000_000,
    );
    off.add(
        GROUP_SERVER,
        frames("cache;refresh;nanosleep;do_syscall_64_[k];__x64_sys_nanosleep_[k];do_nanosleep_[k];schedule_[k]"),
        4_000_000,
    );
    let mut stacks = FoldedStacks::default();
    stacks.set(StackKind::OffCpu, off.finish());
    let load = load_at(10_000, 400.0);
    let server = KernelReport {
        threads: vec![crate::kernel_report::ThreadReport {
            comm: "conn".into(),
            oncpu_ns: 1_000_000,
            ..Default::default()
        }],
        // Every sleep in read, counted by the scheduler: 10,000 next requests, 200 answers,
        // and the ticket thread's 200 waits for asks; their exact time.
        syscalls: vec![crate::kernel_report::SyscallReport {
            name: "read".into(),
            blocked: Some(10_400),
            blocked_ns: Some((socket_us + 6_000_000 + 5_000_000) * 1_000),
            ..Default::default()
        }],
        ..Default::default()
    };
    (load, server, stacks)
}

/// The pipe's 200 waits of 30 ms: its writer woke the connection threads about as often (a
/// thread, or a helper process per wait); the load generator, an idle CPU's interrupts and a
/// thread that hands out connections woke them too, but they are the client, the kernel, or
/// woke them 50 times as often.
#[test]
fn the_other_end_of_a_pipe_is_the_waker_that_woke_its_readers_as_often_as_they_waited() {
    use crate::kernel_report::WakerReport;
    let (load, mut server, stacks) = threaded(40_000_000, 3_990_000);
    let waker = |pid: u32, comm: &str, count: u64| WakerReport {
        waker_pid: pid,
        waker_comm: comm.into(),
        wakee_comm: "conn".into(),
        count,
        processes: 1,
    };
    let client = KernelReport {
        pids: vec![9],
        ..Default::default()
    };
    let pipe_of = |server: &KernelReport| {
        let a = account_of(&load, server, &client, &stacks);
        (a.parts.into_iter())
            .find(|p| p.resource == Some(Resource::Pipe))
            .expect("the pipe wait")
    };
    server.wakers = vec![
        waker(9, "loadgen-0", 10_000),
        waker(7, "acceptor", 10_000),
        waker(0, "swapper/1", 3_000),
        waker(7, "ticket", 202),
    ];
    let pipe = pipe_of(&server);
    assert_eq!(
        pipe.held_by.as_deref(),
        Some("ticket (pid 7), which woke them 202 times"),
        "{pipe:?}"
    );
    // A helper started for each wait: a new process each time, named by what they run.
    server.wakers[3] = WakerReport {
        processes: 200,
        ..waker(31, "sleep", 600)
    };
    assert_eq!(
        pipe_of(&server).held_by.as_deref(),
        Some("sleep (200 processes), which woke them 600 times")
    );
    // A child that woke its parent before its exec, under the parent's name: named by the
    // program it exited as.
    server.wakers[3] = WakerReport {
        processes: 200,
        ..waker(31, "conn", 400)
    };
    server.exits = vec![crate::record::ExitRecord {
        pid: 31,
        tid: 31,
        group: 0,
        comm: "sleep".into(),
        exit_code: Some(0),
        signal: None,
        t_s: 1.0,
        monotonic_ns: 1_000_000_000,
    }];
    assert_eq!(
        pipe_of(&server).held_by.as_deref(),
        Some("sleep (200 processes), which woke them 400 times")
    );
    server.exits.clear();
    assert!(
        pipe.describe().contains("its other end ticket (pid 7)"),
        "{}",
        pipe.describe()
    );
    // No waker woke them about as often as they waited: none is named.
    server.wakers.truncate(3);
    assert_eq!(pipe_of(&server).held_by, None);
}

#[test]
fn waits_for_work_and_waits_in_a_request_are_told_apart_and_scaled_to_the_exact_times() {
    // The drawn stacks under-read the pipe: 3.99 s drawn of the 6 s the scheduler counted.
    let (socket_us, pipe_us) = (40_000_000.0, 3_990_000.0);
    let (load, server, stacks) = threaded(socket_us as u64, pipe_us as u64);
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert_eq!(a.request_threads, ["conn"]);
    let pipe = (a.parts.iter())
        .find(|p| p.resource == Some(Resource::Pipe))
        .expect("the pipe wait");
    // Scaled: read's exact 51 s shared by the drawn ones, the pipe's 3.99 s of them.
    let scale = (socket_us + 11e6) / (socket_us + pipe_us + 5e6);
    let pipe_ms = pipe_us / 1e3 * scale;
    assert!(
        (pipe.per_request_ms - pipe_ms / 10_000.0).abs() < 1e-9,
        "{pipe:?}"
    );
    assert_eq!(pipe.threads, ["conn"]);
    assert_eq!(pipe.function.as_deref(), Some("wait_for_ticket"));
    // Each wait as long as its drawn ones, and as many as its scaled time makes.
    assert!((pipe.mean_wait_ms.unwrap() - 30.0).abs() < 1e-9, "{pipe:?}");
    let waits = pipe.waits.unwrap();
    assert!((waits - pipe_ms / 30.0).abs() < 1e-6, "{waits}");
    // The next requests' reads are idle; the ticket's and the refresher's waits no part.
    assert!((a.idle_per_request_ms - socket_us / 1e3 * scale / 10_000.0).abs() < 1e-9);
    assert!(a.parts.iter().all(|p| p.resource != Some(Resource::Sleep)));
    assert_eq!(
        a.parts.iter().filter(|p| p.place == Place::Blocked).count(),
        1,
        "{a:?}"
    );
    assert!(pipe.share > 0.9, "{a:?}");
}

/// A thread per connection that reads its dependency's answer as it reads its client's next
/// request: the stacks show both as the same wait for work; the kernel's count of the sleeps
/// on the server's outbound connections takes the service's out of the idle time.
#[test]
fn a_dependency_read_like_a_wait_for_work_is_the_services_part_by_the_kernels_count() {
    // 10,000 requests, 200 of which wait 30 ms on 127.0.0.1:9000 (6 s); 40 s of next
    // requests. No pipe wait.
    let (load, mut server, stacks) = threaded(46_000_000, 0);
    let idle_before =
        account_of(&load, &server, &KernelReport::default(), &stacks).idle_per_request_ms;
    server.outbound = vec![crate::record::Outbound {
        remote: "127.0.0.1:9000".into(),
        opened: 200,
        waits: 200,
        wait_ns: 6_000_000_000,
        ..Default::default()
    }];
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let top = &a.parts[0];
    assert_eq!(top.place, Place::Blocked, "{a:?}");
    assert_eq!(top.resource, Some(Resource::Service), "{a:?}");
    assert_eq!(top.held_by.as_deref(), Some("127.0.0.1:9000"));
    assert!((top.mean_wait_ms.unwrap() - 30.0).abs() < 1e-9, "{top:?}");
    assert!(
        (top.per_request_ms - 6_000.0 / 10_000.0).abs() < 1e-9,
        "{top:?}"
    );
    // One request in 50 waits 30 ms: p99 (30 ms) is that wait.
    assert!(top.share > 0.9, "{a:?}");
    assert!(
        (idle_before - a.idle_per_request_ms - 0.6).abs() < 1e-9,
        "{idle_before} -> {}",
        a.idle_per_request_ms
    );
    assert!(
        top.describe()
            .contains("a service it calls, at 127.0.0.1:9000"),
        "{}",
        top.describe()
    );
    // Without the kernel's count, the same stacks leave p99 unaccounted, not misnamed.
    server.outbound[0].waits = 0;
    server.outbound[0].wait_ns = 0;
    let blind = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert!(blind.unaccounted_share > 0.9, "{blind:?}");
}

/// An event loop reading a popen's pipe (1.5 s over 47 reads) then waiting for its shell in
/// pclose (1.4 ms): the shells, short-lived processes with too few stacks drawn to be timed,
/// spent 1.5 s in wait4 for their own children, which the scheduler's exact count of the
/// server's wait4 sleeps includes. That count is the server's, not the event loop's: scaled to
/// it, the timed pclose line would take the shells' time and pass for a third of p99.
#[test]
fn a_syscalls_exact_time_is_shared_with_the_processes_no_window_holds() {
    use crate::stacks::LineSet;
    let lua = "nginx;main;ngx_process_events_and_timers;ngx_http_lua_run_thread";
    let mut off = LineSet::default();
    let timed = |off: &mut LineSet, stack: String, us: u64, periods: u64| {
        let line = off.add(GROUP_SERVER, frames(&stack), us);
        off.add_periods(line, periods);
        off.add_at(line, 0, us);
    };
    timed(
        &mut off,
        "nginx;main;ngx_process_events_and_timers;epoll_wait;entry_SYSCALL_64_[k];do_epoll_wait_[k];ep_poll_[k];schedule_[k]".into(),
        4_000_000,
        2_400,
    );
    timed(
        &mut off,
        format!(
            "{lua};fread;read;entry_SYSCALL_64_[k];do_syscall_64_[k];ksys_read_[k];vfs_read_[k];anon_pipe_read_[k];schedule_[k]"
        ),
        1_500_000,
        47,
    );
    timed(
        &mut off,
        format!(
            "{lua};pclose;wait4;entry_SYSCALL_64_[k];do_syscall_64_[k];__do_sys_wait4_[k];kernel_wait4_[k];do_wait_[k];schedule_[k]"
        ),
        1_400,
        47,
    );
    off.add(
        GROUP_SERVER,
        frames("sh;[no stack];__do_sys_wait4_[k]"),
        1_500_000,
    );
    let mut stacks = FoldedStacks::default();
    stacks.set(StackKind::OffCpu, off.finish());
    let mut load = load_at(2_400, 1_000.0);
    load.throughput_rps = 400.0;
    let server = KernelReport {
        threads: vec![crate::kernel_report::ThreadReport {
            comm: "nginx".into(),
            oncpu_ns: 300_000_000,
            ..Default::default()
        }],
        syscalls: vec![
            crate::kernel_report::SyscallReport {
                name: "read".into(),
                blocked: Some(47),
                blocked_ns: Some(1_500_000_000),
                ..Default::default()
            },
            crate::kernel_report::SyscallReport {
                name: "wait4".into(),
                blocked: Some(94),
                blocked_ns: Some(1_501_400_000),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert_eq!(a.parts[0].resource, Some(Resource::Pipe), "{a:?}");
    let pclose = (a.parts.iter()).find(|p| p.kernel.as_deref() == Some("do_wait"));
    let pclose_ms = pclose.map_or(0.0, |p| p.per_request_ms * 2_400.0 / p.requests_delayed);
    assert!((pclose_ms - 1.4).abs() < 0.01, "{a:?}");
}

/// An event loop asking a service for every request: its thread sleeps only in epoll_wait, never
/// on the service's connections. The kernel timed each ask until its answer: 9,800 of 0.1 ms and
/// 200 of 30 ms. The answers' lengths make the service the tail's part (p99 is those 30 ms); each
/// delayed its own request alone. Without their lengths, every answer the mean one (0.7 ms), the
/// service holds about its mean of p99, not the tail.
#[test]
fn an_event_loops_asks_are_the_services_part_by_the_lengths_of_its_answers() {
    use crate::stacks::LineSet;
    let mut off = LineSet::default();
    add_drawn(
        &mut off,
        "nginx;main;ngx_process_events_and_timers;epoll_wait;entry_SYSCALL_64_[k];do_epoll_wait_[k];ep_poll_[k];schedule_hrtimeout_range_[k];schedule_[k]",
        40_000_000,
        10_000,
    );
    let mut stacks = FoldedStacks::default();
    stacks.set(StackKind::OffCpu, off.finish());
    let load = load_at(10_000, 800.0);
    let mut lengths = crate::record::NsHistogram::default();
    lengths.slots[srvprof_common::hist::slot_of(100_000) as usize] = 9_800;
    lengths.slots[srvprof_common::hist::slot_of(30_000_000) as usize] = 200;
    let mut server = KernelReport {
        threads: vec![crate::kernel_report::ThreadReport {
            comm: "nginx".into(),
            oncpu_ns: 200_000_000,
            ..Default::default()
        }],
        outbound: vec![crate::record::Outbound {
            remote: "127.0.0.1:9000".into(),
            opened: 10_000,
            answers: 10_000,
            answer_ns: 9_800 * 100_000 + 200 * 30_000_000,
            answer_lengths: Some(lengths),
            ..Default::default()
        }],
        ..Default::default()
    };
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let top = &a.parts[0];
    assert_eq!(top.resource, Some(Resource::Service), "{a:?}");
    assert_eq!(top.held_by.as_deref(), Some("127.0.0.1:9000"));
    assert!(top.threads.is_empty(), "{top:?}");
    assert!((top.requests_delayed - 1.0).abs() < 1e-9, "{top:?}");
    assert!((top.per_request_ms - 0.698).abs() < 1e-9, "{top:?}");
    assert!(top.share > 0.8, "{a:?}");
    // No lengths: 0.7 ms for every request, far from the 30 ms of p99.
    server.outbound[0].answer_lengths = None;
    let flat = account_of(&load, &server, &KernelReport::default(), &stacks);
    let service = (flat.parts.iter())
        .find(|p| p.resource == Some(Resource::Service))
        .unwrap();
    assert!(service.share < 0.1, "{flat:?}");
    // A thread that slept on the service for its answers' time keeps the sleeps' part.
    server.outbound[0].waits = 10_000;
    server.outbound[0].wait_ns = server.outbound[0].answer_ns;
    let slept = account_of(&load, &server, &KernelReport::default(), &stacks);
    let services = (slept.parts.iter()).filter(|p| p.resource == Some(Resource::Service));
    assert_eq!(services.count(), 1, "{slept:?}");
}

/// The waits to be taken of 10,000 new connections on port 8080, `waited` of them 30 ms each.
fn accepted(waited: u64) -> crate::kernel_report::AcceptQueueReport {
    let by_port = vec![crate::kernel_report::AcceptQueuePort {
        port: 8080,
        accepts: 10_000,
        wait_ns: waited * 30_000_000,
    }];
    crate::kernel_report::AcceptQueueReport {
        accepts: 10_000,
        wait_ns: waited * 30_000_000,
        p99_ms: 30.0,
        max_ms: 30.0,
        by_port,
    }
}

/// A thread per connection behind a thread that accepts: 200 connections of 10,000 wait 30 ms in
/// the accept queue while it sleeps, its 6 s of sleeps drawn as `chore`.
fn behind_an_acceptor(chore: &str) -> (LoadReport, KernelReport, FoldedStacks) {
    use crate::stacks::LineSet;
    let (load, server, mut stacks) = threaded(46_000_000, 0);
    let mut off = LineSet::default();
    for l in stacks.lines(StackKind::OffCpu) {
        let line = off.add(l.group, l.frames.clone(), l.value);
        off.add_periods(line, l.periods);
    }
    off.add(
        GROUP_SERVER,
        frames("acceptor;main;accept;do_syscall_64_[k];__x64_sys_accept_[k];__sys_accept4_[k];inet_csk_accept_[k];schedule_[k]"),
        40_000_000,
    );
    add_drawn(&mut off, chore, 6_000_000, 200);
    stacks.set(StackKind::OffCpu, off.finish());
    (load, server, stacks)
}

#[test]
fn connections_an_acceptor_left_waiting_are_the_accept_queues_part_held_by_what_it_did() {
    // The acceptor's sleep drawn with its stack, or with none (its syscall alone).
    for (chore, held) in [
        (
            "acceptor;main;housekeeping;nanosleep;do_syscall_64_[k];__x64_sys_nanosleep_[k];do_nanosleep_[k];schedule_[k]",
            "acceptor waited on a sleep or timer in housekeeping",
        ),
        (
            "acceptor;[no stack];__do_sys_clock_nanosleep_[k]",
            "acceptor waited on a sleep or timer",
        ),
    ] {
        let (load, mut server, stacks) = behind_an_acceptor(chore);
        let blind = account_of(&load, &server, &KernelReport::default(), &stacks);
        assert!(
            (blind.parts.iter()).any(|p| p.resource == Some(Resource::Sleep)),
            "without the queue's figures the acceptor's sleep is a request's wait: {blind:?}"
        );

        server.tcp.accept_queue = Some(accepted(200));
        // The kernel's lengths: 9,800 connections read at once (10 us), 200 after 30 ms.
        let mut lengths = crate::record::NsHistogram::default();
        lengths.slots[srvprof_common::hist::slot_of(10_000) as usize] = 9_800;
        lengths.slots[srvprof_common::hist::slot_of(30_000_000) as usize] = 200;
        let a = account(Inputs {
            accept_lengths: Some(&lengths),
            ..inputs(&load, &server, &KernelReport::default(), &stacks)
        })
        .unwrap();
        let top = &a.parts[0];
        assert_eq!(top.place, Place::Network, "{a:?}");
        assert_eq!(top.resource, Some(Resource::AcceptQueue), "{a:?}");
        assert_eq!(top.kernel.as_deref(), Some("port 8080"));
        // Told as the 200 long waits (their lengths the histogram's, scaled to the exact mean).
        assert!((top.waits.unwrap() - 200.0).abs() < 1e-6, "{top:?}");
        assert!((top.mean_wait_ms.unwrap() - 30.0).abs() < 1.0, "{top:?}");
        assert!((top.per_request_ms - 0.6).abs() < 1e-9, "{top:?}");
        assert_eq!(top.held_by.as_deref(), Some(held), "{top:?}");
        assert!(top.share > 0.9, "{a:?}");
        // Its sleep is the queue's cause, not a second part beside it.
        assert!(
            !(a.parts.iter()).any(|p| p.resource == Some(Resource::Sleep)),
            "{a:?}"
        );
        assert!(top.describe().contains("the accept queue of port 8080"));

        // On a busy host 300 more wait 2 ms for a CPU: still 200 that arrived while the acceptor
        // was away (its 6 s of sleeps, over a span 50 times that long, of 10,000 arrivals).
        lengths.slots[srvprof_common::hist::slot_of(10_000) as usize] = 9_500;
        lengths.slots[srvprof_common::hist::slot_of(2_000_000) as usize] = 300;
        server.duration_s = 300.0;
        let a = account(Inputs {
            accept_lengths: Some(&lengths),
            ..inputs(&load, &server, &KernelReport::default(), &stacks)
        })
        .unwrap();
        let top = &a.parts[0];
        assert!((top.waits.unwrap() - 200.0).abs() < 1e-6, "{top:?}");
        assert!(top.mean_wait_ms.unwrap() > 10.0, "{top:?}");

        // Every connection taken in its ordinary start: the acceptor held none of them.
        let mut starts = crate::record::NsHistogram::default();
        starts.slots[srvprof_common::hist::slot_of(180_000) as usize] = 10_000;
        let a = account(Inputs {
            accept_lengths: Some(&starts),
            ..inputs(&load, &server, &KernelReport::default(), &stacks)
        })
        .unwrap();
        let queue = (a.parts.iter())
            .find(|p| p.resource == Some(Resource::AcceptQueue))
            .unwrap();
        assert_eq!(queue.held_by, None, "{queue:?}");
    }
}

#[test]
fn a_wait_nothing_names_under_the_acceptors_name_holds_no_connection() {
    // New threads' first switch-outs, undrawn, under the acceptor's name (a thread is renamed
    // after it starts): no wait srvprof can name, so no holder.
    let (load, mut server, stacks) = behind_an_acceptor("acceptor;[no stack]");
    server.tcp.accept_queue = Some(accepted(200));
    let mut lengths = crate::record::NsHistogram::default();
    lengths.slots[srvprof_common::hist::slot_of(10_000) as usize] = 9_800;
    lengths.slots[srvprof_common::hist::slot_of(30_000_000) as usize] = 200;
    let a = account(Inputs {
        accept_lengths: Some(&lengths),
        ..inputs(&load, &server, &KernelReport::default(), &stacks)
    })
    .unwrap();
    let queue = (a.parts.iter())
        .find(|p| p.resource == Some(Resource::AcceptQueue))
        .unwrap();
    assert_eq!(queue.held_by, None, "{queue:?}");
}

/// The account's inputs with no histograms, 20 us of the server's CPU a request and 10 of the
/// client's.
fn inputs<'a>(
    load: &'a LoadReport,
    server: &'a KernelReport,
    client: &'a KernelReport,
    stacks: &'a FoldedStacks,
) -> Inputs<'a> {
    Inputs {
        load,
        server,
        client,
        runq_lengths: None,
        oncpu_run_lengths: None,
        run_wall_lengths: None,
        runq_preempted_lengths: None,
        accept_lengths: None,
        pause_lengths: None,
        send_hold_lengths: None,
        transfer_lengths: None,
        server_cpu_us: 20.0,
        client_cpu_us: 10.0,
        stacks,
    }
}

#[test]
fn an_event_loop_that_accepts_and_serves_keeps_its_waits_and_gets_no_accept_part() {
    // The connection threads take their own connections (say, SO_REUSEPORT listeners polled
    // with the connections): no thread waits for work only in an accept, and their waits are
    // the requests' own.
    let (load, mut server, stacks) = threaded(46_000_000, 6_000_000);
    server.tcp.accept_queue = Some(accepted(200));
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert!(
        !(a.parts.iter()).any(|p| p.resource == Some(Resource::AcceptQueue)),
        "{a:?}"
    );
    assert_eq!(a.parts[0].resource, Some(Resource::Pipe), "{a:?}");
}

#[test]
fn how_often_a_wait_is_met_reads_per_request() {
    let part = |waits: f64, mean: f64| TailPart {
        waits: Some(waits),
        mean_wait_ms: Some(mean),
        ..Default::default()
    };
    assert_eq!(
        part(200.0, 30.04).how_often(10_000).as_deref(),
        Some("1 request in 50 waits 30.0 ms")
    );
    assert_eq!(
        part(30_000.0, 0.012).how_often(10_000).as_deref(),
        Some("3.0 waits of 0.01 ms a request")
    );
    assert_eq!(part(0.5, 30.0).how_often(10_000), None);
    assert_eq!(TailPart::default().how_often(10_000), None);
    // A service answering 1 in 50 asks in 36 ms and the rest in 0.1 ms: told by its slow ones.
    let mut service = part(10_000.0, 0.818);
    service.long_waits = Some(LongWaits {
        waits: 200.0,
        mean_ms: 36.0,
    });
    assert_eq!(
        service.how_often(10_000).as_deref(),
        Some("1 request in 50 waits 36.0 ms, its other waits 0.10 ms")
    );
}

/// A part's waits whose lengths are known: the long ones (ten times the median or more, beyond
/// the widest gap when there is one) are counted apart when they are fewer than half; even
/// waits, or mostly long ones, have none.
#[test]
fn a_few_long_waits_among_short_ones_are_counted_apart() {
    use super::compose::LONG_WAIT_RATIO;
    let mut cost = Cost {
        part: TailPart {
            waits: Some(10_000.0),
            mean_wait_ms: Some(0.818),
            ..Default::default()
        },
        lengths: Some(vec![(0.1, 0.98), (0.12, 0.0), (36.0, 0.02)]),
        ..Default::default()
    };
    let long = super::compose::long_waits(&cost).unwrap();
    assert!((long.waits - 200.0).abs() < 1e-9 && (long.mean_ms - 36.0).abs() < 1e-9);
    // A busy host's delays between the fast and the slow ones: the slow ones still, beyond the
    // gap (an upstream answering 1 in 50 in 30 ms beside a neighbour: 11 answers of 1.5-2.6 ms).
    cost.lengths = Some(vec![
        (0.1, 0.97),
        (1.5, 0.004),
        (2.0, 0.003),
        (2.6, 0.003),
        (36.0, 0.02),
    ]);
    let long = super::compose::long_waits(&cost).unwrap();
    assert!((long.waits - 200.0).abs() < 1e-6, "{long:?}");
    // One timeout of 500 ms beyond them: still the 200 slow ones and it.
    cost.lengths = Some(vec![
        (0.1, 0.9699),
        (2.6, 0.01),
        (36.0, 0.02),
        (500.0, 0.0001),
    ]);
    let long = super::compose::long_waits(&cost).unwrap();
    assert!((long.waits - 201.0).abs() < 1e-6, "{long:?}");
    cost.lengths = Some(vec![(0.1, 0.5), (0.1 * LONG_WAIT_RATIO * 0.99, 0.5)]);
    assert_eq!(super::compose::long_waits(&cost), None);
    cost.lengths = Some(vec![(0.1, 0.4), (36.0, 0.6)]);
    assert_eq!(super::compose::long_waits(&cost), None);
    cost.lengths = None;
    assert_eq!(super::compose::long_waits(&cost), None);
}

#[test]
fn resent_syns_are_the_networks_part_by_the_kernels_timeout() {
    let (load, mut server, stacks) = threaded(40_000_000, 0);
    server.tcp.syn_retransmits = 150;
    let mut load = load;
    load.latency_us.p99 = 1_002_000;
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let net = &a.parts[0];
    assert_eq!(net.place, Place::Network, "{a:?}");
    // 1.5 % of the requests waited 1 s: a request at p99 is one of them.
    assert!((net.per_request_ms - 15.0).abs() < 1e-9, "{net:?}");
    assert!((net.tail_ms - 1000.0).abs() < 1e-9, "{net:?}");
    assert!(
        net.describe()
            .contains("SYNs retransmitted to the server, each resent after 1000 ms")
    );
}

/// One answer in 50 a 1 MiB transfer over a slow path (85 ms until the client acknowledged it),
/// and small answers held behind it in the host's queue (9 ms, one in 3): the transfers and the
/// held answers are two parts, each by its own count and mean, the transfers first (p99 is
/// one of them), named by what paced them; the shares and what is not accounted for add up to
/// p99.
#[test]
fn answers_transfers_are_a_part_of_their_own_beside_the_answers_held() {
    use crate::kernel_report::{SendHoldKind, SendHoldReport};
    let (mut load, mut server, stacks) = threaded(40_000_000, 0);
    let kind = |kind: &str, holds: u64, each_ms: u64| SendHoldKind {
        kind: kind.into(),
        holds,
        wait_ns: holds * each_ms * 1_000_000,
        p99_ms: each_ms as f64,
        max_ms: each_ms as f64,
    };
    (load.latency_us.p50, load.latency_us.p99) = (400, 86_000);
    server.tcp.send_holds = Some(SendHoldReport {
        by_kind: vec![
            kind("partial_segment", 3_300, 9),
            kind("full_segments", 190, 85),
            kind("zero_window", 10, 85),
        ],
        delayed_acks: 0,
    });
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let transfer = &a.parts[0];
    assert_eq!(transfer.resource, Some(Resource::Transfer), "{a:?}");
    assert_eq!(transfer.place, Place::Network, "{a:?}");
    assert_eq!(transfer.waits, Some(200.0), "{transfer:?}");
    assert_eq!(transfer.mean_wait_ms, Some(85.0), "{transfer:?}");
    assert!(transfer.share >= 0.8, "{a:?}");
    let words = transfer.describe();
    assert!(words.contains("as fast as the path"), "{words}");
    // The closed window's holds are under a tenth of the transfers' time: not named.
    assert!(!words.contains("closed"), "{words}");
    let held = (a.parts.iter())
        .find(|p| p.resource == Some(Resource::HeldSend))
        .expect("the held answers' part");
    assert_eq!(held.waits, Some(3_300.0), "{held:?}");
    assert_eq!(held.mean_wait_ms, Some(9.0), "{held:?}");
    let shares: f64 = a.parts.iter().map(|p| p.share).sum::<f64>() + a.unaccounted_share;
    assert!((shares - 1.0).abs() < 1e-9, "{a:?}");
}

/// Answers written in two parts on connections with Nagle's algorithm on: every one held 44 ms
/// for the client's delayed ACK (the median is slow too), or one in 50 (the tail). The held
/// answers are the network's part, each delaying its own request by its length, with the
/// kernel's reason and the host's delayed ACKs in its words; none held, no part.
#[test]
fn answers_held_unsent_are_the_networks_part_by_their_own_lengths() {
    use crate::kernel_report::{SendHoldKind, SendHoldReport};
    let (mut load, mut server, stacks) = threaded(40_000_000, 0);
    let held = |holds: u64| SendHoldReport {
        by_kind: vec![SendHoldKind {
            kind: "partial_segment".into(),
            holds,
            wait_ns: holds * 44_000_000,
            p99_ms: 50.0,
            max_ms: 50.0,
        }],
        delayed_acks: holds,
    };
    (load.latency_us.p50, load.latency_us.p99) = (44_100, 44_900);
    server.tcp.send_holds = Some(held(10_000));
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let net = &a.parts[0];
    assert_eq!(net.resource, Some(Resource::HeldSend), "{a:?}");
    assert!((net.per_request_ms - 44.0).abs() < 1e-9, "{net:?}");
    assert!(net.share >= 0.9, "{a:?}");
    let words = net.describe();
    assert!(words.contains("Nagle's algorithm"), "{words}");
    assert!(words.contains("sent 10000 ACKs late"), "{words}");
    assert!(words.ends_with("each 44.0 ms"), "{words}");
    // One answer in 50: the median untouched, p99 one of them.
    (load.latency_us.p50, load.latency_us.p99) = (100, 44_200);
    server.tcp.send_holds = Some(held(200));
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let net = &a.parts[0];
    assert_eq!(net.resource, Some(Resource::HeldSend), "{a:?}");
    assert!((net.per_request_ms - 0.88).abs() < 1e-9, "{net:?}");
    assert!(net.share >= 0.9, "{a:?}");
    server.tcp.send_holds = None;
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert!(
        a.parts
            .iter()
            .all(|p| p.resource != Some(Resource::HeldSend)),
        "{a:?}"
    );
}

#[test]
fn lost_segments_are_the_networks_part_by_the_connections_own_timeout() {
    let (mut load, mut server, stacks) = threaded(40_000_000, 0);
    load.latency_us.p99 = 205_000;
    // 2 % of responses lost and resent after the connections' 204 ms (tcp_info), the
    // client resending its request for most of them; its SYN retransmits are not segments.
    server.tcp.retransmits = 200;
    server.tcp.rto_ms = Some(204.0);
    let mut client = KernelReport::default();
    client.tcp.retransmits = 153;
    client.tcp.syn_retransmits = 3;
    let a = account_of(&load, &server, &client, &stacks);
    let net = &a.parts[0];
    assert_eq!(net.resource, Some(Resource::Retransmit), "{a:?}");
    assert!((net.per_request_ms - 4.08).abs() < 1e-9, "{net:?}");
    assert!((net.tail_ms - 204.0).abs() < 1e-9, "{net:?}");
    assert_eq!(
        net.describe(),
        "the network: segments retransmitted (200 by the server, 150 by the client), each \
         resent after 204 ms"
    );
    assert_eq!(
        (a.parts.iter())
            .filter(|p| p.place == Place::Network)
            .count(),
        1,
        "{a:?}"
    );
    // Without the connections' timeout, the kernel's floor.
    server.tcp.rto_ms = None;
    let a = account_of(&load, &server, &client, &stacks);
    assert_eq!(a.parts[0].mean_wait_ms, Some(RTO_MIN_MS), "{a:?}");
    // The slowest request a little over the timeout: the timeouts were waited.
    server.tcp.rto_ms = Some(204.0);
    load.latency_us.max = 212_000;
    let a = account_of(&load, &server, &client, &stacks);
    assert_eq!(a.parts[0].resource, Some(Resource::Retransmit), "{a:?}");
}

/// Retransmits on a path whose slowest request took 89 ms, against the connections' 216 ms
/// timeout: no request waited a timeout out (a deep queue's early probes resent those), so they
/// are no part, and a part that was waited (one answer in 50 a transfer of 85.5 ms) leads.
#[test]
fn retransmits_no_request_waited_a_timeout_for_are_no_part() {
    use crate::kernel_report::{SendHoldKind, SendHoldReport};
    let (mut load, mut server, stacks) = threaded(40_000_000, 0);
    (
        load.latency_us.p50,
        load.latency_us.p99,
        load.latency_us.max,
    ) = (455, 85_900, 89_215);
    server.tcp.retransmits = 13;
    server.tcp.rto_ms = Some(216.0);
    server.tcp.send_holds = Some(SendHoldReport {
        by_kind: vec![SendHoldKind {
            kind: "full_segments".into(),
            holds: 200,
            wait_ns: 200 * 85_500_000,
            p99_ms: 100.0,
            max_ms: 100.0,
        }],
        delayed_acks: 0,
    });
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert!(
        a.parts
            .iter()
            .all(|p| p.resource != Some(Resource::Retransmit)),
        "{a:?}"
    );
    assert_eq!(a.parts[0].resource, Some(Resource::Transfer), "{a:?}");
    assert!(a.parts[0].share >= 0.8, "{a:?}");
}

#[test]
fn cpu_beyond_what_the_median_carries_takes_the_tail_and_the_clients_does_not() {
    // 1 request in 50 spins 30 ms: 0.62 ms of CPU a request against a median of 0.14 ms.
    let (parts, rest) = allocate(
        vec![
            cost(Place::OnCpu, 0.62, true),
            cost(Place::Client, 0.11, true),
            cost(Place::RunQueue, 0.01, false),
        ],
        0.14,
        30.0,
    );
    assert_eq!(parts[0].place, Place::OnCpu, "{parts:?}");
    assert!(parts[0].share > 0.95, "{parts:?}");
    let client = parts.iter().find(|p| p.place == Place::Client).unwrap();
    assert_eq!(client.tail_ms, 0.0, "{parts:?}");
    assert!(rest < 1e-9);
}

#[test]
fn the_hottest_function_is_the_servers_own_not_a_librarys() {
    use crate::stacks::Module;
    let module = |path: &str| Module {
        path: path.into(),
        build_id: None,
    };
    let modules = [
        ("slow_path", module("/srv/threaded")),
        ("conn_main", module("/srv/threaded")),
        ("clock_gettime", module("[vdso]")),
        ("memcpy", module("/usr/lib/libc.so.6")),
    ]
    .into_iter()
    .map(|(f, m)| (f.to_string(), m))
    .collect();
    let line = |stack: &str, value| FoldedLine {
        group: GROUP_SERVER,
        frames: frames(stack),
        value,
        periods: 0,
    };
    let lines = [
        line("conn;conn_main;slow_path;clock_gettime", 60),
        line("conn;conn_main;slow_path", 10),
        line("conn;conn_main;memcpy", 80),
        line("conn;conn_main;memcpy;copy_user_[k]", 5),
    ];
    // libc's memcpy is conn_main's time; the vDSO's clock_gettime slow_path's.
    assert_eq!(
        hottest_function(&lines, &modules).as_deref(),
        Some("conn_main")
    );
    let only_own = &lines[..2];
    assert_eq!(
        hottest_function(only_own, &modules).as_deref(),
        Some("slow_path")
    );
    // Without modules, the innermost frame past the wrappers.
    assert_eq!(
        hottest_function(&lines, &Default::default()).as_deref(),
        Some("memcpy")
    );
}

#[test]
fn a_lock_and_a_cpu_are_told_with_who_held_them() {
    use crate::kernel_report::{LockHolder, LockReport, RunqHolderReport};
    let (load, mut server, mut stacks) = threaded(40_000_000, 0);
    let mut lines = stacks.offcpu.clone();
    lines.push(FoldedLine {
        group: GROUP_SERVER,
        frames: frames(
            "conn;conn_main;count_request;___pthread_mutex_lock;__GI___lll_lock_wait;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_futex_[k];futex_wait_[k];schedule_[k]",
        ),
        value: 3_000_000,
        periods: 0,
    });
    stacks.offcpu = lines;
    server.locks = vec![LockReport {
        address: "0x55d0c0ffee00".into(),
        wait_ns: 3_000_000_000,
        stack: vec!["conn_main".into(), "count_request".into()],
        holders: vec![LockHolder {
            tid: 4242,
            comm: "cache-refresh".into(),
            ..Default::default()
        }],
        ..Default::default()
    }];
    server.runq_holders = vec![
        RunqHolderReport {
            pid: 0,
            comm: "swapper/0".into(),
            wait_ns: 9_000_000,
            share: 0.6,
            ..Default::default()
        },
        RunqHolderReport {
            pid: 77,
            comm: "hog".into(),
            wait_ns: 6_000_000,
            share: 0.4,
            ..Default::default()
        },
    ];
    server.threads[0].runq_ns = 15_000_000;
    server.threads[0].runq_waits = 1_000;
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let lock = (a.parts.iter())
        .find(|p| p.resource == Some(Resource::Lock))
        .expect("the lock");
    assert_eq!(
        lock.describe(),
        "blocked on a lock (futex) in futex_wait, called from count_request, held by \
         cache-refresh (tid 4242) at 0x55d0c0ffee00"
    );
    let runq = (a.parts.iter())
        .find(|p| p.place == Place::RunQueue)
        .expect("the run queue");
    assert_eq!(
        runq.describe(),
        "the server's threads waiting for a CPU (held most by hog (pid 77), 40% of it)"
    );
}

/// A quota that throttled the server 12 ms of its connection thread's 15 ms of waits for a CPU
/// held 80 % of them: it is named over a process that held 40 %; one that throttled 0.9 ms
/// (6 %) leaves the process named; neither is, at under MIN_HOLDER_SHARE each.
#[test]
fn a_quota_that_held_the_server_back_is_the_run_queues_holder_when_it_held_the_most() {
    use crate::kernel_report::{CpuLimitReport, RunqHolderReport};
    let (load, mut server, stacks) = threaded(40_000_000, 0);
    server.threads[0].pid = 4242;
    server.threads[0].runq_ns = 15_000_000;
    server.threads[0].runq_waits = 1_000;
    let hog = |share: f64| RunqHolderReport {
        pid: 77,
        comm: "hog".into(),
        wait_ns: 6_000_000,
        share,
        ..Default::default()
    };
    let quota = |throttled_s: f64| CpuLimitReport {
        cgroup: "/web".into(),
        quota_us: 30_000,
        period_us: 100_000,
        pids: vec![4242],
        throttled_s,
        ..Default::default()
    };
    let held = |server: &KernelReport| -> String {
        let a = account_of(&load, server, &KernelReport::default(), &stacks);
        let runq = (a.parts.iter()).find(|p| p.place == Place::RunQueue);
        runq.expect("the run queue").describe()
    };
    server.runq_holders = vec![hog(0.4)];
    server.cpu_limits = vec![quota(0.012)];
    assert_eq!(
        held(&server),
        "the server's threads waiting for a CPU (held most by the CPU quota of /web (0.30 CPUs), 80% of it)"
    );
    server.cpu_limits = vec![quota(0.0009)];
    assert_eq!(
        held(&server),
        "the server's threads waiting for a CPU (held most by hog (pid 77), 40% of it)"
    );
    server.runq_holders = vec![hog(0.05)];
    assert_eq!(held(&server), "the server's threads waiting for a CPU");
}

/// A Go server stopped 100 times in its 10 s span, 50 pauses of 2 ms and 50 of 18 ms: a request
/// arrives in one 10 % of the time, in a long one 9 times as often as in a short one, and waits
/// half of it: 0.1 x 1 + 0.9 x 9 = 8.2 ms on average, 0.82 ms a request. The thread that held the
/// world stopped spun on a CPU meanwhile: the pause's time, not a request's CPU.
#[test]
fn a_runtimes_pauses_are_waited_out_by_the_requests_that_arrive_in_them_the_long_ones_most() {
    use crate::kernel_report::PauseReport;
    let (load, mut server, stacks) = threaded(40_000_000, 0);
    server.duration_s = 10.0;
    server.threads[0].oncpu_ns = 1_200_000_000;
    server.families.pauses.pauses = vec![PauseReport {
        pid: 7,
        runtime: "go".into(),
        pauses: 100,
        total_ns: 1_000_000_000,
        max_ns: 18_000_000,
    }];
    let mut lengths = crate::record::NsHistogram::default();
    lengths.slots[srvprof_common::hist::slot_of(2_000_000) as usize] = 50;
    lengths.slots[srvprof_common::hist::slot_of(18_000_000) as usize] = 50;
    let a = account(Inputs {
        pause_lengths: Some(&lengths),
        ..inputs(&load, &server, &KernelReport::default(), &stacks)
    })
    .unwrap();
    let pause = (a.parts.iter())
        .find(|p| p.resource == Some(Resource::Pause))
        .expect("the pauses' part");
    assert_eq!(
        pause.describe(),
        "stopped by the Go runtime (pid 7): its stop-the-world pauses"
    );
    assert!((pause.waits.unwrap() - 1_000.0).abs() < 1e-6, "{pause:?}");
    let mean = pause.mean_wait_ms.unwrap();
    assert!((mean - 8.2).abs() <= 0.05 * 8.2, "{pause:?}");
    assert!(
        (pause.per_request_ms - 0.1 * mean).abs() < 1e-9,
        "{pause:?}"
    );
    // 1.2 s of CPU less the 1 s of pauses, over the 10,000 requests.
    let cpu = (a.parts.iter()).find(|p| p.place == Place::OnCpu).unwrap();
    assert!((cpu.per_request_ms - 0.02).abs() < 1e-9, "{cpu:?}");
    // Without the lengths, every pause the mean one: half of 10 ms.
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let pause = (a.parts.iter()).find(|p| p.resource == Some(Resource::Pause));
    assert!((pause.unwrap().mean_wait_ms.unwrap() - 5.0).abs() < 1e-9);
}

/// An open loop's summary: the uncorrected latency's mean (us), the sends behind schedule, the
/// most behind (us), and how late the requests at p99 went out (us), if timed.
fn open_loop(
    uncorrected_mean_us: f64,
    behind: u64,
    max_behind_us: u64,
    late_at_p99_us: Option<f64>,
) -> srvprof_loadgen::OpenLoopSummary {
    srvprof_loadgen::OpenLoopSummary {
        uncorrected_latency_us: srvprof_loadgen::LatencySummary {
            mean: uncorrected_mean_us,
            ..Default::default()
        },
        sends_behind_schedule: behind,
        max_behind_us,
        late_at_p99_us,
    }
}

#[test]
fn an_open_loops_late_sends_are_the_clients_queue() {
    let (mut load, server, stacks) = threaded(40_000_000, 0);
    // 2 % of the requests sent 25 ms late on average: 0.5 ms a request.
    load.latency_us.mean = 900.0;
    load.open_loop = Some(open_loop(400.0, 200, 40_000, None));
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let queue = &a.parts[0];
    assert_eq!(queue.place, Place::ClientQueue, "{a:?}");
    assert!((queue.per_request_ms - 0.5).abs() < 1e-9);
    assert!((queue.mean_wait_ms.unwrap() - 25.0).abs() < 1e-9);
    assert!((queue.tail_ms - 25.0).abs() < 1e-9, "{queue:?}");
}

#[test]
fn an_event_loops_wait_delays_the_requests_in_flight_and_half_those_arriving() {
    // One thread, 400 requests a second of 10 ms on average: 4 in flight; a 30 ms wait
    // delays them and half of the 12 that arrive meanwhile.
    let (mut load, server, stacks) = threaded(40_000_000, 3_990_000);
    load.throughput_rps = 400.0;
    load.latency_us.mean = 10_000.0;
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let pipe = (a.parts.iter())
        .find(|p| p.resource == Some(Resource::Pipe))
        .unwrap();
    assert!((a.requests_per_thread - 4.0).abs() < 1e-9);
    assert!((pipe.requests_delayed - 10.0).abs() < 1e-9, "{pipe:?}");
    let waited_ms = pipe.per_request_ms * 10_000.0 / pipe.requests_delayed;
    assert!(
        (waited_ms - pipe.waits.unwrap() * 30.0).abs() < 1e-6,
        "{pipe:?}"
    );
}

/// A worker that sleeps in one syscall for one wait alone: 48 sleeps of 30 ms by the scheduler's
/// count, of which the three drawn happened to average 50 ms. The count is the scheduler's, not
/// the time over the drawn mean; a wait that shares its syscall with others keeps the drawn mean.
#[test]
fn a_wait_alone_in_its_syscall_takes_the_schedulers_count_of_its_sleeps() {
    use crate::stacks::LineSet;
    // The worker's waits for work and its pipe reads, with a disk read as long in the same
    // syscall or without.
    let stacks_with = |disk_read: bool| {
        let mut off = LineSet::default();
        add_drawn(
            &mut off,
            "nginx;ngx_process_events;epoll_wait;do_syscall_64_[k];do_epoll_wait_[k];ep_poll_[k];schedule_[k]",
            40_000_000,
            10_000,
        );
        add_drawn(
            &mut off,
            "nginx;ngx_http_lua_run_thread;io_popen_read;fread;read;do_syscall_64_[k];ksys_read_[k];anon_pipe_read_[k];schedule_[k]",
            150_000,
            3,
        );
        if disk_read {
            add_drawn(
                &mut off,
                "nginx;ngx_http_read_file;read;do_syscall_64_[k];ksys_read_[k];folio_wait_bit_common_[k];schedule_[k]",
                150_000,
                3,
            );
        }
        let mut stacks = FoldedStacks::default();
        stacks.set(StackKind::OffCpu, off.finish());
        stacks
    };
    let (stacks, shared_stacks) = (stacks_with(false), stacks_with(true));
    let load = load_at(2_400, 400.0);
    let server = KernelReport {
        threads: vec![crate::kernel_report::ThreadReport {
            comm: "nginx".into(),
            oncpu_ns: 1_000_000,
            ..Default::default()
        }],
        syscalls: vec![crate::kernel_report::SyscallReport {
            name: "read".into(),
            blocked: Some(48),
            blocked_ns: Some(48 * 30_000_000),
            ..Default::default()
        }],
        ..Default::default()
    };
    let part = |stacks: &FoldedStacks| -> TailPart {
        let a = account_of(&load, &server, &KernelReport::default(), stacks);
        (a.parts.into_iter())
            .find(|p| p.resource == Some(Resource::Pipe))
            .unwrap()
    };
    let alone = part(&stacks);
    assert!((alone.waits.unwrap() - 48.0).abs() < 1e-9, "{alone:?}");
    assert!(
        (alone.mean_wait_ms.unwrap() - 30.0).abs() < 1e-9,
        "{alone:?}"
    );
    // Half the syscall's sleeping time is a disk read's: the drawn mean.
    let shared = part(&shared_stacks);
    assert!(
        (shared.mean_wait_ms.unwrap() - 50.0).abs() < 1e-9,
        "{shared:?}"
    );
}

/// Connection threads that hand each request's work to a pool of "worker" threads and wait for
/// it: a worker sleeps 30 ms for one request in 50. The workers never wait on a socket, so
/// only their wakeups tell that they serve requests: the connection threads wake them as often
/// as requests come, they wake the connection threads back, and they park between jobs. A
/// "logger" woken as often but never waking anyone back serves no request, and its disk writes
/// are none of the tail's; nor does a "helper" that answers asks it waits for on a pipe.
#[test]
fn workers_handed_each_request_and_handing_it_back_are_request_threads() {
    use crate::kernel_report::WakerReport;
    use crate::stacks::LineSet;
    let mut off = LineSet::default();
    add_drawn(
        &mut off,
        "conn;conn_main;read;do_syscall_64_[k];ksys_read_[k];sk_wait_data_[k];schedule_[k]",
        40_000_000,
        10_000,
    );
    add_drawn(
        &mut off,
        "worker;worker_main;do_work;wait_for_ticket;nanosleep;do_syscall_64_[k];__x64_sys_nanosleep_[k];do_nanosleep_[k];schedule_[k]",
        6_000_000,
        200,
    );
    let park = |name: &str| {
        frames(&format!(
            "{name};{name}_main;pthread_cond_wait;do_syscall_64_[k];__x64_sys_futex_[k];futex_wait_[k];schedule_[k]"
        ))
    };
    off.add(GROUP_SERVER, park("worker"), 14_000_000);
    off.add(GROUP_SERVER, park("logger"), 1_000_000);
    off.add(
        GROUP_SERVER,
        frames(
            "logger;log_main;write;do_syscall_64_[k];ksys_write_[k];io_schedule_[k];schedule_[k]",
        ),
        9_000_000,
    );
    // A helper that reads asks from a pipe and answers them: handed work and handing it back,
    // but its wait for asks is a pipe's, which would read as the requests' own.
    off.add(
        GROUP_SERVER,
        frames("helper;helper_main;read;do_syscall_64_[k];ksys_read_[k];vfs_read_[k];pipe_read_[k];schedule_[k]"),
        20_000_000,
    );
    let mut stacks = FoldedStacks::default();
    stacks.set(StackKind::OffCpu, off.finish());
    let load = load_at(10_000, 700.0);
    let woke = |waker: &str, wakee: &str, count| WakerReport {
        waker_pid: 7,
        waker_comm: waker.into(),
        wakee_comm: wakee.into(),
        count,
        processes: 1,
    };
    let mut server = KernelReport {
        wakers: vec![
            woke("conn", "worker", 10_000),
            woke("conn", "logger", 10_000),
            woke("conn", "helper", 10_000),
            woke("helper", "conn", 10_000),
        ],
        ..Default::default()
    };
    let account =
        |server: &KernelReport| account_of(&load, server, &KernelReport::default(), &stacks);
    // Not handed back: the workers' sleep and the logger's writes are no request's.
    let a = account(&server);
    assert_eq!(a.request_threads, ["conn"], "{a:?}");
    assert!(a.parts.iter().all(|p| p.place != Place::Blocked), "{a:?}");
    // A busy pool: its workers find most jobs queued, woken for one in seven.
    let busy = KernelReport {
        wakers: vec![
            woke("conn", "worker", 1_500),
            woke("worker", "conn", 10_000),
        ],
        ..Default::default()
    };
    assert_eq!(account(&busy).request_threads, ["conn", "worker"]);
    server.wakers.push(woke("worker", "conn", 9_800));
    let a = account(&server);
    assert_eq!(a.request_threads, ["conn", "worker"], "{a:?}");
    let top = &a.parts[0];
    assert_eq!(top.resource, Some(Resource::Sleep), "{a:?}");
    assert_eq!(top.threads, ["worker"]);
    assert_eq!(top.function.as_deref(), Some("wait_for_ticket"));
    assert!(top.share > 0.9, "{a:?}");
    assert!(
        a.parts.iter().all(|p| p.resource != Some(Resource::Disk)),
        "{a:?}"
    );
    assert!(
        a.parts.iter().all(|p| p.resource != Some(Resource::Pipe)),
        "{a:?}"
    );
}

/// A thread per connection, one request in fifty spinning 28 ms on a CPU, and 0.5 % of the
/// requests sent 33 ms late by the open loop: the threads' runs from a wakeup to the next
/// sleep (the scheduler's histogram) put that CPU on the slowest requests, where the CPU a
/// request alone spreads it over 1 % of them at most (at p50 0.45 ms, half of p99); the late
/// sends, too few to make p99, do not take the spinning requests' place at it.
#[test]
fn a_rare_long_run_on_a_cpu_is_the_slowest_requests_time() {
    use srvprof_common::hist::slot_of;
    let (mut load, mut server, stacks) = threaded(40_000_000, 0);
    load.latency_us.p50 = 450;
    load.latency_us.mean = 1_000.0;
    load.open_loop = Some(open_loop(835.0, 50, 30_000, None));
    // 9,800 runs of 40 us and 200 of 28 ms: 5,992 ms.
    server.threads[0].oncpu_ns = 5_992_000_000;
    let mut runs = crate::record::NsHistogram::default();
    runs.slots[slot_of(40_000) as usize] = 9_800;
    runs.slots[slot_of(28_000_000) as usize] = 200;
    let cpu_share = |server: &KernelReport, runs: Option<&crate::record::NsHistogram>| {
        let a = account(Inputs {
            load: &load,
            server,
            client: &KernelReport::default(),
            runq_lengths: None,
            oncpu_run_lengths: runs,
            run_wall_lengths: None,
            runq_preempted_lengths: None,
            accept_lengths: None,
            pause_lengths: None,
            send_hold_lengths: None,
            transfer_lengths: None,
            server_cpu_us: 599.2,
            client_cpu_us: 10.0,
            stacks: &stacks,
        })
        .unwrap();
        let queue = (a.parts.iter()).find(|p| p.place == Place::ClientQueue);
        assert!(queue.is_some_and(|q| q.tail_ms == 0.0), "{a:?}");
        (a.parts.iter())
            .find(|p| p.place == Place::OnCpu)
            .map(|p| p.share)
            .unwrap()
    };
    let with_runs = cpu_share(&server, Some(&runs));
    assert!(with_runs >= 0.9, "{with_runs}");
    let without = cpu_share(&server, None);
    assert!(without < 0.6, "{without}");
    // The runs stand for the request threads' only when those hold nearly all the CPU.
    server.threads.push(crate::kernel_report::ThreadReport {
        comm: "jit".into(),
        oncpu_ns: 2_000_000_000,
        ..Default::default()
    });
    assert!((cpu_share(&server, Some(&runs)) - without).abs() < 1e-9);
}

/// A Go program's stop-the-world pauses are runs of the thread that holds them: each takes the
/// shortest run at least as long as itself out of the runs, a short pause a short run.
#[test]
fn each_go_pause_takes_its_own_run_out_of_the_cpus_runs() {
    use super::compose::without_pauses;
    use srvprof_common::hist::slot_of;
    let slot = |ns: u64| slot_of(ns) as usize;
    let mut runs = crate::record::NsHistogram::default();
    runs.slots[slot(40_000)] = 9_800;
    runs.slots[slot(150_000)] = 30;
    runs.slots[slot(22_000_000)] = 60;
    runs.slots[slot(28_000_000)] = 20;
    let mut pauses = crate::record::NsHistogram::default();
    pauses.slots[slot(100_000)] = 10;
    pauses.slots[slot(20_000_000)] = 75;
    let left = without_pauses(&runs, &pauses);
    assert_eq!(left.slots[slot(40_000)], 9_800);
    assert_eq!(left.slots[slot(150_000)], 20);
    assert_eq!(left.slots[slot(22_000_000)], 0);
    assert_eq!(left.slots[slot(28_000_000)], 5);
    assert_eq!(left.total(), 9_825);
}

/// The load generator timed how late the requests at p99 went out: the client's queue takes
/// that, measured, and the waits that made those requests slow share the rest. Here 2 % of
/// requests sent 25 ms late, but those at p99 only 2 ms late: the spinning requests' CPU is
/// the rest; unmeasured, the late sends' mean wait would take 25 ms of the 30.
#[test]
fn the_clients_queue_at_p99_is_what_the_load_generator_timed_there() {
    let (mut load, mut server, stacks) = threaded(40_000_000, 0);
    load.latency_us.mean = 900.0;
    load.open_loop = Some(open_loop(400.0, 200, 40_000, Some(2_000.0)));
    server.threads[0].oncpu_ns = 6_000_000_000;
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    let queue = (a.parts.iter()).find(|p| p.place == Place::ClientQueue);
    assert!(
        queue.is_some_and(|q| (q.tail_ms - 2.0).abs() < 1e-9),
        "{a:?}"
    );
    assert_eq!(a.parts[0].place, Place::OnCpu, "{a:?}");
    assert!(a.parts[0].tail_ms > 25.0, "{a:?}");
    // Measured past what p99 has above the median, it takes only that.
    load.open_loop.as_mut().unwrap().late_at_p99_us = Some(40_000.0);
    let a = account_of(&load, &server, &KernelReport::default(), &stacks);
    assert_eq!(a.parts[0].place, Place::ClientQueue, "{a:?}");
    assert!((a.parts[0].tail_ms - 29.9).abs() < 1e-9, "{a:?}");
}

/// A service with one slow answer (30 ms) in 50 fast ones (0.5 ms) that an event loop slept on
/// three times an answer: its long waits are the slow answers, 47 of 2,350, at 30 ms, not three
/// times as many at a third of the length, whichever way its sleeps fall.
#[test]
fn a_services_long_waits_are_its_slow_answers_however_often_it_was_slept_on() {
    use srvprof_common::hist::slot_of;
    let mut lengths = crate::record::NsHistogram::default();
    lengths.slots[slot_of(500_000) as usize] = 2_303;
    lengths.slots[slot_of(30_000_000) as usize] = 47;
    let answer_ns = 2_303 * 500_000 + 47 * 30_000_000;
    let service = |waits: u64, wait_ns: u64| crate::record::Outbound {
        remote: "127.0.0.1:9000".into(),
        opened: 1,
        waits,
        wait_ns,
        answers: 2_350,
        answer_ns,
        answer_lengths: Some(lengths.clone()),
        ..Default::default()
    };
    // Slept on three times an answer, or not at all (an event loop polling it).
    for o in [service(3 * 2_350, answer_ns), service(0, 0)] {
        let (load, mut server, stacks) = threaded(46_000_000, 0);
        server.outbound = vec![o];
        let a = account_of(&load, &server, &KernelReport::default(), &stacks);
        let part = (a.parts.iter())
            .find(|p| p.resource == Some(Resource::Service))
            .unwrap_or_else(|| panic!("{a:?}"));
        let long = part
            .long_waits
            .as_ref()
            .unwrap_or_else(|| panic!("{part:?}"));
        assert!((long.waits - 47.0).abs() < 1e-6, "{long:?}");
        assert!((25.0..40.0).contains(&long.mean_ms), "{long:?}");
    }
}
