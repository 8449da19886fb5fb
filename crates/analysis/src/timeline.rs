//! A row of run.json's timeline: one interval of the load beside the kernel's figures for it.

use serde::{Deserialize, Serialize};

use crate::interval::KernelRow;

/// One interval: the client's view (throughput, latency, errors) beside the kernel's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    /// When the kernel interval really started and how long it really was (seconds since
    /// measurement started): the kernel rates are per second of this length.
    pub t_s: f64,
    pub duration_s: f64,
    /// The load generator's interval(s) beside it, on the same clock: normally the one starting
    /// at the grid point the kernel interval was due at; several (their completions and errors
    /// summed, throughput averaged, the worst p50 and p99) only if the sampler missed a grid point.
    #[serde(default)]
    pub load_t_s: f64,
    #[serde(default)]
    pub load_intervals: usize,
    pub throughput_rps: f64,
    pub completed: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub server: KernelRow,
    /// Load generator CPU, percent of one CPU.
    pub client_user_pct: f64,
    pub client_sys_pct: f64,
}
