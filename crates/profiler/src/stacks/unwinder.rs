//! One process's user stacks unwound from its samples: its executable mappings read from
//! /proc/PID/maps (again, at most once a second, when a sample lands outside all of them), each
//! module's CFI handed to framehop, and each sample's stack walked from its registers and the copy
//! of its stack the ring carried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder};
use srvprof_analysis::unwind_quality::UnwindEnd;
use srvprof_common::{MAX_STACK_DEPTH, OffcpuTime, StackKey, USER_STACK_BYTES, UserStackSample};

use super::copy_hints::Outcome;
use super::modules::{FileCache, VDSO};
use crate::procfs::maps::{self as proc_maps, Mapping};

/// A process's modules are read again at most this often when samples land outside them.
const RELOAD_AFTER: Duration = Duration::from_secs(1);

/// A user stack unwound from a sample's copy: its frames, leaf first, and how unwinding ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserStack {
    pub frames: Vec<u64>,
    pub end: UnwindEnd,
}

/// A record of the ring.
pub(super) enum Record<'a> {
    Stack(Sample<'a>),
    PeriodEnd(OffcpuTime),
}

impl<'a> Record<'a> {
    pub(super) fn parse(record: &'a [u8]) -> Option<Record<'a>> {
        if record.len() == size_of::<OffcpuTime>() {
            // SAFETY: OffcpuTime is plain integers, and the record is exactly one.
            return Some(Record::PeriodEnd(unsafe {
                std::ptr::read_unaligned(record.as_ptr().cast::<OffcpuTime>())
            }));
        }
        Sample::parse(record).map(Record::Stack)
    }
}

/// One sample unwound: its stack, and what its copy came to (what the copy hints learn from).
pub(super) struct Unwound {
    pub(super) stack: UserStack,
    pub(super) copy: Outcome,
}

/// One record of the ring: the sample's fields and the part of the stack copy that was filled.
pub(super) struct Sample<'a> {
    pub(super) key: StackKey,
    pub(super) tid: u32,
    pub(super) seq: u64,
    pub(super) time_ns: u64,
    pub(super) ip: u64,
    pub(super) sp: u64,
    pub(super) bp: u64,
    /// The kernel stack it carried, leaf first, as the record's bytes (empty: none, or its key
    /// holds its id).
    pub(super) kernel: &'a [u8],
    /// The copy of the user stack from sp up, where it lies in the ring.
    pub(super) stack: &'a [u8],
}

impl<'a> Sample<'a> {
    /// The kernel stack it carried, into `out`.
    pub(super) fn kernel_frames(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend(
            (self.kernel.chunks_exact(8))
                .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))),
        );
    }

    pub(super) fn parse(record: &'a [u8]) -> Option<Sample<'a>> {
        let header = std::mem::offset_of!(UserStackSample, stack);
        if record.len() < size_of::<UserStackSample>() {
            return None;
        }
        let field = |offset: usize| -> u64 {
            u64::from_ne_bytes(record[offset..offset + 8].try_into().expect("8 bytes"))
        };
        // SAFETY: StackKey is plain integers and bytes, and the record holds one at offset 0.
        let key = unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<StackKey>()) };
        let len_at = std::mem::offset_of!(UserStackSample, stack_len);
        let len = u32::from_ne_bytes(record[len_at..len_at + 4].try_into().expect("4 bytes"));
        let len = (len as usize).min(USER_STACK_BYTES);
        let tid_at = std::mem::offset_of!(UserStackSample, tid);
        let kernel_len_at = std::mem::offset_of!(UserStackSample, kernel_len);
        let kernel_len = u32::from_ne_bytes(
            record[kernel_len_at..kernel_len_at + 4]
                .try_into()
                .expect("4 bytes"),
        );
        let kernel_at = std::mem::offset_of!(UserStackSample, kernel);
        let kernel = &record[kernel_at..kernel_at + 8 * (kernel_len as usize).min(MAX_STACK_DEPTH)];
        Some(Sample {
            key,
            tid: u32::from_ne_bytes(record[tid_at..tid_at + 4].try_into().expect("4 bytes")),
            ip: field(std::mem::offset_of!(UserStackSample, ip)),
            sp: field(std::mem::offset_of!(UserStackSample, sp)),
            bp: field(std::mem::offset_of!(UserStackSample, bp)),
            seq: field(std::mem::offset_of!(UserStackSample, seq)),
            time_ns: field(std::mem::offset_of!(UserStackSample, time_ns)),
            kernel,
            stack: &record[header..header + len],
        })
    }
}

