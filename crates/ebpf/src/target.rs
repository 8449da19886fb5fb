//! Which processes are watched, and reading task_struct fields at offsets userspace found in BTF.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_probe_read_kernel,
        bpf_probe_read_kernel_buf,
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use srvprof_common::{
    HistSlots, MAX_TARGET_PROCESSES, MAX_THREADS, TARGET_BITMAP_WORDS, ThreadStats, hist, lost,
};

/// tgid -> group (server or client). Children forked by a watched process join its group.
#[map]
pub static TARGET_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TARGET_PROCESSES, 0);

/// Bit tgid % 64 of word tgid / 64 is set for every watched process: the filter every syscall
/// and scheduler event on the machine passes, so it is an array load (inlined by the JIT), not a
/// hash lookup. TARGET_TGIDS stays the truth; userspace re-sets any bit a racing fork lost.
#[map]
pub static TARGET_BITMAP: Array<u64> = Array::with_max_entries(TARGET_BITMAP_WORDS, 0);

/// tid -> cumulative figures for every watched thread.
#[map]
pub static THREADS: HashMap<u32, ThreadStats> = HashMap::with_max_entries(MAX_THREADS, 0);

/// All zeros, never written: a new thread's stats start as a copy of it, not as a value built
/// on the 512-byte BPF stack of the scheduler's programs.
#[map]
static ZERO_THREAD: Array<ThreadStats> = Array::with_max_entries(1, 0);

/// Records the programs had to drop, by reason (srvprof_common::lost).
#[map]
pub static LOST_EVENTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(lost::COUNT, 0);

// Offsets of task_struct fields, set by userspace from /sys/kernel/btf/vmlinux before loading.
#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_COMM_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_EXIT_CODE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static TASK_EXEC_RUNTIME_OFFSET: u64 = 0;
/// The groups whose stacks are taken (srvprof_common::globals::STACK_GROUPS).
#[unsafe(no_mangle)]
static STACK_GROUPS: u64 = 0;

/// Reads a global set at load time; volatile so the compiler does not fold the zero default.
#[inline(always)]
pub fn global(g: &'static u64) -> u64 {
    unsafe { core::ptr::read_volatile(g) }
}

#[inline(always)]
pub fn read_field<T>(base: *const u8, offset: u64) -> Option<T> {
    unsafe { bpf_probe_read_kernel(base.add(offset as usize) as *const T).ok() }
}

/// (tid, tgid) of a task.
#[inline(always)]
pub fn task_ids(task: *const u8) -> Option<(u32, u32)> {
    let tid: i32 = read_field(task, global(&TASK_PID_OFFSET))?;
    let tgid: i32 = read_field(task, global(&TASK_TGID_OFFSET))?;
    Some((tid as u32, tgid as u32))
}

#[inline(always)]
pub fn task_exit_code(task: *const u8) -> Option<i32> {
    read_field(task, global(&TASK_EXIT_CODE_OFFSET))
}

/// The scheduler's on-CPU total for the task (se.sum_exec_runtime), ns.
#[inline(always)]
pub fn task_exec_runtime(task: *const u8) -> Option<u64> {
    read_field(task, global(&TASK_EXEC_RUNTIME_OFFSET))
}

#[inline(always)]
pub fn task_comm(task: *const u8) -> [u8; 16] {
    let mut comm = [0u8; 16];
    let _ = unsafe {
        bpf_probe_read_kernel_buf(task.add(global(&TASK_COMM_OFFSET) as usize), &mut comm)
    };
    comm
}

#[inline(always)]
pub fn current_comm() -> [u8; 16] {
    bpf_get_current_comm().unwrap_or([0u8; 16])
}

/// False when the process is certainly not watched (the bit is clear): the cheap first test.
#[inline(always)]
pub fn maybe_watched(tgid: u32) -> bool {
    let word = tgid / 64;
    if word >= TARGET_BITMAP_WORDS {
        return true; // beyond the bitmap: ask the hash
    }
    let bits = TARGET_BITMAP.get(word).copied().unwrap_or(0);
    bits & (1u64 << (tgid % 64)) != 0
}

