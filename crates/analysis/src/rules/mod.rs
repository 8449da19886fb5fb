//! The rules that read a run report and write its findings: one small function per rule, its
//! thresholds named beside it, in files by subject. `findings` runs them all and ranks them:
//! what is wrong with the run itself first, then the causes by the share of p99 they explain.

pub mod balance;
pub mod churn;
pub mod cpu;
pub mod dependency;
pub mod failures;
pub mod io;
pub mod irq;
pub mod limits;
pub mod locks;
pub mod memory;
pub mod observer;
pub mod p99;
pub mod pauses;
pub mod stacks;
pub mod tail;
pub mod tcp;
pub mod tls;

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;
use crate::tail_account::{Place, Resource};

/// A cause that explains at least this share of p99 ranks by that share, above every finding
/// that explains less or has no share (those follow by severity).
pub const RANKED_TAIL_SHARE: f64 = 0.1;

/// Every rule's findings, ranked: critical findings about the run itself (no share of the tail:
/// a dead target, no success, a client-bound run), then the causes that explain at least
/// RANKED_TAIL_SHARE of p99, the largest share first, then the rest by severity. Ties keep the
/// order below, which puts a cause before the symptoms it makes.
pub fn findings(r: &RunReport) -> Vec<Finding> {
    ranked(without_generic(from_the_account(r, unranked(r))))
}

/// The rules that name a part of the account of p99 (crate::tail_account) with more evidence
/// than it has (the lock's holder, the file, the faults, the process that held the CPU), and
/// the part each names. Their share of p99 is the account's, so that every cause is measured
/// against the others by one split of p99; without an account, or without that part in it, each
/// keeps its own estimate. The rules the account cannot measure keep theirs: several SYN
/// retransmits to one connection, an event loop's dependency (its reads
/// never sleep: it waits for the answer in its poll, with all other work), and the CPU of
/// requests queued behind others.
///
/// A neighbour's or a quota's share is the part's times its share of the waits (its evidence
/// named here).
const ACCOUNTED: &[(FindingKind, Place, Option<Resource>, Option<&str>)] = &[
    (
        FindingKind::LockContention,
        Place::Blocked,
        Some(Resource::Lock),
        None,
    ),
    (
        FindingKind::BlockingIo,
        Place::Blocked,
        Some(Resource::Disk),
        None,
    ),
    (
        FindingKind::MemoryPressure,
        Place::Blocked,
        Some(Resource::PageFault),
        None,
    ),
    (
        FindingKind::NoisyNeighbour,
        Place::RunQueue,
        None,
        Some("share_of_wait"),
    ),
    (FindingKind::RunqTail, Place::RunQueue, None, None),
    (
        FindingKind::CpuThrottled,
        Place::RunQueue,
        None,
        Some("share_of_tail_wait"),
    ),
    (
        FindingKind::StopTheWorld,
        Place::Blocked,
        Some(Resource::Pause),
        None,
    ),
    (
        FindingKind::SlowDependency,
        Place::Blocked,
        Some(Resource::Service),
        None,
    ),
];

/// Each finding of an ACCOUNTED kind takes its share of p99 from the account's part (its own
/// estimate stays as `rule_tail_ms`).
fn from_the_account(r: &RunReport, mut out: Vec<Finding>) -> Vec<Finding> {
    let Some(account) = &r.tail_account else {
        return out;
    };
    for f in &mut out {
        let Some((_, place, resource, scale)) = ACCOUNTED.iter().find(|(kind, ..)| *kind == f.kind)
        else {
            continue;
        };
        let part = (account.parts.iter())
            .filter(|p| p.place == *place && (resource.is_none() || p.resource == *resource))
            .max_by(|a, b| a.tail_ms.total_cmp(&b.tail_ms));
        // A finding without the evidence its share is scaled by (a quota over the load
        // generator, which holds back the sending, not the server) keeps its own.
        let of_it = match scale {
            Some(k) => f.evidence.get(*k).copied(),
            None => Some(1.0),
        };
        if let (Some(part), Some(of_it)) = (part, of_it) {
            if let Some(own) = f.evidence.get("tail_ms").copied() {
                f.evidence.insert("rule_tail_ms".into(), own);
            }
            *f = f.clone().explaining(part.tail_ms * of_it, account.p99_ms);
        }
    }
    out
}

/// A generic finding never stands beside a specific one: slow_dependency without a remote
/// address only says the server waits on "a timer, a lock or a pipe", which a cause that names
/// the wait (and explains RANKED_TAIL_SHARE of p99) says better.
fn without_generic(mut out: Vec<Finding>) -> Vec<Finding> {
    let generic = |f: &Finding| {
        f.kind == FindingKind::SlowDependency && f.evidence.get("remotes") == Some(&0.0)
    };
    let named = out.iter().any(|f| {
        !generic(f)
            && f.kind != FindingKind::P99Tracks
            && f.tail_share.is_some_and(|s| s >= RANKED_TAIL_SHARE)
    });
    if named {
        out.retain(|f| !generic(f));
    }
    out
}

