//! Memory pressure on watched threads: the time they spend reclaiming memory themselves, when
//! an allocation finds too little free (direct reclaim) or their control group at its limit
//! (memcg reclaim). Both tracepoints pairs fire in the allocating task, so the time between
//! begin and end is that thread's, sleeps in it included. Page faults that read a page back in
//! are timed by sched.rs, as uninterruptible sleeps outside a syscall.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::btf_tracepoint, programs::BtfTracePointContext};

use crate::target::watched_thread_current;

#[inline(always)]
fn reclaim_begins() -> i32 {
    if let Some(st) = watched_thread_current() {
        st.reclaim_start_ns = unsafe { bpf_ktime_get_ns() };
    }
    0
}

#[inline(always)]
fn reclaim_ends() -> i32 {
    if let Some(st) = watched_thread_current() {
        if st.reclaim_start_ns != 0 {
            let now = unsafe { bpf_ktime_get_ns() };
            st.reclaims += 1;
            st.reclaim_ns += now.saturating_sub(st.reclaim_start_ns);
            st.reclaim_start_ns = 0;
        }
    }
    0
}

/// mm_vmscan_direct_reclaim_begin(int order, gfp_t gfp_flags)
#[btf_tracepoint(function = "mm_vmscan_direct_reclaim_begin")]
pub fn mm_vmscan_direct_reclaim_begin(_ctx: BtfTracePointContext) -> i32 {
    reclaim_begins()
}

/// mm_vmscan_direct_reclaim_end(unsigned long nr_reclaimed)
#[btf_tracepoint(function = "mm_vmscan_direct_reclaim_end")]
pub fn mm_vmscan_direct_reclaim_end(_ctx: BtfTracePointContext) -> i32 {
    reclaim_ends()
}

/// mm_vmscan_memcg_reclaim_begin(int order, gfp_t gfp_flags)
#[btf_tracepoint(function = "mm_vmscan_memcg_reclaim_begin")]
pub fn mm_vmscan_memcg_reclaim_begin(_ctx: BtfTracePointContext) -> i32 {
    reclaim_begins()
}

/// mm_vmscan_memcg_reclaim_end(unsigned long nr_reclaimed)
#[btf_tracepoint(function = "mm_vmscan_memcg_reclaim_end")]
pub fn mm_vmscan_memcg_reclaim_end(_ctx: BtfTracePointContext) -> i32 {
    reclaim_ends()
}
