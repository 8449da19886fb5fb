//! On-CPU stacks (cpu-clock samples) and off-CPU stacks (time from switch-out to switch-in, as
//! bcc's offcputime, by the scheduler's clock as in sched.rs), counted in the kernel by (process,
//! thread name, user stack, kernel stack).
//!
//! On-CPU samples also go to user space one by one, each with the thread's user registers and a
//! copy of the top of its user stack, to be unwound there from the binary's CFI (most
//! distribution binaries have no frame pointers, so the kernel's walk stops at the leaf); the
//! kernel's count is then only their fallback, used when the ring is full. A sample carries its
//! kernel stack's frames too; the kernel's counts keep theirs in STACK_TRACES, whose buckets
//! collide as distinct stacks pile up.

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST, BPF_RB_NO_WAKEUP, pt_regs},
    helpers::{
        bpf_get_current_task_btf, bpf_get_prandom_u32, bpf_ktime_get_ns, bpf_probe_read_kernel,
        bpf_task_pt_regs,
        generated::{bpf_get_stack, bpf_probe_read_user},
    },
    macros::{btf_tracepoint, map, perf_event},
    maps::{HashMap, PerCpuArray, RingBuf, StackTrace},
    programs::{BtfTracePointContext, PerfEventContext, tracing::StackIdContext},
};
use srvprof_common::{
    MAX_STACK_DEPTH, MAX_STACK_KEYS, MAX_STACK_TRACES, MAX_THREADS, OFFCPU_RATE_WINDOW_NS,
    OFFCPU_UNWIND_FIRST_EVERY, OFFCPU_UNWIND_PER_S, OffcpuTime, STACK_ID_COLLIDED, StackCopyHint,
    StackKey, TickGrid, USER_STACK_BYTES, USER_STACK_MISS_LIMIT, USER_STACK_RETRY_EVERY,
    USER_STACK_RING_BYTES, UserStackSample, lost,
};

use crate::regs::current_syscall_slot;
use crate::target::{
    THREADS, count_lost, count_lost_n, current_comm, global, read_field, stacks_group_of,
    task_exec_runtime,
};

/// get_stackid's error when the stack's bucket holds another stack (the map is too full).
const EEXIST: i32 = 17;
/// get_stackid's error when the walk found no frame.
const EFAULT: i32 = 14;

#[inline(always)]
fn stack_id(result: Result<i64, i32>) -> i32 {
    match result {
        Ok(id) => id as i32,
        Err(e) if e == -EEXIST => {
            count_lost(lost::STACK_TRACES_FULL);
            STACK_ID_COLLIDED
        }
        Err(_) => -1,
    }
}

/// stack id -> frames (instruction pointers, leaf first), kernel and user stacks alike.
#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(MAX_STACK_TRACES, 0);

/// On-CPU samples of watched threads with their registers and stack copies (UserStackSample).
#[map]
static USER_STACK_SAMPLES: RingBuf = RingBuf::with_byte_size(USER_STACK_RING_BYTES, 0);

/// tid -> how much of its stack is worth copying: what its unwound stacks have needed so far,
/// set by user space (absent: USER_STACK_BYTES). Copying costs ~0.3 us per KiB here, in the
/// interrupt the sample is taken in.
#[map]
static STACK_COPY_HINTS: HashMap<u32, StackCopyHint> = HashMap::with_max_entries(MAX_THREADS, 0);

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
    /// Nonzero when this period's stacks were sent for unwinding: its id (UserStackSample.seq).
    pub seq: u64,
    /// The thread's switch rate: periods begun since `rate_since_ns`, and the 1 in N periods
    /// drawn that the last rate window set (this period was drawn with it: its weight).
    pub rate_since_ns: u64,
    pub rate_count: u64,
    pub every: u64,
}

/// tid -> the off-CPU period a watched thread began at its last switch-out.
#[map]
static OFFCPU_START: HashMap<u32, OffcpuPeriod> = HashMap::with_max_entries(MAX_THREADS, 0);

/// task_struct's __state of a task that ran its last time (do_task_dead).
const TASK_DEAD: u64 = 0x80;

