//! Context switches, on/off-CPU time, run-queue latency, migrations; following forks.

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel_str_bytes, bpf_probe_read_user,
    },
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};
use aya_ebpf::{bindings::BPF_NOEXIST, maps::HashMap};
use srvprof_common::{
    BlockedTable, CountTime, DiskWaitKey, FUTEX_SLOT, GROUP_SERVER, HOLDER_BEFORE, HistSlots,
    HolderKey, HolderWait, LOCK_CONVOY_NS, LockWait, LockWaitKey, MAX_DISK_WAITS, MAX_LOCK_WAITS,
    MAX_RUNQ_HOLDERS, MAX_WAKE_PAIRS, NUM_GROUPS, RunningSlot, Sleep, SocketArg, ThreadStats,
    WakeCount, WakeKey, datagram_wait, futex_lock_protocol, lost, socket_arg,
};

use crate::regs::{current_syscall_args, current_syscall_fd, current_syscall_slot};
use crate::target::{
    count_lost, current_comm, group_of, record, task_comm, task_exec_runtime, task_ids, watch,
    watched_thread,
};

/// [group] -> its watched threads' context switches: a sampled window's edges read them from one
/// slot, not by walking every bucket of THREADS (a few hundred microseconds of the reading CPU).
#[map]
static GROUP_SWITCHES: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// [group] -> its watched threads' time on a CPU, added at each switch-out; with RUNNING, a
/// sampled window's edges read the group's on-CPU time without a file per thread in /proc.
#[map]
static GROUP_ONCPU: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// Per CPU: the watched thread running there and since when (its slice so far is not in
/// GROUP_ONCPU yet).
#[map]
static RUNNING: PerCpuArray<RunningSlot> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn add_group_oncpu(group: u32, ns: u64) {
    if let Some(n) = GROUP_ONCPU.get_ptr_mut(group) {
        unsafe { *n += ns };
    }
}

/// [group].by_nr[nr] -> voluntary off-CPU periods inside syscall nr, and their time.
#[map]
static BLOCKED_SYSCALLS: PerCpuArray<BlockedTable> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// Adds to `key`'s value in `map` with `add`, or inserts `first()` for a new key (made only
/// then: it may call helpers); `full` counts a new key that found the map full. Another CPU may
/// insert the same key first: then it adds.
#[inline(always)]
fn add_or_insert<K, V>(
    map: &HashMap<K, V>,
    key: &K,
    first: impl Fn() -> V,
    add: impl Fn(&mut V),
    full: u32,
) {
    if let Some(v) = map.get_ptr_mut(key) {
        add(unsafe { &mut *v });
        return;
    }
    if map.insert(key, &first(), BPF_NOEXIST as u64).is_err() {
        match map.get_ptr_mut(key) {
            Some(v) => add(unsafe { &mut *v }),
            None => count_lost(full),
        }
    }
}

/// (process, syscall, fd) -> its watched threads' uninterruptible sleeps and their time.
#[map]
static DISK_WAITS: HashMap<DiskWaitKey, CountTime> = HashMap::with_max_entries(MAX_DISK_WAITS, 0);

#[inline(always)]
fn add_disk_wait(key: &DiskWaitKey, ns: u64) {
    let first = || CountTime {
        count: 1,
        total_ns: ns,
    };
    let add = |c: &mut CountTime| {
        c.count += 1;
        c.total_ns += ns;
    };
    add_or_insert(&DISK_WAITS, key, first, add, lost::DISK_WAITS_MAP_FULL);
}

/// (process, futex word, waiter, holder) -> the waiter's futex waits charged to the holder.
#[map]
static LOCK_WAITS: HashMap<LockWaitKey, LockWait> = HashMap::with_max_entries(MAX_LOCK_WAITS, 0);

