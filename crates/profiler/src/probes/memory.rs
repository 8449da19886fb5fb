//! The reclaim programs (ebpf/src/memory.rs): memory a watched thread reclaimed itself, counted
//! in its thread figures (read by sched.rs).

/// Attached by the probes' loop, each to the BTF tracepoint of its name.
pub const PROGRAMS: &[&str] = &[
    "mm_vmscan_direct_reclaim_begin",
    "mm_vmscan_direct_reclaim_end",
    "mm_vmscan_memcg_reclaim_begin",
    "mm_vmscan_memcg_reclaim_end",
];
