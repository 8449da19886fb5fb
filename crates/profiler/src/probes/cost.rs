//! The probes' own cost, as the kernel accounts it: each program's run time and runs
//! (bpf_stats). The accounting is switched on by holding a BPF_ENABLE_STATS descriptor, for some
//! intervals only: while it is on, every program of the machine pays two clock reads a call, and
//! each switch is a kernel text rewrite like a program's attach (timed as a flip).

use std::os::fd::OwnedFd;

use aya::sys::{Stats, enable_stats};
use srvprof_analysis::observer::{Flips, ProgramRuns};

use super::Probes;
use crate::clock;

/// The switch, and its flips.
#[derive(Default)]
pub struct Accounting {
    on: Option<OwnedFd>,
    flips: Flips,
}

impl Accounting {
    /// Switches the accounting on; false when the kernel refuses (before 5.8).
    pub fn start(&mut self) -> bool {
        if self.on.is_some() {
            return true;
        }
        let before = clock::monotonic_ns();
        self.on = enable_stats(Stats::RunTime).ok();
        self.flips.add(clock::monotonic_ns().saturating_sub(before));
        self.on.is_some()
    }

    pub fn stop(&mut self) {
        if let Some(fd) = self.on.take() {
            let before = clock::monotonic_ns();
            drop(fd);
            self.flips.add(clock::monotonic_ns().saturating_sub(before));
        }
    }
}

impl Probes {
    /// Each loaded program's run time and runs so far (cumulative since load).
    pub fn program_runs(&self) -> Vec<ProgramRuns> {
        self.ebpf
            .programs()
            .filter_map(|(name, prog)| {
                let info = prog.info().ok()?;
                Some(ProgramRuns {
                    program: name.to_string(),
                    run_ns: info.run_time().as_nanos() as u64,
                    calls: info.run_count(),
                })
            })
            .collect()
    }

    /// Switches the kernel's accounting of the programs' run time on; false when it cannot be.
    pub fn start_timing(&mut self) -> bool {
        self.accounting.start()
    }

    pub fn stop_timing(&mut self) {
        self.accounting.stop();
    }

    /// srvprof's flips so far: the syscall programs' attaches and detaches, and the
    /// accounting's switches.
    pub fn flips(&self) -> Flips {
        let window = self.window.as_ref().map(|w| w.flips).unwrap_or_default();
        window.merged(self.accounting.flips)
    }
}
