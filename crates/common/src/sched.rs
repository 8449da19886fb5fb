//! The scheduler's programs (ebpf/src/sched.rs): per-thread figures, wakeups, run-queue holders,
//! uninterruptible waits and lock waits.

names! {
    maps: [
        GROUP_SWITCHES,
        GROUP_ONCPU,
        RUNNING,
        OFFCPU_HIST,
        RUNQ_HIST,
        ONCPU_RUN_HIST,
        RUN_WALL_HIST,
        RUNQ_PREEMPTED_HIST,
        BLOCKED_SYSCALLS,
        WAKEUPS,
        RUNQ_HOLDERS,
        SLICE_START,
        DISK_WAITS,
        LOCK_WAITS,
    ],
    globals: [],
}

/// Distinct (waker thread, woken thread) pairs kept per run.
pub const MAX_WAKE_PAIRS: u32 = 16384;

/// Per-thread scheduler and syscall figures, cumulative since the thread was first seen,
/// plus the timestamps the programs need between events.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub tgid: u32,
    pub group: u32,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub oncpu_ns: u64,
    pub offcpu_ns: u64,
    pub runq_ns: u64,
    pub runq_count: u64,
    pub migrations: u64,
    pub syscalls: u64,
    pub syscall_ns: u64,
    /// Bit n set: the thread ran on CPU n (CPUs 0..63).
    pub cpu_mask: u64,
    pub last_switch_in_ns: u64,
    pub last_switch_out_ns: u64,
    /// When the thread became runnable and started waiting for a CPU; 0 when not waiting.
    pub runnable_since_ns: u64,
    /// The task's sum_exec_runtime at its last switch-out (0: not yet read).
    pub exec_at_switch_out_ns: u64,
    /// The syscall in flight: when it was entered (0: none) and its number.
    pub syscall_start_ns: u64,
    pub syscall_nr: u64,
    /// Always counted (sched_switch): the thread's voluntary off-CPU periods inside a syscall
    /// (switched out asleep with a syscall's number in its user registers), and their time from
    /// switch-out to switch-in. Counted at the switch-in, so with the syscall's return, as a
    /// syscall tracer would count it.
    pub syscalls_blocked: u64,
    pub syscall_blocked_ns: u64,
    /// The syscall the thread went to sleep in at its last switch-out, plus one (0: it was not
    /// asleep in a syscall).
    pub blocked_nr: u64,
    /// Sampled windows: syscall_blocked_ns when the syscall in flight was entered.
    pub blocked_ns_at_enter: u64,
    /// Sampled windows: the timed syscalls that did not block, and every timed syscall's time
    /// outside its blocked periods (weighted as window::weighted weights the whole call).
    pub syscalls_unblocked: u64,
    pub syscall_rest_ns: u64,
    /// Off-CPU stacks: user stack walks in a row that failed, finding no frame or a stack that
    /// collided in the map (a binary built without frame pointers, like Debian's nginx, gives
    /// either). Past USER_STACK_MISS_LIMIT only one walk in USER_STACK_RETRY_EVERY is tried:
    /// each failed walk costs ~2 us at every switch-out.
    pub user_stack_misses: u64,
    /// Set when the thread last switched out in uninterruptible sleep (TASK_UNINTERRUPTIBLE: disk
    /// I/O, a page fault's read, a kernel lock), with the file descriptor its syscall was given
    /// (-1: none, or not in a syscall): its time until the switch-in goes to DISK_WAITS.
    pub uninterruptible: u32,
    pub blocked_fd: i32,
    /// Set when the thread last switched out asleep in futex(2): the futex word's address (the
    /// syscall's first argument; 0: not in a futex wait). The thread charged with the wait is
    /// set when it is woken (futex_holder, 0: not yet), and its wait goes to LOCK_WAITS at the
    /// switch-in.
    pub futex_uaddr: u64,
    pub futex_holder: u32,
    pub futex_holder_tgid: u32,
    /// 1 when that wait followed a lock's protocol (futex_lock_protocol), else 0.
    pub futex_lock: u32,
    /// The syscall (its number plus one) of the sleep the thread's last switch-in ended, 0 when
    /// that off-CPU period was a preemption: with last_switch_out_ns and last_switch_in_ns, the
    /// thread's last sleep while it runs.
    pub slept_nr: u32,
    /// The sleep of the thread charged with that futex wait (its holder's, or the lock_root's)
    /// known when it woke this one: a lock held across a syscall's sleep.
    pub futex_holder_sleep: Sleep,
    /// The thread its last futex wait was charged to (0: it has slept otherwise since; a
    /// preemption keeps it), when that wait ended and the thread's run-queue total then. A
    /// thread that passes a lock on within LOCK_CONVOY_NS of running after getting it passes
    /// this on, so a queue of waiters behind one long holder is charged to that holder.
    pub lock_root: u32,
    pub lock_root_tgid: u32,
    pub lock_root_since_ns: u64,
    pub lock_root_runq_ns: u64,
    /// The lock_root's sleep the last futex wait overlapped, passed on with the lock.
    pub lock_root_sleep: Sleep,
    /// Memory reclaimed by the thread itself (direct or memcg reclaim): how often, for how long,
    /// and when the one in progress began (0: none).
    pub reclaims: u64,
    pub reclaim_ns: u64,
    pub reclaim_start_ns: u64,
    /// The server's threads: the file descriptor plus one a switch-out asleep in a socket read
    /// named (socket_arg; 0: any other wait). At the switch-in, the sleep is charged to the
    /// socket's remote address when it is one of the server's outbound connections.
    pub sleep_socket: u32,
    /// 1 when that sleep may be on a datagram socket (datagram_wait): a descriptor not among the
    /// outbound connections is then looked at once at the wake, and a connected UDP socket's
    /// sleep is charged to its remote address (a DNS lookup's answer).
    pub sleep_datagram: u32,
    /// The outbound socket the thread's last such sleep was on (0: its last was on another
    /// socket): a sleep on the same one again goes on with that call to the service (the
    /// answer's last bytes, the close), and is not counted as another wait.
    pub last_waited_sk: u64,
    /// On-CPU time since the thread last went to sleep (its preemptions do not end a run), and
    /// its waits for a CPU after those preemptions: a request served in the run waits both.
    pub run_ns: u64,
    pub run_preempted_ns: u64,
    /// The run-queue waits that began with a preemption (part of runq_ns and runq_count), and
    /// whether the one under way did (1) or began with a wakeup (0).
    pub runq_preempted_ns: u64,
    pub runq_preempted_count: u64,
    pub runnable_preempted: u64,
    /// On-CPU time by this program's own stamps, switch-in to switch-out, where oncpu_ns is the
    /// scheduler's charge: the scheduler starts charging a thread woken on an idle CPU from its
    /// clock's last reading, at the wakeup, before the CPU has left idle, and no timer can sample
    /// that part (it runs the idle task).
    pub stamped_oncpu_ns: u64,
    pub comm: [u8; 16],
}

