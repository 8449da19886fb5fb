//! From samples to figures: pure functions over recorded data, testable without a kernel.
//!
//! Nothing here reads the kernel or /proc: every input is in [`record`] (what the sampler read at
//! each interval boundary) or the load generator's report, so every rule can be tested with
//! hand-made samples. Cargo enforces it: this crate does not depend on aya or the profiler.
//!
//! The flow: [`series::SampleSeries`] holds the samples; [`kernel_report`] turns two of them into
//! one side's figures over the window, [`interval`] into one timeline row; [`run_report::build`]
//! puts run.json together and [`rules`] reads it to write the findings ([`with_findings`]).

pub mod correlation;
pub mod finding;
pub mod interval;
pub mod kernel_report;
pub mod names;
pub mod observer;
pub mod probe_output;
pub use srvprof_loadgen::random;
pub mod record;
pub mod rules;
pub mod run_report;
pub mod series;
pub mod slow_intervals;
pub mod timeline;
pub mod tls_code;
pub mod unwind_quality;

use run_report::RunReport;

/// The report with its findings: the rules read the figures `run_report::build` put together.
pub fn with_findings(mut report: RunReport) -> RunReport {
    report.findings = rules::findings(&report);
    report
}
