//! A request served in one run of its thread on a CPU (wakeup to sleep) waits that run out by
//! the wall clock: its CPU time and its waits for a CPU after each preemption in it. Those waits
//! go with the runs, the longest runs being the ones preempted most (a 30 ms spin beside a busy
//! neighbour waits a quarter of its time), not with the waits after a wakeup, which fall on
//! requests whatever their length. The on-CPU part is split with the runs' wall-clock lengths,
//! and the waits it carries at p99 move to the run queue's part.

use super::{Place, TailPart};
use crate::kernel_report::ThreadReport;
use crate::record::NsHistogram;
use srvprof_common::hist;

/// The preempted waits of the threads `serves` picks, and of the whole group.
pub(super) struct Preempted {
    /// The request threads' waits after a preemption: ns and count.
    pub ns: u64,
    pub waits: u64,
    /// Every thread's in the group: the runs' histograms count them all.
    pub group_ns: u64,
}

impl Preempted {
    pub fn of(threads: &[ThreadReport], serves: impl Fn(&str) -> bool) -> Self {
        let (mut ns, mut waits, mut group_ns) = (0, 0, 0);
        for t in threads {
            group_ns += t.runq_preempted_ns;
            if serves(&t.comm) {
                ns += t.runq_preempted_ns;
                waits += t.runq_preempted_waits;
            }
        }
        Self {
            ns,
            waits,
            group_ns,
        }
    }
}

/// The CPU's share of the runs a request at p99 meets, `tail_ms` of them by the wall clock: the
/// runs at least that long by the wall clock (the longest one when none is), against as many of
/// the longest CPU runs, rank for rank (both histograms count the same runs, recorded at the
/// same sleeps). A run long because it was preempted (a quota's throttle, a neighbour's slices)
/// has the CPU of the runs of its rank.
pub(super) fn cpu_share_at(cpu: &NsHistogram, wall: &NsHistogram, tail_ms: f64) -> f64 {
    let tail_ns = tail_ms * 1e6;
    let mut rank = 0;
    for (slot, &n) in wall.slots.iter().enumerate().rev() {
        if n > 0 && middle(slot) < tail_ns && rank > 0 {
            break;
        }
        rank += n;
    }
    match (longest_sum(cpu, rank), longest_sum(wall, rank)) {
        (c, w) if rank > 0 && w > 0.0 => (c / w).clamp(0.0, 1.0),
        _ => 1.0,
    }
}

/// The sum (ns, at each slot's middle) of the `k` longest values in `h`.
fn longest_sum(h: &NsHistogram, k: u64) -> f64 {
    let (mut left, mut sum) = (k, 0.0);
    for (slot, &n) in h.slots.iter().enumerate().rev() {
        let taken = n.min(left);
        sum += taken as f64 * middle(slot);
        left -= taken;
        if left == 0 {
            break;
        }
    }
    sum
}

/// A slot's value, ns: the middle of its range.
fn middle(slot: usize) -> f64 {
    (hist::slot_lower_bound(slot as u32) as f64 + hist::slot_value(slot as u32) as f64) / 2.0
}

