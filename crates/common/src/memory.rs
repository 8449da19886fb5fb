//! The reclaim programs (ebpf/src/memory.rs): memory a watched thread reclaimed itself, counted
//! in its thread's slot of the scheduler's map (sched.rs), so the family has no map of its own.

names! {
    maps: [],
    globals: [],
}
