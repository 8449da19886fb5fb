//! On-CPU samples unwound in user space from each binary's CFI (.eh_frame, .debug_frame) with
//! framehop, the unwinder samply uses; frame pointers where a function has no CFI.
//!
//! The BPF side sends each sample of a watched thread with its user registers and a copy of the
//! top of its user stack (UserStackSample). A thread of its own drains that ring every 20 ms,
//! while the sampled processes still run, so their mappings are the ones the samples were taken
//! in. A process's executable mappings are read from /proc/PID/maps once, and again (at most
//! once a second) when a sample lands outside all of them: the modules of new ones are added.
//! Each ELF file is read and parsed once, whichever processes map it. This file is the draining
//! thread and what it keeps; unwinder.rs unwinds one process's samples, modules.rs reads the
//! ELF files.

use std::collections::HashMap;
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use srvprof_analysis::unwind_quality::UnwindEnd;
use srvprof_common::{OffcpuTime, StackCopyHint, StackKey};

use super::copy_hints::CopyHints;
use super::ids::{FrameTree, KERNEL_ID_BASE, UNWOUND_ID_BASE};
use super::modules::FileCache;
use super::timed::{Grid, StackRef, TimedCounts};
pub use super::unwinder::UserStack;
use super::unwinder::{ProcessUnwinder, Record};

/// How often the ring is drained.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// What the unwinding thread hands back at the end.
#[derive(Debug)]
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
    /// Per stack, the off-CPU periods its drawn ones stand for (the sum of their weights).
    pub offcpu_drawn: HashMap<StackRef, u64>,
    /// Per process, its executable mappings (lines of /proc/PID/maps) when last read: the
    /// frames of a process that is gone by the end are named from these.
    pub maps: HashMap<u32, String>,
    /// Per (group, off-CPU) the stacks unwound here, and the bytes of user stack they copied.
    pub copied: HashMap<(u32, bool), (u64, u64)>,
    /// The kernel stacks samples carried, each kept once, under the id its keys were
    /// given (from KERNEL_ID_BASE).
    kernel_ids: FrameTree,
    /// The user stacks unwound here (ids from UNWOUND_ID_BASE), each under how its unwinding
    /// ended (an index in `ends`).
    user_ids: FrameTree,
    ends: Vec<UnwindEnd>,
}

impl Default for UnwoundStacks {
    fn default() -> Self {
        Self {
            oncpu: TimedCounts::default(),
            offcpu: TimedCounts::default(),
            offcpu_periods: HashMap::new(),
            offcpu_drawn: HashMap::new(),
            maps: HashMap::new(),
            copied: HashMap::new(),
            kernel_ids: FrameTree::new(KERNEL_ID_BASE, (i32::MAX - KERNEL_ID_BASE) as usize),
            user_ids: FrameTree::new(UNWOUND_ID_BASE, (KERNEL_ID_BASE - UNWOUND_ID_BASE) as usize),
            ends: Vec::new(),
        }
    }
}

impl UnwoundStacks {
    /// The key with the kernel stack the sample carried, under an id of its own (the kernel
    /// gave it none).
    fn with_kernel_frames(&mut self, mut key: StackKey, frames: &[u64]) -> StackKey {
        if let Some(id) = (!frames.is_empty())
            .then(|| self.kernel_ids.id(0, frames))
            .flatten()
        {
            key.kernel_stack_id = id;
        }
        key
    }

    /// The user stack's id (StackRef), -1 when nothing was unwound.
    fn user_id(&mut self, stack: &UserStack) -> i32 {
        if stack.frames.is_empty() {
            return -1;
        }
        let end = match self.ends.iter().position(|e| *e == stack.end) {
            Some(i) => i,
            None => {
                self.ends.push(stack.end);
                self.ends.len() - 1
            }
        };
        self.user_ids.id(end as u64, &stack.frames).unwrap_or(-1)
    }

    /// The kernel stack a key's id (from KERNEL_ID_BASE) stands for, leaf first.
    pub fn kernel_stack(&self, id: i32) -> Option<Vec<u64>> {
        self.kernel_ids.stack(id).map(|(_, frames)| frames)
    }

    /// The user stack an id (from UNWOUND_ID_BASE) stands for.
    pub fn user_stack(&self, id: i32) -> Option<UserStack> {
        let (end, frames) = self.user_ids.stack(id)?;
        let end = *self.ends.get(end as usize)?;
        Some(UserStack { frames, end })
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
            *self.offcpu_drawn.entry((key, stack)).or_default() += t.weight;
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

impl Drop for UserStacks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
