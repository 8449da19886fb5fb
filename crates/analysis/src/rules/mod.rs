//! The rules that read a run report and write its findings: one small function per rule, its
//! thresholds named beside it, in files by subject. `findings` runs them all, most weighty first.

pub mod balance;
pub mod churn;
pub mod cpu;
pub mod dependency;
pub mod failures;
pub mod interrupts;
pub mod io;
pub mod limits;
pub mod p99;
pub mod stacks;
pub mod tcp;

use crate::finding::Finding;
use crate::run_report::RunReport;

/// Every rule, in order of weight: critical first, then by how much they explain.
pub fn findings(r: &RunReport) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(failures::no_success(r));
    out.extend(failures::target_died(r));
    // Who reset connections, in which state and why: ranked above the error bursts they cause.
    out.extend(tcp::resets(r));
    out.extend(cpu::client_bound(r));
    // A quota that holds the server back explains the run-queue waits and the tail below.
    out.extend(limits::cpu_throttled(r));
    // A thread waiting on the disk is not on a CPU: the cause before the CPU figures.
    out.extend(io::blocking_io(r));
    // Connection setup's cost and TIME_WAIT before the CPU figures it inflates.
    out.extend(churn::connection_churn(r));
    out.extend(dependency::slow_dependency(r));
    // One busy worker of several: above the saturated thread it is.
    out.extend(balance::worker_imbalance(r));
    out.extend(cpu::server_cpu_saturated(r));
    out.extend(tcp::syn_tail_or_overflows(r));
    // Who took the CPU, ranked above the waits it caused.
    out.extend(cpu::noisy_neighbour(r));
    out.extend(cpu::runq_tail(r));
    out.extend(interrupts::net_irq_concentrated(r));
    out.extend(cpu::client_concurrency_short(r));
    out.extend(tcp::server_closed_idle(r));
    out.extend(failures::error_bursts(r));
    out.extend(p99::p99_tracks(r));
    out.extend(failures::lost_events(r));
    out.extend(stacks::shallow_stacks(r));
    // Stable: within a severity, the order above.
    out.sort_by_key(|f| f.severity);
    out
}

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::tcp::tests::resets_run;
    use super::*;
    use crate::finding::FindingKind;
    use crate::run_report::TimelineRow;

    #[test]
    fn every_kind_of_finding_is_made_by_some_case_of_some_table() {
        let tables = [
            balance::tests::tables(),
            churn::tests::tables(),
            dependency::tests::tables(),
            cpu::tests::tables(),
            failures::tests::tables(),
            interrupts::tests::tables(),
            io::tests::tables(),
            limits::tests::tables(),
            p99::tests::tables(),
            stacks::tests::tables(),
            tcp::tests::tables(),
        ];
        let made: BTreeSet<FindingKind> = tables.iter().flatten().flat_map(|t| t.check()).collect();
        let untested: Vec<FindingKind> = FindingKind::ALL
            .into_iter()
            .filter(|kind| !made.contains(kind))
            .collect();
        assert!(
            untested.is_empty(),
            "no case makes a finding of kind {untested:?}"
        );
    }

    #[test]
    fn resets_rank_above_the_error_bursts_they_cause() {
        // The ranks of the reset finding and of the error burst in a run with one bursty interval.
        let ranks = |reset_errors| {
            let mut run = resets_run(100, reset_errors, 100);
            run.timeline = vec![TimelineRow {
                t_s: 0.0,
                duration_s: 1.0,
                completed: 200,
                errors: 100,
                ..Default::default()
            }];
            let all = findings(&run);
            let rank = |kind: FindingKind| all.iter().position(|f| f.kind == kind).unwrap();
            (
                rank(FindingKind::ServerResets),
                rank(FindingKind::ErrorBurst),
            )
        };
        let (resets, burst) = ranks(100);
        assert_eq!(resets, 0);
        assert!(resets < burst);
        // At Warning too, it comes before the bursts it causes.
        let (resets, burst) = ranks(40);
        assert!(resets < burst);
    }
}
