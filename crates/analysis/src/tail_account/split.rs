//! The split of p99 among the parts: what the median carries, then what the slowest
//! TAIL_FRACTION of requests carry of each beyond it (see the module above).

use super::{Place, TAIL_FRACTION, TailPart};
use crate::record::NsHistogram;

/// A part before the split of p99: where, its time per request, whether every request pays it
/// (the CPU parts) or some wait for it, and when known the share of requests that meet it
/// (waits times the requests each delays, over the requests; above 1 when each meets it more
/// than once).
#[derive(Clone, Debug, Default)]
pub struct Cost {
    pub part: TailPart,
    pub uniform: bool,
    pub affected: Option<f64>,
    /// The mean length of one occurrence when the part names no wait of its own (the CPU's
    /// runs between sleeps); otherwise its mean_wait_ms.
    pub each_ms: Option<f64>,
    /// Its time in a request at p99 when that was measured rather than inferred (the client's
    /// queue, which the load generator timed per request): it takes that, and the others share
    /// the rest.
    pub pinned_ms: Option<f64>,
    /// When known, how one wait's length is spread: (ms, share of the waits), the run queue's
    /// from the scheduler's histogram. Without it, every wait is the mean wait.
    pub lengths: Option<Vec<(f64, f64)>>,
}

impl Cost {
    fn mean_ms(&self) -> Option<f64> {
        self.each_ms.or(self.part.mean_wait_ms)
    }
}

