//! On-CPU samples unwound in user space from each binary's CFI (.eh_frame, .debug_frame) with
//! framehop, the unwinder samply uses; frame pointers where a function has no CFI.
//!
//! The BPF side sends each sample of a watched thread with its user registers and a copy of the
//! top of its user stack (UserStackSample). A thread of its own drains that ring every 20 ms,
//! while the sampled processes still run, so their mappings are the ones the samples were taken
//! in. A process's executable mappings are read from /proc/PID/maps once, and again (at most
//! once a second) when a sample lands outside all of them: the modules of new ones are added.
//! Each ELF file is read and parsed once, whichever processes map it.

use std::collections::HashMap;
use std::fs;
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};
use srvprof_analysis::unwind_quality::UnwindEnd;
use srvprof_common::{
    MAX_STACK_DEPTH, OffcpuTime, StackCopyHint, StackKey, USER_STACK_BYTES, UserStackSample,
};

use super::copy_hints::{CopyHints, Outcome};
use super::ids::{KERNEL_ID_BASE, StackIds, UNWOUND_ID_BASE};
use super::timed::{Grid, TimedCounts};
use crate::proc_maps::{self, Mapping};

/// How often the ring is drained.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// A process's modules are read again at most this often when samples land outside them.
const RELOAD_AFTER: Duration = Duration::from_secs(1);

/// A user stack unwound from a sample's copy: its frames, leaf first, and how unwinding ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserStack {
    pub frames: Vec<u64>,
    pub end: UnwindEnd,
}

/// What the unwinding thread hands back at the end.
#[derive(Debug, Default)]
pub struct UnwoundStacks {
    /// On-CPU samples, per stack (its key, its kernel stack id the kernel's or one given here
    /// to the frames the sample carried, from KERNEL_ID_BASE; and the id of the user stack
    /// unwound here, from UNWOUND_ID_BASE, -1 when none was) and interval of the run's
    /// grid. A stack is kept once, however many intervals it is seen in.
    pub oncpu: TimedCounts,
    /// Off-CPU periods sent for unwinding, in the interval they ended in: their time off the CPU
    /// (ns) times the periods each stands for (OffcpuTime.weight): an estimate of each stack's
    /// share of the thread's time.
    pub offcpu: TimedCounts,
    /// Per process, the off-CPU periods whose stacks were unwound and timed.
    pub offcpu_periods: HashMap<u32, u64>,
    /// The kernel stacks on-CPU samples carried, under the ids their keys were given
    /// (from KERNEL_ID_BASE).
    pub kernel_frames: HashMap<i32, Vec<u64>>,
    /// Per process, its executable mappings (lines of /proc/PID/maps) when last read: the
    /// frames of a process that is gone by the end are named from these.
    pub maps: HashMap<u32, String>,
    /// Per (group, off-CPU) the stacks unwound here, and the bytes of user stack they copied.
    pub copied: HashMap<(u32, bool), (u64, u64)>,
    kernel_ids: StackIds<Vec<u64>>,
    user_ids: StackIds<UserStack>,
}

impl Default for StackIds<Vec<u64>> {
    fn default() -> Self {
        Self::from(KERNEL_ID_BASE)
    }
}

impl Default for StackIds<UserStack> {
    fn default() -> Self {
        Self::from(UNWOUND_ID_BASE)
    }
}

impl UnwoundStacks {
    /// The key with the kernel stack the sample carried, under an id of its own (the kernel
    /// gave it none).
    fn with_kernel_frames(&mut self, mut key: StackKey, frames: &[u64]) -> StackKey {
        if frames.is_empty() {
            return key;
        }
        let (id, new) = self.kernel_ids.id(frames);
        if new {
            self.kernel_frames.insert(id, frames.to_vec());
        }
        key.kernel_stack_id = id;
        key
    }

    /// The user stack's id (StackRef), -1 when nothing was unwound.
    fn user_id(&mut self, stack: &UserStack) -> i32 {
        if stack.frames.is_empty() {
            return -1;
        }
        self.user_ids.id(stack).0
    }

