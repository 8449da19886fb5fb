//! CLOCK_MONOTONIC, the clock bpf_ktime_get_ns() reads: the probes, the sampler and the load
//! generator share it, so their timelines line up. Defined once, in the load generator.

pub use srvprof_loadgen::monotonic_ns;
