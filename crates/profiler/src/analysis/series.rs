//! The samples of a run, folded as they arrive: the first one, the last two, and one timeline row
//! per interval and group. A long run keeps a few kilobytes per interval, not every sample.

use srvprof_common::{GROUP_CLIENT, GROUP_SERVER};

use super::interval::{IntervalRow, interval_row};
use crate::sampler::Sample;

#[derive(Default)]
pub struct SampleSeries {
    first: Option<Sample>,
    /// The last two samples: the end of the run, and the one before in case the last interval
    /// (teardown after the load ended) is dropped.
    recent: Vec<Sample>,
    pub server_rows: Vec<IntervalRow>,
    pub client_rows: Vec<IntervalRow>,
    count: usize,
}

impl SampleSeries {
    pub fn push(&mut self, sample: Sample) {
        match (&self.first, self.recent.last()) {
            (Some(first), Some(prev)) => {
                let start = first.monotonic_ns;
                self.server_rows
                    .push(interval_row(prev, &sample, GROUP_SERVER, start));
                self.client_rows
                    .push(interval_row(prev, &sample, GROUP_CLIENT, start));
            }
            _ => self.first = Some(sample.clone()),
        }
        self.recent.push(sample);
        if self.recent.len() > 2 {
            self.recent.remove(0);
        }
        self.count += 1;
    }

    /// How many samples were taken.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn first(&self) -> Option<&Sample> {
        self.first.as_ref()
    }

    /// The sample ending interval `intervals` (counted from 1): the last one, or the one before it.
    pub fn end_of(&self, intervals: usize) -> Option<&Sample> {
        let last_rows = self.server_rows.len();
        if intervals >= last_rows {
            self.recent.last()
        } else {
            self.recent.first()
        }
    }
}
