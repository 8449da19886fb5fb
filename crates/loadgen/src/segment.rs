//! One client host's share of a run split over several (`--segment I/N`, the I-th of N,
//! 1-based), as k6's execution segments: each host works out its own share, with no traffic
//! between them, and the N shares together are exactly the one-host run. Connections and `-n`
//! are split as evenly as integers allow; an open loop's arrivals and a request list's entries
//! are dealt out by index, arrival k to the host with k mod N = I-1, so the union of the N
//! schedules is the one-host schedule and each request's latency still counts from its intended
//! send time (coordinated omission stays corrected).

use std::fmt;

/// The I-th of N shares of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// I - 1.
    index: u64,
    /// N.
    count: u64,
}

impl Segment {
    /// The whole run, on one host.
    pub const WHOLE: Segment = Segment { index: 0, count: 1 };

    /// "I/N", 1 <= I <= N.
    pub fn parse(text: &str) -> Result<Segment, String> {
        let bad = || format!("`{text}` is not a segment like 2/3 (the 2nd of 3, counted from 1)");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (i, n): (u64, u64) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if n == 0 || i == 0 || i > n {
            return Err(format!(
                "segment {text}: I/N needs 1 <= I <= N (the I-th of N, counted from 1)"
            ));
        }
        Ok(Segment {
            index: i - 1,
            count: n,
        })
    }

    /// I, counted from 1.
    pub fn number(&self) -> u64 {
        self.index + 1
    }

    /// N.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// This segment's part of `total` (connections, `-n`): total / N, one more for the first
    /// total % N segments.
    pub fn share(&self, total: u64) -> u64 {
        total / self.count + u64::from(self.index < total % self.count)
    }

    /// The one-host index of this segment's `local`-th arrival, or request of a list (from 0).
    #[inline]
    pub fn global(&self, local: u64) -> u64 {
        local * self.count + self.index
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::RateSchedule;

    fn segments(n: u64) -> Vec<Segment> {
        (1..=n)
            .map(|i| Segment::parse(&format!("{i}/{n}")).unwrap())
            .collect()
    }

    #[test]
    fn shares_add_up_to_the_whole_and_differ_by_one_at_most() {
        for n in 1..=7 {
            for total in 0..40 {
                let shares: Vec<u64> = segments(n).iter().map(|s| s.share(total)).collect();
                assert_eq!(shares.iter().sum::<u64>(), total, "{total} over {n}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1, "{shares:?}");
            }
        }
        assert_eq!(Segment::WHOLE.share(50), 50);
    }

    /// Every segment's first arrivals, by the schedule each computes alone, are together the one
    /// host's, each once: steady, in stages and ramps.
    #[test]
    fn the_segments_schedules_together_are_the_one_host_schedule() {
        for rate in ["1000", "200:1s,ramp:200-5000:2s,700:1s"] {
            let rate = RateSchedule::parse(rate).unwrap();
            for n in 1..=6 {
                let per = 500;
                let mut union: Vec<(u64, std::time::Duration)> = segments(n)
                    .iter()
                    .flat_map(|s| {
                        (0..per).map(|local| (s.global(local), rate.due(s.global(local) as f64)))
                    })
                    .collect();
                union.sort();
                let one_host: Vec<(u64, std::time::Duration)> = (0..per * n)
                    .map(|k| (k, rate.due(k as f64)))
                    .collect();
                assert_eq!(union, one_host, "{n} segments");
            }
        }
    }

    #[test]
    fn a_segment_is_named_from_one() {
        let s = Segment::parse("2/3").unwrap();
        assert_eq!((s.to_string(), s.global(0), s.global(1)), ("2/3".into(), 1, 4));
        for bad in ["0/3", "4/3", "1/0", "3", "a/b", "1/2/3"] {
            assert!(Segment::parse(bad).is_err(), "{bad}");
        }
        assert!(Segment::parse("1/1").unwrap().is_whole());
    }
}
