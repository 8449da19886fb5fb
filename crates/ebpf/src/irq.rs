//! System-wide, per-CPU hardirq and softirq counts and time (per-CPU maps are the per-CPU split).
//! In sampled mode the softirq programs are attached for one window an interval (userspace then
//! takes the counts from /proc/softirqs, and the time per event or per packet from here); the
//! hardirq programs run all along in both modes.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::BtfTracePointContext,
};
use srvprof_common::{CountTime, MAX_IRQS, NR_SOFTIRQS, SoftirqSlot};

use crate::window;

/// Per CPU (the per-CPU split is the per-CPU map itself), per vector: one slot, one lookup per event.
#[map]
static SOFTIRQS: PerCpuArray<SoftirqSlot> = PerCpuArray::with_max_entries(NR_SOFTIRQS, 0);
#[map]
static HARDIRQS: PerCpuHashMap<u32, CountTime> = PerCpuHashMap::with_max_entries(MAX_IRQS, 0);
#[map]
static HARDIRQ_START: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// softirq_entry(unsigned int vec_nr). Counted at entry, as /proc/softirqs counts; in sampled
/// mode only inside the span the softirqs are timed in, so the count is the timed events'.
#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(ctx: BtfTracePointContext) -> i32 {
    if window::programs_empty() {
        return 0;
    }
    let vec: u32 = ctx.arg(0);
    if let Some(slot) = SOFTIRQS.get_ptr_mut(vec) {
        let now = unsafe { bpf_ktime_get_ns() };
        let held = window::softirq_span_holds(now);
        unsafe {
            (*slot).count += held as u64;
            (*slot).start_ns = if held { now } else { 0 };
        }
    }
    0
}

/// softirq_exit(unsigned int vec_nr)
#[btf_tracepoint(function = "softirq_exit")]
pub fn softirq_exit(ctx: BtfTracePointContext) -> i32 {
    if window::programs_empty() {
        return 0;
    }
    let vec: u32 = ctx.arg(0);
    if let Some(slot) = SOFTIRQS.get_ptr_mut(vec) {
        unsafe {
            // A start from before the span began is stale: that softirq's exit was missed.
            if (*slot).start_ns != 0 && (*slot).start_ns >= window::softirq_span_start() {
                (*slot).total_ns += bpf_ktime_get_ns().saturating_sub((*slot).start_ns);
                (*slot).start_ns = 0;
            }
        }
    }
    0
}

/// irq_handler_entry(int irq, struct irqaction *action)
#[btf_tracepoint(function = "irq_handler_entry")]
pub fn irq_handler_entry(ctx: BtfTracePointContext) -> i32 {
    let irq: u32 = ctx.arg(0);
    match HARDIRQS.get_ptr_mut(&irq) {
        Some(ct) => unsafe { (*ct).count += 1 },
        None => {
            let _ = HARDIRQS.insert(
                &irq,
                &CountTime {
                    count: 1,
                    total_ns: 0,
                },
                0,
            );
        }
    }
    if let Some(start) = HARDIRQ_START.get_ptr_mut(0) {
        unsafe { *start = bpf_ktime_get_ns() };
    }
    0
}

/// irq_handler_exit(int irq, struct irqaction *action, int ret)
#[btf_tracepoint(function = "irq_handler_exit")]
pub fn irq_handler_exit(ctx: BtfTracePointContext) -> i32 {
    let irq: u32 = ctx.arg(0);
    let Some(start) = HARDIRQ_START.get_ptr_mut(0) else {
        return 0;
    };
    // Attached all along: a start is stale only when srvprof attached between an entry and its
    // exit, and the next entry overwrites it.
    let started = unsafe { *start };
    if started == 0 {
        return 0;
    }
    unsafe { *start = 0 };
    if let Some(ct) = HARDIRQS.get_ptr_mut(&irq) {
        unsafe { (*ct).total_ns += bpf_ktime_get_ns().saturating_sub(started) };
    }
    0
}
