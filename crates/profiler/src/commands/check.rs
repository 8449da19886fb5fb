//! `srvprof check`: every prerequisite, pass or fail, with the fix. Exit status 0 only if all pass.

use serde::Serialize;

use crate::error::SrvprofError;
use crate::probes::{KernelOffsets, ProbeTargets, Probes, btf_offsets::VMLINUX_BTF};
use crate::procfs;

#[derive(Serialize, Debug)]
pub struct CheckResult {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

fn result(name: &str, pass: bool, detail: impl Into<String>) -> CheckResult {
    CheckResult {
        name: name.into(),
        pass,
        detail: detail.into(),
    }
}

/// File-descriptor limits (soft, hard).
pub fn fd_limits() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (lim.rlim_cur, lim.rlim_max)
}

/// The capabilities a run needs, in effect or not: which are missing, and how to get them.
fn privileges(missing: &[&str]) -> CheckResult {
    if missing.is_empty() {
        return result(
            "privileges",
            true,
            "CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (or CAP_SYS_ADMIN) in effect",
        );
    }
    result(
        "privileges",
        false,
        format!(
            "{} not in effect: run srvprof with sudo, or grant them to it (sudo setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep \"$(command -v srvprof)\")",
            missing.join(", ")
        ),
    )
}

pub fn checks() -> Vec<CheckResult> {
    let mut out = vec![kernel_version(&procfs::kernel_release())];
    let caps = procfs::caps::Caps::of_self();
    let privileged = caps.missing_for_probes().is_empty();
    out.push(privileges(&caps.missing()));
    let btf = crate::procfs::files::has_kernel_btf();
    out.push(result(
        "kernel BTF",
        btf,
        if btf {
            VMLINUX_BTF.to_string()
        } else {
            SrvprofError::NoKernelBtf.to_string()
        },
    ));
    match KernelOffsets::from_running_kernel() {
        Ok(_) => out.push(result(
            "kernel field offsets",
            true,
            "found in the kernel's BTF: the fields of task_struct, pt_regs, sock, inet_sock and sk_buff the programs read",
        )),
        Err(e) => out.push(result("kernel field offsets", false, e.to_string())),
    }
    out.push(result(
        "tracefs",
        true,
        "not needed: every probe is a BTF tracepoint (tp_btf), which attaches without tracefs",
    ));
    let (soft, hard) = fd_limits();
    // The load generator holds one descriptor per connection plus its own (FD_OVERHEAD); a
    // server started by --cmd has a limit of its own.
    let fits = hard >= 1024 + srvprof_loadgen::FD_OVERHEAD;
    out.push(result(
        "open-file limit",
        fits,
        format!(
            "soft {soft}, hard {hard}: srvprof raises the soft limit to the hard one, so `run -c N` fits while N+{} <= {hard}; the server needs about N of its own (raise them with `ulimit -n` or /etc/security/limits.conf)",
            srvprof_loadgen::FD_OVERHEAD
        ),
    ));
    if privileged && btf {
        // Load and attach every program, watching only ourselves, then detach.
        // Stacks too, at run's default frequency: check covers every program run can attach.
        let targets = ProbeTargets {
            server_pids: vec![std::process::id()],
            stack_sample_hz: Some(99),
            accept_waits: crate::probes::tcp::AcceptWaits::Always,
            ..Default::default()
        };
        let mut attached = Vec::new();
        let outcome = Probes::attach(&targets, |program, r| {
            attached.push((program.to_string(), r.map_err(|e| e.to_string())))
        });
        for (program, r) in attached {
            match r {
                Ok(()) => out.push(result(
                    &format!("program {program}"),
                    true,
                    "loads and attaches",
                )),
                Err(e) => out.push(result(
                    &format!("program {program}"),
                    false,
                    format!("{e}; {}", without(&program)),
                )),
            }
        }
        if let Err(e) = outcome
            && !out
                .iter()
                .any(|c| c.name.starts_with("program ") && !c.pass)
        {
            out.push(result("eBPF object", false, e.to_string()));
        }
    } else {
        out.push(result(
            "eBPF programs",
            false,
            "not tried: fix the checks above first",
        ));
    }
    out
}

/// What a run lacks when `program` cannot load.
fn without(program: &str) -> String {
    use crate::probes::{Family, syscalls};
    match Family::of(program) {
        Some(Family::Oncpu | Family::Offcpu) => "`run` stops here unless given --stacks off".into(),
        Some(family) => {
            let name = clap::ValueEnum::to_possible_value(&family).expect("no family is hidden");
            let what = family.programs();
            format!(
                "`run` and `probe` stop here: they attach {what} (--skip-probes {} leaves {})",
                name.get_name(),
                if what.ends_with('s') { "them out" } else { "it out" }
            )
        }
        None if syscalls::PROGRAMS.contains(&program) => {
            "`run` and `probe` stop here unless given --syscalls off".into()
        }
        None => "`run` and `probe` cannot watch a server: the scheduler's programs are the base of every figure".into(),
    }
}

/// The oldest kernel srvprof is written for: BTF tracepoints (5.5), BPF ring buffers (5.8), and
/// BPF memory charged to the memory cgroup (5.11), since srvprof does not raise RLIMIT_MEMLOCK.
const OLDEST_KERNEL: (u32, u32) = (5, 11);