    /// The user stacks the counts' ids stand for, by id.
    pub fn take_user_stacks(&mut self) -> HashMap<i32, UserStack> {
        std::mem::take(&mut self.user_ids).into_stacks()
    }

    /// An off-CPU period ended: charge its stacks, unwound when it began.
    fn period_ended(
        &mut self,
        grid: &Grid,
        pending: &mut HashMap<u64, (StackKey, i32)>,
        t: &OffcpuTime,
    ) {
        if let Some((key, stack)) = pending.remove(&t.seq) {
            *self.offcpu_periods.entry(key.tgid).or_default() += 1;
            let value = t.off_ns.saturating_mul(t.weight);
            self.offcpu.add(grid, (key, stack), t.end_ns, value);
        }
    }
}

/// The thread that drains and unwinds the samples.
pub struct UserStacks {
    stop: Arc<AtomicBool>,
    grid: Arc<Grid>,
    unwound: Arc<Mutex<UnwoundStacks>>,
    thread: Option<JoinHandle<()>>,
}

impl UserStacks {
    /// `copy_hints` is the BPF map of how much of each thread's stack to copy, which this thread
    /// keeps to what the thread's stacks have needed (copy_hints.rs). The modules of `pids` are
    /// read here, before the sampling programs attach: a first read that is slow (a disk busy
    /// writing out a fresh build) then delays the start, instead of stalling the draining
    /// while the ring fills.
    pub fn start(
        mut ring: RingBuf<MapData>,
        copy_hints: BpfHashMap<MapData, u32, StackCopyHint>,
        pids: &[u32],
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let grid = Arc::new(Grid::default());
        let unwound = Arc::new(Mutex::new(UnwoundStacks::default()));
        let mut files = FileCache::default();
        let mut processes: HashMap<u32, ProcessUnwinder> = pids
            .iter()
            .map(|&pid| (pid, ProcessUnwinder::new(pid, &mut files)))
            .collect();
        let thread = {
            let (stop, unwound, grid) = (stop.clone(), unwound.clone(), grid.clone());
            std::thread::Builder::new()
                .name("srvprof-unwind".into())
                .spawn(move || {
                    let mut hints = CopyHints::new(copy_hints);
                    // Off-CPU periods unwound, by id, until their end says how long they were.
                    let mut pending: HashMap<u64, (StackKey, i32)> = HashMap::new();
                    let mut open_period: HashMap<u32, u64> = HashMap::new();
                    // Each sample's frames go here, not in buffers of their own.
                    let (mut kernel, mut frames) = (Vec::new(), Vec::new());
                    loop {
                        let last = stop.load(Ordering::Acquire);
                        let mut out = unwound.lock().unwrap_or_else(|e| e.into_inner());
                        // In ring order: a period's stacks come before its end. Each record is
                        // unwound where it lies in the ring, not copied out: copies of up to
                        // 64 KiB, freed at once, fragmented this thread's heap (RSS grew 1.4 MB
                        // a minute, measured).
                        let mut chunk = std::time::Instant::now();
                        while let Some(item) = ring.next() {
                            if chunk.elapsed() >= crate::realtime::BACKGROUND_CHUNK {
                                std::thread::yield_now();
                                chunk = std::time::Instant::now();
                            }
                            let Some(record) = Record::parse(&item) else {
                                continue;
                            };
                            match record {
                                Record::Stack(s) => {
                                    let p = processes.entry(s.key.tgid).or_insert_with(|| {
                                        ProcessUnwinder::new(s.key.tgid, &mut files)
                                    });
                                    let u = p.unwind(&s, &mut files, std::mem::take(&mut frames));
                                    hints.learn(s.tid, &u.copy);
                                    let copied =
                                        out.copied.entry((s.key.group, s.seq != 0)).or_default();
                                    *copied = (copied.0 + 1, copied.1 + u.copy.copied);
                                    s.kernel_frames(&mut kernel);
                                    let key = out.with_kernel_frames(s.key, &kernel);
                                    let user = out.user_id(&u.stack);
                                    frames = u.stack.frames;
                                    if s.seq == 0 {
                                        out.oncpu.add(&grid, (key, user), s.time_ns, 1);
                                    } else {
                                        // A thread's earlier period still pending never ended
                                        // in the ring (its end did not fit): drop it.
                                        if let Some(old) = open_period.insert(s.tid, s.seq) {
                                            pending.remove(&old);
                                        }
                                        pending.insert(s.seq, (key, user));
                                    }
                                }
                                Record::PeriodEnd(t) => out.period_ended(&grid, &mut pending, &t),
                            }
                        }
                        out.oncpu.close(&grid);
                        out.offcpu.close(&grid);
                        if last {
                            out.maps = (processes.iter())
                                .filter(|(_, p)| !p.maps.is_empty())
                                .map(|(&pid, p)| (pid, p.maps.clone()))
                                .collect();
                            break;
                        }
                        drop(out);
                        std::thread::sleep(DRAIN_EVERY);
                    }
                })
                .ok()
        };
        Self {
            stop,
            grid,
            unwound,
            thread,
        }
    }