/// Splits p99 among the parts (see the module's doc): each part's tail_ms and share, the parts
/// by their share, and the rest unaccounted.
pub fn allocate(costs: Vec<Cost>, p50_ms: f64, p99_ms: f64) -> (Vec<TailPart>, f64) {
    let ms = |c: &Cost| c.part.per_request_ms.max(0.0);
    let mut left = p50_ms.max(0.0);
    let mut median = vec![0.0; costs.len()];
    for (i, c) in costs.iter().enumerate().filter(|(_, c)| c.uniform) {
        median[i] = ms(c).min(left);
        left -= median[i];
    }
    // The median request meets a wait that half the requests or more meet, or one of unknown
    // reach.
    let in_median =
        |c: &Cost| !c.uniform && c.pinned_ms.is_none() && c.affected.is_none_or(|a| a >= 0.5);
    let waits: f64 = costs.iter().filter(|c| in_median(c)).map(ms).sum();
    let fill = if waits > 0.0 {
        (left / waits).min(1.0)
    } else {
        0.0
    };
    for (i, c) in costs.iter().enumerate().filter(|(_, c)| in_median(c)) {
        median[i] = ms(c) * fill;
    }
    // Above the median: what each wait can add to one request at p99. Known reach: its mean
    // wait (or its time per request, if more) when at least TAIL_FRACTION of requests meet it,
    // nothing when fewer do. Unknown: all its time on the slowest TAIL_FRACTION of requests.
    // The server's CPU beyond what the median carries is some requests' more than others': it
    // competes for the excess as a wait of unknown reach. The client's is spread over them all.
    let rest: Vec<f64> = (costs.iter().zip(&median))
        .map(|(c, m)| match c.part.place {
            _ if c.pinned_ms.is_some() => 0.0,
            Place::Client => 0.0,
            _ => (ms(c) - m).max(0.0),
        })
        .collect();
    let known = |c: &Cost| match (c.affected, c.mean_ms(), c.pinned_ms) {
        (Some(a), Some(wait), None) if wait > 0.0 => Some((a, wait)),
        _ => None,
    };
    let slowest: f64 = (costs.iter().zip(&rest))
        .filter(|(c, _)| known(c).is_none())
        .map(|(_, r)| r / TAIL_FRACTION)
        .sum();
    let mut spreads = vec![Spread::on_slowest(slowest)];
    spreads.extend(costs.iter().filter_map(|c| {
        let (a, wait) = known(c)?;
        // A wait met by fewer requests than p99 stands for is no p99 request's (its cap below is
        // none): it is not among the sums the slowest are drawn from either, where it would take
        // the place of the waits a request at p99 meets.
        if a < TAIL_FRACTION {
            return Some(Spread(vec![(0.0, 1.0)]));
        }
        // Without their lengths, every wait the mean one.
        let even = [(wait, 1.0)];
        Some(Spread::compound(a, c.lengths.as_deref().unwrap_or(&even)))
    }));
    let slowest_carried = slowest_carry(&spreads);
    let mut k = 0;
    // What the slowest TAIL_FRACTION of requests carry of each part with a known reach.
    let carried: Vec<Option<f64>> = (costs.iter())
        .map(|c| {
            known(c).map(|_| {
                k += 1;
                slowest_carried[k]
            })
        })
        .collect();
    // Each part's weight is what the slowest TAIL_FRACTION of requests carry of it beyond the
    // median: a wait met by few but long outweighs one met by many but short.
    let weight: Vec<f64> = (costs.iter().zip(&median).zip(&rest).zip(&carried))
        .map(|(((c, m), r), carried)| match (c.part.place, carried) {
            _ if c.pinned_ms.is_some() => 0.0,
            (Place::Client, _) => 0.0,
            (_, Some(carried)) => (carried - m).max(0.0),
            (_, None) if slowest > 0.0 => r / TAIL_FRACTION * slowest_carried[0] / slowest,
            _ => 0.0,
        })
        .collect();
    // A part whose waits' lengths are known can give a slow request as much as the slowest
    // carry of it (several waits, or one long one); others one mean wait.
    let cap: Vec<f64> = (costs.iter().zip(&median).zip(&rest).zip(&carried))
        .map(|(((c, m), r), carried)| match (c.affected, c.mean_ms()) {
            (Some(a), Some(wait)) if a >= TAIL_FRACTION => {
                let most = match (&c.lengths, carried) {
                    (Some(_), Some(carried)) => wait.max(ms(c)).max(*carried),
                    _ => wait.max(ms(c)),
                };
                (most - m).max(0.0)
            }
            (Some(_), Some(_)) => 0.0,
            _ => r / TAIL_FRACTION,
        })
        .collect();
    // The measured parts first: the others share what is left above the median.
    let mut excess = (p99_ms - p50_ms).max(0.0);
    let pinned: Vec<Option<f64>> = (costs.iter())
        .map(|c| {
            c.pinned_ms.map(|ms| {
                let took = ms.clamp(0.0, excess);
                excess -= took;
                took
            })
        })
        .collect();
    let above = share_out(excess, &weight, &cap);
    let mut parts: Vec<TailPart> = Vec::new();
    for (((c, m), a), pinned) in costs.into_iter().zip(median).zip(above).zip(pinned) {
        let mut part = c.part;
        part.tail_ms = pinned.unwrap_or(m + a);
        part.share = match p99_ms > 0.0 {
            true => (part.tail_ms / p99_ms).min(1.0),
            false => 0.0,
        };
        parts.push(part);
    }
    parts.retain(|p| p.tail_ms > 0.0 || p.per_request_ms > 0.0);
    parts.sort_by(|a, b| b.tail_ms.total_cmp(&a.tail_ms));
    let accounted: f64 = parts.iter().map(|p| p.tail_ms).sum();
    (parts, (p99_ms - accounted).max(0.0))
}

/// A part's time in one request, as (ms, probability) pairs.
struct Spread(Vec<(f64, f64)>);

impl Spread {
    /// All of `ms` on the slowest TAIL_FRACTION of requests, none on the others.
    fn on_slowest(ms: f64) -> Self {
        Spread(vec![(0.0, 1.0 - TAIL_FRACTION), (ms, TAIL_FRACTION)])
    }