/// A watched thread switching in after a futex wait it was woken from: the wait is charged to
/// the thread set as its holder when it was woken, which becomes its lock_root.
#[inline(always)]
fn end_futex_wait(st: &mut ThreadStats, tid: u32, now: u64) {
    if st.futex_uaddr == 0 {
        return;
    }
    if st.futex_holder != 0 && st.last_switch_out_ns != 0 {
        let waited = now.saturating_sub(st.last_switch_out_ns);
        let key = LockWaitKey {
            tgid: st.tgid,
            group: st.group,
            uaddr: st.futex_uaddr,
            waiter_tid: tid,
            holder_tid: st.futex_holder,
            lock_protocol: st.futex_lock,
            _pad: 0,
        };
        let holder_tgid = st.futex_holder_tgid;
        let sleep = st.futex_holder_sleep;
        let slept = sleep.overlap(st.last_switch_out_ns, now);
        let slept_nr = if slept > 0 { sleep.nr_slot } else { 0 };
        let first = || LockWait {
            waits: 1,
            wait_ns: waited,
            holder_tgid,
            holder_slept_nr: slept_nr,
            holder_slept_ns: slept,
        };
        let add = |w: &mut LockWait| {
            w.waits += 1;
            w.wait_ns += waited;
            if slept > 0 {
                w.holder_slept_ns += slept;
                w.holder_slept_nr = slept_nr;
            }
        };
        add_or_insert(&LOCK_WAITS, &key, first, add, lost::LOCK_WAITS_MAP_FULL);
        st.lock_root = st.futex_holder;
        st.lock_root_tgid = st.futex_holder_tgid;
        st.lock_root_since_ns = now;
        st.lock_root_runq_ns = st.runq_ns;
        st.lock_root_sleep = sleep;
    }
    st.futex_uaddr = 0;
    st.futex_holder = 0;
}

/// task_struct's __state bits: asleep and not to be woken by signals, and not counted in the
/// load average (TASK_IDLE: a kernel thread's idle wait, not a wait for a disk).
const TASK_UNINTERRUPTIBLE: u64 = 0x2;
const TASK_NOLOAD: u64 = 0x400;

/// (waker, woken watched thread) -> wakeups.
#[map]
static WAKEUPS: HashMap<WakeKey, WakeCount> = HashMap::with_max_entries(MAX_WAKE_PAIRS, 0);

/// (task holding the CPU when a watched thread's wait for it ended, the thread's group) -> waits.
#[map]
static RUNQ_HOLDERS: HashMap<HolderKey, HolderWait> =
    HashMap::with_max_entries(MAX_RUNQ_HOLDERS, 0);

/// A watched thread of `group` waited `waited` ns for the CPU that the current task (the one
/// switching out for it) gives up now, after holding it since `slice_start`: that task is
/// charged the part of the wait it ran for, and HOLDER_BEFORE the rest (a quota's throttle that
/// ends while a neighbour runs is not the neighbour's).
#[inline(always)]
fn charge_holder(group: u32, waited: u64, now: u64, slice_start: u64) {
    let held = waited.min(now.saturating_sub(slice_start));
    let holder = bpf_get_current_pid_tgid();
    let (tid, tgid) = (holder as u32, (holder >> 32) as u32);
    charge(group, tid, tgid, held, current_comm);
    if held < waited {
        let earlier = || {
            let mut comm = [0u8; 16];
            comm[..7].copy_from_slice(b"earlier");
            comm
        };
        charge(group, HOLDER_BEFORE, HOLDER_BEFORE, waited - held, earlier);
    }
}

/// Adds `ns` of one wait to its holder's entry; its name is read only for a new entry.
#[inline(always)]
fn charge(
    group: u32,
    holder_tid: u32,
    holder_tgid: u32,
    ns: u64,
    holder_comm: impl Fn() -> [u8; 16],
) {
    let key = HolderKey { holder_tid, group };
    let first = || HolderWait {
        waits: 1,
        wait_ns: ns,
        holder_tgid,
        _pad: 0,
        holder_comm: holder_comm(),
    };
    let add = |w: &mut HolderWait| {
        w.waits += 1;
        w.wait_ns += ns;
    };
    add_or_insert(&RUNQ_HOLDERS, &key, first, add, lost::RUNQ_HOLDERS_MAP_FULL);
}

