//! From samples to figures: pure functions over recorded data, testable without a kernel.

pub mod kernel_report;
pub mod interval;