/// One process's modules, as framehop needs them.
pub(super) struct ProcessUnwinder {
    pub(super) pid: u32,
    pub(super) unwinder: UnwinderX86_64<Arc<[u8]>>,
    pub(super) cache: CacheX86_64,
    /// Every executable range of the process when last read, JIT code's included: a sample in
    /// one of them needs no new look at its mappings.
    pub(super) known: Vec<(u64, u64)>,
    /// The mappings a module was added for.
    pub(super) loaded: std::collections::HashSet<(u64, u64)>,
    /// The executable lines of /proc/PID/maps when last read (kept when the process is gone).
    pub(super) maps: String,
    pub(super) checked_at: Instant,
}

impl ProcessUnwinder {
    pub(super) fn new(pid: u32, files: &mut FileCache) -> Self {
        let mut p = Self {
            pid,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            known: Vec::new(),
            loaded: Default::default(),
            maps: String::new(),
            checked_at: Instant::now(),
        };
        p.refresh(files);
        p
    }

    /// Reads the process's mappings again and adds the modules of new ones (a library loaded
    /// since); JIT code gets none (framehop walks it by frame pointers).
    pub(super) fn refresh(&mut self, files: &mut FileCache) {
        let (lines, mappings) = executable_mappings(self.pid);
        if lines.is_empty() {
            // Gone: what was known of it stays.
            self.checked_at = Instant::now();
            return;
        }
        self.maps = lines;
        self.known = mappings.iter().map(|m| (m.start, m.end)).collect();
        for m in mappings.iter().filter(|m| is_module(m)) {
            if self.loaded.contains(&(m.start, m.end)) {
                continue;
            }
            if let Some(module) = files.module(self.pid, m) {
                self.unwinder.add_module(module);
            }
            // Tried once: a file that cannot be read now will not be readable later.
            self.loaded.insert((m.start, m.end));
        }
        self.checked_at = Instant::now();
    }

    /// The sample's user frames, leaf first: return addresses as the kernel's walk gives them.
    /// `frames`: a buffer to put them in.
    pub(super) fn unwind(
        &mut self,
        s: &Sample,
        files: &mut FileCache,
        mut frames: Vec<u64>,
    ) -> Unwound {
        frames.clear();
        let mut u = Unwound {
            stack: UserStack {
                frames,
                end: UnwindEnd::Lost,
            },
            copy: Outcome {
                sp: s.sp,
                copied: s.stack.len() as u64,
                deepest_read: 0,
                read_past_copy: false,
                reached_root: false,
            },
        };
        if s.ip == 0 {
            return u;
        }
        if !self.covers(s.ip) && self.checked_at.elapsed() >= RELOAD_AFTER {
            self.refresh(files);
        }
        let stack = s.stack;
        let sp = s.sp;
        let (mut deepest, mut ran_out) = (0u64, false);
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())?;
            let Some(bytes) = stack.get(off as usize..off as usize + 8) else {
                // Beyond the copy but within what may be copied.
                ran_out |= off < USER_STACK_BYTES as u64;
                return Err(());
            };
            deepest = deepest.max(off + 8);
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut regs = UnwindRegsX86_64::new(s.ip, s.sp, s.bp);
        let mut frame = FrameAddress::InstructionPointer(s.ip);
        let frames = &mut u.stack.frames;
        frames.push(s.ip);
        u.stack.end = loop {
            if frames.len() >= MAX_STACK_DEPTH {
                break UnwindEnd::TooDeep;
            }
            let ip = regs.ip();
            let next =
                self.unwinder
                    .unwind_frame(frame, &mut regs, &mut self.cache, &mut read_stack);
            let ret = match next {
                Ok(Some(ret)) => ret,
                Ok(None) => break UnwindEnd::Root,
                Err(_) if ran_out => break UnwindEnd::CopyEnded,
                // JIT code (no module: framehop walks it by its frame pointer) whose frame
                // pointer is below the stack pointer or outside the copy: it points into
                // another stack.
                Err(
                    framehop::Error::FramepointerUnwindingMovedBackwards
                    | framehop::Error::CouldNotReadStack(_),
                ) if !self.in_module(ip) => break UnwindEnd::StackSwitch,
                Err(_) => break UnwindEnd::Lost,
            };
            let Some(next) = FrameAddress::from_return_address(ret) else {
                break UnwindEnd::Root;
            };
            frames.push(ret);
            frame = next;
        };
        u.copy.read_past_copy = ran_out;
        u.copy.deepest_read = deepest;
        u.copy.reached_root = u.stack.end == UnwindEnd::Root;
        u
    }

    pub(super) fn covers(&self, ip: u64) -> bool {
        self.known.iter().any(|&(s, e)| s <= ip && ip < e)
    }

    /// True when `ip` is in a file's code or the vDSO, not in JIT code.
    pub(super) fn in_module(&self, ip: u64) -> bool {
        self.loaded.iter().any(|&(s, e)| s <= ip && ip < e)
    }
}