/// The key of the task switching out (the current one) with its kernel stack; its user stack
/// is unwound in user space, or walked here only when the ring has no room (the caller sets
/// user_stack_id).
#[inline(always)]
fn stack_key<C: StackIdContext>(ctx: &C, tgid: u32, group: u32, syscall: u32) -> StackKey {
    StackKey {
        tgid,
        group,
        user_stack_id: -1,
        kernel_stack_id: stack_id(ctx.get_stackid(&STACK_TRACES, 0)),
        comm: current_comm(),
        syscall,
        _pad: 0,
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

/// Per CPU: the sampler's last tick accounted for (TickGrid).
#[map]
static TICK_GRID: PerCpuArray<TickGrid> = PerCpuArray::with_max_entries(1, 0);

// Set by userspace before loading: the sampler's period, and where a perf_event program's
// context keeps the event and the event its timer's due time (from the kernel's BTF).
#[unsafe(no_mangle)]
static SAMPLE_PERIOD_NS: u64 = 0;
#[unsafe(no_mangle)]
static PERF_CTX_EVENT_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static PERF_EVENT_EXPIRES_OFFSET: u64 = 0;

/// When the tick being delivered was due: the cpu-clock timer's expiry, which the kernel moves
/// on only after the program ran (perf_swevent_hrtimer), and its event. None when it cannot be
/// read.
#[inline(always)]
fn tick_due(ctx: &PerfEventContext) -> Option<(u64, u64)> {
    let event: u64 = read_field(ctx.as_ptr() as *const u8, global(&PERF_CTX_EVENT_OFFSET))?;
    Some((event_due(event)?, event))
}

/// The cpu-clock timer's next expiry, from its event.
#[inline(always)]
fn event_due(event: u64) -> Option<u64> {
    if event == 0 {
        return None;
    }
    let due: i64 = read_field(event as *const u8, global(&PERF_EVENT_EXPIRES_OFFSET))?;
    (due > 0).then_some(due as u64)
}

/// Whether a tick due at `due` is a new one after the last accounted for at `last`. Not when it
/// is that one, or the catch-up of a timer stopped and restarted past its expiry (another
/// profiler's control-group events switching at each context switch do that): restarted 10 µs
/// out (perf_swevent_start_hrtimer), it fires again for the tick a switch already took.
#[inline(always)]
fn next_on_grid(due: u64, last: u64, period: u64) -> bool {
    due > last && (last == 0 || due - last >= period / 2)
}

/// The software cpu-clock event fired on this CPU: a watched thread's sample goes to user space
/// with its registers and stack copy, or, when the ring is full, is counted here by its stacks.
/// A tick a switch already took (it was due before the switch) is not the current thread's.
#[perf_event]
pub fn oncpu_sample(ctx: PerfEventContext) -> u32 {
    let tgid = ctx.tgid();
    let watched = if ctx.pid() == 0 {
        None
    } else {
        stacks_group_of(tgid)
    };
    let now = unsafe { bpf_ktime_get_ns() };
    let mut time_ns = now;
    if let (Some((due, event)), Some(grid)) = (tick_due(&ctx), TICK_GRID.get_ptr_mut(0)) {
        let grid = unsafe { &mut *grid };
        grid.event = event;
        let period = global(&SAMPLE_PERIOD_NS);
        let last = grid.last_tick_ns;
        if last != 0 && due > last && (due - last).checked_rem(period).unwrap_or(0) != 0 {
            count_lost(lost::ONCPU_TIMER_RESTARTED);
        }
        if !next_on_grid(due, grid.last_tick_ns, period) {
            if watched.is_some() {
                count_lost(lost::ONCPU_TICK_NOT_THEIRS);
            }
            grid.last_tick_ns = grid.last_tick_ns.max(due);
            return 0;
        }
        if watched.is_some() && grid.last_tick_ns != 0 && period != 0 {
            // Ticks between the last one and this: the timer overran them (held off a period or
            // more); after the last switch they were the current thread's.
            let ticks = (due - grid.last_tick_ns).checked_div(period).unwrap_or(1);
            count_lost_n(lost::ONCPU_TICKS_SKIPPED, ticks.saturating_sub(1));
        }
        grid.last_tick_ns = due;
        time_ns = due;
    }
    if let Some(group) = watched {
        take_sample(&ctx, tgid, group, ctx.pid(), time_ns);
    }
    0
}

/// An on-CPU sample of the current thread: to user space with its registers and stack copy, or,
/// when the ring is full, counted here by its stacks.
#[inline(always)]
fn take_sample<C: StackIdContext + EbpfContext>(
    ctx: &C,
    tgid: u32,
    group: u32,
    tid: u32,
    time_ns: u64,
) {
    // The sample carries its kernel stack's frames. Only a sample the ring has no room for
    // is counted here, under stack ids: the kernel's frame-pointer walk of the user stack
    // (through a binary without frame pointers it faults and costs microseconds).
    let key = StackKey {
        tgid,
        group,
        user_stack_id: -1,
        kernel_stack_id: -1,
        comm: current_comm(),
        syscall: 0,
        _pad: 0,
    };
    if !send_user_stack(ctx.as_ptr(), &key, tid, 0, time_ns) {
        count_lost(lost::USER_STACK_RING_FULL);
        // By group, as the measured span's samples of each take these from the window's count.
        count_lost(lost::oncpu_untimed(group));
        let key = StackKey {
            kernel_stack_id: stack_id(ctx.get_stackid(&STACK_TRACES, 0)),
            user_stack_id: stack_id(ctx.get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64)),
            ..key
        };
        add(&ONCPU_STACKS, &key, 1);
    }
}

/// At a switch on this CPU: a tick due since the last one accounted for (the timer's expiry has
/// passed), whose interrupt has not arrived (interrupts are off here), fell while the thread
/// switching out ran. It is taken now for that thread when watched, and marked taken either way.
#[inline(always)]
fn take_due_tick(ctx: &BtfTracePointContext, now: u64) {
    let period = global(&SAMPLE_PERIOD_NS);
    let Some(grid) = TICK_GRID.get_ptr_mut(0) else {
        return;
    };
    let grid = unsafe { &mut *grid };
    if period == 0 || grid.last_tick_ns == 0 {
        return;
    }
    // The timer's own expiry, not the grid's next step: a stopped and restarted timer (another
    // profiler's control-group events switching) has moved on from the grid.
    let Some(due) = event_due(grid.event) else {
        return;
    };
    if due > now {
        return;
    }
    if !next_on_grid(due, grid.last_tick_ns, period) {
        grid.last_tick_ns = grid.last_tick_ns.max(due);
        return;
    }
    let behind = (due - grid.last_tick_ns)
        .checked_div(period)
        .unwrap_or(1)
        .max(1);
    grid.last_tick_ns = due;
    let tid = ctx.pid();
    if tid == 0 {
        return;
    }
    let tgid = ctx.tgid();
    if let Some(group) = stacks_group_of(tgid) {
        count_lost(lost::ONCPU_TICK_AT_SWITCH);
        count_lost_n(lost::ONCPU_TICKS_SKIPPED, behind.saturating_sub(1));
        take_sample(ctx, tgid, group, tid, due);
    }
}

const PAGE: u64 = 4096;
/// Pages in a row that do not read, and are copied as zeros, before the copy ends.
const STACK_HOLE_PAGES: u64 = 4;

/// Bytes of `tid`'s stack to copy from `sp` up: its hint's, or to its stack's known end when `sp`
/// is below that (at least a word).
#[inline(always)]
fn copy_limit(tid: u32, sp: u64) -> u64 {
    let Some(hint) = (unsafe { STACK_COPY_HINTS.get(&tid) }) else {
        return USER_STACK_BYTES as u64;
    };
    let mut limit = hint.bytes as u64;
    if hint.end > sp && hint.end - sp < limit {
        limit = hint.end - sp;
    }
    limit.clamp(8, USER_STACK_BYTES as u64)
}

/// Sends the sample with the current thread's user registers and the top of its user stack.
/// The registers are the ones the kernel saved when the thread entered it (the interrupt that
/// sampled it, or the syscall it is in), so they are its user registers either way. The stack
/// is copied page by page from sp up: a read fails only on an unmapped page, so the copy stops
/// at the stack's end, not a page before it, where the outermost frames (main, start_thread) are.
#[inline(always)]
fn send_user_stack(
    ctx: *mut core::ffi::c_void,
    key: &StackKey,
    tid: u32,
    seq: u64,
    time_ns: u64,
) -> bool {
    let Some(mut entry) = USER_STACK_SAMPLES.reserve::<UserStackSample>(0) else {
        return false;
    };
    let sample = entry.as_mut_ptr();
    // The kernel stack walked straight into the sample, never a STACK_TRACES bucket another
    // stack may hold. Bytes written, or a negative error (none: a sample in user mode).
    let frames = unsafe { (*sample).kernel.as_mut_ptr() };
    let n = unsafe { bpf_get_stack(ctx, frames.cast(), (MAX_STACK_DEPTH * 8) as u32, 0) };
    unsafe { (*sample).kernel_len = if n > 0 { (n as u64 / 8) as u32 } else { 0 } };
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    let reg = |p: *const u64| unsafe { bpf_probe_read_kernel(p) }.unwrap_or(0);
    let (ip, sp, bp) = if regs.is_null() {
        (0, 0, 0)
    } else {
        unsafe {
            (
                reg(&raw const (*regs).rip),
                reg(&raw const (*regs).rsp),
                reg(&raw const (*regs).rbp),
            )
        }
    };
    unsafe {
        (*sample).key = *key;
        (*sample).tid = tid;
        (*sample).ip = ip;
        (*sample).sp = sp;
        (*sample).bp = bp;
        (*sample).seq = seq;
        (*sample).time_ns = time_ns;
    }
    let stack = unsafe { (*sample).stack.as_mut_ptr() };
    let limit = copy_limit(tid, sp);
    // The rest of sp's page, then whole pages while they read, are wanted, and fit, up to the
    // limit (rounded up to a page). A page that does not read is either past the stack's end or one
    // the thread never touched (the far part of a large local buffer, `char buf[8192]` of which a
    // request fills the first bytes): not resident, and this read may not fault it in. The
    // helper zeroes it; the copy goes on over up to STACK_HOLE_PAGES such pages in a row, so the
    // frames above the buffer (the thread's start) are still copied, and ends where they do not
    // read either.
    let first = PAGE - (sp & (PAGE - 1));
    let mut len: u64 = 0;
    if sp != 0 && unsafe { bpf_probe_read_user(stack.cast(), first as u32, sp as *const _) } == 0 {
        len = first;
        let mut hole: u64 = 0;
        for _ in 0..(USER_STACK_BYTES as u64 / PAGE) {
            // len <= USER_STACK_BYTES - PAGE + first - ..., kept provably in bounds:
            if len > USER_STACK_BYTES as u64 - PAGE || len >= limit {
                break;
            }
            let dst = unsafe { stack.add(len as usize) };
            if unsafe { bpf_probe_read_user(dst.cast(), PAGE as u32, (sp + len) as *const _) } != 0
            {
                hole += 1;
                if hole > STACK_HOLE_PAGES {
                    break;
                }
            } else {
                hole = 0;
            }
            len += PAGE;
        }
        // Not the pages that did not read at the end (the one that ended the copy was not added).
        len -= hole.min(STACK_HOLE_PAGES) * PAGE;
    }
    unsafe { (*sample).stack_len = len as u32 };
    // No wakeup: user space polls the ring every 20 ms, and a wakeup from here is an irq_work
    // self-interrupt, microseconds on a VM.
    entry.submit(BPF_RB_NO_WAKEUP as u64);
    true
}

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state):
/// a second program on the tracepoint, so sched.rs's accounting stays as it is.
///
/// Only switch-outs of watched threads matter: the period a thread began at its last switch-out
/// is charged to that switch-out's key now, at its next one (its stacks if it was drawn, its
/// thread name alone if not), as the wall time between the two
/// minus the time it ran in between (sum_exec_runtime, updated by the scheduler just before the
/// tracepoint). That is its time from switch-out to switch-in by the scheduler's clock, whatever
/// other programs on the tracepoint cost before this one reads the time (see sched.rs).
#[btf_tracepoint(function = "sched_switch")]
pub fn offcpu_switch(ctx: BtfTracePointContext) -> i32 {
    let now = unsafe { bpf_ktime_get_ns() };
    take_due_tick(&ctx, now);
    let prev_tid = ctx.pid();
    let prev_tgid = ctx.tgid();
    if prev_tid == 0 {
        return 0;
    }
    let Some(group) = stacks_group_of(prev_tgid) else {
        return 0;
    };
    let prev: *const u8 = ctx.arg(1);
    let exec = task_exec_runtime(prev).unwrap_or(0);
    let (mut rate_since_ns, mut rate_count, mut every) = (now, 0, OFFCPU_UNWIND_FIRST_EVERY);
    if let Some(period) = unsafe { OFFCPU_START.get(&prev_tid) } {
        let period = *period;
        // The same thread (a tid reused by another process began no period of its own).
        if period.key.tgid == prev_tgid && exec != 0 && period.exec_ns != 0 {
            let ran = exec.saturating_sub(period.exec_ns);
            let off = now.saturating_sub(period.start_ns).saturating_sub(ran);
            add(&OFFCPU_STACKS, &period.key, off);
            if period.seq != 0 {
                let time = OffcpuTime {
                    seq: period.seq,
                    off_ns: off,
                    // The 1 in `every` it was drawn with.
                    weight: period.every,
                    end_ns: now,
                };
                if USER_STACK_SAMPLES
                    .output::<OffcpuTime>(&time, BPF_RB_NO_WAKEUP as u64)
                    .is_err()
                {
                    count_lost(lost::USER_STACK_RING_FULL);
                }
            }
        }
        if period.key.tgid == prev_tgid {
            (rate_since_ns, rate_count, every) =
                (period.rate_since_ns, period.rate_count, period.every);
        }
    }
    let prev_state: u64 = ctx.arg(3);
    if prev_state & TASK_DEAD != 0 {
        // Its last switch-out: no period begins.
        let _ = OFFCPU_START.remove(&prev_tid);
        return 0;
    }
    // A draw of the periods, 1 in `every` (set from the thread's recent switch rate: see
    // OFFCPU_UNWIND_PER_S), gets its stacks: the kernel's, and a copy of the user stack sent
    // to be unwound from CFI. The rest are timed under the thread's name alone, without the
    // stack walks (microseconds each) at every switch-out; user space shares each thread
    // name's exact total among the drawn periods' stacks.
    rate_count += 1;
    let span = now.saturating_sub(rate_since_ns);
    if span >= OFFCPU_RATE_WINDOW_NS {
        // checked_: a plain `/` or `%` brings a divide-by-zero panic path BPF cannot link;
        // wrapping_mul, as saturating_mul needs a 128-bit helper (switches in 20 ms stay far
        // below 2^64 / 1e9).
        let per_s = rate_count
            .wrapping_mul(1_000_000_000)
            .checked_div(span)
            .unwrap_or(0);
        every = (per_s / OFFCPU_UNWIND_PER_S).max(1);
        (rate_since_ns, rate_count) = (now, 0);
    }
    let drawn = every <= 1
        || u64::from(unsafe { bpf_get_prandom_u32() })
            .checked_rem(every)
            .unwrap_or(0)
            == 0;
    let mut seq = 0;
    let syscall = current_syscall_slot() as u32;
    let key = if drawn {
        let mut key = stack_key(&ctx, prev_tgid, group, syscall);
        let id = (u64::from(prev_tid) << 40) | (now & ((1 << 40) - 1));
        if send_user_stack(ctx.as_ptr(), &key, prev_tid, id, now) {
            seq = id;
        } else {
            // No room in the ring: the kernel's frame-pointer walk of the user stack instead.
            count_lost(lost::USER_STACK_RING_FULL);
            key.user_stack_id = stack_id(user_stack(&ctx, prev_tid, prev_tgid));
        }
        key
    } else {
        StackKey {
            tgid: prev_tgid,
            group,
            user_stack_id: -1,
            kernel_stack_id: -1,
            comm: current_comm(),
            syscall,
            _pad: 0,
        }
    };
    let period = OffcpuPeriod {
        start_ns: now,
        exec_ns: exec,
        key,
        seq,
        rate_since_ns,
        rate_count,
        every,
    };
    if OFFCPU_START.insert(&prev_tid, &period, 0).is_err() {
        count_lost(lost::OFFCPU_START_FULL);
    }
    0
}
