//! Which kernel figures track p99 over the run, and whether that could be chance.
//!
//! Pearson's r over the run's intervals, with a permutation test: p99's intervals are shuffled
//! PERMUTATIONS times and the share of shuffles whose |r| reaches the measured one is the chance
//! of seeing it from unrelated series. The strongest of several series is picked, so that share is
//! multiplied by how many were compared (Bonferroni). Six intervals with r = -0.67 are noise;
//! a statement that something "tracks" p99 needs MIN_INTERVALS and a p-value below MAX_P_VALUE.

use serde::{Deserialize, Serialize};

use crate::random::SplitMix64;
use crate::timeline::TimelineRow;

/// Intervals needed before any kernel figure is said to track p99.
pub const MIN_INTERVALS: usize = 10;
/// A correlation this likely by chance, or likelier, is not reported as tracking.
pub const MAX_P_VALUE: f64 = 0.01;
/// Shuffles of the permutation test: p-values resolve to 1 / (PERMUTATIONS + 1).
pub const PERMUTATIONS: u32 = 4999;
/// The correlations kept in run.json, strongest first.
pub const KEPT: usize = 5;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Correlation {
    pub series: String,
    pub coefficient: f64,
    pub intervals: usize,
    /// The chance that unrelated series would correlate this strongly: the permutation test's
    /// two-sided p-value times the number of series compared. 1 in a run.json written before
    /// srvprof computed it.
    #[serde(default = "not_tested")]
    pub p_value: f64,
}

fn not_tested() -> f64 {
    1.0
}

impl Correlation {
    /// Enough intervals and unlikely by chance: what may be called tracking.
    pub fn significant(&self) -> bool {
        self.intervals >= MIN_INTERVALS && self.p_value < MAX_P_VALUE
    }
}

/// Pearson correlation; None without variance or with fewer than 4 points.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len().min(ys.len());
    if n < 4 {
        return None;
    }
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let (mx, my) = (mean(xs), mean(ys));
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let syy: f64 = ys.iter().map(|y| (y - my) * (y - my)).sum();
    if sxx <= f64::EPSILON || syy <= f64::EPSILON {
        return None;
    }
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    Some(sxy / (sxx * syy).sqrt())
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Two-sided permutation p-value of the correlation of `xs` and `ys`: the share of `rounds`
/// shuffles of `ys` (seeded, so a report is reproducible) whose |r| is at least the measured |r|,
/// counting the measured order as one. 1 when r is undefined.
pub fn permutation_p_value(xs: &[f64], ys: &[f64], rounds: u32, seed: u64) -> f64 {
    let n = xs.len().min(ys.len());
    let Some(r) = pearson(xs, ys) else {
        return 1.0;
    };
    // r = sxy / sqrt(sxx syy): only sxy changes under a shuffle, so compare sxy alone.
    let (mx, my) = (mean(&xs[..n]), mean(&ys[..n]));
    let dx: Vec<f64> = xs[..n].iter().map(|x| x - mx).collect();
    let mut dy: Vec<f64> = ys[..n].iter().map(|y| y - my).collect();
    let sxy = |dy: &[f64]| dx.iter().zip(dy).map(|(a, b)| a * b).sum::<f64>();
    let observed = sxy(&dy).abs() * (1.0 - 1e-12);
    let mut rng = SplitMix64(seed ^ n as u64);
    let mut at_least = 0u32;
    for _ in 0..rounds {
        for i in (1..n).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            dy.swap(i, j);
        }
        if sxy(&dy).abs() >= observed {
            at_least += 1;
        }
    }
    debug_assert!(r.is_finite());
    (at_least + 1) as f64 / (rounds + 1) as f64
}

/// The series of the timeline, by name. Counts and CPU time that grow with the load (switches,
/// syscalls, NET_RX softirqs, user and sys time) are taken per request: as rates per second they fall whenever throughput
/// falls, and in a closed loop p99 rises then (a request waits behind the same -c others for
/// longer), so every rate would "track" p99 with nothing to say about why. Throughput itself is
/// one of the series, so that case is named as what it is.
fn series(timeline: &[TimelineRow]) -> Vec<(&'static str, Vec<f64>)> {
    let max_of = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let of = |f: &dyn Fn(&TimelineRow) -> f64| timeline.iter().map(f).collect::<Vec<f64>>();
    let per_request = |per_s: f64, r: &TimelineRow| {
        if r.throughput_rps > 0.0 {
            per_s / r.throughput_rps
        } else {
            0.0
        }
    };
    vec![
        ("req/s", of(&|r| r.throughput_rps)),
        (
            "voluntary switches per request",
            of(&|r| per_request(r.server.voluntary_switches_per_s, r)),
        ),
        (
            "involuntary switches per request",
            of(&|r| per_request(r.server.involuntary_switches_per_s, r)),
        ),
        ("run-queue p99", of(&|r| r.server.runq_p99_us)),
        ("CPU quota throttled ms", of(&|r| r.server.throttled_ms)),
        (
            "server sys µs per request",
            of(&|r| per_request(r.server.sys_pct * 1e4, r)),
        ),
        (
            "server user µs per request",
            of(&|r| per_request(r.server.user_pct * 1e4, r)),
        ),
        (
            "syscalls per request",
            of(&|r| per_request(r.server.syscalls_per_s.unwrap_or(0.0), r)),
        ),
        (
            "NET_RX per request on the busiest CPU",
            of(&|r| per_request(max_of(&r.server.net_rx_per_s), r)),
        ),
        (
            "listen overflows",
            of(&|r| r.server.listen_overflows as f64),
        ),
        ("SYN retransmits", of(&|r| r.server.syn_retransmits as f64)),
        (
            "client CPU µs per request",
            of(&|r| per_request((r.client_user_pct + r.client_sys_pct) * 1e4, r)),
        ),
        ("errors", of(&|r| r.errors as f64)),
    ]
}

