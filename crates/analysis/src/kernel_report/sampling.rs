//! Sampled mode: the syscall and interrupt programs ran only in a window of each interval, so
//! their counts are scaled up from the windows (by the responses served in them when a load
//! generator says how many, else by the context switches made in them, else by time), and
//! interrupt times are the kernel's own counts at the windows' mean time per event.

use crate::record::{CountNs, Sample};

/// Sampled mode: the share of the window between two samples the syscall and interrupt programs
/// were attached. None in exact mode (attached all along).
pub fn traced_fraction(start: &Sample, end: &Sample) -> Option<f64> {
    let traced = end
        .kernel
        .traced_ns?
        .saturating_sub(start.kernel.traced_ns.unwrap_or(0));
    let wall = end.monotonic_ns.saturating_sub(start.monotonic_ns);
    Some(if wall == 0 {
        0.0
    } else {
        (traced as f64 / wall as f64).min(1.0)
    })
}

/// Fewer responses than this in the windows: too few to scale by.
const MIN_TRACED_RESPONSES: u64 = 100;
/// Fewer context switches than this in the windows: too few to scale by.
pub const MIN_TRACED_SWITCHES: u64 = 50;
/// Less time on a CPU than this in the windows (ns): too little to scale by.
pub const MIN_TRACED_ONCPU_NS: u64 = 1_000_000;

/// What the syscall counts seen in the windows are scaled by (sampled mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The share of the load generator's responses that arrived while the programs were attached
    /// (`run`): the server runs slower while traced, so a share of time would undercount it.
    Responses,
    /// The share of the group's time on a CPU spent while they were attached: syscalls are made
    /// on a CPU, so a burst that a window catches weighs as much as it should, and one it misses
    /// is not mistaken for idle time. The scheduler's own account (/proc schedstat).
    OnCpu,
    /// The share of the group's context switches made while they were attached: syscalls come
    /// with the threads' wakeups and switches, so a burst that a window catches weighs as much as
    /// it should, and one it misses is not mistaken for idle time. Exact counts, always recorded.
    Switches,
    /// The share of time they were attached, when neither was seen often enough.
    Time,
}

impl Basis {
    pub fn name(self) -> &'static str {
        match self {
            Basis::Responses => "responses",
            Basis::OnCpu => "oncpu",
            Basis::Switches => "switches",
            Basis::Time => "time",
        }
    }
}

fn delta(end: Option<u64>, start: Option<u64>) -> Option<u64> {
    Some(end?.saturating_sub(start.unwrap_or(0)))
}

/// The group's context switches between two samples (every watched thread, exact).
pub fn group_switches(start: &Sample, end: &Sample, group: u32) -> u64 {
    let before: std::collections::BTreeMap<u32, u64> = start
        .kernel
        .threads
        .iter()
        .map(|t| (t.tid, t.voluntary_switches + t.involuntary_switches))
        .collect();
    end.kernel
        .threads
        .iter()
        .filter(|t| t.group == group)
        .map(|t| {
            (t.voluntary_switches + t.involuntary_switches)
                .saturating_sub(before.get(&t.tid).copied().unwrap_or(0))
        })
        .sum()
}

/// The group's time on a CPU between two samples, and the part inside the windows (sampled mode).
pub fn group_oncpu(start: &Sample, end: &Sample, group: u32) -> Option<(u64, u64)> {
    let at = |v: &Option<Vec<u64>>| v.as_ref()?.get(group as usize).copied();
    Some((
        delta(at(&end.oncpu_ns), at(&start.oncpu_ns))?,
        delta(at(&end.traced_oncpu_ns), at(&start.traced_oncpu_ns))?,
    ))
}

/// The group's switches made while the windows were open, between two samples.
pub fn traced_switches(start: &Sample, end: &Sample, group: u32) -> Option<u64> {
    let at = |s: &Sample| s.traced_switches.as_ref()?.get(group as usize).copied();
    delta(at(end), at(start))
}

/// Sampled mode: the share of the window's work the syscall programs saw, which their counts are
/// divided by, and what it is a share of (Basis). None in exact mode.
pub fn traced_share_by(start: &Sample, end: &Sample, _group: u32) -> Option<(f64, Basis)> {
    let time = traced_fraction(start, end)?;
    if let (Some(traced), Some(all)) = (
        delta(end.traced_responses, start.traced_responses),
        delta(end.responses, start.responses),
    ) && traced >= MIN_TRACED_RESPONSES
        && all >= traced
    {
        return Some((traced as f64 / all as f64, Basis::Responses));
    }
    // Without responses, time. Scaling by the CPU time or the switches the windows caught was
    // measured and rejected (issue 16): the tracing inflates a syscall-heavy server's CPU time
    // inside the windows (a paced getppid loop read 0.81 of its rate) and changes how nginx
    // batches its switches (1.12 and 1.55 of syscount's count under steady load). Both are still
    // recorded in each window (WindowUnit) for the estimator work that follows.
    Some((time, Basis::Time))
}

/// The share alone (see traced_share_by).
pub fn traced_share(start: &Sample, end: &Sample, group: u32) -> Option<f64> {
    traced_share_by(start, end, group).map(|(share, _)| share)
}

