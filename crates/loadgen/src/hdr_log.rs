//! `--hdr-log FILE`: the latency of each interval of the measured window as an HdrHistogram
//! interval log, the format of HdrHistogram's own `HistogramLogWriter` (StartTime and BaseTime
//! headers, a legend, then one line per interval with a V2 compressed histogram in base64), which
//! HdrHistogram's tools read and add up (Java's `HistogramLogReader` and
//! `HistogramLogProcessor`, the hdrhistogram crate's `IntervalLogIterator`): the logs of several
//! clients merge without loss, where their percentiles cannot be averaged.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use srvprof_files::{OutDir, PendingFile};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogWriterBuilder, IntervalLogWriterError, Tag,
};
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

use crate::error::LoadError;

/// The legend Java's `HistogramLogWriter` puts after the headers (its reader and the crate's skip
/// it); the crate's writer has none.
const LEGEND: &str =
    r#""StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram""#;

/// The merged latency histogram (µs) of each interval, kept until the run ends as it will go
/// into the log, V2 compressed: a few KB per interval (4 KB for 50,000 latencies spread evenly
/// over 100 µs-100 ms) where the histogram itself takes ~190 KB, so an hour of 1 s intervals
/// keeps about 15 MB at most.
#[derive(Default)]
pub(crate) struct IntervalLatency {
    serializer: V2DeflateSerializer,
    /// (interval index, compressed histogram), in index order.
    kept: Vec<(u64, Vec<u8>)>,
}

impl IntervalLatency {
    pub fn keep(&mut self, index: u64, latency: &Histogram<u64>) {
        let mut compressed = Vec::new();
        self.serializer
            .serialize(latency, &mut compressed)
            .expect("a histogram serializes into memory");
        self.kept.push((index, compressed));
    }
}

/// The log file: created before the load starts, so that a path that cannot be written stops the
/// run before anything is measured, and written once when it ends. A file is written under a
/// temporary name beside its own (never through a link planted at its name) and takes its name
/// only when whole: a run that fails before (or while) it is written leaves no empty or half log.
pub(crate) struct HdrLogFile {
    path: PathBuf,
    file: Option<Sink>,
}

enum Sink {
    /// A device or a pipe (/dev/stdout, /dev/full, a FIFO), written as it is.
    Stream(File),
    File(PendingFile),
}

impl HdrLogFile {
    pub fn create(path: &Path) -> Result<HdrLogFile, LoadError> {
        let err = |source| LoadError::HdrLog {
            path: path.display().to_string(),
            source,
            measured: None,
        };
        let stream = std::fs::metadata(path)
            .is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_fifo());
        let sink = if stream {
            Sink::Stream(File::options().write(true).open(path).map_err(err)?)
        } else {
            let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                err(io::Error::other("the name is not a file name in UTF-8"))
            })?;
            Sink::File(OutDir::parent_of(path).and_then(|d| d.create(name)).map_err(err)?)
        };
        Ok(HdrLogFile {
            path: path.to_path_buf(),
            file: Some(sink),
        })
    }

    /// The log `name` in the output folder `dir`.
    pub fn create_in(dir: &OutDir, name: &str) -> Result<HdrLogFile, LoadError> {
        let file = dir.create(name).map_err(|source| LoadError::HdrLog {
            path: dir.join(name).display().to_string(),
            source,
            measured: None,
        })?;
        Ok(HdrLogFile {
            path: dir.join(name),
            file: Some(Sink::File(file)),
        })
    }

    /// One histogram per interval, `intervals` of them (the timeline's length), the first
    /// starting at `measure_start` (StartTime and BaseTime: interval timestamps are seconds since
    /// the measured window began); intervals without an answer get an empty histogram. Each
    /// interval is tagged `host` when given (a split run's: `Tag=host,` before the interval, as
    /// HdrHistogram's writer tags them), so a merge keeps each host's apart.
    pub fn write(
        mut self,
        latency: &IntervalLatency,
        measure_start: SystemTime,
        interval: Duration,
        window: Duration,
        intervals: usize,
        host: Option<&str>,
    ) -> Result<(), LoadError> {
        let err = |source| LoadError::HdrLog {
            path: self.path.display().to_string(),
            source,
            measured: None,
        };
        let write = |out: &mut dyn Write| {
            let mut out = BufWriter::new(out);
            write_log(&mut out, latency, measure_start, interval, window, intervals, host)?;
            out.flush()
        };
        match self.file.take().expect("written once") {
            Sink::Stream(mut f) => write(&mut f).map_err(err),
            Sink::File(mut f) => write(&mut f).and_then(|_| f.commit()).map_err(err),
        }
    }
}

