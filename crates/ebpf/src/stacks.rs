//! On-CPU stacks (cpu-clock samples) and off-CPU stacks (time from switch-out to switch-in, as
//! bcc's offcputime, by the scheduler's clock as in sched.rs), counted in the kernel by (process,
//! thread name, user stack, kernel stack).

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map, perf_event},
    maps::{HashMap, StackTrace},
    programs::{BtfTracePointContext, PerfEventContext, tracing::StackIdContext},
};
use srvprof_common::{
    MAX_STACK_KEYS, MAX_STACK_TRACES, MAX_THREADS, StackKey, USER_STACK_MISS_LIMIT,
    USER_STACK_RETRY_EVERY, lost,
};

use crate::target::{THREADS, count_lost, current_comm, group_of, task_exec_runtime};

/// get_stackid's error when the stack's bucket holds another stack (the map is too full).
const EEXIST: i32 = 17;
/// get_stackid's error when the walk found no frame.
const EFAULT: i32 = 14;

#[inline(always)]
fn stack_id(result: Result<i64, i32>) -> i32 {
    match result {
        Ok(id) => id as i32,
        Err(e) => {
            if e == -EEXIST {
                count_lost(lost::STACK_TRACES_FULL);
            }
            -1
        }
    }
}

/// stack id -> frames (instruction pointers, leaf first), kernel and user stacks alike.
#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(MAX_STACK_TRACES, 0);

/// Samples per stack key.
#[map]
static ONCPU_STACKS: HashMap<StackKey, u64> = HashMap::with_max_entries(MAX_STACK_KEYS, 0);

/// Off-CPU nanoseconds per stack key.
#[map]
static OFFCPU_STACKS: HashMap<StackKey, u64> = HashMap::with_max_entries(MAX_STACK_KEYS, 0);

/// An off-CPU period that began: when a watched thread switched out, the scheduler's on-CPU total
/// for it then, and its stacks. Only this file reads it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OffcpuPeriod {
    pub start_ns: u64,
    pub exec_ns: u64,
    pub key: StackKey,
}

/// tid -> the off-CPU period a watched thread began at its last switch-out.
#[map]
static OFFCPU_START: HashMap<u32, OffcpuPeriod> = HashMap::with_max_entries(MAX_THREADS, 0);

/// task_struct's __state of a task that ran its last time (do_task_dead).
const TASK_DEAD: u64 = 0x80;

/// The current task's stacks; the current task is the one sampled or switching out.
#[inline(always)]
fn current_stack_key<C: StackIdContext>(ctx: &C, tgid: u32, group: u32) -> StackKey {
    let user = ctx.get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64);
    stack_key(ctx, tgid, group, user)
}

#[inline(always)]
fn stack_key<C: StackIdContext>(
    ctx: &C,
    tgid: u32,
    group: u32,
    user: Result<i64, i32>,
) -> StackKey {
    let kernel = ctx.get_stackid(&STACK_TRACES, 0);
    StackKey {
        tgid,
        group,
        user_stack_id: stack_id(user),
        kernel_stack_id: stack_id(kernel),
        comm: current_comm(),
    }
}

#[inline(always)]
fn add(map: &HashMap<StackKey, u64>, key: &StackKey, n: u64) {
    if let Some(v) = map.get_ptr_mut(key) {
        // Not atomic (bpfel-unknown-none has no atomic RMW in core): two CPUs adding to the
        // same key in the same instant may lose one addition, a rare and small undercount.
        unsafe { *v += n };
        return;
    }
    if map.insert(key, &n, BPF_NOEXIST as u64).is_err() {
        // Another CPU inserted it first, or the map is full: then this is dropped, and counted.
        match map.get_ptr_mut(key) {
            Some(v) => unsafe { *v += n },
            None => count_lost(lost::STACK_KEYS_FULL),
        }
    }
}

/// The switching-out thread's user stack, unless its walks keep failing: then one walk
/// in USER_STACK_RETRY_EVERY, so a binary without frame pointers does not pay a failed walk
/// (~2 us, a fault on the first frame) at every switch-out, and one that starts to have frames
/// (a JIT warming up) is noticed.
#[inline(always)]
fn user_stack(ctx: &BtfTracePointContext, tid: u32, tgid: u32) -> Result<i64, i32> {
    let st = THREADS
        .get_ptr_mut(&tid)
        .map(|st| unsafe { &mut *st })
        .filter(|st| st.tgid == tgid);
    let Some(st) = st else {
        return ctx.get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64);
    };
    let misses = st.user_stack_misses;
    if misses >= USER_STACK_MISS_LIMIT && misses % USER_STACK_RETRY_EVERY != 0 {
        st.user_stack_misses = misses + 1;
        return Err(-EFAULT);
    }
    let user = ctx.get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64);
    // A collision (EEXIST: the bucket holds another stack) counts as a miss too: a walk through
    // garbage frames gives a new stack every time, so those fill the map and collide, and the
    // sample shows no user frames either way.
    st.user_stack_misses = if user.is_ok() { 0 } else { misses + 1 };
    user
}

/// The software cpu-clock event fired on this CPU: count the running thread's stacks if watched.
#[perf_event]
pub fn oncpu_sample(ctx: PerfEventContext) -> u32 {
    let tgid = ctx.tgid();
    if ctx.pid() == 0 {
        return 0;
    }
    if let Some(group) = group_of(tgid) {
        let key = current_stack_key(&ctx, tgid, group);
        add(&ONCPU_STACKS, &key, 1);
    }
    0
}

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state):
/// a second program on the tracepoint, so sched.rs's accounting stays as it is.
///
/// Only switch-outs of watched threads matter: the period a thread began at its last switch-out
/// is charged to that switch-out's stacks now, at its next one, as the wall time between the two
/// minus the time it ran in between (sum_exec_runtime, updated by the scheduler just before the
/// tracepoint). That is its time from switch-out to switch-in by the scheduler's clock, whatever
/// other programs on the tracepoint cost before this one reads the time (see sched.rs).
#[btf_tracepoint(function = "sched_switch")]
pub fn offcpu_switch(ctx: BtfTracePointContext) -> i32 {
    let now = unsafe { bpf_ktime_get_ns() };
    let prev_tid = ctx.pid();
    let prev_tgid = ctx.tgid();
    if prev_tid == 0 {
        return 0;
    }
    let Some(group) = group_of(prev_tgid) else {
        return 0;
    };
    let prev: *const u8 = ctx.arg(1);
    let exec = task_exec_runtime(prev).unwrap_or(0);
    if let Some(period) = unsafe { OFFCPU_START.get(&prev_tid) } {
        let period = *period;
        // The same thread (a tid reused by another process began no period of its own).
        if period.key.tgid == prev_tgid && exec != 0 && period.exec_ns != 0 {
            let ran = exec.saturating_sub(period.exec_ns);
            let off = now.saturating_sub(period.start_ns).saturating_sub(ran);
            add(&OFFCPU_STACKS, &period.key, off);
        }
    }
    let prev_state: u64 = ctx.arg(3);
    if prev_state & TASK_DEAD != 0 {
        // Its last switch-out: no period begins.
        let _ = OFFCPU_START.remove(&prev_tid);
        return 0;
    }
    let period = OffcpuPeriod {
        start_ns: now,
        exec_ns: exec,
        key: stack_key(
            &ctx,
            prev_tgid,
            group,
            user_stack(&ctx, prev_tid, prev_tgid),
        ),
    };
    if OFFCPU_START.insert(&prev_tid, &period, 0).is_err() {
        count_lost(lost::OFFCPU_START_FULL);
    }
    0
}