/// Kernel series against p99 per interval, strongest first, each with its p-value.
pub fn correlations(timeline: &[TimelineRow]) -> Vec<Correlation> {
    let p99: Vec<f64> = timeline.iter().map(|r| r.p99_us as f64).collect();
    let mut out: Vec<(Correlation, Vec<f64>)> = series(timeline)
        .into_iter()
        .filter_map(|(name, xs)| {
            let c = pearson(&xs, &p99)?;
            let correlation = Correlation {
                series: name.into(),
                coefficient: c,
                intervals: xs.len(),
                p_value: 1.0,
            };
            Some((correlation, xs))
        })
        .collect();
    let compared = out.len() as f64;
    out.sort_by(|a, b| b.0.coefficient.abs().total_cmp(&a.0.coefficient.abs()));
    out.truncate(KEPT);
    out.into_iter()
        .enumerate()
        .map(|(i, (mut c, xs))| {
            let p = permutation_p_value(&xs, &p99, PERMUTATIONS, i as u64);
            c.p_value = (p * compared).min(1.0);
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pearson_of_known_series() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!((pearson(&x, &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap() - 1.0).abs() < 1e-9);
        assert!((pearson(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-9);
        assert!(pearson(&x, &[1.0, 1.0, 1.0, 1.0, 1.0]).is_none());
        assert!(pearson(&x[..3], &x[..3]).is_none());
    }

    /// Normal-ish noise from the test's own generator (sum of uniforms).
    fn noise(rng: &mut SplitMix64, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| (0..6).map(|_| rng.uniform()).sum())
            .collect()
    }

    #[test]
    fn unrelated_series_are_significant_at_about_the_nominal_rate() {
        // 400 pairs of independent series: a 5 % test rejects about 20 of them.
        let mut rng = SplitMix64(7);
        let rejected = (0..400)
            .filter(|&seed| {
                let (x, y) = (noise(&mut rng, 20), noise(&mut rng, 20));
                permutation_p_value(&x, &y, 999, seed) < 0.05
            })
            .count();
        assert!((8..=34).contains(&rejected), "{rejected} of 400 at 5 %");
    }

    #[test]
    fn a_planted_correlation_is_found_and_six_points_are_not_enough() {
        let mut rng = SplitMix64(11);
        for seed in 0..50 {
            let x = noise(&mut rng, 30);
            let y: Vec<f64> = x
                .iter()
                .zip(noise(&mut rng, 30))
                .map(|(a, e)| 3.0 * a + 0.5 * e)
                .collect();
            assert!(permutation_p_value(&x, &y, 999, seed) < 0.01);
        }
        // Six points, even perfectly correlated: 6! = 720 orders, 2 of them as strong.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let p = permutation_p_value(&x, &x, 4999, 1);
        assert!(p > 0.001 && p < 0.01, "{p}");
    }

    /// A closed loop of 100 connections whose throughput moves (a host's noise): p99 follows
    /// 100 / throughput, and the server's costs per request stay put, so rates per second move
    /// with throughput alone. `extra_syscalls` per request, if any, come with p99 instead.
    fn closed_loop(seed: u64, extra_syscalls: f64) -> Vec<TimelineRow> {
        let mut rng = SplitMix64(seed);
        noise(&mut rng, 20)
            .into_iter()
            .zip(noise(&mut rng, 20))
            .map(|(a, e)| {
                let rps = 60_000.0 + 20_000.0 * a;
                let p99_us = 1e6 * 100.0 / rps * (1.0 + 0.02 * e);
                let per_request = 2.0 + extra_syscalls * p99_us / 1000.0;
                let mut row = TimelineRow {
                    throughput_rps: rps,
                    p99_us: p99_us as u64,
                    ..Default::default()
                };
                row.server.syscalls_per_s = Some(per_request * rps);
                row.server.voluntary_switches_per_s = 0.01 * rps;
                row.server.net_rx_per_s = vec![2.0 * rps, 10.0];
                // 8 µs of CPU a request each side (percent of a CPU).
                row.server.sys_pct = 6e-4 * rps;
                row.server.user_pct = 2e-4 * rps;
                row.client_sys_pct = 8e-4 * rps;
                row
            })
            .collect()
    }

    #[test]
    fn rates_that_follow_throughput_are_not_said_to_track_p99() {
        for seed in 0..20 {
            let found = correlations(&closed_loop(seed, 0.0));
            assert_eq!(found[0].series, "req/s", "{found:?}");
            assert!(found[0].coefficient < 0.0 && found[0].significant());
            // As rates per second they would all read |r| near 1; per request they are flat.
            assert!(
                found
                    .iter()
                    .all(|c| c.series == "req/s" || !c.significant()),
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_cost_per_request_that_moves_with_p99_is_found() {
        for seed in 0..20 {
            let found = correlations(&closed_loop(seed, 1.0));
            let syscalls = found
                .iter()
                .find(|c| c.series == "syscalls per request")
                .unwrap_or_else(|| panic!("{found:?}"));
            assert!(
                syscalls.coefficient > 0.9 && syscalls.significant(),
                "{syscalls:?}"
            );
        }
    }
}
