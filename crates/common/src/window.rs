//! The trace window (ebpf/src/window.rs): when the sampled mode's syscall and softirq programs
//! count.

names! {
    maps: [TRACE_WINDOW],
    globals: [
        /// Non-zero: the windowed syscall and softirq programs return at once (a measurement of
        /// what the kernel's traced path and the programs' dispatch cost alone).
        WINDOW_PROGRAMS_EMPTY,
    ],
}

// Indexes into TRACE_WINDOW, which userspace writes before it attaches the syscall and softirq
// programs for a window (sampled mode; in exact mode both stay 0: attached all along).

/// bpf_ktime_get_ns() when the window's syscall count began, right before userspace read
/// what the counts are scaled by: a syscall that returns before it is not counted, one that
/// began before it is counted but not timed (its start was not seen). u64::MAX while the
/// programs are being attached.
pub const START_NS: u32 = 0;
/// The window's length; 0 in exact mode.
pub const LEN_NS: u32 = 1;
/// The softirqs timed are those that begin in [SOFTIRQ_FROM_NS, SOFTIRQ_UNTIL_NS) (0: no
/// end), the span over which userspace counts the packets they are divided by: the programs
/// are attached a few hundred microseconds before it and detached after it.
pub const SOFTIRQ_FROM_NS: u32 = 2;
pub const SOFTIRQ_UNTIL_NS: u32 = 3;
pub const COUNT: u32 = 4;
