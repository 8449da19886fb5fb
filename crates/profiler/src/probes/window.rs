//! Sampled mode: the syscall and softirq programs, the ones that run on every syscall and every
//! softirq of the machine, count and time only in one window an interval, placed where the server
//! is busy (sampler/window.rs opens and closes it; where is sampler/placement.rs's). The hardirq programs
//! count and time all along: hardirqs are rare next to softirqs (a NIC's interrupts are
//! coalesced, loopback raises none), so they are counted and timed exactly for next to nothing.
//!
//! While the programs sit on the syscall tracepoints, every syscall of every process takes the
//! kernel's traced path (65-160 ns more for a process not watched, measured on this project's
//! VMs), and a softirq program that only checks a flag still costs its dispatch: left attached
//! behind a flag, the softirq programs took 31 of the probes' 58 ms a second under a one-worker
//! nginx at 120k requests a second (bpf_stats), 6 % of the server's CPU. So all four are attached
//! for their window only. Each attach and detach rewrites kernel text and waits for every CPU to
//! see it, which holds the CPU srvprof runs on for 150-250 µs under a VM, so it happens once an
//! interval, with a pause between programs. A twentieth of the time traced costs a twentieth of
//! the tracing (cli.rs, SAMPLED_WINDOW_DIVISOR, says why not less); the figures are then scaled
//! up from the window
//! (srvprof_analysis::kernel_report::sampling), and the softirq counts come from the kernel's own
//! /proc/softirqs.

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
    /// The softirq then the syscall programs, in attach order. The window is the time syscalls
    /// were counted: from count_syscalls_from_now to the counting program's detach (sys_exit goes
    /// last, so it is detached first).
    programs: Vec<&'static str>,
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    length: Duration,
    /// The window is open (its programs attached).
    open: bool,
    /// When the open window's count began (monotonic ns), None when closed or not yet
    /// counting.
    opened_ns: Option<u64>,
    /// Time the programs were attached in closed windows.
    closed_traced_ns: u64,
    /// Each attach and detach: how long it held srvprof's CPU.
    pub flips: srvprof_analysis::observer::Flips,
}

impl Window {
    /// `programs` are loaded, not attached.
    pub fn new(programs: Vec<&'static str>, window: Duration) -> Self {
        Self {
            programs,
            links: Vec::new(),
            length: window,
            open: false,
            opened_ns: None,
            closed_traced_ns: 0,
            flips: Default::default(),
        }
    }

    pub fn length(&self) -> Duration {
        self.length
    }

    /// Attaches the programs for a window of `len` ns; the window's start tells them which
    /// starts are stale.
    pub fn open(&mut self, ebpf: &mut Ebpf, len: u64) -> Result<(), SrvprofError> {
        if self.open {
            return Ok(());
        }
        set(ebpf, window::LEN_NS, len)?;
        // No syscall is counted until the caller says (count_syscalls_from_now).
        set(ebpf, window::START_NS, u64::MAX)?;
        // No softirq is timed until the caller has read the packets (softirq_span_from_now).
        set(ebpf, window::SOFTIRQ_FROM_NS, u64::MAX)?;
        set(ebpf, window::SOFTIRQ_UNTIL_NS, 0)?;
        self.open = true;
        for (i, &name) in self.programs.iter().enumerate() {
            if i > 0 {
                // One stall at a time: whatever waits for this CPU runs between two attaches.
                crate::realtime::breathe();
            }
            let prog = btf_program(ebpf, name)?;
            let before = clock::monotonic_ns();
            let link = attach_loaded(prog, name, name)?;
            let after = clock::monotonic_ns();
            self.flips.add(after.saturating_sub(before));
            self.links.push((name, link));
        }
        Ok(())
    }

    /// The syscalls that return from now on are counted: call right before reading what the
    /// counts are scaled by, so both cover the same span (the attaches and the packets' reading
    /// before it take a few hundred microseconds).
    pub fn count_syscalls_from_now(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        if !self.open || self.opened_ns.is_some() {
            return Ok(());
        }
        let from = clock::monotonic_ns();
        set(ebpf, window::START_NS, from)?;
        self.opened_ns = Some(from);
        Ok(())
    }

    /// The softirqs that begin from now on are timed: call right after reading the packets
    /// processed at the window's start. Their span, not the programs', is what the time per
    /// packet divides by: attaching four programs takes as long as a fifth of a window.
    pub fn softirq_span_from_now(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        set(ebpf, window::SOFTIRQ_FROM_NS, clock::monotonic_ns())
    }

    /// The softirqs that begin from now on are not timed: call right before reading the packets
    /// processed at the window's end.
    pub fn softirq_span_until_now(&mut self, ebpf: &mut Ebpf) -> Result<(), SrvprofError> {
        set(ebpf, window::SOFTIRQ_UNTIL_NS, clock::monotonic_ns())
    }

    /// Detaches the programs, last attached first, adding the window to the traced time.
    pub fn close(&mut self, ebpf: &mut Ebpf) {
        if !std::mem::take(&mut self.open) {
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
            let after = clock::monotonic_ns();
            self.flips.add(after.saturating_sub(before));
            first_detached.get_or_insert(midpoint(before, after));
        }
        let closed = first_detached.unwrap_or_else(clock::monotonic_ns);
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