    /// The run's interval grid: interval 0 starts at `origin_ns` (CLOCK_MONOTONIC).
    pub fn set_grid(&self, origin_ns: u64, interval_ns: u64) {
        self.grid.set(origin_ns, interval_ns);
    }

    /// Drains what is left and returns everything unwound, with the grid its times are on.
    pub fn finish(&mut self) -> (UnwoundStacks, Option<(u64, u64)>) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let unwound = std::mem::take(&mut *self.unwound.lock().unwrap_or_else(|e| e.into_inner()));
        (unwound, self.grid.get())
    }
}

/// A record of the ring.
enum Record<'a> {
    Stack(Sample<'a>),
    PeriodEnd(OffcpuTime),
}

impl<'a> Record<'a> {
    fn parse(record: &'a [u8]) -> Option<Record<'a>> {
        if record.len() == size_of::<OffcpuTime>() {
            // SAFETY: OffcpuTime is plain integers, and the record is exactly one.
            return Some(Record::PeriodEnd(unsafe {
                std::ptr::read_unaligned(record.as_ptr().cast::<OffcpuTime>())
            }));
        }
        Sample::parse(record).map(Record::Stack)
    }
}

impl Drop for UserStacks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One sample unwound: its stack, and what its copy came to (what the copy hints learn from).
struct Unwound {
    stack: UserStack,
    copy: Outcome,
}

/// One record of the ring: the sample's fields and the part of the stack copy that was filled.
struct Sample<'a> {
    key: StackKey,
    tid: u32,
    seq: u64,
    time_ns: u64,
    ip: u64,
    sp: u64,
    bp: u64,
    /// The kernel stack it carried, leaf first, as the record's bytes (empty: none, or its key
    /// holds its id).
    kernel: &'a [u8],
    /// The copy of the user stack from sp up, where it lies in the ring.
    stack: &'a [u8],
}

