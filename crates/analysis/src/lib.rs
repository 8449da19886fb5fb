//! From samples to figures: pure functions over recorded data, testable without a kernel.
//!
//! Nothing here reads the kernel or /proc: every input is in [`record`] (what the sampler read at
//! each interval boundary) or the load generator's report, so every rule can be tested with
//! hand-made samples. Cargo enforces it: this crate does not depend on aya or the profiler.
//!
//! The flow: [`series::ReadingSeries`] holds the readings; [`kernel_report`] turns two of them into
//! one group's figures over the span between them, [`interval`] into one timeline row;
//! [`run_report::build`] puts run.json together and [`rules`] reads it to write the findings
//! ([`with_findings`]).
//!
//! ## One word for each thing
//! - **reading**: every counter of the probes and /proc, taken at one instant at an interval's
//!   boundary ([`record::Reading`]).
//! - **interval**: the span between two readings on the load's grid (`--interval`, 1 s). A
//!   **timeline row** is one interval's figures: [`timeline::TimelineRow`] in run.json, whose
//!   kernel half is [`interval::KernelRow`] and whose load half is the load generator's
//!   `LoadRow`.
//! - **span**: any stretch between two readings; the **measured span** is the load's, from the
//!   end of its warm-up to its end: what run.json's figures cover.
//! - **trace window**: in sampled mode, the few milliseconds of each interval the syscall and
//!   softirq programs are attached; their figures are scaled up from the windows
//!   ([`kernel_report::sampling`]). "Window" means this and nothing else.
//! - **time range**: a part of the measured span a user picks (`srvprof report --from --to`).
//! - **stack sample**: one on-CPU sample of a thread's stack (99 Hz); an **off-CPU period**: a
//!   thread's time from one switch-out to its switch-in.
//! - **group**: the server's processes or the client's (the load generator's); TCP figures call
//!   it a **side**.
//! - **report**: run.json ([`run_report::RunReport`]), `srvprof probe`'s JSON
//!   ([`probe_output::ProbeOutput`]) or one group's figures ([`kernel_report::KernelReport`]);
//!   report.html is the page, `srvprof report` the command that rewrites it.

pub mod correlation;
pub mod finding;
pub mod interval;
pub mod kernel_report;
mod lock_stacks;
pub mod names;
pub mod observer;
pub mod probe_output;
pub use srvprof_loadgen::random;
pub mod record;
pub mod rules;
pub mod run_report;
pub mod sample_count;
pub mod series;
pub mod slow_intervals;
pub mod split_run;
pub mod stacks;
pub mod tail_account;
pub mod timeline;
pub mod tls_code;
pub mod unwind_quality;

use run_report::RunReport;

/// The report with its findings: the rules read the figures `run_report::build` put together.
pub fn with_findings(mut report: RunReport) -> RunReport {
    report.findings = rules::findings(&report);
    report
}