/// A thread's sleep in a syscall: from its switch-out to its switch-in, and the syscall's number
/// plus one (0: none known).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sleep {
    pub from_ns: u64,
    pub until_ns: u64,
    pub nr_slot: u32,
    pub _pad: u32,
}

impl Sleep {
    /// How much of the wait from `start` to `end` this sleep covers (ns).
    pub fn overlap(&self, start: u64, end: u64) -> u64 {
        if self.nr_slot == 0 {
            return 0;
        }
        self.until_ns
            .min(end)
            .saturating_sub(self.from_ns.max(start))
    }
}

/// A thread woken from a futex wait that wakes another waiter within this long of running since
/// (the wall time less its run-queue waits) only passed the lock on (took it, did a little, let
/// it go): the new waiter's wait is charged to whoever the first one's wait was.
pub const LOCK_CONVOY_NS: u64 = 50_000;

/// futex(2)'s number on x86-64, plus one (ThreadStats.blocked_nr's encoding).
pub const FUTEX_SLOT: u64 = 202 + 1;

/// Whether a futex(2) call with operation `op` (its second argument) and value `val` (its third)
/// waits the way a lock's waiters do: FUTEX_WAIT or FUTEX_WAIT_BITSET on the value 2 ("locked,
/// with waiters", the contended state of glibc's pthread mutexes, Rust's std Mutex and Go's
/// runtime locks alike), or FUTEX_LOCK_PI / FUTEX_LOCK_PI2 (priority-inheritance mutexes).
/// A condition variable's, a parked thread's or an event's wait uses other values.
pub fn futex_lock_protocol(op: u64, val: u64) -> bool {
    const CMD_MASK: u64 = 0x7f;
    const FUTEX_WAIT: u64 = 0;
    const FUTEX_LOCK_PI: u64 = 6;
    const FUTEX_WAIT_BITSET: u64 = 9;
    const FUTEX_LOCK_PI2: u64 = 13;
    match op & CMD_MASK {
        FUTEX_WAIT | FUTEX_WAIT_BITSET => val as u32 == 2,
        FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => true,
        _ => false,
    }
}