/// Per CPU: when the task now on it switched in, to tell how much of a wait it held the CPU for.
#[map]
static SLICE_START: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The thread's sleep in the syscall of `nr_slot` (its number plus one) ended after `off` ns
/// off the CPU: counted to that syscall.
#[inline(always)]
fn count_blocked(st: &mut ThreadStats, nr_slot: u64, off: u64) {
    st.syscalls_blocked += 1;
    st.syscall_blocked_ns += off;
    let nr = (nr_slot.wrapping_sub(1) & 0xffff) as usize;
    if let Some(table) = BLOCKED_SYSCALLS.get_ptr_mut(st.group) {
        if let Some(ct) = unsafe { (*table).by_nr.get_mut(nr) } {
            ct.count += 1;
            ct.total_ns += off;
        }
    }
}

/// Off-CPU periods (ns, by the scheduler's clock: see sched_switch), one histogram per group.
#[map]
static OFFCPU_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// Run-queue latency (runnable to on-CPU, ns), one histogram per group.
#[map]
static RUNQ_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// On-CPU runs (ns): a thread's CPU time from a wakeup to its next sleep, its preemptions
/// included, one histogram per group. A request served in one run waits as long as that run.
#[map]
static ONCPU_RUN_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// The same runs by the wall clock: their CPU time and their waits for a CPU after each
/// preemption, one histogram per group. A request served in one run waits this long.
#[map]
static RUN_WALL_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// Run-queue waits that began with a preemption (ns), one histogram per group: RUNQ_HIST less
/// these is the waits after a wakeup.
#[map]
static RUNQ_PREEMPTED_HIST: PerCpuArray<HistSlots> = PerCpuArray::with_max_entries(NUM_GROUPS, 0);

