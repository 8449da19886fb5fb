//! `srvprof run`: drive the server with load and, in the same run and on the same clock, watch the
//! kernel under it and under the load generator; then relate the two.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cli::{RunArgs, Stacks};
use crate::discover::{self, ServerProcess};
use crate::error::SrvprofError;
use crate::probes::{ProbeTargets, Probes, tcp::AcceptWaits};
use crate::render;
use crate::render::run_text;
use crate::sampler::Sampler;
use crate::stacks::{perf_map::StartMaps, symbolize};
use crate::{clock, output};
use srvprof_analysis::run_report::{Observed, RunReport, TargetInfo, build};
use srvprof_analysis::series::ReadingSeries;
use srvprof_analysis::stacks::FoldedStacks;
use srvprof_analysis::with_findings;
use srvprof_files::OutDir;

pub fn run(args: &RunArgs) -> Result<ExitCode, SrvprofError> {
    if args.pyroscope.is_some() && args.stacks == crate::cli::Stacks::Off {
        return Err(SrvprofError::Usage(
            "--pyroscope pushes the server's stacks: leave out --stacks off".into(),
        ));
    }
    // Its credentials and TLS now: a file that cannot be read stops the run before it starts.
    let pyroscope = output::pyroscope::receiver(
        args.pyroscope.as_ref(),
        args.load.cacert.as_deref(),
        args.pyroscope_auth_file.as_deref(),
    )?;
    // First: a Ctrl-C or SIGTERM from here on ends the run cleanly instead of killing it.
    let stop = super::prepare_to_probe()?;
    // Everything measured is kept: without --out, in a new folder named for when the run began,
    // made (private) now, so a folder that cannot be written stops the run before it measures.
    let out = match &args.out {
        Some(dir) => output::open_dir(dir)?,
        None => new_run_folder(Path::new("."), &local_time_stamp())?,
    };
    check_out_dir(&out, args.force)?;
    let mut notes = Vec::new();
    let mut server_process = match &args.cmd {
        Some(cmd) => {
            // Under sudo the server is the invoking user's, as it would be without srvprof.
            let user = crate::privilege::invoking_account().filter(|_| !args.cmd_as_root);
            Some(ServerProcess::start(
                cmd,
                user.as_ref(),
                Duration::from_secs(60),
            )?)
        }
        None => None,
    };
    let given: Vec<u32> = match &server_process {
        Some(s) => vec![s.pid],
        None => discover::live_targets(&args.pids, &mut notes)?,
    };
    let pids = discover::with_descendants(&given);
    // The JVMs' perf maps as they are now, and a sentence for each JIT runtime whose code will
    // stay unnamed (with stacks only: naming is for them).
    let jit_maps = if args.stacks.on() {
        StartMaps::take(&pids)
    } else {
        StartMaps::default()
    };
    notes.extend(jit_maps.notes.iter().cloned());
    let url = match &args.url {
        Some(u) => u.clone(),
        None => discover::discover_url(&pids, &mut notes)?,
    };
    let mut config = args.load.to_config().map_err(SrvprofError::Loadgen)?;
    config.url = url.clone();
    if args.pyroscope.is_some() {
        // The pushed profile is labelled with the run it belongs to.
        config.run_id = config
            .run_id
            .or_else(|| Some(srvprof_loadgen::start::run_id_from_now()));
    }
    // srvprof's own threads (the sampler's reading, the unwinder) run where its load generator
    // runs, not on the server's CPUs, where their bursts would delay the server they measure.
    // Threads started from here on inherit it; the server (--cmd) was started before.
    if let Some(cpus) = config.cpus.as_deref()
        && let Err(e) = srvprof_loadgen::pin_current_thread_to(cpus)
    {
        notes.push(format!(
            "could not keep srvprof's own threads on CPUs {cpus:?} ({e}): they may run on the server's CPUs"
        ));
    }
    for n in &notes {
        eprintln!("srvprof: {n}");
    }
    eprintln!(
        "srvprof: profiling PIDs {} while loading {}",
        join(&pids),
        srvprof_loadgen::redact::url(&url)
    );

    let port = discover::url_port(&url).unwrap_or(80);
    let targets = ProbeTargets {
        server_pids: pids.clone(),
        client_pids: vec![std::process::id()],
        tcp_ports: vec![port],
        stack_sample_hz: args.stacks.on().then_some(args.freq),
        client_stacks: args.stacks == Stacks::All,
        skip_syscalls: !args.syscalls.on,
        sampled_window: args.syscalls.sampled_window(config.interval),
        skip: args.syscalls.skip.clone(),
        empty_window_programs: args.syscalls.empty_window_programs,
        accept_waits: match config.keepalive {
            true => AcceptWaits::Off,
            false => AcceptWaits::Always,
        },
    };
    let probes = Probes::attach(&targets, |_, _| {})?;
    // Scripts and tests bracket the probed window with this line and "reading stacks".
    eprintln!(
        "srvprof: probes attached; warming up for {:?}, then measuring",
        config.warmup + config.ramp_up
    );
    let interval = config.interval;
    let progress = Arc::new(srvprof_loadgen::Progress::default());
    // Until the load generator says when it starts measuring (the origin of its interval grid).
    let provisional_start = clock::monotonic_ns();
    let mut sampler = Sampler::new(probes, provisional_start, pids.first().copied())
        .with_listen_ports(listen_ports(&pids, port))
        .with_responses({
            let progress = Arc::clone(&progress);
            move || progress.responses()
        });
    // The first reading's walk of the socket table, before the load starts: it runs on the load
    // generator's CPUs, in one piece.
    sampler.walk_before_start()?;
    let load_done = Arc::new(AtomicBool::new(false));
    let sampling = {
        let load_done = Arc::clone(&load_done);
        let progress = Arc::clone(&progress);
        let duration = config.duration;
        // Named, so that run.json's observer and a user's `top -H` tell its time from the load's.
        std::thread::Builder::new()
            .name("srvprof-sampler".into())
            .spawn(move || {
                sample_every(
                    sampler, &progress, interval, duration, &load_done, &jit_maps,
                )
            })
            .expect(
                "the system would not start srvprof's sampling thread (out of threads or memory)",
            )
    };

    let load = srvprof_loadgen::run_with_progress(&config, Arc::clone(&stop), progress);
    load_done.store(true, Ordering::Relaxed);
    let Sampled {
        samples,
        exits,
        error: sample_error,
        stacks,
        not_realtime,
        observer,
    } = sampling.join().expect("sampling thread");
    notes.extend(not_realtime);
    if let Some(s) = server_process.as_mut() {
        s.stop();
    }
    // Only the --hdr-log file failed after the load: the run is still reported and written.
    let (load, hdr_log_error) = match load {
        Ok(load) => (load, None),
        Err(mut e) => match e.take_measured() {
            Some(load) => (load, Some(e)),
            None => return Err(SrvprofError::Loadgen(e)),
        },
    };
    if let Some(e) = sample_error {
        notes.push(format!("sampling stopped early: {e}"));
    }
    if stop.load(Ordering::Relaxed) {
        notes.push("interrupted; the figures cover the time measured until then".into());
    }
    if samples.len() < 2 {
        notes.push("the run ended before a full interval was measured".into());
    }
    if let Some(error) = load.remote_write.as_ref().and_then(|rw| rw.error.as_ref()) {
        notes.push(error.clone());
    }
    let target = target_info(pids, &url, args.cmd.clone());
    let observed = Observed {
        stacks: stacks.as_ref(),
        observer: srvprof_analysis::observer::cost(&observer),
    };
    let report = with_findings(build(target, load, &samples, &exits, notes, observed));
    if args.json {
        let json = serde_json::to_string_pretty(&report).expect("run report serializes");
        println!("{json}");
    } else {
        print!(
            "{}",
            crate::render::first_screen::text(&report, stacks.as_ref(), args.timeline)
        );
    }
    let dir = &out;
    write_run(dir, &report, stacks.as_ref(), args.force)?;
    let dir_path = dir.path();
    // Here, not in write_run: run.json does not keep the sampling frequency pprof needs.
    if let Some(s) = &stacks {
        let client = [std::process::id()];
        let binaries = crate::stacks::build_id::Binaries::read(&report.target.pids, &client);
        crate::render::pprof::write(dir, s, args.freq, &binaries, args.force)?;
    }
    if let Some(receiver) = &pyroscope {
        match crate::output::pyroscope::push(receiver, dir_path, &report.load) {
            Ok(()) => eprintln!(
                "srvprof: pushed the server's profile to {}",
                receiver.endpoint().url
            ),
            Err(e) => eprintln!("srvprof: {e}"),
        }
    }
    eprintln!(
        "srvprof: wrote {}; the report: {}",
        dir_path.display(),
        dir.join("report.html").display()
    );
    if !args.json {
        println!("{:<13}{}", "report", dir.join("report.html").display());
    }
    if let Some(e) = hdr_log_error {
        return Err(SrvprofError::Loadgen(e));
    }
    Ok(if report.load.completed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What the sampling thread hands back.
struct Sampled {
    samples: ReadingSeries,
    exits: Vec<srvprof_analysis::record::ExitRecord>,
    error: Option<SrvprofError>,
    stacks: Option<FoldedStacks>,
    /// Why the sampler could not run as a real-time thread, if it could not.
    not_realtime: Option<String>,
    observer: srvprof_analysis::observer::ObserverTally,
}

/// Samples on the load generator's interval grid, at measure start + k * interval, until the load
/// is done, then once more; then names the stacks, while the server still runs.
///
/// It keeps time as a real-time thread sleeping to absolute deadlines (see realtime.rs). Every
/// sample carries the time it was taken and the grid point it was due at; one taken so late that
/// it passed the next grid point ends the intervals it spans, and the next is due at the next
/// grid point ahead, never in a burst of catching up.
/// How often the warm-up's counters are looked at for answers held unsent and asks (ms).
const HOLD_LOOK_MS: u64 = 100;

fn sample_every(
    mut sampler: Sampler,
    progress: &srvprof_loadgen::Progress,
    interval: Duration,
    duration: Option<Duration>,
    load_done: &AtomicBool,
    jit_maps: &StartMaps,
) -> Sampled {
    let interval_ns = (interval.as_nanos() as u64).max(1);
    let mut error = None;
    // Real-time while sampling, so a saturated CPU does not make the readings late.
    let realtime = crate::realtime::realtime_thread();
    let not_realtime = realtime.as_ref().err().map(|e| {
        format!("the sampler ran at normal priority ({e}): on a saturated CPU its intervals may start late (t_s against load_t_s)")
    });
    if let Some(n) = &not_realtime {
        eprintln!("srvprof: {n}");
    }
    let measure_start = loop {
        if let Some(ns) = progress.measure_start_ns() {
            break Some(ns);
        }
        if load_done.load(Ordering::Relaxed) {
            break None; // the load never started (e.g. the port is closed)
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut samples = ReadingSeries::on_grid(measure_start.unwrap_or(0), interval);
    if let Some(measure_start) = measure_start {
        // The warm-up has no readings: the hold and ask programs attach from looks at its
        // counters.
        let look = Duration::from_millis(HOLD_LOOK_MS);
        while clock::monotonic_ns() + 2 * look.as_nanos() as u64 <= measure_start
            && !load_done.load(Ordering::Relaxed)
            && error.is_none()
        {
            std::thread::sleep(look);
            error = sampler.look_at_namespace().err();
        }
        sampler.set_start_ns(measure_start);
        sampler
            .probes_mut()
            .set_stack_grid(measure_start, interval_ns);
        // The kernel figures cover the load's window: the last sample is at its end, before the
        // load generator lets requests in flight finish and closes its connections.
        let measure_end = duration.map_or(u64::MAX, |d| measure_start + d.as_nanos() as u64);
        let grid = (measure_start, interval_ns, measure_end);
        let done = || load_done.load(Ordering::Relaxed);
        let status = crate::render::status::Status::on_stderr();
        let total_s = duration.map(|d| d.as_secs_f64());
        let result = crate::grid::readings(&mut sampler, grid, 0, done, |_, reading| {
            let measured_s = reading.monotonic_ns.saturating_sub(measure_start) as f64 / 1e9;
            samples.push(reading);
            status.show(&crate::render::status::line(
                measured_s,
                total_s,
                progress.so_far(),
                interval.as_secs_f64(),
            ));
            Ok(true)
        });
        status.clear();
        if let Err(e) = result {
            error = Some(e);
        }
    }
    drop(realtime);
    eprintln!("srvprof: load done; reading stacks");
    let stacks = symbolize::read_named(sampler.probes_mut(), jit_maps);
    let observer = sampler.observer();
    let exits = sampler.finish();
    Sampled {
        samples,
        exits,
        error,
        stacks,
        not_realtime,
        observer,
    }
}

/// `srvprof-run-STAMP` in `parent`, or `-2`, `-3`... after it when a run of the same second
/// has the name.
fn new_run_folder(parent: &Path, stamp: &str) -> Result<OutDir, SrvprofError> {
    let name = format!("srvprof-run-{stamp}");
    for n in 1..1000 {
        let path = match n {
            1 => parent.join(&name),
            n => parent.join(format!("{name}-{n}")),
        };
        // Made exclusively: a name someone else took first (even a moment ago) is skipped.
        match OutDir::create_new(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            r => return r.map_err(|e| output::write_err(&path, e)),
        }
    }
    Err(SrvprofError::Usage(format!(
        "{} and 998 more like it exist already; give the run a folder with --out DIR",
        parent.join(&name).display()
    )))
}

/// The local time now as YYYYMMDD-HHMMSS.
fn local_time_stamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: localtime_r reads `now` and writes only into `tm`, which we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&now, &mut tm) };
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

fn check_out_dir(dir: &OutDir, force: bool) -> Result<(), SrvprofError> {
    for name in ["run.json", "timeline.csv", "report.html", "oncpu.folded"] {
        output::check_writable(dir, name, force)?;
    }
    Ok(())
}

/// Writes the run into `dir`, then opens a folder srvprof made up to the user's umask.
pub fn write_run(
    dir: &OutDir,
    report: &RunReport,
    stacks: Option<&FoldedStacks>,
    force: bool,
) -> Result<(), SrvprofError> {
    output::clear_run_folder(dir);
    let json = serde_json::to_string_pretty(report).expect("run report serializes");
    output::write_atomic(dir, "run.json", json.as_bytes(), force)?;
    output::write_atomic(
        dir,
        "timeline.csv",
        run_text::timeline_csv(report).as_bytes(),
        force,
    )?;
    if let Some(stacks) = stacks {
        output::stacks::write_dir(stacks, dir, force)?;
        if let Ok(slowest) = render::slowest::slowest(report, stacks) {
            render::slowest::write_diffs(dir, &slowest, force)?;
        }
    }
    let stacks = output::stacks::read_dir(dir.path())?;
    render::write_flamegraphs(dir, report, &stacks, force)?;
    render::write_html(dir, report, &stacks, force)?;
    dir.finish().map_err(|e| output::write_err(dir.path(), e))
}

/// What run.json says was loaded and watched: the URL without its secrets.
fn target_info(pids: Vec<u32>, url: &str, cmd: Option<String>) -> TargetInfo {
    TargetInfo {
        pids,
        url: srvprof_loadgen::redact::url(url),
        cmd,
    }
}

/// The ports the server listens on (their sockets' drop counters attribute overflows), or the URL's.
fn listen_ports(pids: &[u32], url_port: u16) -> Vec<u16> {
    let mut ports: Vec<u16> = discover::listening_addrs(pids)
        .iter()
        .map(|a| a.port())
        .collect();
    if ports.is_empty() {
        ports.push(url_port);
    }
    ports.dedup();
    ports
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server answering every request with a 200, until `stop` is set.
    fn answering_server(stop: Arc<AtomicBool>) -> (u16, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let thread = std::thread::spawn(move || {
            let end = std::time::Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < end {
                let Ok((mut tcp, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = tcp.set_nonblocking(false);
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                // One request a read: the client waits for each answer before the next.
                while let Ok(n @ 1..) = tcp.read(&mut buf) {
                    let answers = buf[..n].windows(4).filter(|w| w == b"\r\n\r\n").count();
                    for _ in 0..answers {
                        let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                    }
                }
            }
        });
        (port, thread)
    }

    #[test]
    fn run_json_the_report_and_the_screen_hold_no_secret() {
        let stop = Arc::new(AtomicBool::new(false));
        let (port, server) = answering_server(stop.clone());
        let url = format!("http://user:s3cret@127.0.0.1:{port}/");
        let config = srvprof_loadgen::LoadConfig {
            url: url.clone(),
            connections: 1,
            threads: 1,
            requests: Some(3),
            duration: None,
            headers: vec![("Authorization".into(), "Bearer s3cret".into())],
            ..srvprof_loadgen::LoadConfig::default()
        };
        let load = srvprof_loadgen::run(&config, Arc::new(AtomicBool::new(false)));
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        let report = with_findings(RunReport {
            target: target_info(vec![1], &url, None),
            load: load.expect("the load"),
            ..RunReport::default()
        });
        let dir = std::env::temp_dir().join(format!("srvprof-secrets-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_run(&output::open_dir(&dir).unwrap(), &report, None, true).unwrap();
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains("s3cret"), "{}: {text}", path.display());
            files += 1;
        }
        assert!(files >= 3, "run.json, timeline.csv, report.html");
        std::fs::remove_dir_all(&dir).unwrap();
        let screen = crate::render::first_screen::text(&report, None, true);
        assert!(!screen.contains("s3cret"), "{screen}");
    }

    #[test]
    fn a_new_run_folder_never_takes_an_existing_name() {
        let parent = std::env::temp_dir().join(format!("srvprof-folders-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent).unwrap();
        let first = new_run_folder(&parent, "20261127-031500").unwrap();
        assert_eq!(first.path(), parent.join("srvprof-run-20261127-031500"));
        let second = new_run_folder(&parent, "20261127-031500").unwrap();
        assert_eq!(second.path(), parent.join("srvprof-run-20261127-031500-2"));
        // Someone else's folder (or link) of the next name is passed over, never used.
        std::os::unix::fs::symlink("/tmp", parent.join("srvprof-run-20261127-031500-3")).unwrap();
        let third = new_run_folder(&parent, "20261127-031500").unwrap();
        assert!(third.path().ends_with("srvprof-run-20261127-031500-4"));
        let stamp = local_time_stamp();
        assert!(stamp.len() == 15 && stamp.as_bytes()[8] == b'-', "{stamp}");
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
