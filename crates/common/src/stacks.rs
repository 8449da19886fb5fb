//! The stack programs (ebpf/src/stacks.rs): stack keys, the on-CPU samples with a copy of the
//! user stack, and the off-CPU periods timed.

names! {
    maps: [
        STACK_TRACES,
        ONCPU_STACKS,
        OFFCPU_STACKS,
        OFFCPU_START,
        USER_STACK_SAMPLES,
        STACK_COPY_HINTS,
        TICK_GRID,
    ],
    globals: [
        /// The on-CPU sampler's period, ns.
        SAMPLE_PERIOD_NS,
        /// bpf_perf_event_data_kern.event: the sampling event behind a perf_event program's context.
        PERF_CTX_EVENT_OFFSET,
        /// perf_event.hw.hrtimer.node.expires: when the cpu-clock event's timer was due.
        PERF_EVENT_EXPIRES_OFFSET,
    ],
}

/// Distinct stacks (user and kernel together) the STACK_TRACES map can hold.
pub const MAX_STACK_TRACES: u32 = 8192;

/// Distinct (process, thread name, user stack, kernel stack) keys per stack-count map.
pub const MAX_STACK_KEYS: u32 = 16384;

/// Frames kept per stack (the kernel's PERF_MAX_STACK_DEPTH).
pub const MAX_STACK_DEPTH: usize = 127;

/// At most this many bytes of a sampled thread's user stack are copied from its stack pointer
/// up, for unwinding in user space from the binary's CFI (.eh_frame): frames whose part of the
/// stack lies beyond are cut off (the stack is then reported as not reaching the thread's
/// start). Fewer once the thread's stacks are known to need fewer (StackCopyHint).
pub const USER_STACK_BYTES: usize = 65536;

/// The ring the on-CPU samples with their stack copies go through: room for 250 whole copies,
/// 1.3 s of on-CPU samples at 99 Hz on 2 CPUs, between two drains (srvprof drains it every
/// 20 ms).
pub const USER_STACK_RING_BYTES: u32 = 16 * 1024 * 1024;

pub const USER_STACK_MISS_LIMIT: u64 = 16;
pub const USER_STACK_RETRY_EVERY: u64 = 64;

/// Where samples or off-CPU time are counted: one process's thread name and its two stacks.
/// A stack id is an index into STACK_TRACES, negative when the kernel could not take that stack:
/// -1 when there was none to take (a sample in user mode has no kernel stack),
/// [`STACK_ID_COLLIDED`] when it was taken but its bucket held another stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub tgid: u32,
    pub group: u32,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    pub comm: [u8; 16],
    /// Off-CPU: the syscall the thread slept in, plus one (0: none; on-CPU keys 0). The undrawn
    /// periods are timed per thread name and syscall, so that each syscall's exact time goes to
    /// the drawn stacks in it: a busy thread's rare long wait in one syscall, drawn a few times
    /// at most, is not shared with its frequent short ones in another.
    pub syscall: u32,
    pub _pad: u32,
}

/// A stack the kernel walked but could not keep: STACK_TRACES is a hash table of one stack per
/// bucket, and this stack's bucket held another. Shown as a kernel frame saying so, so that a
/// sample taken in the kernel is not put under the user code it interrupted.
pub const STACK_ID_COLLIDED: i32 = -2;

/// An on-CPU sample of a watched thread, for unwinding in user space: its kernel stack's frames
/// (on-CPU) or id (off-CPU), its user registers at the moment it was interrupted or entered the
/// kernel, and a copy of its user stack from `sp` up.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UserStackSample {
    pub key: StackKey,
    pub tid: u32,
    /// Bytes of `stack` filled, from `sp` up (0 when the first page could not be read).
    pub stack_len: u32,
    /// Frames of `kernel` filled, leaf first: the kernel stack, carried here rather than
    /// interned in STACK_TRACES, whose buckets collide as distinct stacks pile up (measured: 43
    /// of 428 samples of a TLS server lost their kernel stack that way; a worker pool's off-CPU
    /// wait, once in a few runs, became a wait of no kind). 0 for a sample taken in user mode.
    pub kernel_len: u32,
    pub _pad: u32,
    pub kernel: [u64; MAX_STACK_DEPTH],
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// 0 for an on-CPU sample; else this off-CPU period's id, which its OffcpuTime names when
    /// the period ends.
    pub seq: u64,
    /// When it was taken (the sample's interrupt, or the switch-out), CLOCK_MONOTONIC ns.
    pub time_ns: u64,
    pub stack: [u8; USER_STACK_BYTES],
}

/// How much of a thread's user stack a sample copies, as user space learned it from the thread's
/// unwound stacks (absent: USER_STACK_BYTES from the stack pointer up).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCopyHint {
    /// At most this many bytes from the stack pointer up: the deepest its unwinding has read,
    /// with a margin.
    pub bytes: u32,
    pub _pad: u32,
    /// Nonzero: the address just past the outermost frame its complete stacks reached (main,
    /// start_thread), with a margin. A copy from a stack pointer below it ends there, not `bytes`
    /// up: what lies above is the thread's start (argv and the environment for the main thread),
    /// not frames. 0 for a thread seen on more than one stack (a runtime that switches stacks).
    pub end: u64,
}

/// The end of an off-CPU period whose stacks were sent as a UserStackSample (same ring, told
/// apart by its size): its time off the CPU, and how many of the thread's periods it stands for
/// (the inverse of the chance it had to be sent).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OffcpuTime {
    pub seq: u64,
    pub off_ns: u64,
    pub weight: u64,
    /// When the period ended (the switch-in's first switch-out after), CLOCK_MONOTONIC ns.
    pub end_ns: u64,
}

/// A watched thread's off-CPU stacks are taken (the kernel's, and a copy of the user stack for
/// unwinding) for about this many periods per second at most: each period with probability
/// 1/N, N set from the thread's switch rate over the last OFFCPU_RATE_WINDOW_NS (1 for a thread
/// that switches less often: every period), each drawn one standing for N. A draw, not the
/// first switch-out after a pause: that one follows a long run, and a preempted thread that ran
/// long waits long (measured: 3x its off-CPU time).
pub const OFFCPU_UNWIND_PER_S: u64 = 50;
pub const OFFCPU_RATE_WINDOW_NS: u64 = 20_000_000;
/// N for a thread's first rate window, before its rate is known.
pub const OFFCPU_UNWIND_FIRST_EVERY: u64 = 4;

/// Per CPU: the on-CPU sampler's last tick accounted for, by its due time (CLOCK_MONOTONIC ns).
///
/// The cpu-clock timer fires on a fixed grid, but its interrupt arrives late (10-100 us on a
/// VM, measured) and never while interrupts are off, as they are through a context switch and
/// the programs on sched_switch: a tick due while a thread ran would land on whatever runs
/// after its switch-out (the idle task, most often). So a switch takes the tick due before it for
/// the thread switching out, and the late interrupt, finding its tick taken, is dropped. The due
/// time is the timer's own, read from the event (its address kept here at each tick): another
/// profiler's control-group events make the kernel stop and restart it, moving its grid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TickGrid {
    pub last_tick_ns: u64,
    pub event: u64,
}

pod!(
    StackCopyHint,
    StackKey,
    UserStackSample,
    OffcpuTime,
    TickGrid
);
