//! Sampled mode: how closely each estimate is known. Every figure scaled up from the windows is
//! a ratio estimate (what the windows saw over the share of the basis they covered; an interrupt
//! row's time is its exact count at the windows' mean per event), and its 95 % uncertainty comes
//! from how much the windows differ: the jackknife, each window left out in turn.

use super::sampling::{Basis, WindowUnit};
use crate::record::CountNs;

/// The 95 % uncertainty of a ratio estimate (sum of the numerators over the sum of the
/// denominators, one pair per window), as a share of it; its spread from window to window is
/// measured by the jackknife (each window left out in turn). None when fewer than 3 windows saw
/// a denominator, or nothing was counted (the estimate is then 0 and how wrong it is unknown).
pub fn ratio_error(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 3 {
        return None;
    }
    let (s_all, x_all) = pairs.iter().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    if x_all <= 0.0 {
        return None;
    }
    let ratio = s_all / x_all;
    if ratio <= 0.0 {
        return None;
    }
    // One window that saw the basis says nothing of how much windows differ.
    if pairs.iter().filter(|(_, x)| *x > 0.0).count() < 3 {
        return None;
    }
    let left_out: Vec<f64> = pairs
        .iter()
        .filter_map(|(s, x)| {
            let rest = x_all - x;
            (rest > 0.0).then(|| (s_all - s) / rest)
        })
        .collect();
    if left_out.len() < 2 {
        return None;
    }
    let n = left_out.len() as f64;
    let mean = left_out.iter().sum::<f64>() / n;
    let variance = (n - 1.0) / n * left_out.iter().map(|r| (r - mean).powi(2)).sum::<f64>();
    Some(1.96 * variance.sqrt() / ratio)
}

/// The 95 % uncertainty of a sampled syscall total, as a share of it: the estimate is
/// (syscalls seen) / (share of the basis seen), a ratio estimator over the windows.
pub fn relative_error(units: &[WindowUnit], basis: Basis) -> Option<f64> {
    let pairs: Vec<(f64, f64)> = units.iter().map(|u| (u.syscalls, u.basis(basis))).collect();
    ratio_error(&pairs)
}

/// The basis a report was scaled by (KernelReport::scaled_by).
fn report_basis(report: &super::KernelReport) -> Option<Basis> {
    Some(match report.scaled_by.as_deref()? {
        "responses" => Basis::Responses,
        "io_calls" => Basis::IoCalls,
        "switches" => Basis::Switches,
        "oncpu" => Basis::OnCpu,
        _ => Basis::Time,
    })
}

/// Sampled mode: the 95 % uncertainty of a report's syscall totals (a share of them), from the
/// windows it covered, by the basis it was scaled by (KernelReport::scaled_by).
pub fn syscalls_error(report: &super::KernelReport, windows: &[WindowUnit]) -> Option<f64> {
    relative_error(windows, report_basis(report)?)
}