/// The group's syscalls the probes counted between two samples (in sampled mode, the ones made
/// while the windows were open).
pub fn traced_syscalls(start: &Sample, end: &Sample, group: u32) -> u64 {
    let sum = |s: &Sample| -> u64 {
        s.kernel
            .syscalls
            .iter()
            .filter(|(g, _, _)| *g == group)
            .map(|(_, _, c)| c.count)
            .sum()
    };
    sum(end).saturating_sub(sum(start))
}

/// One interval's window, as the estimator sees it: the syscalls counted in it and how much of
/// each basis it covered.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowUnit {
    pub syscalls: f64,
    pub responses: f64,
    pub switches: f64,
    pub oncpu_ns: f64,
    pub traced_ns: f64,
}

impl WindowUnit {
    /// The window(s) between two samples, for `group`.
    pub fn between(start: &Sample, end: &Sample, group: u32) -> WindowUnit {
        WindowUnit {
            syscalls: traced_syscalls(start, end, group) as f64,
            responses: delta(end.traced_responses, start.traced_responses).unwrap_or(0) as f64,
            switches: traced_switches(start, end, group).unwrap_or(0) as f64,
            oncpu_ns: group_oncpu(start, end, group).map_or(0, |(_, traced)| traced) as f64,
            traced_ns: delta(end.kernel.traced_ns, start.kernel.traced_ns).unwrap_or(0) as f64,
        }
    }

    fn basis(&self, basis: Basis) -> f64 {
        match basis {
            Basis::Responses => self.responses,
            Basis::Switches => self.switches,
            Basis::OnCpu => self.oncpu_ns,
            Basis::Time => self.traced_ns,
        }
    }
}

/// The 95 % uncertainty of a sampled syscall total, as a share of it: the estimate is
/// (syscalls seen) / (share of the basis seen), a ratio estimator over the windows, and its
/// spread from window to window is measured by the jackknife (each window left out in turn).
/// None when fewer than 3 windows saw the basis.
pub fn relative_error(units: &[WindowUnit], basis: Basis) -> Option<f64> {
    let k = units.len();
    if k < 3 {
        return None;
    }
    let (s_all, x_all): (f64, f64) = units
        .iter()
        .map(|u| (u.syscalls, u.basis(basis)))
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    if x_all <= 0.0 {
        return None;
    }
    let ratio = s_all / x_all;
    if ratio <= 0.0 {
        // Nothing counted in any window: the estimate is 0, and how wrong it could be is unknown.
        return None;
    }
    // One window that saw the basis says nothing of how much windows differ.
    if units.iter().filter(|u| u.basis(basis) > 0.0).count() < 3 {
        return None;
    }
    let left_out: Vec<f64> = units
        .iter()
        .filter_map(|u| {
            let x = x_all - u.basis(basis);
            (x > 0.0).then(|| (s_all - u.syscalls) / x)
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

/// Sampled mode: the 95 % uncertainty of a report's syscall totals (a share of them), from the
/// windows it covered, by the basis it was scaled by (KernelReport::scaled_by).
pub fn syscalls_error(report: &super::KernelReport, windows: &[WindowUnit]) -> Option<f64> {
    let basis = match report.scaled_by.as_deref()? {
        "responses" => Basis::Responses,
        "switches" => Basis::Switches,
        "oncpu" => Basis::OnCpu,
        _ => Basis::Time,
    };
    relative_error(windows, basis)
}

/// Scales a count seen while the programs were attached up to the whole window.
pub(super) fn scaled(n: u64, fraction: Option<f64>) -> u64 {
    match fraction {
        None => n,
        Some(f) if f > 0.0 => (n as f64 / f).round() as u64,
        Some(_) => 0,
    }
}

/// Sampled mode: `count` events (the kernel's own count) at the mean time per event the probes
/// measured in their windows.
pub(super) fn at_probe_mean(probe: CountNs, count: u64) -> CountNs {
    let total_ns = if probe.count == 0 {
        0
    } else {
        (u128::from(probe.total_ns) * u128::from(count) / u128::from(probe.count)) as u64
    };
    CountNs { count, total_ns }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlation::SplitMix64;

    /// A uniform draw in [0, 1).
    fn uniform(rng: &mut SplitMix64) -> f64 {
        (rng.next() >> 11) as f64 / (1u64 << 53) as f64
    }

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
            if uniform(&mut rng) < 0.002 {
                let len = 50 + (uniform(&mut rng) * 100.0) as usize;
                let per_switch = 4.0 + 2.0 * uniform(&mut rng);
                for i in t..(t + len).min(ms) {
                    let n = (10.0 + 20.0 * uniform(&mut rng)).round();
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
            let open = (second * 1000 + 100 + (uniform(&mut rng) * room as f64) as u64) as usize;
            let range = open..open + window_ms as usize;
            windows.push(WindowUnit {
                syscalls: syscalls[range.clone()].iter().sum(),
                switches: switches[range].iter().sum(),
                responses: 0.0,
                oncpu_ns: 0.0,
                traced_ns: window_ms as f64 * 1e6,
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
        assert_eq!(relative_error(&[unit(0.0, 0.0); 5], Basis::Switches), None);
        // Identical windows: no spread, no error.
        assert_eq!(
            relative_error(&[unit(10.0, 2.0); 5], Basis::Switches),
            Some(0.0)
        );
    }
}
