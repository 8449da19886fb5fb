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
    /// The server's side of a split run: its id, this host, the common start and this host's
    /// clock then (as a load agent records them in its load.json's `config`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<srvprof_loadgen::ClockState>,
}

/// `srvprof probe --out DIR`'s series.json: what `srvprof merge` needs to build the run on the
/// servers' side as `srvprof run` builds it on one host (run_report::build).
#[derive(Serialize, serde::Deserialize)]
pub struct ProbeSeries {
    pub pids: Vec<u32>,
    pub series: crate::series::ReadingSeries,
    pub exits: Vec<crate::record::ExitRecord>,
    pub observer: Option<crate::observer::ObserverCost>,
}