/// Symptoms, and the causes that make them: with a cause found, the symptom explains only the
/// share of p99 its causes leave (a neighbour that held 99 % of the run-queue wait leaves the
/// run-queue tail 1 % of it).
const EXPLAINED_BY: &[(FindingKind, &[FindingKind])] = &[(
    FindingKind::RunqTail,
    &[FindingKind::NoisyNeighbour, FindingKind::CpuThrottled],
)];

fn ranked(mut out: Vec<Finding>) -> Vec<Finding> {
    for (symptom, causes) in EXPLAINED_BY {
        let explained = out
            .iter()
            .filter(|f| causes.contains(&f.kind))
            .filter_map(|f| f.tail_share)
            .fold(0.0, f64::max);
        for f in out.iter_mut().filter(|f| f.kind == *symptom) {
            f.tail_share = f.tail_share.map(|s| (s - explained).max(0.0));
        }
    }
    let rank = |f: &Finding| match f.tail_share {
        None if f.severity == Severity::Critical => (0, 0, 0),
        Some(share) if share >= RANKED_TAIL_SHARE => (1, 1000 - (share * 1000.0).round() as i64, 0),
        _ => (2, 0, f.severity as i64),
    };
    // Stable: ties keep the rules' order.
    out.sort_by_key(rank);
    out
}

