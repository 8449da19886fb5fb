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

/// Declares FindingKind from one list of kinds and their names: the enum, ALL and name().
macro_rules! finding_kinds {
    ($($kind:ident => $name:literal),* $(,)?) => {
        /// What a finding is about; in run.json as its name ("syn_retransmit_tail"), a stable
        /// key scripts may match on.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum FindingKind {
            $(#[serde(rename = $name)] $kind),*
        }

        impl FindingKind {
            pub const ALL: &[FindingKind] = &[$(FindingKind::$kind),*];

            /// The name run.json and the report show.
            pub fn name(self) -> &'static str {
                match self {
                    $(FindingKind::$kind => $name),*
                }
            }
        }
    };
}

finding_kinds! {
    NoSuccess => "no_success",
    TargetDied => "target_died",
    ServerResets => "server_resets",
    ClientResets => "client_resets",
    ClientBound => "client_bound",
    CpuThrottled => "cpu_throttled",
    BlockingIo => "blocking_io",
    MemoryPressure => "memory_pressure",
    SlowDependency => "slow_dependency",
    LockContention => "lock_contention",
    StopTheWorld => "stop_the_world",
    WorkerImbalance => "worker_imbalance",
    ServerCpuSaturated => "server_cpu_saturated",
    SynRetransmitTail => "syn_retransmit_tail",
    ListenOverflows => "listen_overflows",
    NoisyNeighbour => "noisy_neighbour",
    RunqTail => "runq_tail",
    NetIrqConcentrated => "net_irq_concentrated",
    ClientConcurrencyShort => "client_concurrency_short",
    ServerClosedIdle => "server_closed_idle",
    ConnectionChurn => "connection_churn",
    TlsCost => "tls_cost",
    ErrorBurst => "error_burst",
    P99Tracks => "p99_tracks",
    LostEvents => "lost_events",
    ObserverCost => "observer_cost",
    ShallowStacks => "shallow_stacks",
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
    /// The share of the run's p99 this cause explains (0..=1): the time it adds to a request in
    /// the tail over p99. None for findings about the run itself (a dead target, a client-bound
    /// run, lost events) or whose cost to a request is not known. Findings are ranked by it.
    #[serde(default)]
    pub tail_share: Option<f64>,
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
            tail_share: None,
        }
    }

    /// This cause adds `tail_ms` to a request in the tail of a run whose p99 is `p99_ms`: its
    /// share of p99 (at most all of it), and `tail_ms` among the evidence. Nothing for a run
    /// without a p99.
    pub fn explaining(mut self, tail_ms: f64, p99_ms: f64) -> Finding {
        if p99_ms > 0.0 && tail_ms.is_finite() {
            let share = (tail_ms.max(0.0) / p99_ms).min(1.0);
            self.tail_share = Some(share);
            self.evidence.insert("tail_ms".into(), tail_ms.max(0.0));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_explains_at_most_all_of_p99() {
        let f = || Finding::new(FindingKind::RunqTail, Severity::Warning, String::new(), &[]);
        assert_eq!(f().explaining(5.0, 10.0).tail_share, Some(0.5));
        assert_eq!(f().explaining(30.0, 10.0).tail_share, Some(1.0));
        assert_eq!(f().explaining(-1.0, 10.0).tail_share, Some(0.0));
        assert_eq!(f().explaining(5.0, 0.0).tail_share, None);
        assert_eq!(f().explaining(5.0, 10.0).evidence["tail_ms"], 5.0);
    }

    #[test]
    fn every_kind_is_explained_in_docs_findings_md() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/findings.md");
        let doc = std::fs::read_to_string(path).expect("docs/findings.md");
        for &kind in FindingKind::ALL {
            assert!(
                doc.contains(&format!("\n## `{}`\n", kind.name())),
                "docs/findings.md has no section for {kind}"
            );
        }
    }

    #[test]
    fn kinds_serialize_to_their_stable_names() {
        for &kind in FindingKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.name()));
            let back: FindingKind = serde_json::from_str(&json).unwrap();
            assert_eq!(back, kind);
        }
    }
}