/// A file's mapping or the vDSO's: something with CFI to read (a file removed since is read
/// through /proc/PID/map_files).
fn is_module(m: &Mapping) -> bool {
    m.path.starts_with('/') || m.path == VDSO
}

/// Code a sample can be in: an executable mapping, but the vsyscall page (no CFI, no frames).
fn unwindable(m: &Mapping) -> bool {
    m.executable() && m.path != "[vsyscall]"
}

/// The executable mappings of /proc/PID/maps, as its lines and parsed (none when the process
/// is gone): files', the vDSO, and anonymous ones (JIT code).
fn executable_mappings(pid: u32) -> (String, Vec<Mapping>) {
    let text = proc_maps::read(pid);
    let (mut lines, mut mappings) = (String::new(), Vec::new());
    for line in text.lines() {
        if let Some(m) = Mapping::parse(line).filter(unwindable) {
            mappings.push(m);
            lines.push_str(line);
            lines.push('\n');
        }
    }
    (lines, mappings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn executable_mappings_are_read_and_files_and_the_vdso_are_modules() {
        let parse = |line: &str| Mapping::parse(line).unwrap();
        let nginx = parse("55d0c0a00000-55d0c0a10000 r-xp 00002000 08:01 1234 /usr/sbin/nginx");
        assert!(unwindable(&nginx) && is_module(&nginx));
        let data = parse("55d0c0a00000-55d0c0a10000 r--p 00000000 08:01 1234 /usr/sbin/nginx");
        assert!(!unwindable(&data));
        let vdso = parse("7ffc1000-7ffc3000 r-xp 00000000 00:00 0 [vdso]");
        assert!(unwindable(&vdso) && is_module(&vdso));
        let vsyscall = parse("7ffc1000-7ffc3000 r-xp 00000000 00:00 0 [vsyscall]");
        assert!(!unwindable(&vsyscall));
        // JIT code: known, so a sample in it does not send srvprof back to /proc, but no module.
        let jit = parse("7f0000-7f1000 rwxp 00000000 00:00 0");
        assert!(unwindable(&jit) && !is_module(&jit));
    }

    #[test]
    pub(super) fn modules_of_this_process_are_read_from_its_mappings() {
        // This test binary's own mappings: every executable file parses, and one holds .eh_frame.
        let me = std::process::id();
        let mut files = FileCache::default();
        let p = ProcessUnwinder::new(me, &mut files);
        assert!(p.loaded.len() >= 2, "{:?}", p.known);
        assert!(
            files
                .files
                .values()
                .flatten()
                .any(|f| f.info.eh_frame.is_some()),
            "no module with .eh_frame"
        );
        assert!(
            p.covers(modules_of_this_process_are_read_from_its_mappings as fn() as usize as u64)
        );
    }
}