/// Moves the preempted waits the on-CPU part carried at p99 (all but `cpu_share` of its time
/// there) to the run queue's part (`run_queue` when the split left none: every wait followed a
/// preemption), and sets each part's time per request back to its own: `cpu_ms` of CPU, and
/// every run-queue wait's time.
pub(super) fn move_to_run_queue(
    parts: &mut Vec<TailPart>,
    cpu_share: f64,
    cpu_ms: f64,
    run_queue: TailPart,
    p99_ms: f64,
) {
    let Some(on) = parts.iter().position(|p| p.place == Place::OnCpu) else {
        return;
    };
    let moved = parts[on].tail_ms * (1.0 - cpu_share);
    parts[on].tail_ms -= moved;
    parts[on].per_request_ms = cpu_ms;
    let rq = match parts.iter().position(|p| p.place == Place::RunQueue) {
        Some(i) => i,
        None => {
            parts.push(TailPart {
                tail_ms: 0.0,
                ..run_queue.clone()
            });
            parts.len() - 1
        }
    };
    let rq = &mut parts[rq];
    rq.tail_ms += moved;
    rq.per_request_ms = run_queue.per_request_ms;
    rq.waits = run_queue.waits;
    rq.mean_wait_ms = run_queue.mean_wait_ms;
    rq.preempted_tail_ms = Some(moved);
    for p in parts.iter_mut() {
        p.share = match p99_ms > 0.0 {
            true => (p.tail_ms / p99_ms).min(1.0),
            false => 0.0,
        };
    }
    parts.sort_by(|a, b| b.tail_ms.total_cmp(&a.tail_ms));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(values_ns: &[(u64, u64)]) -> NsHistogram {
        let mut h = NsHistogram::default();
        for &(ns, count) in values_ns {
            h.slots[hist::slot_of(ns) as usize] += count;
        }
        h
    }

    #[test]
    fn a_long_run_is_as_much_cpu_as_the_cpu_run_of_its_rank() {
        // 98 runs of 0.3 ms on the CPU, unpreempted, and 2 of 22.5 ms that waited 7.5 ms more.
        let cpu = runs(&[(300_000, 98), (22_500_000, 2)]);
        let wall = runs(&[(300_000, 98), (30_000_000, 2)]);
        let share = cpu_share_at(&cpu, &wall, 30.0);
        assert!((share - 0.75).abs() < 0.05, "{share}");
        // Unpreempted runs are all CPU.
        assert!((cpu_share_at(&cpu, &cpu, 22.5) - 1.0).abs() < 0.05);
        // 2 runs of 1 ms on the CPU held back 60 ms by a throttle: the tail's run is mostly the
        // wait, though longer CPU runs (5 ms) were never preempted.
        let cpu = runs(&[(1_000_000, 2), (5_000_000, 1), (300_000, 97)]);
        let wall = runs(&[(61_000_000, 2), (5_000_000, 1), (300_000, 97)]);
        let share = cpu_share_at(&cpu, &wall, 40.0);
        assert!(share <= 5.5 / 40.0, "{share}");
        // A request at p99 meeting several unpreempted runs (an event loop's) is all CPU though
        // p99's on-CPU time is longer than any run.
        let loops = runs(&[(300_000, 90), (2_000_000, 10)]);
        assert!((cpu_share_at(&loops, &loops, 8.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn what_moves_keeps_p99s_sum() {
        let part = |place, tail_ms| TailPart {
            place,
            tail_ms,
            ..Default::default()
        };
        let all = TailPart {
            per_request_ms: 0.3,
            waits: Some(40.0),
            ..part(Place::RunQueue, 0.0)
        };
        let mut parts = vec![part(Place::OnCpu, 28.0), part(Place::RunQueue, 0.5)];
        move_to_run_queue(&mut parts, 0.75, 0.5, all.clone(), 30.0);
        assert_eq!(parts[0].place, Place::OnCpu);
        assert!((parts[0].tail_ms - 21.0).abs() < 1e-9);
        assert!((parts[1].tail_ms - 7.5).abs() < 1e-9);
        assert!((parts[0].share - 0.7).abs() < 1e-9);
        assert_eq!(parts[1].per_request_ms, 0.3);
        assert_eq!(parts[1].waits, Some(40.0));
        assert_eq!(parts[1].preempted_tail_ms, Some(7.0));
        let sum: f64 = parts.iter().map(|p| p.tail_ms).sum();
        assert!((sum - 28.5).abs() < 1e-9);
        // Every wait after a preemption: the split left no run-queue part, and one is made.
        let mut parts = vec![part(Place::OnCpu, 28.0)];
        move_to_run_queue(&mut parts, 0.75, 0.5, all, 30.0);
        let rq = parts.iter().find(|p| p.place == Place::RunQueue).unwrap();
        assert!((rq.tail_ms - 7.0).abs() < 1e-9, "{parts:?}");
    }
}