/// Where a syscall that waits on one socket names it: its first argument (`Fd`: read, readv,
/// recvfrom, recvmsg, recvmmsg), or the first pollfd at its first argument, in user memory
/// (`PollFd`: poll(2) and ppoll(2) of one descriptor, the wait before a read). `slot` is
/// ThreadStats.blocked_nr's encoding, `nfds` the second argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketArg {
    Fd,
    PollFd,
    None,
}

pub fn socket_arg(slot: u64, nfds: u64) -> SocketArg {
    const READ: u64 = 1;
    const POLL: u64 = 8;
    const READV: u64 = 20;
    const RECVFROM: u64 = 46;
    const RECVMSG: u64 = 48;
    const PPOLL: u64 = 272;
    const RECVMMSG: u64 = 300;
    match slot {
        READ | READV | RECVFROM | RECVMSG | RECVMMSG => SocketArg::Fd,
        POLL | PPOLL if nfds == 1 => SocketArg::PollFd,
        _ => SocketArg::None,
    }
}

/// Whether a syscall's wait on one socket may be a datagram service's answer: a poll of one
/// descriptor (glibc's resolver polls its UDP socket, then reads without waiting) or a recv*; a
/// read(2) or readv(2) is a stream's (a UDP client reads with recv*).
pub fn datagram_wait(slot: u64, nfds: u64) -> bool {
    const READ: u64 = 1;
    const READV: u64 = 20;
    socket_arg(slot, nfds) != SocketArg::None && slot != READ && slot != READV
}

/// Who woke a watched thread: the task running when the wakeup was issued (sched_waking fires in
/// the waker's context; an interrupt's wakeup names the task it interrupted, often the idle task).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WakeKey {
    pub waker_tid: u32,
    pub wakee_tid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeCount {
    pub count: u64,
    pub waker_tgid: u32,
    /// The woken thread's group (server or client).
    pub wakee_group: u32,
    pub waker_comm: [u8; 16],
}

/// Who held a CPU when a watched thread's wait for it ended: the task switched out as the thread
/// switched in (sched_switch's prev), keyed with the waiting thread's group. It is charged the
/// part of the wait it ran for; the part before its slice began is [`HOLDER_BEFORE`]'s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HolderKey {
    pub holder_tid: u32,
    pub group: u32,
}

/// The holder "tid" (and tgid) of the waits' time before their last holder took the CPU: other
/// tasks' slices, or a CPU quota's throttle, which ends with whatever runs when the period
/// turns charged only for its own slice.
pub const HOLDER_BEFORE: u32 = u32::MAX;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HolderWait {
    /// Waits that ended with this task giving up the CPU, and their summed length (ns).
    pub waits: u64,
    pub wait_ns: u64,
    pub holder_tgid: u32,
    pub _pad: u32,
    pub holder_comm: [u8; 16],
}

pub const MAX_RUNQ_HOLDERS: u32 = 4096;

/// A watched process's uninterruptible sleeps: in which syscall (its number plus one; 0 when not
/// in a syscall, as in a page fault) on which file descriptor (-1 when the syscall takes none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DiskWaitKey {
    pub tgid: u32,
    pub group: u32,
    pub nr_slot: u32,
    pub fd: i32,
}

pub const MAX_DISK_WAITS: u32 = 4096;

