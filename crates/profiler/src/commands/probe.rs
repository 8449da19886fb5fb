//! `srvprof probe`: watch running processes for a while, print a timeline and a summary.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Instant;

use srvprof_common::GROUP_SERVER;

use crate::cli::{Format, ProbeArgs};
use crate::error::SrvprofError;
use crate::probes::{ProbeTargets, Probes, tcp::AcceptWaits};
use crate::render::text;
use crate::sampler::Sampler;
use crate::stacks::{perf_map::StartMaps, symbolize};
use crate::{clock, output, procfs};
use srvprof_analysis::kernel_report::kernel_report;
use srvprof_analysis::probe_output::{ProbeOutput, ProbeSeries};
use srvprof_analysis::series::ReadingSeries;

pub fn run(args: &ProbeArgs) -> Result<(), SrvprofError> {
    // First: a Ctrl-C or SIGTERM from here on ends the run cleanly instead of killing it.
    if args.pyroscope.is_some() && !args.stacks {
        return Err(SrvprofError::Usage(
            "--pyroscope pushes the targets' stacks: add --stacks on".into(),
        ));
    }
    // Its credentials and TLS now, before anything is attached.
    let pyroscope = output::pyroscope::receiver(
        args.pyroscope.as_ref(),
        args.cacert.as_deref(),
        args.pyroscope_auth_file.as_deref(),
    )?;
    let stop = super::prepare_to_probe()?;
    let mut notes = Vec::new();
    // As `run` does: the given processes and their children (nginx's master and its workers).
    let pids =
        crate::discover::with_descendants(&crate::discover::live_targets(&args.pids, &mut notes)?);
    let clock = args.start_at.map(|_| srvprof_loadgen::start::clock_state());
    if let (Some(at), Some(clock)) = (args.start_at, &clock) {
        srvprof_loadgen::start::check(at, clock, args.allow_unsynced)
            .map_err(SrvprofError::Loadgen)?;
    }
    // The folder opened (made, private) now: one that cannot hold the results stops the probe
    // before it measures.
    let out_dir = match &args.out {
        Some(dir) => Some(output::open_dir(dir)?),
        None => None,
    };
    if let Some(dir) = &out_dir {
        output::check_writable(dir, "probe.json", args.force)?;
    }
    // TCP figures are about the targets' own listening ports, when they have any.
    let mut ports: Vec<u16> = crate::discover::listening_addrs(&pids)
        .iter()
        .map(|a| a.port())
        .collect();
    ports.dedup();
    // The JVMs' perf maps as they are now (with stacks only: naming is for them).
    let jit_maps = match args.stacks {
        true => StartMaps::take(&pids),
        false => StartMaps::default(),
    };
    notes.extend(jit_maps.notes.iter().cloned());
    let targets = ProbeTargets {
        server_pids: pids.clone(),
        tcp_ports: ports.clone(),
        stack_sample_hz: args.stacks.then_some(args.freq),
        skip_syscalls: !args.syscalls.on,
        sampled_window: args.syscalls.sampled_window(args.interval),
        skip: args.syscalls.skip.clone(),
        empty_window_programs: args.syscalls.empty_window_programs,
        // Whether the clients open a connection per request is not known here.
        accept_waits: AcceptWaits::WhileConnecting,
        ..Default::default()
    };
    let probes = Probes::attach(&targets, |_, _| {})?;
    if let (Some(at), Some(clock)) = (args.start_at, &clock) {
        eprintln!(
            "srvprof: probes attached; watching from {}",
            at.to_rfc3339()
        );
        if !srvprof_loadgen::start::wait_for(at, clock, args.allow_unsynced, &stop)
            .map_err(SrvprofError::Loadgen)?
        {
            eprintln!(
                "srvprof: interrupted before {}: nothing was watched",
                at.to_rfc3339()
            );
            return Ok(());
        }
    }
    // With --start-at, watching starts at that instant, not when this thread woke for it (late
    // by the scheduler): its rows then sit on the load agents' wall-clock grid.
    let woke_late = args.start_at.map_or(0, |at| at.passed().as_nanos() as u64);
    let start_ns = clock::monotonic_ns().saturating_sub(woke_late);
    let mut sampler =
        Sampler::new(probes, start_ns, pids.first().copied()).with_listen_ports(ports);
    (sampler.probes_mut()).set_stack_grid(start_ns, args.interval.as_nanos() as u64);
    let mut series = ReadingSeries::on_grid(start_ns, args.interval);
    let mut first = sampler.take_reading(false)?;
    first.due_ns = Some(start_ns);
    series.push(first);
    let mut stdout = std::io::stdout().lock();
    for note in &notes {
        eprintln!("srvprof: {note}");
    }
    // On stderr in every format: the probes are attached from here on (scripts wait for this line).
    eprintln!(
        "srvprof: watching PIDs {} for {:?} (Ctrl-C stops early)",
        join(&pids),
        args.duration
    );
    if args.format() == Format::Text {
        let cpus = series.first().map_or(0, |s| s.kernel.softirqs.len());
        text::interval_header(&mut stdout, cpus);
    }
    let started = Instant::now();
    // As in `run`: a real-time sampler on a grid of absolute deadlines, so intervals neither start
    // late on a busy CPU nor drift by the time each reading takes.
    let realtime = crate::realtime::realtime_thread();
    if let Err(e) = &realtime {
        notes.push(format!(
            "the sampler ran at normal priority ({e}): on a saturated CPU its intervals may start late"
        ));
    }
    let grid = (
        start_ns,
        args.interval.as_nanos() as u64,
        start_ns + args.duration.as_nanos() as u64,
    );
    let stopped = || stop.load(Ordering::Relaxed);
    crate::grid::readings(&mut sampler, grid, 1, stopped, |sampler, reading| {
        series.push(reading);
        if args.format() == Format::Text
            && let Some(row) = series.server_rows.last()
        {
            text::interval_line(&mut stdout, row);
        }
        let watched = sampler.probes_mut().watched_pids()?;
        if watched.iter().all(|(p, _)| !procfs::process_alive(*p)) {
            notes.push(format!(
                "every watched process exited {:.1} s into the run; stopped early",
                started.elapsed().as_secs_f64()
            ));
            return Ok(false);
        }
        Ok(true)
    })?;
    drop(realtime);
    if stop.load(Ordering::Relaxed) {
        notes.push(format!(
            "interrupted after {:.1} s; the figures cover that time",
            started.elapsed().as_secs_f64()
        ));
    }
    let stacks = match args.stacks {
        true => symbolize::read_named(sampler.probes_mut(), &jit_maps),
        false => None,
    };
    let observer = srvprof_analysis::observer::cost(&sampler.observer());
    let (Some(first), Some(last)) = (series.first(), series.last()) else {
        unreachable!("the series holds the first sample")
    };
    // A run its server's exit stopped ended on a reading the grid did not know was the last.
    let mut last = last.clone();
    if last.time_wait.is_none() {
        last.time_wait = sampler.time_wait_now();
    }
    let exits = sampler.finish();
    let mut report = kernel_report(first, &last, GROUP_SERVER, &exits);
    series.state_errors(&mut report, GROUP_SERVER, series.server_rows.len());
    let series_rows = series.server_rows.clone();
    notes.extend(report.sampling_note());
    let run_id = srvprof_loadgen::start::run_id(args.run_id.as_deref(), args.start_at);
    // The folded series, for `srvprof merge` to build a split run's report from (before the rows
    // move into probe.json).
    let series_json = args.out.as_ref().map(|_| {
        serde_json::to_string(&ProbeSeries {
            pids: pids.clone(),
            series,
            exits: exits.clone(),
            observer: observer.clone(),
        })
        .expect("a series serializes")
    });
    let out = ProbeOutput {
        tool: "srvprof",
        report,
        intervals: series_rows,
        notes,
        observer,
        host: run_id.as_ref().map(|_| srvprof_loadgen::start::host_name()),
        run_id,
        start_at: args.start_at.map(|at| at.to_rfc3339()),
        clock,
    };
    let json = serde_json::to_string_pretty(&out).expect("report serializes");
    match args.format() {
        Format::Json => {
            let _ = writeln!(stdout, "{json}");
        }
        Format::Text => {
            text::kernel_summary(&mut stdout, &out.report, &out.notes);
            if let Some(o) = &out.observer {
                let line = crate::render::run_text::observer_line(o);
                let _ = writeln!(stdout, "watching: {line}");
            }
        }
    }
    if let Some(dir) = &out_dir {
        output::write_atomic(dir, "probe.json", json.as_bytes(), args.force)?;
        if let Some(text) = series_json {
            output::write_atomic(dir, "series.json", text.as_bytes(), args.force)?;
        }
        if let Some(stacks) = &stacks {
            output::stacks::write_dir(stacks, dir, args.force)?;
            let binaries = crate::stacks::build_id::Binaries::read(&pids, &[]);
            crate::render::pprof::write(dir, stacks, args.freq, &binaries, args.force)?;
        }
        dir.finish().map_err(|e| output::write_err(dir.path(), e))?;
        if let Some(receiver) = &pyroscope {
            let run = out
                .run_id
                .clone()
                .unwrap_or_else(srvprof_loadgen::start::run_id_from_now);
            let window = crate::output::pyroscope::window_from(start_ns, out.report.duration_s);
            match crate::output::pyroscope::push_window(receiver, dir.path(), &run, window) {
                Ok(()) => eprintln!(
                    "srvprof: pushed the targets' profile to {}",
                    receiver.endpoint().url
                ),
                Err(e) => eprintln!("srvprof: {e}"),
            }
        }
    }
    Ok(())
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