/// task_struct's __state of a task that ran its last time (do_task_dead).
const TASK_DEAD: u64 = 0x80;

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
///
/// On- and off-CPU time are the scheduler's own: the time between two switch-outs of a thread is
/// split with its sum_exec_runtime, which the scheduler updated just before this tracepoint. So
/// on-CPU time is what /proc/PID/task/TID/schedstat says, and off-CPU time is the wall time
/// between the switch-outs minus it: the period from a switch-out to the next switch-in, the
/// run-queue wait after the wakeup included, as bcc's offcputime counts it, in every state
/// (sleeping, blocked, preempted), with no minimum length. Timing each period by this program's
/// own clock readings instead (as before, and as offcputime does) made it depend on what else
/// runs on the tracepoint: programs run in the order they were attached, so those attached before
/// this one (another profiler's stack walks, say) run at every switch-out before it reads the
/// clock, and their time moved from off-CPU to on-CPU (up to 13 % of a loaded nginx worker's
/// off-CPU time with libbpf-tools' offcputime attached first). The time between two
/// switch-outs carries that delay at both ends, so it cancels. The thread's last period, still
/// running or still off-CPU, is added by userspace when it reads the map (probes/sched.rs).
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let now = unsafe { bpf_ktime_get_ns() };
    let preempt: u64 = ctx.arg(0);
    let next: *const u8 = ctx.arg(2);
    let prev_state: u64 = ctx.arg(3);
    // Whoever ran on this CPU is switching out: its slice goes to GROUP_ONCPU below if watched.
    if let Some(slot) = RUNNING.get_ptr_mut(0) {
        unsafe { (*slot).group_plus_one = 0 };
    }
    // The outgoing task's slice began at the last switch on this CPU; next's begins now.
    let slice_start = match SLICE_START.get_ptr_mut(0) {
        Some(at) => unsafe { core::mem::replace(&mut *at, now) },
        None => 0,
    };

    // prev is the current task: the tracepoint fires before the switch.
    if let Some(st) = crate::target::watched_thread_current() {
        // Its first switch-out since srvprof knows it (seen or seeded by userspace).
        let first_out = st.voluntary_switches + st.involuntary_switches == 0;
        // It ran since its last switch-out, but no sched_switch named it as next: the sleep in
        // a syscall that period began (if it did) ended unseen, and is counted here instead.
        let unseen_in = st.last_switch_in_ns == 0 && st.last_switch_out_ns != 0 && !first_out;
        let unseen_blocked_nr = if unseen_in { st.blocked_nr } else { 0 };
        // Preempted, or switched out while still TASK_RUNNING: the kernel counts that in nivcsw.
        let involuntary = (preempt & 0xff) != 0 || (prev_state & 0xffff_ffff) == 0;
        if involuntary {
            st.involuntary_switches += 1;
            st.runnable_since_ns = now;
            st.runnable_preempted = 1;
        } else {
            st.voluntary_switches += 1;
            // Going to sleep: a wakeup seen while it was still running is not a wait for a CPU.
            st.runnable_since_ns = 0;
            st.runnable_preempted = 0;
        }
        if let Some(n) = GROUP_SWITCHES.get_ptr_mut(st.group) {
            unsafe { *n += 1 };
        }
        // Asleep inside a syscall: its time until the switch-in is that syscall's (a preemption
        // is not: one at a syscall's return happens after the syscall tracepoints saw it end).
        st.blocked_nr = if involuntary {
            0
        } else {
            current_syscall_slot()
        };
        // The server's sleeps on one socket, which may be a dependency's (charged at the wake).
        let on_socket = st.group == GROUP_SERVER && socket_arg(st.blocked_nr, 1) != SocketArg::None;
        let args = if st.blocked_nr == FUTEX_SLOT || on_socket {
            current_syscall_args()
        } else {
            (0, 0, 0)
        };
        let (uaddr, op, val) = if st.blocked_nr == FUTEX_SLOT {
            args
        } else {
            (0, 0, 0)
        };
        let fd = match socket_arg(st.blocked_nr, args.1) {
            _ if !on_socket => None,
            SocketArg::Fd => Some(args.0),
            SocketArg::PollFd => unsafe { bpf_probe_read_user(args.0 as *const i32) }
                .ok()
                .map(|fd| fd as u64),
            SocketArg::None => None,
        };
        st.sleep_socket = match fd {
            Some(fd) if fd < u32::MAX as u64 => fd as u32 + 1,
            _ => 0,
        };
        st.sleep_datagram = u32::from(on_socket && datagram_wait(st.blocked_nr, args.1));
        st.futex_uaddr = uaddr;
        st.futex_lock = futex_lock_protocol(op, val) as u32;
        st.futex_holder = 0;
        if !involuntary {
            // Asleep: whatever lock it got from its last futex wait, it let go or waits again.
            st.lock_root = 0;
        }
        let uninterruptible =
            !involuntary && prev_state & TASK_UNINTERRUPTIBLE != 0 && prev_state & TASK_NOLOAD == 0;
        st.uninterruptible = uninterruptible as u32;
        st.blocked_fd = if uninterruptible {
            current_syscall_fd(st.blocked_nr)
        } else {
            -1
        };
        let prev: *const u8 = ctx.arg(1);
        let exec = task_exec_runtime(prev).unwrap_or(0);
        if st.last_switch_in_ns == 0 && st.last_switch_out_ns != 0 && !first_out {
            // It ran since its last switch-out, but no sched_switch named it as next.
            count_lost(lost::SWITCH_INS_UNSEEN);
        }
        if st.last_switch_in_ns != 0 {
            st.stamped_oncpu_ns += now.saturating_sub(st.last_switch_in_ns);
        }
        if exec != 0 && st.exec_at_switch_out_ns != 0 {
            let on = exec.saturating_sub(st.exec_at_switch_out_ns);
            st.oncpu_ns += on;
            st.run_ns += on;
            add_group_oncpu(st.group, on);
            if st.last_switch_out_ns != 0 {
                let off = now.saturating_sub(st.last_switch_out_ns).saturating_sub(on);
                st.offcpu_ns += off;
                record(&OFFCPU_HIST, st.group, off);
                if unseen_blocked_nr != 0 {
                    count_blocked(st, unseen_blocked_nr, off);
                }
            }
        } else if st.last_switch_in_ns != 0 {
            // No scheduler total to split with: this program's own clock readings.
            let on = now.saturating_sub(st.last_switch_in_ns);
            st.oncpu_ns += on;
            st.run_ns += on;
            add_group_oncpu(st.group, on);
            if st.last_switch_out_ns != 0 {
                let off = st.last_switch_in_ns.saturating_sub(st.last_switch_out_ns);
                st.offcpu_ns += off;
                record(&OFFCPU_HIST, st.group, off);
            }
        }
        if !involuntary {
            if st.run_ns != 0 {
                record(&ONCPU_RUN_HIST, st.group, st.run_ns);
                record(&RUN_WALL_HIST, st.group, st.run_ns + st.run_preempted_ns);
            }
            st.run_ns = 0;
            st.run_preempted_ns = 0;
        }
        st.last_switch_in_ns = 0;
        st.exec_at_switch_out_ns = exec;
        // A thread that exits switches out for the last time: no off-CPU time runs on after it.
        st.last_switch_out_ns = if prev_state & TASK_DEAD != 0 { 0 } else { now };
    }

    let Some((next_tid, next_tgid)) = task_ids(next) else {
        return 0;
    };
    if next_tid == 0 {
        return 0;
    }
    if let Some(st) = watched_thread(next_tid, next_tgid, || task_comm(next)) {
        if st.exec_at_switch_out_ns == 0 {
            // First seen switching in: its on-CPU time counts from here (the scheduler's total
            // is where its last, unseen, switch-out left it).
            st.exec_at_switch_out_ns = task_exec_runtime(next).unwrap_or(0);
        }
        if st.runnable_since_ns != 0 {
            let waited = now.saturating_sub(st.runnable_since_ns);
            st.runq_ns += waited;
            st.runq_count += 1;
            record(&RUNQ_HIST, st.group, waited);
            charge_holder(st.group, waited, now, slice_start);
            if st.runnable_preempted != 0 {
                st.runq_preempted_ns += waited;
                st.runq_preempted_count += 1;
                st.run_preempted_ns += waited;
                record(&RUNQ_PREEMPTED_HIST, st.group, waited);
            }
            st.runnable_since_ns = 0;
            st.runnable_preempted = 0;
        }
        end_futex_wait(st, next_tid, now);
        if st.uninterruptible != 0 {
            if st.last_switch_out_ns != 0 {
                let key = DiskWaitKey {
                    tgid: st.tgid,
                    group: st.group,
                    nr_slot: st.blocked_nr as u32,
                    fd: st.blocked_fd,
                };
                add_disk_wait(&key, now.saturating_sub(st.last_switch_out_ns));
            }
            st.uninterruptible = 0;
        }
        st.slept_nr = if st.last_switch_out_ns != 0 {
            st.blocked_nr as u32
        } else {
            0
        };
        if st.blocked_nr != 0 {
            if st.last_switch_out_ns != 0 {
                count_blocked(st, st.blocked_nr, now.saturating_sub(st.last_switch_out_ns));
            }
            st.blocked_nr = 0;
        }
        if st.sleep_socket != 0 {
            if st.last_switch_out_ns != 0 {
                let slept = now.saturating_sub(st.last_switch_out_ns);
                let fd = st.sleep_socket - 1;
                crate::tcp::socket_sleep_ended(st, next, fd, slept, st.sleep_datagram != 0);
            }
            st.sleep_socket = 0;
        }
        st.last_switch_in_ns = now;
        if let Some(slot) = RUNNING.get_ptr_mut(0) {
            unsafe {
                *slot = RunningSlot {
                    group_plus_one: u64::from(st.group) + 1,
                    since_ns: now,
                }
            };
        }
        let cpu = unsafe { bpf_get_smp_processor_id() };
        st.cpu_mask |= 1u64 << (cpu & 63);
    }
    0
}