fn write_log(
    out: &mut impl Write,
    latency: &IntervalLatency,
    measure_start: SystemTime,
    interval: Duration,
    window: Duration,
    intervals: usize,
    host: Option<&str>,
) -> io::Result<()> {
    // A tag holds no comma, space or line break: a host name has none.
    let tag = host.and_then(Tag::new);
    let mut serializer = V2DeflateSerializer::new();
    IntervalLogWriterBuilder::new()
        .add_comment("[Histogram log format version 1.3]")
        .add_comment(&format!(
            "[srvprof latency log: values in microseconds (us), one histogram per {interval:?} \
             interval of the measured window, from each request's send time (open loop: its \
             intended send time) to its complete answer]"
        ))
        .with_start_time(measure_start)
        .with_base_time(measure_start)
        .begin_log_with(out, &mut serializer)?;
    writeln!(out, "{LEGEND}")?;
    // A builder without headers writes nothing: this one only writes the intervals.
    let mut log = IntervalLogWriterBuilder::new().begin_log_with(out, &mut serializer)?;

    let intervals = (intervals as u64).max(latency.kept.last().map_or(0, |(i, _)| i + 1));
    let empty = crate::histogram::new_histogram();
    let mut deserializer = Deserializer::new();
    let mut kept = latency.kept.iter().peekable();
    for index in 0..intervals {
        let start = interval * index as u32;
        // The last interval ends with the window, as in the timeline.
        let length = window
            .checked_sub(start)
            .filter(|rest| !rest.is_zero())
            .map_or(interval, |rest| rest.min(interval));
        let decoded;
        let histogram = match kept.next_if(|(i, _)| *i == index) {
            Some((_, compressed)) => {
                decoded = deserializer
                    .deserialize::<u64, _>(&mut compressed.as_slice())
                    .map_err(io::Error::other)?;
                &decoded
            }
            None => &empty,
        };
        log.write_histogram(histogram, start, length, tag)
            .map_err(|e| match e {
                IntervalLogWriterError::IoError(e) => e,
                IntervalLogWriterError::SerializeError(e) => io::Error::other(e),
            })?;
    }
    drop(log);
    out.flush()
}

#[cfg(test)]
mod tests {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    use super::*;

    #[test]
    fn an_interval_without_answers_is_empty_and_the_last_ends_with_the_window() {
        let mut latency = IntervalLatency::default();
        let mut h = crate::histogram::new_histogram();
        h.record(1_500).unwrap();
        latency.keep(0, &h);
        h.record(90_000).unwrap();
        latency.keep(2, &h);
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_000_000_250);
        let mut out = Vec::new();
        let second = Duration::from_secs(1);
        let window = Duration::from_millis(2_500);
        write_log(&mut out, &latency, start, second, window, 3, None).unwrap();

        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(text.lines().count(), 2 + 2 + 1 + 3, "{text}");
        assert!(text.contains("values in microseconds"), "{text}");
        assert!(text.contains(&format!("\n{LEGEND}\n")), "{text}");
        let mut intervals = Vec::new();
        for entry in IntervalLogIterator::new(&out) {
            match entry.unwrap() {
                LogEntry::StartTime(t) | LogEntry::BaseTime(t) => {
                    assert_eq!(t, Duration::from_millis(1_795_000_000_250))
                }
                LogEntry::Interval(i) => {
                    intervals.push((i.start_timestamp(), i.duration(), i.max()));
                }
            }
        }
        let ms = Duration::from_millis;
        assert_eq!(
            intervals,
            [
                (ms(0), second, 1_500.0),
                (ms(1_000), second, 0.0),
                (ms(2_000), ms(500), h.max() as f64),
            ]
        );
    }

    #[test]
    fn a_split_runs_intervals_are_tagged_by_host() {
        let mut latency = IntervalLatency::default();
        let mut h = crate::histogram::new_histogram();
        h.record(2_000).unwrap();
        latency.keep(0, &h);
        let mut out = Vec::new();
        let second = Duration::from_secs(1);
        write_log(&mut out, &latency, SystemTime::UNIX_EPOCH, second, second, 1, Some("client-2")).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.lines().last().unwrap().starts_with("Tag=client-2,0.000,1.000,"), "{text}");
        let tags: Vec<Option<String>> = (IntervalLogIterator::new(&out))
            .filter_map(|e| match e.unwrap() {
                LogEntry::Interval(i) => Some(i.tag().map(|t| t.as_str().to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(tags, [Some("client-2".to_string())]);
    }
}
