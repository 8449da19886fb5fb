//! Sampled mode: the syscall and softirq programs, the ones that run on every syscall and every
//! softirq of the machine, count and time only in short windows placed where the server is busy
//! (the Sampler opens and closes them; where is window_placement's): the softirq programs in one
//! window in each quarter of an interval, the syscall programs in one of those an interval. The
//! hardirq programs count and time all along: hardirqs are rare next to softirqs (a NIC's
//! interrupts are coalesced, loopback raises none), so they are counted and timed exactly for
//! next to nothing.
//!
//! While the programs sit on the syscall tracepoints, every syscall of every process takes the
//! kernel's traced path (65-160 ns more for a process not watched, measured on this project's
//! VMs), so they are attached for their window only. Each attach and detach rewrites kernel text
//! and waits for every CPU to see it, which stalls the CPU srvprof runs on for a few hundred
//! microseconds under a VM; the softirq programs, cheap when they return at once, therefore stay
//! attached and check the window's CLOSED flag instead, and the syscall programs come and go once
//! an interval. A twentieth of the time traced costs a twentieth of the tracing; the figures are
//! then scaled up from the windows (srvprof_analysis::kernel_report::sampling), and the softirq
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

pub struct Window {
    /// The syscall programs, in attach order. The window is the time the last one was attached:
    /// the counting program (sys_exit, which counts syscalls) goes last, so attaching and
    /// detaching the other, a few hundred microseconds, does not stretch the time its counts are
    /// scaled by. Empty with the syscalls off: the window is then the softirq flag's.
    programs: Vec<&'static str>,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    length: Duration,
    /// The softirq programs' flag is open.
    flag_open: bool,
    /// When the open window's syscall programs began (monotonic ns, the last program's attach),
    /// None when closed or opened without them.
    opened_ns: Option<u64>,
    /// Time the syscall programs were attached in closed windows.
    closed_traced_ns: u64,
}

impl Window {
    /// `programs` are loaded, not attached. Marks the window closed, before the softirq programs
    /// attach.
    pub fn new(
        ebpf: &mut Ebpf,
        programs: Vec<&'static str>,
        window: Duration,
    ) -> Result<Self, SrvprofError> {
        set(ebpf, window::CLOSED, 1)?;
        Ok(Self {
            programs,
            links: Vec::new(),
            length: window,
            flag_open: false,
            opened_ns: None,
            closed_traced_ns: 0,
        })
    }

    pub fn length(&self) -> Duration {
        self.length
    }

    /// Opens the softirq programs' flag, then with `syscalls` attaches the syscall programs, for a
    /// window of `len` ns; the window's start tells them which starts are stale.
    pub fn open(&mut self, ebpf: &mut Ebpf, syscalls: bool, len: u64) -> Result<(), SrvprofError> {
        if self.flag_open {
            return Ok(());
        }
        set(ebpf, window::LEN_NS, len)?;
        set(ebpf, window::START_NS, clock::monotonic_ns())?;
        set(ebpf, window::CLOSED, 0)?;
        self.flag_open = true;
        if !syscalls {
            return Ok(());
        }
        let mut last_attached = clock::monotonic_ns();
        for (i, &name) in self.programs.iter().enumerate() {
            if i > 0 {
                // One stall at a time: whatever waits for this CPU runs between two attaches.
                crate::realtime::breathe();
            }
            let prog = btf_program(ebpf, name)?;
            let before = clock::monotonic_ns();
            let link = attach_loaded(prog, name, name)?;
            last_attached = midpoint(before, clock::monotonic_ns());
            self.links.push((name, link));
        }
        self.opened_ns = Some(last_attached);
        Ok(())
    }

    /// Detaches the programs, last attached first, then closes the softirq flag, adding the window
    /// to the traced time.
    pub fn close(&mut self, ebpf: &mut Ebpf) {
        if !std::mem::take(&mut self.flag_open) {
            return;
        }
        let mut first_detached = None;
        while let Some((name, link)) = self.links.pop() {
            if first_detached.is_some() {
                crate::realtime::breathe();
            }
            let before = clock::monotonic_ns();
            if let Ok(prog) = btf_program(ebpf, name) {
                let _ = prog.detach(link);
            }
            first_detached.get_or_insert(midpoint(before, clock::monotonic_ns()));
        }
        let closed = first_detached.unwrap_or_else(clock::monotonic_ns);
        let _ = set(ebpf, window::CLOSED, 1);
        if let Some(opened) = self.opened_ns.take() {
            self.closed_traced_ns += closed.saturating_sub(opened);
        }
    }

    /// Time the programs have been attached so far, the open window included.
    pub fn traced_ns(&self) -> u64 {
        self.closed_traced_ns
            + self
                .opened_ns
                .map_or(0, |t| clock::monotonic_ns().saturating_sub(t))
    }
}

fn set(ebpf: &mut Ebpf, index: u32, value: u64) -> Result<(), SrvprofError> {
    let mut w: Array<&mut MapData, u64> = map_mut(ebpf, maps::TRACE_WINDOW)?;
    w.set(index, value, 0)
        .map_err(|e| map_error(maps::TRACE_WINDOW, e))
}

/// The middle of an attach or detach call: where in it the program started or stopped running
/// is not known, so the window's edges are each off by at most half a call.
fn midpoint(before: u64, after: u64) -> u64 {
    before + after.saturating_sub(before) / 2
}