#[inline(always)]
fn on_wakeup(ctx: &BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    let Some((tid, tgid)) = task_ids(task) else {
        return 0;
    };
    if let Some(st) = watched_thread(tid, tgid, || task_comm(task)) {
        // A task woken while still on a CPU (it had not switched out yet) waits for nothing.
        if st.runnable_since_ns == 0 && st.last_switch_in_ns == 0 {
            st.runnable_since_ns = unsafe { bpf_ktime_get_ns() };
        }
    }
    0
}

/// sched_waking(struct task_struct *p): fires in the waker's context (sched_wakeup may run later
/// on the woken task's CPU), so the current task is who woke `p`.
#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    let Some((wakee_tid, wakee_tgid)) = task_ids(task) else {
        return 0;
    };
    let Some(group) = group_of(wakee_tgid) else {
        return 0;
    };
    let waker = bpf_get_current_pid_tgid();
    let key = WakeKey {
        waker_tid: waker as u32,
        wakee_tid,
    };
    let first = || WakeCount {
        count: 1,
        waker_tgid: (waker >> 32) as u32,
        wakee_group: group,
        waker_comm: current_comm(),
    };
    let add = |n: &mut WakeCount| n.count += 1;
    add_or_insert(&WAKEUPS, &key, first, add, lost::WAKEUPS_MAP_FULL);
    charge_futex_wait(wakee_tid, wakee_tgid, waker);
    0
}