/// A watched thread's futex waits: on which futex word, charged to which thread (the one that
/// woke it, or the holder at the head of the queue it waited in: ThreadStats.lock_root).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockWaitKey {
    pub tgid: u32,
    pub group: u32,
    pub uaddr: u64,
    pub waiter_tid: u32,
    pub holder_tid: u32,
    /// 1: the waits followed a lock's protocol (futex_lock_protocol).
    pub lock_protocol: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockWait {
    /// Waits and their summed length (ns, switch-out to switch-in).
    pub waits: u64,
    pub wait_ns: u64,
    pub holder_tgid: u32,
    /// The syscall (plus one) of the holder's sleep that the waits overlapped most lately, and
    /// the waits' time that such sleeps covered (ns): the lock held while its holder slept.
    pub holder_slept_nr: u32,
    pub holder_slept_ns: u64,
}

pub const MAX_LOCK_WAITS: u32 = 4096;

#[cfg(test)]
mod tests {
    use super::{Sleep, SocketArg, datagram_wait, futex_lock_protocol, socket_arg};

    #[test]
    fn a_holders_sleep_covers_the_part_of_a_wait_it_overlaps() {
        let sleep = Sleep {
            from_ns: 100,
            until_ns: 300,
            nr_slot: 1,
            _pad: 0,
        };
        // A wait that began during the sleep and ended after it; one that held it whole.
        assert_eq!(sleep.overlap(150, 400), 150);
        assert_eq!(sleep.overlap(50, 400), 200);
        // A wait after it, and no syscall known (a preemption).
        assert_eq!(sleep.overlap(300, 400), 0);
        assert_eq!(
            Sleep {
                nr_slot: 0,
                ..sleep
            }
            .overlap(50, 400),
            0
        );
    }

    #[test]
    fn a_poll_of_one_descriptor_and_a_recv_may_wait_on_a_datagram_a_read_on_a_stream() {
        assert!(datagram_wait(8, 1) && datagram_wait(272, 1));
        assert!(datagram_wait(46, 0) && datagram_wait(48, 0) && datagram_wait(300, 0));
        assert!(!datagram_wait(1, 0) && !datagram_wait(20, 0));
        assert!(!datagram_wait(8, 2) && !datagram_wait(233, 1));
    }

    #[test]
    fn the_reads_name_their_socket_and_a_poll_of_one_descriptor_its_pollfd() {
        // Numbers plus one: read 0, recvfrom 45, poll 7, ppoll 271, epoll_wait 232, futex 202.
        assert_eq!(socket_arg(1, 0), SocketArg::Fd);
        assert_eq!(socket_arg(46, 0), SocketArg::Fd);
        assert_eq!(socket_arg(8, 1), SocketArg::PollFd);
        assert_eq!(socket_arg(272, 1), SocketArg::PollFd);
        // An event loop's poll of many, and its epoll_wait, wait for any work.
        assert_eq!(socket_arg(8, 2), SocketArg::None);
        assert_eq!(socket_arg(233, 1), SocketArg::None);
        assert_eq!(socket_arg(203, 0), SocketArg::None);
    }

    #[test]
    fn a_lock_waits_on_its_contended_value_a_condvar_on_others() {
        const PRIVATE: u64 = 128;
        // glibc's __lll_lock_wait: FUTEX_WAIT_PRIVATE on 2; Rust's std Mutex: FUTEX_WAIT_BITSET.
        assert!(futex_lock_protocol(PRIVATE, 2));
        assert!(futex_lock_protocol(9 | PRIVATE, 2));
        // FUTEX_LOCK_PI takes no value.
        assert!(futex_lock_protocol(6 | PRIVATE, 0));
        // Go's notesleep waits on 0; a condvar on its sequence number; FUTEX_WAKE is no wait.
        assert!(!futex_lock_protocol(PRIVATE, 0));
        assert!(!futex_lock_protocol(9 | PRIVATE, 7));
        assert!(!futex_lock_protocol(1 | PRIVATE, 2));
    }
}

/// RUNNING's slot for one CPU: the watched thread running there since `since_ns`
/// (bpf_ktime_get_ns), of group `group_plus_one - 1`; `group_plus_one` is 0 when none is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunningSlot {
    pub group_plus_one: u64,
    pub since_ns: u64,
}

pod!(
    ThreadStats,
    WakeKey,
    WakeCount,
    HolderKey,
    RunningSlot,
    HolderWait,
    DiskWaitKey,
    LockWaitKey,
    LockWait
);
