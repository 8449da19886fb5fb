//! `srvprof probe`'s JSON: what the probes saw over the run, its intervals, notes and cost.

use serde::Serialize;

use crate::interval::KernelRow;
use crate::kernel_report::KernelReport;

#[derive(Serialize)]
pub struct ProbeOutput {
    pub tool: &'static str,
    #[serde(flatten)]
    pub report: KernelReport,
    pub intervals: Vec<KernelRow>,
    /// Things the user should know about this run (PIDs that were gone, early stop, ...).
    pub notes: Vec<String>,
    /// What watching cost (as in run.json); absent when no interval was timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observer: Option<crate::observer::ObserverCost>,
}
