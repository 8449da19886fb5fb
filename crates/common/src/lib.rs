//! Record layouts shared by the BPF programs (crates/ebpf) and userspace (crates/profiler).
//!
//! Everything a map holds or a ring buffer carries is defined here once, `#[repr(C)]`,
//! so both sides agree on the bytes: each probe family's records and the names of its maps and
//! globals in the file named as its BPF programs' (sched.rs, tcp.rs, ...); what they share here
//! (groups, lost events). A file here that declares its names (`names!`) is a family: build.rs
//! declares it, and the other layers' build scripts look for their files of the same name.
#![no_std]

/// Declares a family's map and global names (the `maps` and `globals` modules of its file): each
/// a `&str` equal to its identifier, the name of the BPF side's static it stands for, and ALL,
/// every one of them. A name is written once, beside its family's records; a unit test in the
/// profiler checks every family's against the built object.
macro_rules! names {
    (
        maps: [$($(#[$mdoc:meta])* $map:ident),* $(,)?],
        globals: [$($(#[$gdoc:meta])* $global:ident),* $(,)?] $(,)?
    ) => {
        /// Its maps' names: userspace finds the ones it reads by them.
        pub mod maps {
            $($(#[$mdoc])* pub const $map: &str = stringify!($map);)*
            /// Every one of them.
            pub const ALL: &[&str] = &[$($map),*];
        }
        /// Its globals' names: set by userspace before loading.
        pub mod globals {
            $($(#[$gdoc])* pub const $global: &str = stringify!($global);)*
            /// Every one of them.
            pub const ALL: &[&str] = &[$($global),*];
        }
    };
}

/// Marks records as plain data aya may copy from a map (userspace builds only).
macro_rules! pod {
    ($($record:ty),* $(,)?) => {
        // SAFETY: each is #[repr(C)] plain integers and byte arrays with no padding holes read
        // as values.
        $(#[cfg(feature = "user")] unsafe impl aya::Pod for $record {})*
    };
}

/// Gathers the families' names into `maps` and `globals` (`maps::TCP_PORTS`), for every family
/// build.rs finds.
macro_rules! families {
    ($($family:ident),* $(,)?) => {
        /// Every family's map names.
        pub mod maps {
            // A family with none brings only its ALL, which the one below hides.
            $(#[allow(unused_imports)] pub use crate::$family::maps::*;)*
            /// Each family's ALL.
            pub const ALL: &[&[&str]] = &[$(crate::$family::maps::ALL),*];
        }
        /// Every family's global names: field offsets read from the kernel's BTF (these programs
        /// have no CO-RE relocation support) and switches.
        pub mod globals {
            $(#[allow(unused_imports)] pub use crate::$family::globals::*;)*
            /// Each family's ALL.
            pub const ALL: &[&[&str]] = &[$(crate::$family::globals::ALL),*];
        }
    };
}

pub mod hist;

// Every family's module, `pub use`d, and `families!` over them (build.rs).
include!(concat!(env!("OUT_DIR"), "/families.rs"));

/// Which side of a run a watched process belongs to.
pub const GROUP_SERVER: u32 = 0;
pub const GROUP_CLIENT: u32 = 1;
pub const NUM_GROUPS: u32 = 2;

/// Count and total time of one event kind (a syscall, an interrupt vector or line).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountTime {
    pub count: u64,
    pub total_ns: u64,
}

/// One group's log-linear histogram (hist slots): one map value, read with one lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HistSlots {
    pub slots: [u64; hist::SLOTS as usize],
}

/// Indexes into LOST_EVENTS: records the kernel could not hand over (`loss`), and events counted
/// in the same array that lose nothing (`count`, reported apart). Each is declared once here: the
/// kernel report names every loss by it (lower case), so a new one needs no other list.
pub mod lost {
    /// Declares each index, COUNT, and ALL: each index with its name if it is a `loss`.
    macro_rules! indexes {
        ($($(#[$doc:meta])* $name:ident = $index:literal, $kind:ident;)*) => {
            $($(#[$doc])* pub const $name: u32 = $index;)*
            /// How many indexes there are.
            pub const COUNT: u32 = [$($index),*].len() as u32;
            /// Each index with its name, empty for a `count` (dropped by `losses`).
            const ALL: [(u32, &str); COUNT as usize] = [$(($name, indexes!(@name $kind $name))),*];
            // From 0, in order: the BPF side and recordings index by these numbers.
            const _: () = {
                let mut i = 0;
                while i < ALL.len() {
                    assert!(ALL[i].0 == i as u32, "indexes from 0, in order");
                    i += 1;
                }
            };
        };
        (@name loss $name:ident) => { stringify!($name) };
        (@name count $name:ident) => { "" };
    }

    indexes! {
        EXIT_RING_FULL = 0, loss;
        THREADS_MAP_FULL = 1, loss;
        /// A stack whose hash bucket in STACK_TRACES held another stack (off-CPU stacks, and on-CPU
        /// samples the ring had no room for): shown as a frame saying so. Reported apart from the
        /// losses (stack_ids_collided): the sample itself is kept.
        STACK_TRACES_FULL = 2, count;
        /// A new (process, thread name, stacks) key found ONCPU_STACKS or OFFCPU_STACKS full.
        STACK_KEYS_FULL = 3, loss;
        /// A switched-out thread found OFFCPU_START full: that off-CPU period has no stack.
        OFFCPU_START_FULL = 4, loss;
        WAKEUPS_MAP_FULL = 5, loss;
        /// A watched thread ran without a sched_switch event naming it as next (the kernel does not
        /// always emit one; bpftrace sees the same). Its on- and off-CPU time were then taken from the
        /// scheduler's sum_exec_runtime instead: nothing is lost, this counts how often.
        SWITCH_INS_UNSEEN = 6, count;
        /// A new (side, direction, state, reason) key found TCP_RESETS full: that reset is in the
        /// side's total (TCP_COUNTERS) but not in the breakdown.
        TCP_RESETS_MAP_FULL = 7, loss;
        /// An on-CPU sample found the user-stack ring full: it is counted in the kernel with the
        /// frame-pointer walk of its user stack instead (not a loss: the unwind quality shows it).
        USER_STACK_RING_FULL = 8, count;
        /// A new (CPU holder, group) key found RUNQ_HOLDERS full: that wait is in the run-queue
        /// figures but not in who held the CPU.
        RUNQ_HOLDERS_MAP_FULL = 9, loss;
        /// A new (process, syscall, fd) key found DISK_WAITS full: that uninterruptible sleep is in
        /// the off-CPU figures but not in the disk waits.
        DISK_WAITS_MAP_FULL = 10, loss;
        /// A new (process, futex word, waiter, holder) key found LOCK_WAITS full: that wait is in
        /// the off-CPU figures but not in the lock waits.
        LOCK_WAITS_MAP_FULL = 11, loss;
        /// A server's connect() found OUTBOUND or OUTBOUND_SOCKETS full: that connection is not
        /// among its outbound ones.
        OUTBOUND_MAP_FULL = 12, loss;
        /// A new connection found ACCEPT_PENDING full, or its first read ACCEPT_QUEUE full: that
        /// connection's wait to be taken is not counted.
        ACCEPT_MAP_FULL = 13, loss;
        /// A server socket's unsent bytes found SEND_HELD full: that hold is not timed.
        SEND_HELD_MAP_FULL = 14, loss;
        /// An on-CPU tick due while a watched thread ran, its interrupt not yet arrived when the
        /// thread switched out: taken at the switch-out, for that thread (TickGrid). Not a loss.
        ONCPU_TICK_AT_SWITCH = 15, count;
        /// A late on-CPU tick that arrived in a watched thread switched in after it was due, or
        /// a restarted timer's catch-up of one: the tick was another task's (taken at that
        /// switch), so it is not this thread's sample.
        ONCPU_TICK_NOT_THEIRS = 16, count;
        /// On-CPU ticks the timer skipped while a watched thread ran (its interrupt was held off
        /// longer than a period): that thread's samples the flamegraph lacks.
        ONCPU_TICKS_SKIPPED = 17, count;
        /// An on-CPU tick off the timer's grid (not a whole number of periods after the last): the
        /// kernel stopped and restarted the timer, as another profiler's control-group events do
        /// at each switch into or out of their group, and per-CPU samples then lean toward the
        /// group's threads. Counted on every CPU.
        ONCPU_TIMER_RESTARTED = 18, count;
        /// A server's on-CPU sample the user-stack ring had no room for (also in
        /// USER_STACK_RING_FULL): kept in the kernel without its time, so the measured span's
        /// count takes it from the window's count here.
        SERVER_ONCPU_UNTIMED = 19, count;
        /// SERVER_ONCPU_UNTIMED for the load generator's samples.
        CLIENT_ONCPU_UNTIMED = 20, count;
    }

    /// The index counting `group`'s on-CPU samples the ring had no room for.
    pub const fn oncpu_untimed(group: u32) -> u32 {
        if group == crate::GROUP_CLIENT {
            CLIENT_ONCPU_UNTIMED
        } else {
            SERVER_ONCPU_UNTIMED
        }
    }

    /// Every loss's index and name (upper case, as declared).
    pub fn losses() -> impl Iterator<Item = (u32, &'static str)> {
        ALL.into_iter().filter(|(_, name)| !name.is_empty())
    }
}

pod!(CountTime, HistSlots);
