//! The sampled mode's trace window: when, in each interval, the syscall and softirq programs are
//! attached (where the server is busy, at random, away from the readings: placement.rs), and
//! what is counted while they are, which scales the traced counts to the whole interval. The
//! programs' attaching and detaching is probes/window.rs.

use std::collections::BTreeMap;

use srvprof_analysis::random::SplitMix64;
use srvprof_common::NUM_GROUPS;

use super::Sampler;
use super::placement::{self, Decision, Slot};
use crate::cli::WINDOWS_PER_INTERVAL;
use crate::error::SrvprofError;
use crate::procfs;

/// How long after its first poll a server that has made no read/write call yet is taken for
/// idle (its windows wait for the calls) before it is taken for one that makes none (blind
/// windows): the load usually starts within it.
const IO_GRACE_NS: u64 = 2_000_000_000;

/// The trace window's state: where it is placed in the interval, and the counts taken while open.
pub(super) struct TraceWindow {
    /// Sampled mode: where the current slot of the interval begins (the last sample's time for
    /// the first), until the slot's window of the syscall and interrupt programs has opened.
    pub(super) from_ns: Option<u64>,
    /// Sampled mode: the interval's slots not yet begun or open, the current one included; each
    /// slot of the rest of the interval gets one window.
    pub(super) slots_left: u32,
    /// Sampled mode: the current slot's plan for its window (placement.rs), and when the
    /// slot ends.
    pub(super) slot: Option<(Slot, u64)>,
    /// Sampled mode: the watched processes' read/write calls at the last poll, and whether they
    /// have risen since srvprof started (a server that makes them gets its windows where they do).
    pub(super) io_polled: Option<u64>,
    pub(super) io_seen: bool,
    /// Sampled mode: until when a server not yet seen making read/write calls is taken for idle
    /// rather than for one that makes none (IO_GRACE_NS from the first poll).
    pub(super) io_unknown_until: Option<u64>,
    pub(super) draws: SplitMix64,
    /// Sampled mode: when the open window ends.
    pub(super) end_ns: Option<u64>,
    /// Sampled mode: the interval's window is still to come. The softirq and syscall programs are
    /// attached in one window per interval (each attach and detach holds srvprof's CPU for a few
    /// hundred microseconds), in the first slot found busy (or the last), WINDOWS_PER_INTERVAL
    /// slots' windows long (the interval's whole traced share, running on into the next slots).
    pub(super) due: bool,
    /// Responses when the open window opened, and the sum over the closed windows.
    pub(super) responses_at_open: Option<u64>,
    pub(super) traced_responses: u64,
    /// Each group's context switches when the open window opened, and their sum over the closed
    /// windows: what the sampled syscall counts are scaled by without a load generator.
    pub(super) switches_at_open: Option<[u64; NUM_GROUPS as usize]>,
    pub(super) traced_switches: [u64; NUM_GROUPS as usize],
    /// Sampled mode: each group's time on a CPU, all of it and the part inside the windows.
    pub(super) oncpu: Traced,
    /// Sampled mode: each group's read- and write-type syscalls by the kernel's own per-task
    /// count (/proc/PID/io, a file per process), all of them and the ones made inside the
    /// windows.
    pub(super) io_calls: Traced,
    /// Sampled mode: packets each CPU's NET_RX processed inside the windows (/proc/net/softnet_stat).
    pub(super) rx_packets: PerCpuTraced,
}

impl TraceWindow {
    pub(super) fn new() -> Self {
        Self {
            from_ns: None,
            slots_left: 0,
            slot: None,
            io_polled: None,
            io_seen: false,
            io_unknown_until: None,
            draws: placement::draws(),
            end_ns: None,
            due: false,
            responses_at_open: None,
            traced_responses: 0,
            switches_at_open: None,
            traced_switches: [0; NUM_GROUPS as usize],
            oncpu: Traced::default(),
            io_calls: Traced::default(),
            rx_packets: PerCpuTraced::default(),
        }
    }
}

