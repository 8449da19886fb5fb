//! A finding: one plain-language sentence, its kind and weight, and the numbers behind it. The
//! rules that write them are in crate::rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

/// What a finding is about; in run.json as its snake_case name ("syn_retransmit_tail"), a stable
/// key scripts may match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    NoSuccess,
    TargetDied,
    ServerResets,
    ClientResets,
    ClientBound,
    CpuThrottled,
    BlockingIo,
    SlowDependency,
    WorkerImbalance,
    ServerCpuSaturated,
    SynRetransmitTail,
    ListenOverflows,
    NoisyNeighbour,
    RunqTail,
    NetIrqConcentrated,
    ClientConcurrencyShort,
    ServerClosedIdle,
    ConnectionChurn,
    ErrorBurst,
    P99Tracks,
    LostEvents,
    ShallowStacks,
}

impl FindingKind {
    pub const ALL: [FindingKind; 22] = [
        FindingKind::NoSuccess,
        FindingKind::TargetDied,
        FindingKind::ServerResets,
        FindingKind::ClientResets,
        FindingKind::ClientBound,
        FindingKind::CpuThrottled,
        FindingKind::BlockingIo,
        FindingKind::SlowDependency,
        FindingKind::WorkerImbalance,
        FindingKind::ServerCpuSaturated,
        FindingKind::SynRetransmitTail,
        FindingKind::ListenOverflows,
        FindingKind::NoisyNeighbour,
        FindingKind::RunqTail,
        FindingKind::NetIrqConcentrated,
        FindingKind::ClientConcurrencyShort,
        FindingKind::ServerClosedIdle,
        FindingKind::ConnectionChurn,
        FindingKind::ErrorBurst,
        FindingKind::P99Tracks,
        FindingKind::LostEvents,
        FindingKind::ShallowStacks,
    ];

    /// The name run.json and the report show.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::NoSuccess => "no_success",
            FindingKind::TargetDied => "target_died",
            FindingKind::ServerResets => "server_resets",
            FindingKind::ClientResets => "client_resets",
            FindingKind::ClientBound => "client_bound",
            FindingKind::CpuThrottled => "cpu_throttled",
            FindingKind::BlockingIo => "blocking_io",
            FindingKind::SlowDependency => "slow_dependency",
            FindingKind::WorkerImbalance => "worker_imbalance",
            FindingKind::ServerCpuSaturated => "server_cpu_saturated",
            FindingKind::SynRetransmitTail => "syn_retransmit_tail",
            FindingKind::ListenOverflows => "listen_overflows",
            FindingKind::NoisyNeighbour => "noisy_neighbour",
            FindingKind::RunqTail => "runq_tail",
            FindingKind::NetIrqConcentrated => "net_irq_concentrated",
            FindingKind::ClientConcurrencyShort => "client_concurrency_short",
            FindingKind::ServerClosedIdle => "server_closed_idle",
            FindingKind::ConnectionChurn => "connection_churn",
            FindingKind::ErrorBurst => "error_burst",
            FindingKind::P99Tracks => "p99_tracks",
            FindingKind::LostEvents => "lost_events",
            FindingKind::ShallowStacks => "shallow_stacks",
        }
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    pub summary: String,
    pub evidence: BTreeMap<String, f64>,
}

impl Finding {
    pub fn new(
        kind: FindingKind,
        severity: Severity,
        summary: String,
        evidence: &[(&str, f64)],
    ) -> Finding {
        Finding {
            kind,
            severity,
            summary,
            evidence: evidence.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_to_their_stable_names() {
        for kind in FindingKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.name()));
            let back: FindingKind = serde_json::from_str(&json).unwrap();
            assert_eq!(back, kind);
        }
    }
}