/// A watched thread asleep in a futex wait is woken by the current task (`waker`, its pid_tgid):
/// the wait is charged to it, or, when the waker itself got the lock from a futex wait within
/// LOCK_CONVOY_NS and passes it straight on, to the thread that wait was charged to.
#[inline(always)]
fn charge_futex_wait(wakee_tid: u32, wakee_tgid: u32, waker: u64) {
    let Some(wakee) = crate::target::THREADS.get_ptr_mut(&wakee_tid) else {
        return;
    };
    let wakee = unsafe { &mut *wakee };
    if wakee.tgid != wakee_tgid || wakee.futex_uaddr == 0 || wakee.futex_holder != 0 {
        return;
    }
    let (mut holder, mut holder_tgid) = (waker as u32, (waker >> 32) as u32);
    // What the holder did meanwhile: the waker's last sleep, which ended before it let go (a
    // lock held across a syscall), or the root's, passed on along a convoy.
    let mut sleep = Sleep::default();
    if let Some(w) = crate::target::watched_thread_current() {
        let now = unsafe { bpf_ktime_get_ns() };
        let ran = now
            .saturating_sub(w.lock_root_since_ns)
            .saturating_sub(w.runq_ns.saturating_sub(w.lock_root_runq_ns));
        if w.lock_root != 0 && ran < LOCK_CONVOY_NS {
            holder = w.lock_root;
            holder_tgid = w.lock_root_tgid;
            sleep = w.lock_root_sleep;
        } else if w.last_switch_in_ns != 0 {
            sleep = Sleep {
                from_ns: w.last_switch_out_ns,
                until_ns: w.last_switch_in_ns,
                nr_slot: w.slept_nr,
                _pad: 0,
            };
        }
    }
    wakee.futex_holder = holder;
    wakee.futex_holder_tgid = holder_tgid;
    wakee.futex_holder_sleep = sleep;
}

/// task_rename(struct task_struct *task, const char *comm): fires before the new name is copied
/// in, so a watched thread that names itself (Rust, Java, nginx, tokio threads do) is reported by
/// that name, not the one it was first seen with.
#[btf_tracepoint(function = "task_rename")]
pub fn task_rename(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    let comm: *const u8 = ctx.arg(1);
    let Some((tid, tgid)) = task_ids(task) else {
        return 0;
    };
    // The bitmap filters; the thread's own entry (with its tgid) is the truth.
    if !crate::target::maybe_watched(tgid) {
        return 0;
    }
    if let Some(st) = crate::target::THREADS.get_ptr_mut(&tid) {
        let st = unsafe { &mut *st };
        if st.tgid == tgid {
            let mut name = [0u8; 16];
            if unsafe { bpf_probe_read_kernel_str_bytes(comm, &mut name) }.is_ok() {
                st.comm = name;
            }
        }
    }
    0
}

/// sched_wakeup(struct task_struct *p)
#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(&ctx)
}

/// sched_wakeup_new(struct task_struct *p)
#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(&ctx)
}

/// sched_migrate_task(struct task_struct *p, int dest_cpu)
#[btf_tracepoint(function = "sched_migrate_task")]
pub fn sched_migrate_task(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    let Some((tid, tgid)) = task_ids(task) else {
        return 0;
    };
    if let Some(st) = watched_thread(tid, tgid, || task_comm(task)) {
        st.migrations += 1;
    }
    0
}

/// sched_process_fork(struct task_struct *parent, struct task_struct *child):
/// a new process forked by a watched one is watched too (threads share the tgid already).
#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    let parent_tgid = ctx.tgid();
    let Some(group) = group_of(parent_tgid) else {
        return 0;
    };
    let child: *const u8 = ctx.arg(1);
    let Some((_, child_tgid)) = task_ids(child) else {
        return 0;
    };
    if child_tgid != parent_tgid {
        watch(child_tgid, group);
    }
    0
}
