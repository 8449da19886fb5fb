//! Reading a latency.hlog someone else may have written (`srvprof merge`): every field that sizes
//! an allocation or a time is checked before it is used, so a malformed or hostile log is refused
//! in one sentence, never an abort (a 4 GiB payload length) or a panic (a StartTime that
//! overflows the clock).

use std::io::Read;
use std::time::Duration;

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

/// The largest log srvprof reads: a day of 1 s intervals takes about 20 MB.
pub const MAX_LOG_BYTES: u64 = 64 << 20;
/// The most intervals a log may hold: each becomes a histogram of up to ~300 KB in a merge.
pub const MAX_INTERVALS: usize = 20_000;
/// A histogram's encoding, decompressed: srvprof's are a few KB.
const MAX_HISTOGRAM_BYTES: u64 = 1 << 20;
/// StartTime, in seconds since 1970: beyond the year 3000 it is no clock's.
const MAX_START_S: u64 = 32_503_680_000;
/// An interval's start, from StartTime, and its length.
const MAX_OFFSET: Duration = Duration::from_secs(366 * 86_400);
const MAX_LENGTH: Duration = Duration::from_secs(86_400);
/// The bounds of a histogram srvprof adds: 3 significant digits at most, values up to ~50 days
/// in µs (its own stop at an hour), so none allocates more than ~300 KB.
const MAX_SIGFIG: u32 = 3;
const MAX_HIGHEST: u64 = 1 << 42;

const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// cookie, payload length, normalizing offset, digits, lowest, highest, ratio.
const V2_HEADER: usize = 40;

/// A log: its StartTime (since 1970), and per interval its start (from StartTime), length and
/// latencies.
pub struct Log {
    pub start: Duration,
    pub intervals: Vec<(Duration, Duration, Histogram<u64>)>,
}

/// Parses a whole log; the error says what is wrong with it, without its path.
pub fn parse(bytes: &[u8]) -> Result<Log, String> {
    let (mut start, mut intervals) = (None, Vec::new());
    let mut deserializer = Deserializer::new();
    for (line, entry) in IntervalLogIterator::new(bytes).enumerate() {
        let entry = entry.map_err(|e| format!("entry {} cannot be read ({e:?})", line + 1))?;
        match entry {
            LogEntry::StartTime(t) if t.as_secs() > MAX_START_S => {
                return Err(format!("its StartTime ({} s) is past the year 3000", t.as_secs()));
            }
            LogEntry::StartTime(t) => start = Some(t),
            LogEntry::BaseTime(_) => {}
            LogEntry::Interval(i) => {
                let n = intervals.len() + 1;
                if n > MAX_INTERVALS {
                    return Err(format!("it holds more than {MAX_INTERVALS} intervals"));
                }
                let (at, length) = (i.start_timestamp(), i.duration());
                if at > MAX_OFFSET || length > MAX_LENGTH || length.is_zero() {
                    return Err(format!(
                        "interval {n} starts {} s in and lasts {} s: starts within a year and lengths of up to a day are read",
                        at.as_secs_f64(),
                        length.as_secs_f64()
                    ));
                }
                let h = histogram(&mut deserializer, i.encoded_histogram())
                    .map_err(|e| format!("interval {n}'s histogram {e}"))?;
                intervals.push((at, length, h));
            }
        }
    }
    let start = start.ok_or("it has no StartTime")?;
    Ok(Log { start, intervals })
}

/// Standard base64, as the log writes its histograms (the hdrhistogram crate's reader hands them
/// over encoded).
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// One interval's histogram: base64 of a V2 compressed encoding, its header checked first.
fn histogram(deserializer: &mut Deserializer, encoded: &str) -> Result<Histogram<u64>, String> {
    let compressed = base64_decode(encoded).ok_or("is not base64")?;
    if compressed.len() < 8 || be32(&compressed, 0) != V2_COMPRESSED_COOKIE {
        return Err("is not a V2 compressed histogram".into());
    }
    let len = be32(&compressed, 4) as usize;
    if len != compressed.len() - 8 {
        return Err(format!(
            "claims {len} bytes and holds {}",
            compressed.len() - 8
        ));
    }
    let mut plain = Vec::new();
    flate2::read::ZlibDecoder::new(&compressed[8..])
        .take(MAX_HISTOGRAM_BYTES + 1)
        .read_to_end(&mut plain)
        .map_err(|e| format!("does not decompress ({e})"))?;
    if plain.len() as u64 > MAX_HISTOGRAM_BYTES || plain.len() < V2_HEADER {
        return Err(format!("decompresses to {} bytes", plain.len()));
    }
    let payload = be32(&plain, 4) as usize;
    let (digits, lowest, highest) = (be32(&plain, 12), be64(&plain, 16), be64(&plain, 24));
    if be32(&plain, 0) != V2_COOKIE || payload != plain.len() - V2_HEADER {
        return Err("has a payload of another length than it claims".into());
    }
    if digits > MAX_SIGFIG || lowest == 0 || highest > MAX_HIGHEST {
        return Err(format!(
            "has bounds {lowest}..{highest} at {digits} digits; srvprof's go up to {MAX_HIGHEST} at {MAX_SIGFIG}"
        ));
    }
    deserializer
        .deserialize(&mut plain.as_slice())
        .map_err(|e| format!("cannot be decoded ({e:?})"))
}