impl Sampler {
    /// Sleeps until `due_ns` (monotonic) or until `stop()`. In sampled mode the interval is cut
    /// into WINDOWS_PER_INTERVAL equal slots, each of which would open its window where
    /// placement.rs puts it: where the server is busy, at random, and away from the slot's
    /// edges (and so from the reading at each end of the interval, srvprof's own CPU burst, which
    /// would otherwise slow the server in exactly the time measured). The first slot to open on a
    /// busy poll (or the last) gets the interval's one window, so a burst anywhere in the
    /// interval gets it (measured: one blind 50 ms window a second missed every one of ten 70 ms
    /// bursts in 3 runs of 11).
    pub fn wait_until(&mut self, due_ns: u64, stop: impl Fn() -> bool) -> Result<(), SrvprofError> {
        loop {
            let now = crate::clock::monotonic_ns();
            if self.window.end_ns.is_some_and(|end| now >= end) {
                self.close_window();
            }
            let mut wake = due_ns;
            if let (Some(from), Some(window)) = (self.window.from_ns, self.probes.window()) {
                let len = window.as_nanos() as u64;
                let slots = u64::from(self.window.slots_left.max(1));
                let (slot, _) = *self.window.slot.get_or_insert_with(|| {
                    // A new slot: its first poll only primes the reading (one older than a poll
                    // would call the server busy for what it did before).
                    self.window.io_polled = None;
                    let end = from + due_ns.saturating_sub(from) / slots;
                    (Slot::new(from, end, len, self.window.draws.uniform()), end)
                });
                let busy = if now >= slot.earliest {
                    self.poll_busy()
                } else {
                    None
                };
                match slot.decide(now, busy, self.window.draws.uniform()) {
                    Decision::Open => {
                        self.window.from_ns = None;
                        // An idle slot leaves the window to a later, busier one, but the last.
                        if self.window.due && (busy != Some(false) || self.window.slots_left <= 1) {
                            self.open_window(len)?;
                        } else {
                            self.next_slot();
                        }
                    }
                    Decision::WaitUntil(t) => wake = wake.min(t),
                }
            }
            if now >= due_ns || stop() {
                return Ok(());
            }
            if let Some(end) = self.window.end_ns {
                wake = wake.min(end);
            }
            // An absolute deadline: being preempted here costs no extra sleep. Naps of at most
            // 20 ms keep an eye on stop().
            crate::clock::sleep_until(wake.min(now + 20_000_000));
        }
    }

    /// Attaches the softirq and syscall programs for the interval's window, WINDOWS_PER_INTERVAL
    /// slots' windows long.
    fn open_window(&mut self, len: u64) -> Result<(), SrvprofError> {
        let len = len * u64::from(WINDOWS_PER_INTERVAL);
        self.probes.open_window(len)?;
        self.window.rx_packets.open(procfs::softnet_processed());
        self.probes.time_softirqs_from_now()?;
        self.window.due = false;
        // The syscalls are counted from right before the work they are scaled by is read.
        self.probes.count_syscalls_from_now()?;
        self.window.responses_at_open = self.responses.as_ref().map(|r| r());
        self.window.io_calls.open(self.io_calls());
        self.window.switches_at_open = self.probes.group_switches().ok();
        self.window.oncpu.open(self.oncpu());
        self.window.end_ns = Some(crate::clock::monotonic_ns() + len);
        Ok(())
    }

    /// Whether the server's read/write calls rose since the last poll. Until they first have,
    /// the server is taken for idle for IO_GRACE_NS (its windows wait for its first calls, so
    /// that a burst in the first seconds is not missed by a window spent before it), then for one
    /// that makes none: None, and it gets blind windows. The server's processes only: srvprof's
    /// own (the client group in `run`) reads /proc all the time.
    fn poll_busy(&mut self) -> Option<bool> {
        let now: u64 = self
            .processes
            .values()
            .filter(|p| p.group == srvprof_common::GROUP_SERVER)
            .filter_map(|p| procfs::process_io_calls(p.pid))
            .sum();
        let rose = self.window.io_polled.is_some_and(|last| now > last);
        self.window.io_polled = Some(now);
        self.window.io_seen |= rose;
        let t = crate::clock::monotonic_ns();
        let unknown_until = *self.window.io_unknown_until.get_or_insert(t + IO_GRACE_NS);
        if self.window.io_seen {
            Some(rose)
        } else if t < unknown_until {
            Some(false)
        } else {
            None
        }
    }

