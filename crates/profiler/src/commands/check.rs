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

pub fn checks() -> Vec<CheckResult> {
    let mut out = Vec::new();
    let privileged = procfs::has_bpf_privileges();
    out.push(result(
        "privileges",
        privileged,
        if privileged {
            "root, or CAP_BPF and CAP_PERFMON".to_string()
        } else {
            SrvprofError::NotRoot.to_string()
        },
    ));
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
        Ok(o) => out.push(result("kernel field offsets", true, format!("{o:?}"))),
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
                Err(e) => out.push(result(&format!("program {program}"), false, e)),
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

pub fn run(json: bool) -> Result<bool, SrvprofError> {
    let results = checks();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).expect("serializes")
        );
    } else {
        for c in &results {
            println!(
                "{} {:<32} {}",
                if c.pass { "PASS" } else { "FAIL" },
                c.name,
                c.detail
            );
        }
    }
    Ok(results.iter().all(|c| c.pass))
}