/// The running kernel's release (`uname -r`), checked against OLDEST_KERNEL.
fn kernel_version(release: &str) -> CheckResult {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let version = numbers.next().flatten().zip(numbers.next().flatten());
    let (major, minor) = OLDEST_KERNEL;
    match version {
        Some(v) if v >= OLDEST_KERNEL => result("kernel", true, format!("Linux {release}")),
        Some(_) => result(
            "kernel",
            false,
            format!(
                "Linux {release} is older than {major}.{minor}, the first with every BPF feature srvprof uses (BTF tracepoints, ring buffers, BPF memory in the memory cgroup): run it on a newer kernel"
            ),
        ),
        None => result(
            "kernel",
            false,
            format!(
                "the kernel's release `{release}` has no version srvprof can read; it needs Linux {major}.{minor} or newer"
            ),
        ),
    }
}

/// The checks as a person reads them: one line each, within 100 columns (details wrapped
/// under themselves), and the programs in one line when every one loads.
pub fn text(results: &[CheckResult]) -> String {
    const WIDTH: usize = 100;
    let programs: Vec<&CheckResult> = (results.iter())
        .filter(|c| c.name.starts_with("program "))
        .collect();
    let all_load = !programs.is_empty() && programs.iter().all(|c| c.pass);
    let summary = result(
        "eBPF programs",
        true,
        format!("all {} load and attach", programs.len()),
    );
    let mut shown: Vec<&CheckResult> = Vec::new();
    for c in results {
        if all_load && c.name.starts_with("program ") {
            if std::ptr::eq(c, programs[0]) {
                shown.push(&summary);
            }
            continue;
        }
        shown.push(c);
    }
    let name_width = shown.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let indent = 5 + name_width + 2;
    let mut out = String::new();
    for c in shown {
        let line = format!(
            "{} {:<name_width$}  {}",
            if c.pass { "PASS" } else { "FAIL" },
            c.name,
            c.detail
        );
        out.push_str(&crate::render::text::wrap(&line, indent, WIDTH));
        out.push('\n');
    }
    out
}

pub fn run(json: bool) -> Result<bool, SrvprofError> {
    let results = checks();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).expect("serializes")
        );
    } else {
        print!("{}", text(&results));
    }
    Ok(results.iter().all(|c| c.pass))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_older_than_5_11_fail_with_the_reason() {
        assert!(kernel_version("6.12.43+deb13-cloud-amd64").pass);
        assert!(kernel_version("5.11.0").pass);
        let old = kernel_version("5.10.0-150-generic");
        assert!(
            !old.pass && old.detail.contains("older than 5.11"),
            "{}",
            old.detail
        );
        assert!(!kernel_version("custom").pass);
    }

    #[test]
    fn a_failing_program_says_what_a_run_loses_and_how_to_go_on() {
        assert!(without("sys_enter").contains("--syscalls off"));
        assert!(without("oncpu_sample").contains("--stacks off"));
        assert!(without("tcp_send_reset").contains("--skip-probes tcp"));
        assert!(without("world_stops").contains("--skip-probes pauses"));
        assert!(without("sched_switch").contains("scheduler's programs"));
        for program in crate::probes::PROGRAMS {
            assert!(without(program).contains("`"), "{program}");
        }
    }

    #[test]
    fn passing_programs_are_one_line_and_every_line_fits_100_columns() {
        let mut results = vec![
            privileges(&[]),
            result("kernel", true, "Linux 6.12.43+deb13-cloud-amd64"),
            result(
                "open-file limit",
                true,
                "soft 20000, hard 20000: srvprof raises the soft limit to the hard one, so `run -c N` fits while N+64 <= 20000; the server needs about N of its own (raise them with `ulimit -n` or /etc/security/limits.conf)",
            ),
        ];
        for p in [
            "sched_switch",
            "mm_vmscan_direct_reclaim_begin",
            "oncpu_sample",
        ] {
            results.push(result(&format!("program {p}"), true, "loads and attaches"));
        }
        results.push(result("tracefs", true, "not needed"));
        let shown = text(&results);
        assert!(shown.lines().all(|l| l.len() <= 100), "{shown}");
        assert_eq!(
            shown,
            "\
PASS privileges       CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (or CAP_SYS_ADMIN) in effect
PASS kernel           Linux 6.12.43+deb13-cloud-amd64
PASS open-file limit  soft 20000, hard 20000: srvprof raises the soft limit to the hard one, so `run
                      -c N` fits while N+64 <= 20000; the server needs about N of its own (raise
                      them with `ulimit -n` or /etc/security/limits.conf)
PASS eBPF programs    all 3 load and attach
PASS tracefs          not needed
"
        );
        // A program that fails is named on its own line, the others too.
        results[4].pass = false;
        results[4].detail = "the verifier refused it".into();
        let shown = text(&results);
        assert!(
            shown.contains("FAIL program mm_vmscan_direct_reclaim_begin  the verifier refused it"),
            "{shown}"
        );
        assert!(shown.contains("PASS program sched_switch"), "{shown}");
        assert!(shown.lines().all(|l| l.len() <= 100), "{shown}");
    }
}
