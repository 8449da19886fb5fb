//! From samples to figures: pure functions over recorded data, testable without a kernel.

pub mod findings;
pub mod interval;
pub mod kernel_report;
pub mod run_report;
pub mod series;
