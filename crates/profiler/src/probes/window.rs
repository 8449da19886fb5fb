//! Sampled mode: the syscall and softirq programs, the ones that run on every syscall and every
//! softirq of the machine, are attached only in short windows, one in each quarter of an
//! interval, placed where the server is busy (the Sampler opens and closes them; where is
//! window_placement's). The hardirq programs stay attached
//! all along: hardirqs are rare next to softirqs (a NIC's interrupts are coalesced, loopback
//! raises none), so they are counted and timed exactly for next to nothing.
//!
//! While the programs sit on the syscall tracepoints, every syscall of every process takes the
//! kernel's traced path (65-160 ns more for a process not watched, measured on this project's VMs), and every softirq runs two
//! programs. On a server doing a few syscalls and a softirq per request that is several percent
//! of its CPU. A window of a twentieth of the time costs a twentieth of that; the figures are then
//! scaled up from the windows (srvprof_analysis::kernel_report::sampling), and the softirq
//! counts come from the kernel's own /proc/softirqs.

use std::time::Duration;

use aya::{
    Ebpf,
    maps::{Array, MapData},
    programs::tp_btf::BtfTracePointLinkId,
};
use srvprof_common::{maps, window};

use super::{attach_loaded, btf_program, map_error, map_mut};
use crate::clock;
use crate::error::SrvprofError;

/// The softirq programs (system-wide, one pair per softirq), attached in the windows with the
/// syscall programs.
pub const SOFTIRQ_PROGRAMS: [&str; 2] = ["softirq_entry", "softirq_exit"];

pub struct Window {
    /// In attach order. The window is the time the last one was attached: the counting program
    /// (sys_exit, which counts syscalls) goes last, so attaching and detaching the others, a few
    /// hundred microseconds each, does not stretch the time its counts are scaled by.
    programs: Vec<&'static str>,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    length: Duration,
    /// When the open window began (monotonic ns, the last program's attach), None when closed.
    opened_ns: Option<u64>,
    /// Time the programs were attached in closed windows.
    closed_traced_ns: u64,
}

impl Window {
    /// `programs` are loaded, not attached.
    pub fn new(programs: Vec<&'static str>, window: Duration) -> Self {
        Self {
            programs,
            links: Vec::new(),
            length: window,
            opened_ns: None,
            closed_traced_ns: 0,
        }
    }

    pub fn length(&self) -> Duration {
        self.length
    }

    pub fn is_open(&self) -> bool {
        self.opened_ns.is_some()
    }

    /// Attaches the programs; the window's start tells them which starts are stale.
    pub fn open(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        if self.is_open() {
            return Ok(());
        }
        {
            let mut w: Array<&mut MapData, u64> = map_mut(ebpf, maps::TRACE_WINDOW)?;
            w.set(window::LEN_NS, self.length.as_nanos() as u64, 0)
                .map_err(|e| map_error(maps::TRACE_WINDOW, e))?;
            w.set(window::START_NS, clock::monotonic_ns(), 0)
                .map_err(|e| map_error(maps::TRACE_WINDOW, e))?;
        }
        let mut last_attached = 0;
        for &name in &self.programs {
            let prog = btf_program(ebpf, name)?;
            let before = clock::monotonic_ns();
            let link = attach_loaded(prog, name, name)?;
            last_attached = midpoint(before, clock::monotonic_ns());
            self.links.push((name, link));
        }
        self.opened_ns = Some(last_attached);
        Ok(())
    }

    /// Detaches the programs, last attached first, adding the window to the traced time.
    pub fn close(&mut self, ebpf: &mut Ebpf) {
        let Some(opened) = self.opened_ns.take() else {
            return;
        };
        let mut first_detached = None;
        while let Some((name, link)) = self.links.pop() {
            let before = clock::monotonic_ns();
            if let Ok(prog) = btf_program(ebpf, name) {
                let _ = prog.detach(link);
            }
            first_detached.get_or_insert(midpoint(before, clock::monotonic_ns()));
        }
        let closed = first_detached.unwrap_or_else(clock::monotonic_ns);
        self.closed_traced_ns += closed.saturating_sub(opened);
    }

    /// Time the programs have been attached so far, the open window included.
    pub fn traced_ns(&self) -> u64 {
        self.closed_traced_ns
            + self
                .opened_ns
                .map_or(0, |t| clock::monotonic_ns().saturating_sub(t))
    }
}

/// The middle of an attach or detach call: where in it the program started or stopped running
/// is not known, so the window's edges are each off by at most half a call.
fn midpoint(before: u64, after: u64) -> u64 {
    before + after.saturating_sub(before) / 2
}
