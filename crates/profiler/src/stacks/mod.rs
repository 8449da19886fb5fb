//! The collecting side of stacks: the samples unwound in user space as the run goes (unwind.rs,
//! unwinder.rs and modules.rs, with the copy sizes it learns, copy_hints.rs), their values kept
//! per stack and interval (timed.rs, under ids.rs's ids; the closed intervals' rows out of memory,
//! rows.rs), and, at the end, every frame named
//! (symbolize.rs; JIT code from perf maps, perf_map.rs) and the build-ids of the files they came
//! from (build_id.rs). The BPF side is probes/stacks.rs; the files written from them, render/.

pub mod build_id;
pub mod copy_hints;
pub mod ids;
mod modules;
pub mod perf_map;
mod rows;
pub mod symbolize;
pub mod timed;
pub mod unwind;
mod unwinder;