    pub(super) fn close_window(&mut self) {
        if let Some(at_open) = self.window.switches_at_open.take()
            && let Ok(now) = self.probes.group_switches()
        {
            for ((traced, now), open) in
                self.window.traced_switches.iter_mut().zip(now).zip(at_open)
            {
                *traced += now.saturating_sub(open);
            }
        }
        if self.window.end_ns.is_some() {
            // A failed write leaves softirqs timed a little past the packets' span: no reason
            // to lose the window.
            let _ = self.probes.time_softirqs_until_now();
            self.window.rx_packets.close(procfs::softnet_processed());
        }
        if self.window.oncpu.is_open() {
            self.window.oncpu.close(self.oncpu());
            // Last, right before the counting program's detach.
            self.window.io_calls.close(self.io_calls());
        }
        if let (Some(at_open), Some(r)) = (
            self.window.responses_at_open.take(),
            self.responses.as_ref(),
        ) {
            self.window.traced_responses += r().saturating_sub(at_open);
        }
        self.probes.close_window();
        self.window.end_ns = None;
        self.next_slot();
    }

    /// On to the next slot, if the interval has one left and its window is still to come (the
    /// next sample starts anew): once it has been, the server is not polled until then.
    fn next_slot(&mut self) {
        match self.window.slot.take() {
            Some((_, slot_end)) if self.window.slots_left > 1 && self.window.due => {
                self.window.slots_left -= 1;
                self.window.from_ns = Some(slot_end);
            }
            _ => {
                self.window.slots_left = 0;
                self.window.from_ns = None;
            }
        }
    }
}

/// A counter's readings: process or group -> (group, value).
pub(super) type Readings = BTreeMap<u32, (u32, u64)>;

/// A counter (time on a CPU per group, read/write calls per process) summed per group from its
/// readings (a process first seen counts from its first reading), and the part inside the
/// windows.
#[derive(Default)]
pub(super) struct Traced {
    last: BTreeMap<u32, u64>,
    all: [u64; NUM_GROUPS as usize],
    traced: [u64; NUM_GROUPS as usize],
    /// The readings when the open window opened.
    at_open: Option<Readings>,
}

impl Traced {
    pub(super) fn is_open(&self) -> bool {
        self.at_open.is_some()
    }

    pub(super) fn open(&mut self, now: Readings) {
        self.add(&now);
        self.at_open = Some(now);
    }

    /// Adds what each thread counted since the window opened to its group's traced total.
    pub(super) fn close(&mut self, now: Readings) {
        if let Some(at_open) = self.at_open.take() {
            for (tid, (group, value)) in &now {
                if let (Some((_, open)), Some(traced)) =
                    (at_open.get(tid), self.traced.get_mut(*group as usize))
                {
                    *traced += value.saturating_sub(*open);
                }
            }
        }
        self.add(&now);
    }

    /// The totals a sample carries: all, and inside the windows (None outside sampled mode).
    pub(super) fn totals(&self, sampled: bool) -> (Option<Vec<u64>>, Option<Vec<u64>>) {
        if sampled {
            (Some(self.all.to_vec()), Some(self.traced.to_vec()))
        } else {
            (None, None)
        }
    }

    pub(super) fn add(&mut self, now: &Readings) {
        for (tid, (group, ns)) in now {
            if let Some(last) = self.last.insert(*tid, *ns)
                && let Some(all) = self.all.get_mut(*group as usize)
            {
                *all += ns.saturating_sub(last);
            }
        }
    }
}

/// A per-CPU cumulative kernel counter (packets processed): its growth inside the windows.
#[derive(Default)]
pub(super) struct PerCpuTraced {
    at_open: Option<Vec<u64>>,
    pub(super) traced: Vec<u64>,
}

impl PerCpuTraced {
    pub(super) fn open(&mut self, now: Vec<u64>) {
        self.at_open = Some(now);
    }

    pub(super) fn close(&mut self, now: Vec<u64>) {
        let Some(at_open) = self.at_open.take() else {
            return;
        };
        if self.traced.len() < now.len() {
            self.traced.resize(now.len(), 0);
        }
        for (cpu, (traced, now)) in self.traced.iter_mut().zip(&now).enumerate() {
            *traced += now.saturating_sub(at_open.get(cpu).copied().unwrap_or(*now));
        }
    }
}
