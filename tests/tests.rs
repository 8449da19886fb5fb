//! srvprof's integration tests, one binary: real probes against real processes and servers, each
//! assertion checked against the kernel's own counters, a server whose behaviour is known by
//! construction, or a peer tool. One module per capability; a new test goes in the module of what
//! it checks, a new capability gets a module here. Helpers shared by modules are in support/.
//! tls_alloc.rs stays a binary of its own: its counting allocator is process-wide.
//!
//! What each module checks:
//! - probes, probe_cli, sampler_timing: the probes' counts against /proc, `srvprof probe` and
//!   `check` as users run them, the sampler's clock;
//! - crosscheck, offcpu_crosscheck: the same figures as libbpf-tools and the scheduler's own;
//! - run_cli, faults, resets, causes: `srvprof run` on servers with a known cause, and the
//!   finding that names it;
//! - stacks, report, plots, pprof, pyroscope: stacks, flamegraphs, report.html, the pprof export
//!   and its push to Pyroscope;
//! - observer, stalls, long_runs: what watching costs: CPU, stalls, memory over time;
//! - reliability: every exit path detaches and keeps what was measured;
//! - hdr_log, http2, targets, tls: the load generator's outputs and protocols;
//! - plan: `srvprof plan`'s manifests and scripts, checked as files (no cluster runs here).
//! - remote_write: the load's figures pushed live, read back from Prometheus.
//! - safety: what srvprof writes and reads as root on a shared host, and on hostile input.

mod causes;
mod crosscheck;
mod faults;
mod hdr_log;
mod http2;
mod long_runs;
mod observer;
mod offcpu_crosscheck;
mod plan;
mod plots;
mod pprof;
mod probe_cli;
mod probes;
mod pyroscope;
mod reliability;
mod remote_write;
mod report;
mod resets;
mod run_cli;
mod safety;
mod sample_count;
mod sampler_timing;
mod split_run;
mod stacks;
mod stalls;
mod targets;
mod tls;
