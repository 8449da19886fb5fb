//! The stop-the-world family's part of the record and of the report: each watched process's
//! pauses (uprobes at its runtime's functions) and their lengths, and a group's pauses in a span.

use crate::record::{NsHistogram, Reading};
use serde::{Deserialize, Serialize};

/// Its part of KernelCounters: cumulative since the probes attached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// The watched processes' pauses (those whose runtime is known).
    pub pauses: Vec<PauseRecord>,
    /// Their lengths (ns), per group (server, client); empty in recordings made before.
    pub pause_hist: Vec<NsHistogram>,
}

/// A watched process's stop-the-world pauses so far (uprobes at its runtime's functions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseRecord {
    pub pid: u32,
    pub group: u32,
    /// "go" or "hotspot".
    #[serde(default)]
    pub runtime: String,
    pub pauses: u64,
    pub total_ns: u64,
    /// The longest since the probes were attached.
    pub max_ns: u64,
}

/// Its part of a group's KernelReport.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Figures {
    /// Stop-the-world pauses of its processes whose runtime srvprof knows (Go, HotSpot).
    pub pauses: Vec<PauseReport>,
}

/// `group`'s figures between two readings.
pub fn figures(start: &Reading, end: &Reading, group: u32) -> Figures {
    Figures {
        pauses: pause_deltas(start, end, group),
    }
}

/// One process's stop-the-world pauses in a span: its runtime stopped every thread ("go":
/// runtime.stopTheWorldWithSema to startTheWorldWithSema; "hotspot": a safepoint).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PauseReport {
    pub pid: u32,
    pub runtime: String,
    pub pauses: u64,
    pub total_ns: u64,
    /// The longest since the probes were attached (the warm-up included).
    pub max_ns: u64,
}

impl PauseReport {
    /// Who stopped the world, in words.
    pub fn runtime_name(&self) -> &'static str {
        match self.runtime.as_str() {
            "go" => "the Go runtime",
            "hotspot" => "the JVM",
            _ => "its runtime",
        }
    }
}

/// `group`'s processes' pauses between `start` and `end`, longest in all first.
fn pause_deltas(start: &Reading, end: &Reading, group: u32) -> Vec<PauseReport> {
    let mut out: Vec<PauseReport> = (end.kernel.families.pauses.pauses.iter())
        .filter(|p| p.group == group)
        .filter_map(|p| {
            let before = (start.kernel.families.pauses.pauses.iter()).find(|b| b.pid == p.pid);
            let (n0, ns0) = before.map(|b| (b.pauses, b.total_ns)).unwrap_or_default();
            let pauses = p.pauses.saturating_sub(n0);
            (pauses > 0).then(|| PauseReport {
                pid: p.pid,
                runtime: p.runtime.clone(),
                pauses,
                total_ns: p.total_ns.saturating_sub(ns0),
                max_ns: p.max_ns,
            })
        })
        .collect();
    out.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pauses: u64, ms: u64) -> Reading {
        let mut s = Reading::default();
        s.kernel.families.pauses.pauses = vec![PauseRecord {
            pid: 7,
            group: 0,
            runtime: "go".into(),
            pauses,
            total_ns: ms * 1_000_000,
            max_ns: 20_000_000,
        }];
        s
    }

    #[test]
    fn pauses_are_the_windows_growth() {
        let r = pause_deltas(&at(10, 100), &at(30, 500), 0);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (
                r[0].runtime.as_str(),
                r[0].pauses,
                r[0].total_ns,
                r[0].max_ns
            ),
            ("go", 20, 400_000_000, 20_000_000)
        );
        assert!(pause_deltas(&at(10, 100), &at(10, 100), 0).is_empty());
        assert!(pause_deltas(&at(10, 100), &at(30, 500), 1).is_empty());
    }
}