/// Every rule, in order of weight: critical first, then causes before their symptoms.
fn unranked(r: &RunReport) -> Vec<Finding> {
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
    out.extend(memory::memory_pressure(r));
    // Connection setup's cost and TIME_WAIT before the CPU figures it inflates.
    out.extend(churn::connection_churn(r));
    out.extend(tls::tls_cost(r));
    out.extend(dependency::slow_dependency(r));
    out.extend(locks::lock_contention(r));
    out.extend(pauses::stop_the_world(r));
    // What the account of p99 names that no rule above did.
    out.extend(tail::tail_wait(r));
    out.extend(tail::tail_cpu(r));
    out.extend(tail::retransmit_tail(r));
    // One busy worker of several: above the saturated thread it is.
    out.extend(balance::worker_imbalance(r));
    out.extend(cpu::server_cpu_saturated(r));
    out.extend(tcp::syn_tail_or_overflows(r));
    // Who took the CPU, ranked above the waits it caused.
    out.extend(cpu::noisy_neighbour(r));
    out.extend(cpu::runq_tail(r));
    out.extend(irq::net_irq_concentrated(r));
    out.extend(cpu::client_concurrency_short(r));
    out.extend(tcp::server_closed_idle(r));
    out.extend(failures::error_bursts(r));
    out.extend(p99::p99_tracks(r));
    out.extend(failures::lost_events(r));
    out.extend(observer::observer_cost(r));
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
            tls::tests::tables(),
            dependency::tests::tables(),
            cpu::tests::tables(),
            failures::tests::tables(),
            irq::tests::tables(),
            io::tests::tables(),
            limits::tests::tables(),
            locks::tests::tables(),
            memory::tests::tables(),
            observer::tests::tables(),
            p99::tests::tables(),
            pauses::tests::tables(),
            stacks::tests::tables(),
            tail::tests::tables(),
            tcp::tests::tables(),
        ];
        let made: BTreeSet<FindingKind> = tables.iter().flatten().flat_map(|t| t.check()).collect();
        let untested: Vec<FindingKind> = (FindingKind::ALL.iter().copied())
            .filter(|kind| !made.contains(kind))
            .collect();
        assert!(
            untested.is_empty(),
            "no case makes a finding of kind {untested:?}"
        );
    }

    #[test]
    fn causes_rank_by_the_share_of_p99_they_explain_below_what_is_wrong_with_the_run() {
        use crate::finding::Severity::{Critical, Info, Warning};
        let f = |kind, severity, share: Option<f64>| {
            let f = Finding::new(kind, severity, String::new(), &[]);
            match share {
                Some(s) => f.explaining(s, 1.0),
                None => f,
            }
        };
        let order = ranked(vec![
            f(FindingKind::P99Tracks, Info, None),
            f(FindingKind::SlowDependency, Warning, Some(0.3)),
            f(FindingKind::ServerCpuSaturated, Warning, Some(0.05)),
            f(FindingKind::CpuThrottled, Critical, Some(0.2)),
            f(FindingKind::NoisyNeighbour, Warning, Some(0.9)),
            f(FindingKind::TargetDied, Critical, None),
            f(FindingKind::NetIrqConcentrated, Warning, None),
            f(FindingKind::BlockingIo, Warning, Some(0.3)),
        ]);
        let kinds: Vec<FindingKind> = order.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                // What is wrong with the run itself.
                FindingKind::TargetDied,
                // The causes, by their share; a tie keeps the rules' order.
                FindingKind::NoisyNeighbour,
                FindingKind::SlowDependency,
                FindingKind::BlockingIo,
                // A critical cause is ranked by its share like the others.
                FindingKind::CpuThrottled,
                // Under RANKED_TAIL_SHARE or no share: by severity.
                FindingKind::ServerCpuSaturated,
                FindingKind::NetIrqConcentrated,
                FindingKind::P99Tracks,
            ]
        );
    }

    #[test]
    fn a_generic_finding_gives_way_to_a_specific_one_that_names_the_wait() {
        let f = |kind, share: f64, remotes: f64| {
            Finding::new(
                kind,
                Severity::Warning,
                String::new(),
                &[("remotes", remotes)],
            )
            .explaining(share, 1.0)
        };
        let generic = || f(FindingKind::SlowDependency, 0.73, 0.0);
        // The lock that made the wait is named: the generic sentence goes, whatever its share.
        let kinds = |out: Vec<Finding>| -> Vec<FindingKind> {
            ranked(without_generic(out))
                .iter()
                .map(|f| f.kind)
                .collect()
        };
        assert_eq!(
            kinds(vec![generic(), f(FindingKind::LockContention, 0.70, 0.0)]),
            [FindingKind::LockContention]
        );
        assert_eq!(
            kinds(vec![generic(), f(FindingKind::TailWait, 0.9, 0.0)]),
            [FindingKind::TailWait]
        );
        // Alone, or beside a cause under RANKED_TAIL_SHARE, it stays.
        assert_eq!(kinds(vec![generic()]), [FindingKind::SlowDependency]);
        assert_eq!(
            kinds(vec![generic(), f(FindingKind::LockContention, 0.05, 0.0)]),
            [FindingKind::SlowDependency, FindingKind::LockContention]
        );
        // Naming a remote address, it is specific: ranked by its share beside the others.
        assert_eq!(
            kinds(vec![
                f(FindingKind::SlowDependency, 0.73, 1.0),
                f(FindingKind::LockContention, 0.70, 0.0)
            ]),
            [FindingKind::SlowDependency, FindingKind::LockContention]
        );
    }

    #[test]
    fn a_cause_the_account_measures_takes_its_share_from_it() {
        use crate::tail_account::{Place, Resource, TailAccount, TailPart};
        let lock = || {
            Finding::new(
                FindingKind::LockContention,
                Severity::Warning,
                String::new(),
                &[],
            )
            .explaining(7.0, 10.0)
        };
        let neighbour = || {
            Finding::new(
                FindingKind::NoisyNeighbour,
                Severity::Warning,
                String::new(),
                &[("share_of_wait", 0.5)],
            )
            .explaining(9.0, 10.0)
        };
        let mut r = test_support::quiet_run();
        // Without an account, each keeps its own.
        let out = from_the_account(&r, vec![lock(), neighbour()]);
        assert_eq!(out[0].tail_share, Some(0.7));
        r.tail_account = Some(TailAccount {
            p99_ms: 10.0,
            parts: vec![
                TailPart {
                    place: Place::Blocked,
                    resource: Some(Resource::Lock),
                    tail_ms: 3.0,
                    share: 0.3,
                    ..Default::default()
                },
                TailPart {
                    place: Place::RunQueue,
                    tail_ms: 4.0,
                    share: 0.4,
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let out = from_the_account(&r, vec![lock(), neighbour()]);
        assert_eq!(out[0].tail_share, Some(0.3));
        assert_eq!(out[0].evidence["rule_tail_ms"], 7.0);
        // The neighbour held half the waits for a CPU: half the run queue's part.
        assert_eq!(out[1].tail_share, Some(0.2));
        // A quota that held 80 % of the server's waits for a CPU: 80 % of the run queue's part;
        // one over the load generator (no share of the server's waits) keeps its own.
        let quota = |evidence: &[(&str, f64)]| {
            Finding::new(
                FindingKind::CpuThrottled,
                Severity::Critical,
                String::new(),
                evidence,
            )
            .explaining(7.0, 10.0)
        };
        let out = from_the_account(&r, vec![quota(&[("share_of_tail_wait", 0.8)]), quota(&[])]);
        assert!((out[0].tail_share.unwrap() - 0.32).abs() < 1e-12);
        assert_eq!(out[1].tail_share, Some(0.7));
        // A part the account lacks: the rule's own.
        r.tail_account.as_mut().unwrap().parts.remove(0);
        assert_eq!(from_the_account(&r, vec![lock()])[0].tail_share, Some(0.7));
    }

    #[test]
    fn a_symptom_keeps_only_the_share_its_cause_leaves() {
        let f = |kind, share| {
            Finding::new(kind, Severity::Warning, String::new(), &[]).explaining(share, 1.0)
        };
        // The run-queue tail and the neighbour that held 99 % of it explain about the same share.
        let order = ranked(vec![
            f(FindingKind::RunqTail, 0.44),
            f(FindingKind::NoisyNeighbour, 0.436),
        ]);
        assert_eq!(order[0].kind, FindingKind::NoisyNeighbour);
        let runq = order[1].tail_share.unwrap();
        assert!((runq - 0.004).abs() < 1e-9, "{runq}");
        // Without the neighbour, the run-queue tail keeps its share.
        let alone = ranked(vec![f(FindingKind::RunqTail, 0.44)]);
        assert_eq!(alone[0].tail_share, Some(0.44));
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
