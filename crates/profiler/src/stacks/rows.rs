//! Closed intervals' stack rows, written to an unlinked file as they close, so that a long run's
//! memory does not grow with its length: only the rows of the intervals still open stay in
//! memory. Rows no file can take (none can be made, the disk is full) stay in memory instead:
//! none is lost.
//!
//! The file is made in $TMPDIR, else /var/tmp (kept on disk by convention, where /tmp is often
//! memory), and is gone with srvprof, however it ends.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

/// A stack's value in one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub interval: i64,
    /// The stack's id (Timed::stacks).
    pub stack: u32,
    pub value: u64,
}

const ROW_BYTES: usize = 20;
/// Rows gathered before a write: 80 KiB.
const WRITE_ROWS: usize = 4096;

impl Row {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.interval.to_le_bytes());
        out.extend_from_slice(&self.stack.to_le_bytes());
        out.extend_from_slice(&self.value.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Row {
        let field = |from: usize, to: usize| &b[from..to];
        Row {
            interval: i64::from_le_bytes(field(0, 8).try_into().expect("8 bytes")),
            stack: u32::from_le_bytes(field(8, 12).try_into().expect("4 bytes")),
            value: u64::from_le_bytes(field(12, 20).try_into().expect("8 bytes")),
        }
    }
}

/// Rows as they are closed: in a file, and in memory those not written yet or that no file took.
#[derive(Debug, Default)]
pub struct Rows {
    file: Option<File>,
    /// Bytes of whole rows written to the file.
    written: u64,
    /// Set once a file could not be made or written: later rows stay in memory.
    in_memory: bool,
    /// Rows gathered for the next write.
    pending: Vec<Row>,
    /// Rows no file took.
    kept: Vec<Row>,
    scratch: Vec<u8>,
}

impl Rows {
    /// Rows that write to `file` (None: kept in memory).
    #[cfg(test)]
    fn to_file(file: Option<File>) -> Self {
        Self {
            in_memory: file.is_none(),
            file,
            ..Default::default()
        }
    }

    pub fn push(&mut self, row: Row) {
        self.pending.push(row);
        if self.pending.len() >= WRITE_ROWS {
            self.write();
        }
    }

    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.written as usize / ROW_BYTES + self.pending.len() + self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows held in memory.
    pub fn in_memory(&self) -> usize {
        self.pending.len() + self.kept.len()
    }

    fn write(&mut self) {
        if !self.in_memory && self.file.is_none() {
            match spill_file() {
                Ok(f) => self.file = Some(f),
                Err(e) => self.keep_in_memory(&e),
            }
        }
        let Some(file) = self.file.as_ref().filter(|_| !self.in_memory) else {
            self.kept.append(&mut self.pending);
            return;
        };
        self.scratch.clear();
        for r in &self.pending {
            r.encode(&mut self.scratch);
        }
        // Written at its offset: a write that fails part way leaves `written` where the whole
        // rows end, and its rows are kept in memory.
        match file.write_all_at(&self.scratch, self.written) {
            Ok(()) => {
                self.written += self.scratch.len() as u64;
                self.pending.clear();
            }
            Err(e) => {
                self.keep_in_memory(&e);
                self.kept.append(&mut self.pending);
            }
        }
    }

    fn keep_in_memory(&mut self, e: &std::io::Error) {
        self.in_memory = true;
        eprintln!(
            "srvprof: stacks per interval could not be written to a temporary file in {} ({e}), so they are kept in memory, which grows with the run's length; set TMPDIR to a directory with room for them",
            spill_dir().display()
        );
    }

    /// Every row: those in the file, then those in memory.
    pub fn iter(&self) -> impl Iterator<Item = Row> + '_ {
        let mut offset = 0u64;
        let mut chunk = Vec::new();
        let mut at = 0;
        let from_file = std::iter::from_fn(move || {
            let file = self.file.as_ref()?;
            if at == chunk.len() {
                let len = (self.written - offset).min((WRITE_ROWS * ROW_BYTES) as u64) as usize;
                if len == 0 {
                    return None;
                }
                chunk.resize(len, 0);
                if let Err(e) = file.read_exact_at(&mut chunk, offset) {
                    eprintln!(
                        "srvprof: stacks per interval could not be read back from their temporary file ({e}), so the stacks miss the samples it held"
                    );
                    offset = self.written;
                    chunk.clear();
                    at = 0;
                    return None;
                }
                offset += len as u64;
                at = 0;
            }
            let row = Row::decode(&chunk[at..at + ROW_BYTES]);
            at += ROW_BYTES;
            Some(row)
        });
        from_file
            .chain(self.kept.iter().copied())
            .chain(self.pending.iter().copied())
    }
}

fn spill_dir() -> PathBuf {
    std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// A file with no name, gone when closed.
fn spill_file() -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(spill_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Vec<Row> {
        (0..n)
            .map(|i| Row {
                interval: i as i64 - 3,
                stack: (i % 7) as u32,
                value: (i as u64) << 33 | 5,
            })
            .collect()
    }

    #[test]
    fn closed_rows_leave_memory_and_come_back_whole() {
        let mut r = Rows::default();
        let all = rows(3 * WRITE_ROWS + 10);
        for &row in &all {
            r.push(row);
        }
        assert!(r.file.is_some(), "no temporary file could be made");
        assert_eq!(r.in_memory(), 10);
        assert_eq!(r.len(), all.len());
        assert_eq!(r.iter().collect::<Vec<_>>(), all);
        // Read twice: the off-CPU stacks are.
        assert_eq!(r.iter().count(), all.len());
    }

    #[test]
    fn rows_no_file_takes_stay_in_memory() {
        // A file opened read-only refuses every write.
        let read_only = File::open("/proc/self/stat").ok();
        for file in [None, read_only] {
            let mut r = Rows::to_file(file);
            let all = rows(2 * WRITE_ROWS + 1);
            for &row in &all {
                r.push(row);
            }
            assert_eq!(r.in_memory(), all.len());
            assert_eq!(r.iter().collect::<Vec<_>>(), all);
        }
    }
}