/// Sampled mode: states every estimate's 95 % uncertainty (a share of it) from the windows the
/// report covered: the syscall totals, each syscall's count and time, and each interrupt row's
/// time (the kernel's exact count at the windows' mean time per event, so the uncertainty of
/// that mean). Exact mode (no basis): nothing to state, every field stays None.
pub fn state_errors(report: &mut super::KernelReport, windows: &[WindowUnit]) {
    let Some(basis) = report_basis(report) else {
        return;
    };
    let over = |f: &dyn Fn(&WindowUnit) -> f64| -> Option<f64> {
        let pairs: Vec<(f64, f64)> = windows.iter().map(|u| (f(u), u.basis(basis))).collect();
        ratio_error(&pairs)
    };
    // With the sleeps counted apart, only the rest of each figure was scaled from the windows:
    // its uncertainty, as a share of the whole.
    let of_whole = |error: Option<f64>, whole: u64, exact: Option<u64>| {
        let scaled_share = match exact {
            Some(exact) if whole > 0 => whole.saturating_sub(exact) as f64 / whole as f64,
            _ => 1.0,
        };
        error.map(|e| e * scaled_share)
    };
    let count: u64 = report.syscalls.iter().map(|s| s.count).sum();
    let time: u64 = report.syscalls.iter().map(|s| s.total_ns).sum();
    report.syscalls_error = of_whole(over(&|u| u.syscalls), count, report.syscalls_blocked);
    report.syscall_time_error = of_whole(over(&|u| u.syscall_ns), time, report.syscall_blocked_ns);
    for s in &mut report.syscalls {
        let nr = s.nr;
        s.count_error = of_whole(
            over(&|u| u.by_name.get(&nr).map_or(0.0, |c| c.0)),
            s.count,
            s.blocked,
        );
        s.time_error = of_whole(
            over(&|u| u.by_name.get(&nr).map_or(0.0, |c| c.1)),
            s.total_ns,
            s.blocked_ns,
        );
    }
    // An interrupt row's time is its count times the mean per event the windows saw on its CPU,
    // or on every CPU when that CPU's windows saw none (irq.rs): the error of that mean.
    let mean_error = |event: &dyn Fn(&WindowUnit, Option<usize>) -> CountNs, cpu: usize| {
        let seen_here = windows.iter().any(|u| event(u, Some(cpu)).count > 0);
        let at = seen_here.then_some(cpu);
        let pairs: Vec<(f64, f64)> = windows
            .iter()
            .map(|u| {
                let c = event(u, at);
                (c.total_ns as f64, c.count as f64)
            })
            .collect();
        ratio_error(&pairs)
    };
    for row in &mut report.softirqs {
        let Some(v) = srvprof_common::SOFTIRQ_NAMES
            .iter()
            .position(|n| *n == row.vector)
        else {
            continue;
        };
        row.time_error = if row.timed_per_packet {
            // The windows' time per packet on this CPU.
            let cpu = row.cpu as usize;
            let pairs: Vec<(f64, f64)> = windows
                .iter()
                .map(|u| {
                    let packets = u.rx_packets.get(cpu).copied().unwrap_or(0.0);
                    (u.softirq(Some(cpu), v).total_ns as f64, packets)
                })
                .collect();
            ratio_error(&pairs)
        } else {
            mean_error(&|u, cpu| u.softirq(cpu, v), row.cpu as usize)
        };
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::kernel_report::deltas::{at_probe_mean, scaled, sum};
    use crate::random::SplitMix64;

    /// One synthetic minute of bursty traffic in 1 ms steps, with a window of `window_ms` at a
    /// random place in each second's middle 80 % (as the sampler opens them). Bursts of 50 to
    /// 150 ms start at random (about 2 a second); in a burst each millisecond has 10 to 30 switches
    /// and 4 to 6 syscalls per switch (each burst its own ratio); between bursts a switch and two
    /// syscalls every 100 ms. Returns the windows, all switches and the true syscall total.
    fn bursty_minute(seed: u64, window_ms: u64) -> (Vec<WindowUnit>, f64, f64) {
        let mut rng = SplitMix64(seed);
        let ms = 60_000usize;
        let (mut switches, mut syscalls) = (vec![0.0; ms], vec![0.0; ms]);
        let mut t = 0;
        while t < ms {
            if rng.uniform() < 0.002 {
                let len = 50 + (rng.uniform() * 100.0) as usize;
                let per_switch = 4.0 + 2.0 * rng.uniform();
                for i in t..(t + len).min(ms) {
                    let n = (10.0 + 20.0 * rng.uniform()).round();
                    switches[i] = n;
                    syscalls[i] = (n * per_switch).round();
                }
                t += len;
            } else {
                if t % 100 == 0 {
                    switches[t] = 1.0;
                    syscalls[t] = 2.0;
                }
                t += 1;
            }
        }
        let mut windows = Vec::new();
        for second in 0..60u64 {
            let room = 1000 - window_ms - 200;
            let open = (second * 1000 + 100 + (rng.uniform() * room as f64) as u64) as usize;
            let range = open..open + window_ms as usize;
            windows.push(WindowUnit {
                syscalls: syscalls[range.clone()].iter().sum(),
                switches: switches[range].iter().sum(),
                traced_ns: window_ms as f64 * 1e6,
                ..Default::default()
            });
        }
        (windows, switches.iter().sum(), syscalls.iter().sum())
    }

    #[test]
    fn scaled_by_switches_bursty_traffic_is_unbiased_and_its_interval_covers_the_truth() {
        let seeds = 300;
        let (mut bias, mut covered, mut by_time_off, mut worst) = (0.0, 0, 0, 0.0f64);
        for seed in 0..seeds {
            let (windows, all_switches, truth) = bursty_minute(seed, 50);
            let seen: f64 = windows.iter().map(|w| w.syscalls).sum();
            let seen_switches: f64 = windows.iter().map(|w| w.switches).sum();
            let estimate = seen / seen_switches * all_switches;
            bias += (estimate - truth) / truth / seeds as f64;
            worst = worst.max(((estimate - truth) / truth).abs());
            let error = relative_error(&windows, Basis::Switches).unwrap();
            if (estimate - truth).abs() <= error * estimate {
                covered += 1;
            }
            // Scaled by time instead (the sampled mode before): 5 % of the time, times 20.
            if (seen * 20.0 - truth).abs() > 0.1 * truth {
                by_time_off += 1;
            }
        }
        let coverage = covered as f64 / seeds as f64;
        eprintln!(
            "{seeds} bursty minutes: mean bias {bias:.4}, worst {worst:.3}, 95 % interval covered {coverage:.3}, by time off by > 10 %: {by_time_off}"
        );
        assert!(bias.abs() < 0.02, "mean bias {bias:.4}");
        assert!(
            coverage >= 0.90,
            "95 % interval covered the truth in {coverage:.3} of runs"
        );
        // The switches are what make it work: by time, most of these minutes are off by > 10 %.
        assert!(
            by_time_off > seeds / 2,
            "{by_time_off} of {seeds} off by time"
        );
    }

    /// What one synthetic bursty minute holds in truth: per syscall number (count, ns), and the
    /// NET_RX softirqs' count and time.
    struct Truth {
        by_name: BTreeMap<u32, (f64, f64)>,
        net_rx: CountNs,
    }

    /// A bursty minute as `probe` sees it in sampled mode: 1 ms steps, a window of `window_ms` at a
    /// random place in each second's middle 80 %, figures scaled by time. Bursts of 50 to 150 ms
    /// (about 2 a second) of 200 to 400 syscalls a millisecond, a burst's own mix of read (nr 0,
    /// 30 to 70 %) and write (nr 1), each taking 1 to 3 us (read) or 4 to 8 us (write, a burst's
    /// own mean); NET_RX softirqs at a tenth of the syscalls, 2 to 6 us each (a burst's own mean).
    /// Between bursts, a read every 10 ms.
    fn bursty_named_minute(seed: u64, window_ms: u64) -> (Vec<WindowUnit>, Truth) {
        let mut rng = SplitMix64(seed);
        let ms = 60_000usize;
        // Per millisecond: reads, read ns, writes, write ns, softirqs, softirq ns.
        let mut steps = vec![[0.0f64; 6]; ms];
        let mut t = 0;
        while t < ms {
            if rng.uniform() < 0.002 {
                let len = 50 + (rng.uniform() * 100.0) as usize;
                let read_share = 0.3 + 0.4 * rng.uniform();
                let read_ns = 1000.0 + 2000.0 * rng.uniform();
                let write_ns = 4000.0 + 4000.0 * rng.uniform();
                let irq_ns = 2000.0 + 4000.0 * rng.uniform();
                for step in steps.iter_mut().skip(t).take(len) {
                    let n = (200.0 + 200.0 * rng.uniform()).round();
                    let reads = (n * read_share).round();
                    let irqs = (n / 10.0).round();
                    *step = [
                        reads,
                        reads * read_ns,
                        n - reads,
                        (n - reads) * write_ns,
                        irqs,
                        irqs * irq_ns,
                    ];
                }
                t += len;
            } else {
                if t % 10 == 0 {
                    steps[t] = [1.0, 1500.0, 0.0, 0.0, 0.0, 0.0];
                }
                t += 1;
            }
        }
        let total = |from: usize, to: usize| {
            steps[from..to].iter().fold([0.0; 6], |mut a, s| {
                for (x, y) in a.iter_mut().zip(s) {
                    *x += y;
                }
                a
            })
        };
        let named = |t: [f64; 6]| BTreeMap::from([(0, (t[0], t[1])), (1, (t[2], t[3]))]);
        let mut windows = Vec::new();
        for second in 0..60u64 {
            let room = 1000 - window_ms - 200;
            let open = (second * 1000 + 100 + (rng.uniform() * room as f64) as u64) as usize;
            let seen = total(open, open + window_ms as usize);
            let mut softirqs = vec![vec![
                CountNs::default();
                srvprof_common::SOFTIRQ_NAMES.len()
            ]];
            softirqs[0][NET_RX] = CountNs {
                count: seen[4] as u64,
                total_ns: seen[5] as u64,
            };
            windows.push(WindowUnit {
                syscalls: seen[0] + seen[2],
                syscall_ns: seen[1] + seen[3],
                by_name: named(seen),
                softirqs,
                traced_ns: window_ms as f64 * 1e6,
                ..Default::default()
            });
        }
        let all = total(0, ms);
        let truth = Truth {
            by_name: named(all),
            net_rx: CountNs {
                count: all[4] as u64,
                total_ns: all[5] as u64,
            },
        };
        (windows, truth)
    }

    const NET_RX: usize = 3;

    /// The default mode's estimator as `probe` runs it (scaled by time, interrupt times at the
    /// windows' mean per event), over many synthetic bursty minutes with known truth: every
    /// estimate is unbiased to within 2 %, and each stated 95 % interval covers the truth at about
    /// its nominal rate. It says nothing of how wide the intervals are: a window of a twentieth
    /// of each second catches a 50 ms burst or misses it, so on this traffic they are wide, and
    /// they say so.
    #[test]
    fn scaled_by_time_every_estimate_is_unbiased_and_its_stated_interval_covers_the_truth() {
        use super::super::{KernelReport, SoftirqReport, SyscallReport};
        let (seeds, window_ms) = (400, 50);
        let fraction = 60.0 * window_ms as f64 / 60_000.0;
        // Per figure: summed relative error (bias), runs covered, runs with a stated error, and
        // the stated errors' median.
        let figures = [
            "read count",
            "read time",
            "write count",
            "write time",
            "total",
            "total time",
            "NET_RX time",
        ];
        let mut bias = [0.0f64; 7];
        let mut covered = [0u32; 7];
        let mut stated = [0u32; 7];
        let mut widths: Vec<Vec<f64>> = vec![Vec::new(); 7];
        for seed in 0..seeds {
            let (windows, truth) = bursty_named_minute(seed, window_ms);
            let seen = |nr: u32| -> (f64, f64) {
                windows.iter().fold((0.0, 0.0), |a, w| {
                    let c = w.by_name.get(&nr).copied().unwrap_or_default();
                    (a.0 + c.0, a.1 + c.1)
                })
            };
            let mut report = KernelReport {
                scaled_by: Some(Basis::Time.name().into()),
                traced_share: Some(fraction),
                ..Default::default()
            };
            for nr in [0, 1] {
                let (count, ns) = seen(nr);
                report.syscalls.push(SyscallReport {
                    nr,
                    count: scaled(count as u64, Some(fraction)),
                    total_ns: scaled(ns as u64, Some(fraction)),
                    ..Default::default()
                });
            }
            let probe = windows
                .iter()
                .fold(CountNs::default(), |a, w| sum(a, w.softirqs[0][NET_RX]));
            let net_rx = at_probe_mean(probe, truth.net_rx.count);
            report.softirqs.push(SoftirqReport {
                cpu: 0,
                vector: "NET_RX".into(),
                count: net_rx.count,
                total_ns: net_rx.total_ns,
                ..Default::default()
            });
            state_errors(&mut report, &windows);
            let s = &report.syscalls;
            let t = |nr: u32| truth.by_name[&nr];
            let cases = [
                (s[0].count as f64, t(0).0, s[0].count_error),
                (s[0].total_ns as f64, t(0).1, s[0].time_error),
                (s[1].count as f64, t(1).0, s[1].count_error),
                (s[1].total_ns as f64, t(1).1, s[1].time_error),
                (
                    (s[0].count + s[1].count) as f64,
                    t(0).0 + t(1).0,
                    report.syscalls_error,
                ),
                (
                    (s[0].total_ns + s[1].total_ns) as f64,
                    t(0).1 + t(1).1,
                    report.syscall_time_error,
                ),
                (
                    report.softirqs[0].total_ns as f64,
                    truth.net_rx.total_ns as f64,
                    report.softirqs[0].time_error,
                ),
            ];
            for (i, (estimate, truth, error)) in cases.into_iter().enumerate() {
                bias[i] += (estimate - truth) / truth / seeds as f64;
                if let Some(e) = error {
                    stated[i] += 1;
                    widths[i].push(e);
                    if (estimate - truth).abs() <= e * estimate {
                        covered[i] += 1;
                    }
                }
            }
        }
        for i in 0..figures.len() {
            widths[i].sort_by(f64::total_cmp);
            let median = widths[i]
                .get(widths[i].len() / 2)
                .copied()
                .unwrap_or(f64::NAN);
            let coverage = covered[i] as f64 / stated[i].max(1) as f64;
            eprintln!(
                "{}: bias {:+.4}, stated in {} of {seeds} runs, median ±{:.0} %, covered {coverage:.3}",
                figures[i],
                bias[i],
                stated[i],
                median * 100.0
            );
            assert!(
                bias[i].abs() < 0.02,
                "{}: mean bias {:.4}",
                figures[i],
                bias[i]
            );
            assert!(
                stated[i] >= seeds as u32 * 9 / 10,
                "{}: stated in {} runs",
                figures[i],
                stated[i]
            );
            assert!(
                (0.90..=0.995).contains(&coverage),
                "{}: the 95 % interval covered the truth in {coverage:.3} of runs",
                figures[i]
            );
        }
    }

    #[test]
    fn too_few_windows_or_nothing_seen_has_no_stated_error() {
        let unit = |syscalls, switches| WindowUnit {
            syscalls,
            switches,
            ..Default::default()
        };
        assert_eq!(
            relative_error(&[unit(10.0, 2.0), unit(12.0, 3.0)], Basis::Switches),
            None
        );
        assert_eq!(
            relative_error(&vec![unit(0.0, 0.0); 5], Basis::Switches),
            None
        );
        // Identical windows: no spread, no error.
        assert_eq!(
            relative_error(&vec![unit(10.0, 2.0); 5], Basis::Switches),
            Some(0.0)
        );
    }
}
