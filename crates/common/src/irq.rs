//! The interrupt programs (ebpf/src/irq.rs): softirqs per vector and CPU, hardirqs per line.

names! {
    maps: [SOFTIRQS, HARDIRQS, HARDIRQ_START],
    globals: [],
}

pub const MAX_IRQS: u32 = 1024;

/// Number of softirq vectors (HI, TIMER, NET_TX, NET_RX, BLOCK, IRQ_POLL, TASKLET, SCHED, HRTIMER, RCU).
pub const NR_SOFTIRQS: u32 = 10;
pub const SOFTIRQ_NAMES: [&str; NR_SOFTIRQS as usize] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// One softirq vector on one CPU: count and time, and when the running one started (0: none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftirqSlot {
    pub count: u64,
    pub total_ns: u64,
    pub start_ns: u64,
}

pod!(SoftirqSlot);