/// The group of a watched process, or None when it is not watched.
#[inline(always)]
pub fn group_of(tgid: u32) -> Option<u32> {
    if !maybe_watched(tgid) {
        return None;
    }
    unsafe { TARGET_TGIDS.get(&tgid).copied() }
}

/// The group of a watched process whose stacks are taken, or None.
#[inline(always)]
pub fn stacks_group_of(tgid: u32) -> Option<u32> {
    group_of(tgid).filter(|&g| global(&STACK_GROUPS) & 1u64.wrapping_shl(g) != 0)
}

/// The stats of a thread of a watched process, or None when it is not watched. The hot path is
/// one array load and one hash lookup: the group is kept in the thread's stats, so the process
/// map is asked only the first time a thread is seen (or when its tid was reused).
#[inline(always)]
pub fn watched_thread(
    tid: u32,
    tgid: u32,
    comm: impl FnOnce() -> [u8; 16],
) -> Option<&'static mut ThreadStats> {
    if !maybe_watched(tgid) {
        return None;
    }
    if let Some(st) = THREADS.get_ptr_mut(&tid) {
        let st = unsafe { &mut *st };
        if st.tgid == tgid {
            return Some(st);
        }
    }
    let group = unsafe { TARGET_TGIDS.get(&tgid).copied() }?;
    new_thread_stats(tid, tgid, group, comm)
}

/// The stats of the current thread if it is watched: one helper call for both ids (the context's
/// pid() and tgid() would make two), as the syscall programs run on every syscall.
#[inline(always)]
pub fn watched_thread_current() -> Option<&'static mut ThreadStats> {
    let ids = bpf_get_current_pid_tgid();
    watched_thread(ids as u32, (ids >> 32) as u32, current_comm)
}

/// Starts watching a process (a child forked by a watched one).
#[inline(always)]
pub fn watch(tgid: u32, group: u32) {
    let _ = TARGET_TGIDS.insert(&tgid, &group, 0);
    if let Some(bits) = TARGET_BITMAP.get_ptr_mut(tgid / 64) {
        unsafe { *bits |= 1u64 << (tgid % 64) };
    }
}

#[inline(always)]
pub fn count_lost(reason: u32) {
    count_lost_n(reason, 1);
}

/// `n` events of one reason at once.
#[inline(always)]
pub fn count_lost_n(reason: u32, n: u64) {
    if let Some(v) = LOST_EVENTS.get_ptr_mut(reason) {
        unsafe { *v += n };
    }
}

/// Fresh stats for a thread seen for the first time (or whose tid now names another thread).
/// `comm` is only called here: reading a name on every event would cost a kernel read each time.
#[inline(always)]
fn new_thread_stats(
    tid: u32,
    tgid: u32,
    group: u32,
    comm: impl FnOnce() -> [u8; 16],
) -> Option<&'static mut ThreadStats> {
    let zero = ZERO_THREAD.get(0)?;
    // BPF_ANY: replaces the stats of a dead thread whose tid was reused.
    if THREADS.insert(&tid, zero, 0).is_err() {
        count_lost(lost::THREADS_MAP_FULL);
        return None;
    }
    let st = unsafe { &mut *THREADS.get_ptr_mut(&tid)? };
    st.tgid = tgid;
    st.group = group;
    st.comm = comm();
    Some(st)
}

/// Counts a length (ns) in a histogram map's entry `index` (srvprof_common::hist slots): a
/// group's, or the only one.
#[inline(always)]
pub fn record(hist_map: &PerCpuArray<HistSlots>, index: u32, value_ns: u64) {
    let slot = (hist::slot_of(value_ns) & (hist::SLOTS - 1)) as usize;
    if let Some(h) = hist_map.get_ptr_mut(index) {
        if let Some(n) = unsafe { (*h).slots.get_mut(slot) } {
            *n += 1;
        }
    }
}
