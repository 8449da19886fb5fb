//! Which processes are watched, and reading task_struct fields at offsets userspace found in BTF.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_probe_read_kernel, bpf_probe_read_kernel_buf},
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use srvprof_common::{MAX_TARGET_PROCESSES, MAX_THREADS, ThreadStats, lost};

/// tgid -> group (server or client). Children forked by a watched process join its group.
#[map]
pub static TARGET_TGIDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TARGET_PROCESSES, 0);

/// tid -> cumulative figures for every watched thread.
#[map]
pub static THREADS: HashMap<u32, ThreadStats> = HashMap::with_max_entries(MAX_THREADS, 0);

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

/// The group of a watched process, or None when it is not watched.
#[inline(always)]
pub fn group_of(tgid: u32) -> Option<u32> {
    unsafe { TARGET_TGIDS.get(&tgid).copied() }
}

#[inline(always)]
pub fn count_lost(reason: u32) {
    if let Some(n) = LOST_EVENTS.get_ptr_mut(reason) {
        unsafe { *n += 1 };
    }
}

/// The stats of a watched thread, created on first sight.
#[inline(always)]
pub fn thread_stats(
    tid: u32,
    tgid: u32,
    group: u32,
    comm: [u8; 16],
) -> Option<&'static mut ThreadStats> {
    if let Some(st) = THREADS.get_ptr_mut(&tid) {
        return Some(unsafe { &mut *st });
    }
    let fresh = ThreadStats {
        tgid,
        group,
        comm,
        ..ThreadStats::default()
    };
    if THREADS.insert(&tid, &fresh, 0).is_err() {
        count_lost(lost::THREADS_MAP_FULL);
        return None;
    }
    THREADS.get_ptr_mut(&tid).map(|st| unsafe { &mut *st })
}
