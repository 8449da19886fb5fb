//! From samples to figures: pure functions over recorded data, testable without a kernel.

pub mod interval;
pub mod kernel_report;