impl<'a> Sample<'a> {
    /// The kernel stack it carried, into `out`.
    fn kernel_frames(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend(
            (self.kernel.chunks_exact(8))
                .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))),
        );
    }

    fn parse(record: &'a [u8]) -> Option<Sample<'a>> {
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
struct ProcessUnwinder {
    pid: u32,
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
    /// Every executable range of the process when last read, JIT code's included: a sample in
    /// one of them needs no new look at its mappings.
    known: Vec<(u64, u64)>,
    /// The mappings a module was added for.
    loaded: std::collections::HashSet<(u64, u64)>,
    /// The executable lines of /proc/PID/maps when last read (kept when the process is gone).
    maps: String,
    checked_at: Instant,
}

impl ProcessUnwinder {
    fn new(pid: u32, files: &mut FileCache) -> Self {
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
    fn refresh(&mut self, files: &mut FileCache) {
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
    fn unwind(&mut self, s: &Sample, files: &mut FileCache, mut frames: Vec<u64>) -> Unwound {
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

    fn covers(&self, ip: u64) -> bool {
        self.known.iter().any(|&(s, e)| s <= ip && ip < e)
    }

    /// True when `ip` is in a file's code or the vDSO, not in JIT code.
    fn in_module(&self, ip: u64) -> bool {
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

/// What unwinding needs of one ELF file, read once however many processes and mappings use
/// it (nginx's workers, the same libc everywhere).
#[derive(Clone)]
struct ModuleFile {
    info: ExplicitModuleSectionInfo<Arc<[u8]>>,
    /// Each loadable segment's (file offset, virtual address).
    segments: Vec<(u64, u64, u64)>,
}

/// Files read so far, by device and inode.
#[derive(Default)]
struct FileCache {
    files: HashMap<(String, u64), Option<ModuleFile>>,
}

impl FileCache {
    /// The module of one mapping: its file read through /proc/PID/map_files (the very file
    /// mapped, even in another mount namespace or deleted since), else /proc/PID/root; the
    /// vDSO from the process's memory.
    fn module(&mut self, pid: u32, m: &Mapping) -> Option<Module<Arc<[u8]>>> {
        let file = if m.path == VDSO {
            read_memory(pid, m.start, m.end).and_then(|d| ModuleFile::parse(d.as_slice()))
        } else {
            self.files
                .entry((m.dev.clone(), m.inode))
                .or_insert_with(|| {
                    // Only the headers and the sections unwinding needs are read, not the whole
                    // file: a debug build's DWARF is most of it (srvprof's own: 20 of 158 MB).
                    // Reading it all stalled this thread for over a second on a busy disk, and
                    // the samples queued meanwhile overflowed the ring.
                    let file =
                        fs::File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
                            .or_else(|_| fs::File::open(format!("/proc/{pid}/root{}", m.path)))
                            .ok()?;
                    ModuleFile::parse(&object::ReadCache::new(file))
                })
                .clone()
        }?;
        // The load bias: where the segment this mapping maps was placed. It is the segment whose
        // file offset rounds down to the mapping's (lld's read-only segment may extend into the
        // page the code segment starts in, so containing the offset is not enough).
        let &(seg_offset, seg_address, _) = file
            .segments
            .iter()
            .find(|(off, _, _)| off & !0xfff == m.offset)
            .or_else(|| {
                file.segments
                    .iter()
                    .find(|(off, _, size)| off & !0xfff <= m.offset && m.offset < off + size)
            })?;
        let bias = m
            .start
            .wrapping_sub(m.offset)
            .wrapping_sub(seg_address.wrapping_sub(seg_offset));
        Some(Module::new(m.path.clone(), m.start..m.end, bias, file.info))
    }
}

impl ModuleFile {
    fn parse<'data, R: object::ReadRef<'data>>(data: R) -> Option<ModuleFile> {
        let file = object::File::parse(data).ok()?;
        let segments = file
            .segments()
            .map(|seg| {
                let (off, size) = seg.file_range();
                (off, seg.address(), size)
            })
            .collect();
        let section = |name: &str| {
            file.section_by_name(name).and_then(|s| {
                let data: Arc<[u8]> = Arc::from(s.data().ok()?);
                Some((s.address()..s.address() + s.size(), data))
            })
        };
        let text = section(".text");
        let eh_frame = section(".eh_frame");
        let eh_frame_hdr = section(".eh_frame_hdr");
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: text.as_ref().map(|t| t.0.clone()),
            text: text.map(|t| t.1),
            got_svma: file
                .section_by_name(".got")
                .map(|s| s.address()..s.address() + s.size()),
            eh_frame_svma: eh_frame.as_ref().map(|t| t.0.clone()),
            eh_frame: eh_frame.map(|t| t.1),
            eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|t| t.0.clone()),
            eh_frame_hdr: eh_frame_hdr.map(|t| t.1),
            debug_frame: section(".debug_frame").map(|t| t.1),
            ..Default::default()
        };
        Some(ModuleFile { info, segments })
    }
}

/// The kernel's vDSO (gettimeofday, clock_gettime): an ELF image in the process's memory.
const VDSO: &str = "[vdso]";

fn read_memory(pid: u32, start: u64, end: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mem = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; end.checked_sub(start)? as usize];
    mem.read_exact_at(&mut buf, start).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_mappings_are_read_and_files_and_the_vdso_are_modules() {
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
    fn modules_of_this_process_are_read_from_its_mappings() {
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