    /// The sum of the waits a request meets, `a` of them on average, each as long as `lengths`
    /// spreads them (ms, share): at most one when `a` is 1 or less; otherwise as many as
    /// independent arrivals would bring (Poisson), summed on a grid of GRID steps up to the
    /// sum's mean plus 8 deviations; from MANY a request on, as normal as the central limit
    /// makes the sum.
    fn compound(a: f64, lengths: &[(f64, f64)]) -> Self {
        const GRID: usize = 512;
        const MANY: f64 = 100.0;
        let mean: f64 = lengths.iter().map(|(ms, p)| ms * p).sum();
        let square: f64 = lengths.iter().map(|(ms, p)| ms * ms * p).sum();
        let longest = lengths.iter().map(|l| l.0).fold(0.0, f64::max);
        if a <= 0.0 || longest <= 0.0 {
            return Spread(vec![(0.0, 1.0)]);
        }
        if a <= 1.0 {
            let met = lengths.iter().map(|&(ms, p)| (ms, a * p));
            return Spread(std::iter::once((0.0, 1.0 - a)).chain(met).collect());
        }
        if a >= MANY {
            let (mu, sigma) = (a * mean, (a * square).sqrt());
            let from = (mu - 6.0 * sigma).max(0.0);
            let step = (mu + 6.0 * sigma - from) / (GRID - 1) as f64;
            let atoms: Vec<(f64, f64)> = (0..GRID)
                .map(|i| from + i as f64 * step)
                .map(|x| (x, (-((x - mu) / sigma).powi(2) / 2.0).exp()))
                .collect();
            let total: f64 = atoms.iter().map(|a| a.1).sum();
            return Spread(atoms.into_iter().map(|(x, p)| (x, p / total)).collect());
        }
        let top = a * mean + 8.0 * (a * square).sqrt() + longest;
        let step = top / (GRID - 1) as f64;
        let at = |ms: f64| ((ms / step).round() as usize).min(GRID - 1);
        let mut one = vec![0.0; GRID];
        for &(ms, p) in lengths {
            one[at(ms)] += p;
        }
        // How many waits, cut where what is left is under 1e-9.
        let mut p = (-a).exp();
        let (mut counts, mut total) = (vec![p], p);
        while ((counts.len() as f64) <= a || 1.0 - total > 1e-9) && counts.len() < 10_000 {
            p *= a / counts.len() as f64;
            total += p;
            counts.push(p);
        }
        let mut sum = vec![0.0; GRID];
        let mut k_waits = vec![0.0; GRID];
        k_waits[0] = 1.0;
        for (k, pk) in counts.iter().enumerate() {
            if k > 0 {
                let mut next = vec![0.0; GRID];
                for (i, q) in k_waits.iter().enumerate().filter(|(_, q)| **q > 0.0) {
                    for (j, w) in one.iter().enumerate().filter(|(_, w)| **w > 0.0) {
                        next[(i + j).min(GRID - 1)] += q * w;
                    }
                }
                k_waits = next;
            }
            for (s, q) in sum.iter_mut().zip(&k_waits) {
                *s += pk * q;
            }
        }
        let total: f64 = sum.iter().sum();
        Spread(
            (sum.iter().enumerate())
                .filter(|(_, p)| **p > 1e-12)
                .map(|(i, p)| (i as f64 * step, p / total))
                .collect(),
        )
    }
}

/// One wait's lengths from a histogram of them (ns, srvprof_common::hist slots): each slot at
/// the middle of its bounds, scaled so that their mean is `mean_ms`, the exact one.
pub fn lengths_of(h: &NsHistogram, mean_ms: f64) -> Option<Vec<(f64, f64)>> {
    use srvprof_common::hist;
    let total = h.total();
    if total == 0 || mean_ms <= 0.0 {
        return None;
    }
    let raw: Vec<(f64, f64)> = (h.slots.iter().enumerate())
        .filter(|(_, n)| **n > 0)
        .map(|(slot, n)| {
            let (low, high) = (
                hist::slot_lower_bound(slot as u32) as f64,
                hist::slot_value(slot as u32) as f64,
            );
            ((low + high) / 2.0 / 1e6, *n as f64 / total as f64)
        })
        .collect();
    let raw_mean: f64 = raw.iter().map(|(ms, p)| ms * p).sum();
    (raw_mean > 0.0).then(|| {
        raw.into_iter()
            .map(|(ms, p)| (ms * mean_ms / raw_mean, p))
            .collect()
    })
}

