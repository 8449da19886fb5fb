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
    TailWait => "tail_wait",
    TailCpu => "tail_cpu",
    WorkerImbalance => "worker_imbalance",
    ServerCpuSaturated => "server_cpu_saturated",
    SynRetransmitTail => "syn_retransmit_tail",
    RetransmitTail => "retransmit_tail",
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

/// docs/findings.md, built in: `srvprof explain` and report.html give a kind's section where the
/// repository is not.
const FINDINGS_MD: &str = include_str!("../../../docs/findings.md");

/// The parts of each kind's section in docs/findings.md, in order.
pub const EXPLANATION_LABELS: [&str; 5] = [
    "What it means",
    "Evidence",
    "Threshold",
    "The usual fix",
    "Rule",
];

impl FindingKind {
    /// The kind of a run.json name ("syn_retransmit_tail").
    pub fn from_name(name: &str) -> Option<FindingKind> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// Its section of docs/findings.md as (label, text): the one parser of its `- **Label**:`
    /// lines, whose labels are EXPLANATION_LABELS.
    pub fn explanation_parts(self) -> Vec<(&'static str, &'static str)> {
        let head = format!("\n## `{}`\n", self.name());
        let Some(at) = FINDINGS_MD.find(&head) else {
            return Vec::new();
        };
        let body = &FINDINGS_MD[at + head.len()..];
        let body = &body[..body.find("\n## ").unwrap_or(body.len())];
        body.lines()
            .filter_map(|l| {
                let (label, text) = l.strip_prefix("- **")?.split_once("**: ")?;
                Some((label, text.trim()))
            })
            .collect()
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
        // What the binary carries is the file as it is now.
        assert_eq!(doc, FINDINGS_MD);
        for &kind in FindingKind::ALL {
            assert!(
                doc.contains(&format!("\n## `{}`\n", kind.name())),
                "docs/findings.md has no section for {kind}"
            );
            let parts = kind.explanation_parts();
            let labels: Vec<&str> = parts.iter().map(|(l, _)| *l).collect();
            assert_eq!(labels, EXPLANATION_LABELS, "{kind}'s section");
            assert!(
                parts.iter().all(|(_, t)| !t.is_empty()),
                "{kind}: {parts:?}"
            );
            // The rule's file is named as it is in the repository, and declares each constant
            // its threshold names.
            let rule = concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_string() + parts[4].1;
            let source = std::fs::read_to_string(&rule).expect(&rule);
            let constants: Vec<&str> = (parts[2].1.split('`').skip(1).step_by(2))
                .filter(|w| {
                    w.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                })
                .collect();
            for c in constants {
                assert!(
                    source.contains(&format!("const {c}")),
                    "{kind}: {c} is not in {rule}"
                );
            }
            assert_eq!(FindingKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(FindingKind::from_name("no_such_kind"), None);
        // A section's parts stop at the next section.
        assert_eq!(
            FindingKind::NoSuccess.explanation_parts()[0].1,
            "not one request succeeded"
        );
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