/// What the slowest TAIL_FRACTION of requests carry of each part on average, the parts met
/// independently of each other: each part's mean over the requests whose sum of all parts is in
/// the top TAIL_FRACTION (sums on a grid of BINS).
fn slowest_carry(spreads: &[Spread]) -> Vec<f64> {
    const BINS: usize = 2048;
    let top: f64 = spreads
        .iter()
        .map(|s| s.0.iter().map(|a| a.0).fold(0.0, f64::max))
        .sum();
    if top <= 0.0 {
        return vec![0.0; spreads.len()];
    }
    let bin = |ms: f64| (ms * (BINS - 1) as f64 / top).round() as usize;
    let len = BINS + spreads.len();
    let add = |sum: &[f64], s: &Spread| {
        let mut out = vec![0.0; len];
        for &(ms, p) in &s.0 {
            let shift = bin(ms);
            for (j, q) in sum.iter().enumerate().filter(|(_, q)| **q > 0.0) {
                out[(j + shift).min(len - 1)] += q * p;
            }
        }
        out
    };
    let none = || {
        let mut d = vec![0.0; len];
        d[0] = 1.0;
        d
    };
    let all = spreads.iter().fold(none(), |d, s| add(&d, s));
    // The top TAIL_FRACTION of the sums: every bin above `edge`, `part` of the one at it.
    let (mut edge, mut above) = (len - 1, 0.0);
    while edge > 0 && above + all[edge] < TAIL_FRACTION {
        above += all[edge];
        edge -= 1;
    }
    let part = match all[edge] > 0.0 {
        true => ((TAIL_FRACTION - above) / all[edge]).min(1.0),
        false => 0.0,
    };
    let in_top = |j: usize| match j.cmp(&edge) {
        std::cmp::Ordering::Greater => 1.0,
        std::cmp::Ordering::Equal => part,
        std::cmp::Ordering::Less => 0.0,
    };
    let mass = (0..len).map(|j| all[j] * in_top(j)).sum::<f64>();
    (0..spreads.len())
        .map(|i| {
            let others = (spreads.iter().enumerate())
                .filter(|(j, _)| *j != i)
                .fold(none(), |d, (_, s)| add(&d, s));
            let carried: f64 = (spreads[i].0.iter())
                .map(|&(ms, p)| {
                    let shift = bin(ms);
                    let reach: f64 = (others.iter().enumerate())
                        .map(|(j, q)| q * in_top((j + shift).min(len - 1)))
                        .sum();
                    ms * p * reach
                })
                .sum();
            match mass > 0.0 {
                true => carried / mass,
                false => 0.0,
            }
        })
        .collect()
}

/// `total` shared in proportion to `weights`, none above its cap: what a capped one cannot take
/// goes to the others, and what none can take is left over.
fn share_out(total: f64, weights: &[f64], caps: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; weights.len()];
    let mut open: Vec<usize> = (0..weights.len())
        .filter(|&i| weights[i] > 0.0 && caps[i] > 0.0)
        .collect();
    let mut left = total;
    while left > 1e-12 && !open.is_empty() {
        let sum: f64 = open.iter().map(|&i| weights[i]).sum();
        let full: Vec<usize> = (open.iter().copied())
            .filter(|&i| out[i] + left * weights[i] / sum >= caps[i])
            .collect();
        if full.is_empty() {
            for &i in &open {
                out[i] += left * weights[i] / sum;
            }
            break;
        }
        for &i in &full {
            left -= caps[i] - out[i];
            out[i] = caps[i];
        }
        open.retain(|i| !full.contains(i));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tail_account::tests::cost;

    #[test]
    fn the_shares_and_the_unaccounted_rest_add_up_to_p99() {
        let cases = [
            // 2 % of requests sleep 30 ms: p50 0.1, p99 30.
            (
                vec![
                    cost(Place::OnCpu, 0.05, true),
                    cost(Place::Blocked, 0.6, false),
                ],
                0.1,
                30.0,
            ),
            // Every request waits 43 ms: p50 44, p99 46.
            (
                vec![
                    cost(Place::OnCpu, 0.1, true),
                    cost(Place::Blocked, 43.0, false),
                ],
                44.0,
                46.0,
            ),
            // Nothing waits: all of the tail is unaccounted.
            (vec![cost(Place::OnCpu, 0.05, true)], 0.1, 5.0),
            // More CPU than the median: capped.
            (
                vec![
                    cost(Place::OnCpu, 9.0, true),
                    cost(Place::RunQueue, 1.0, false),
                ],
                1.0,
                2.0,
            ),
        ];
        for (costs, p50, p99) in cases {
            let (parts, rest) = allocate(costs, p50, p99);
            let sum: f64 = parts.iter().map(|p| p.tail_ms).sum::<f64>() + rest;
            assert!((sum - p99).abs() < 1e-9, "{parts:?} + {rest} != {p99}");
            assert!(parts.iter().all(|p| p.share >= 0.0 && p.share <= 1.0));
            assert!(parts.windows(2).all(|w| w[0].tail_ms >= w[1].tail_ms));
        }
    }

    #[test]
    fn a_wait_some_requests_meet_takes_the_tail_and_one_all_meet_takes_the_median() {
        let share = |costs, p50, p99| {
            let (parts, _): (Vec<TailPart>, f64) = allocate(costs, p50, p99);
            (parts.iter().find(|p| p.place == Place::Blocked))
                .map(|p| p.share)
                .unwrap()
        };
        // 2 % of requests sleep 30 ms: the sleep is nearly all of p99.
        let some = share(
            vec![
                cost(Place::OnCpu, 0.05, true),
                cost(Place::Blocked, 0.6, false),
            ],
            0.1,
            30.0,
        );
        assert!(some > 0.95, "{some}");
        // Every request waits 43 ms of 44: 43 of p99's 46.
        let all = share(
            vec![
                cost(Place::OnCpu, 0.1, true),
                cost(Place::Blocked, 43.0, false),
            ],
            44.0,
            46.0,
        );
        assert!((all - 43.0 / 46.0).abs() < 1e-9, "{all}");
        // 0.1 % of requests wait 30 ms (0.03 ms a request), and the median has room for it:
        // p99's 1 ms is not that wait's.
        let rare = share(
            vec![
                cost(Place::OnCpu, 0.05, true),
                cost(Place::Blocked, 0.03, false),
            ],
            0.1,
            1.0,
        );
        assert!(rare < 0.05, "{rare}");
    }

    #[test]
    fn a_wait_in_the_tail_is_split_by_time_between_two_waits() {
        let (parts, rest) = allocate(
            vec![
                cost(Place::OnCpu, 0.05, true),
                cost(Place::Blocked, 0.3, false),
                cost(Place::RunQueue, 0.1, false),
            ],
            0.05,
            20.0,
        );
        assert_eq!(parts[0].place, Place::Blocked);
        assert!((parts[0].tail_ms / parts[1].tail_ms - 3.0).abs() < 1e-6);
        assert!(rest < 1e-9, "{rest}");
    }

    #[test]
    fn what_one_part_cannot_take_goes_to_the_others() {
        let out = share_out(10.0, &[1.0, 1.0, 2.0], &[1.0, 100.0, 100.0]);
        assert_eq!(out[0], 1.0);
        assert!(
            (out[1] - 3.0).abs() < 1e-9 && (out[2] - 6.0).abs() < 1e-9,
            "{out:?}"
        );
        // Nobody can take it all: the rest is left over.
        let out = share_out(10.0, &[1.0, 1.0], &[2.0, 3.0]);
        assert_eq!(out, [2.0, 3.0]);
        assert_eq!(share_out(5.0, &[0.0], &[9.0]), [0.0]);
    }

    #[test]
    fn a_wait_too_rare_for_p99_takes_none_of_it_once_its_waits_are_counted() {
        let counted = |ms: f64, affected: f64, mean_wait_ms: f64| Cost {
            affected: Some(affected),
            part: TailPart {
                mean_wait_ms: Some(mean_wait_ms),
                ..cost(Place::Blocked, ms, false).part
            },
            ..cost(Place::Blocked, ms, false)
        };
        // 0.1 % of requests wait 30 ms, and p99 (5 ms) is something else's.
        let (parts, rest) = allocate(
            vec![cost(Place::OnCpu, 0.05, true), counted(0.03, 0.001, 30.0)],
            0.1,
            5.0,
        );
        let wait = parts.iter().find(|p| p.place == Place::Blocked).unwrap();
        assert!(wait.tail_ms < 1e-9, "{parts:?}");
        assert!((rest - 4.95).abs() < 1e-9, "{rest}");
        // 2 % of requests wait 30 ms: a request at p99 carries one wait.
        let (parts, _) = allocate(
            vec![cost(Place::OnCpu, 0.05, true), counted(0.6, 0.02, 30.0)],
            0.1,
            30.0,
        );
        let wait = parts.iter().find(|p| p.place == Place::Blocked).unwrap();
        assert!((wait.tail_ms - 29.9).abs() < 1e-9, "{parts:?}");
    }

    #[test]
    fn a_short_wait_met_by_more_requests_than_p99_leaves_the_tail_to_the_long_one() {
        let counted = |place, ms: f64, affected: f64, mean_wait_ms: f64| Cost {
            affected: Some(affected),
            part: TailPart {
                mean_wait_ms: Some(mean_wait_ms),
                ..cost(place, ms, false).part
            },
            ..Default::default()
        };
        // 1 request in 50 spins 30 ms (0.57 ms of CPU a request, p99 30.1 ms) while a busy
        // client sent 1.6 % of its requests 9.3 ms late: a request at p99 is a spinning one.
        let (parts, _) = allocate(
            vec![
                cost(Place::OnCpu, 0.567, true),
                cost(Place::Client, 0.108, true),
                counted(Place::ClientQueue, 0.1475, 0.0158, 9.31),
                counted(Place::RunQueue, 0.0655, 1.68, 0.039),
            ],
            0.147,
            30.127,
        );
        assert_eq!(parts[0].place, Place::OnCpu, "{parts:?}");
        assert!(parts[0].share > 0.95, "{parts:?}");
        // 2 % of requests wait 30 ms on one thing, 30 % wait 2 ms on another: the same time a
        // request, but p99 is the long wait's.
        let (parts, _) = allocate(
            vec![
                cost(Place::OnCpu, 0.05, true),
                counted(Place::Blocked, 0.6, 0.02, 30.0),
                counted(Place::RunQueue, 0.6, 0.3, 2.0),
            ],
            0.1,
            30.0,
        );
        assert_eq!(parts[0].place, Place::Blocked, "{parts:?}");
        assert!(parts[0].tail_ms > 27.0, "{parts:?}");
    }

    #[test]
    fn rare_long_run_queue_waits_make_the_tail_of_an_event_loop() {
        use srvprof_common::hist::slot_of;
        // An event loop (50 requests in flight) sharing its CPU with a hog: 61,156 waits for a
        // CPU, 1 % of them the hog's 2 ms slices, the rest 6 us; p50 0.87 ms, p99 5.16 ms.
        let mut h = NsHistogram::default();
        h.slots[slot_of(6_000) as usize] = 60_545;
        h.slots[slot_of(2_000_000) as usize] = 611;
        let mean_ms = (60_545.0 * 0.006 + 611.0 * 2.0) / 61_156.0;
        let runq = |lengths| Cost {
            affected: Some(61_156.0 * 49.8 / 199_915.0),
            part: TailPart {
                mean_wait_ms: Some(mean_ms),
                ..cost(
                    Place::RunQueue,
                    mean_ms * 61_156.0 * 49.8 / 199_915.0,
                    false,
                )
                .part
            },
            lengths,
            ..Default::default()
        };
        let share = |lengths| {
            let (parts, _) = allocate(
                vec![
                    cost(Place::OnCpu, 0.0117, true),
                    cost(Place::Client, 0.0159, true),
                    runq(lengths),
                ],
                0.865,
                5.163,
            );
            (parts.iter().find(|p| p.place == Place::RunQueue))
                .map(|p| p.share)
                .unwrap()
        };
        // With the waits' lengths, two of the hog's slices are what the slowest 1 % meet.
        let spread = share(lengths_of(&h, mean_ms));
        assert!(spread > 0.8, "{spread}");
        // Thousands of waits a request (a 1 s tail of a queue 20,000 deep): the sum is normal,
        // about as long for every request, and it is worked out at once.
        let many = Spread::compound(5_000.0, &lengths_of(&h, mean_ms).unwrap());
        let mean: f64 = many.0.iter().map(|(ms, p)| ms * p).sum();
        assert!((mean / (5_000.0 * mean_ms) - 1.0).abs() < 0.01, "{mean}");
        // Every wait its mean length (0.03 ms), the run queue could not make that tail.
        let even = share(None);
        assert!(even < 0.2, "{even}");
    }
}
