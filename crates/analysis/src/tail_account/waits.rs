//! A wait, named from an off-CPU stack: the kernel function it slept in, the resource that
//! function waits on, the user function that called it, and the syscall.

use super::Resource;

/// Kernel functions and the wait each is, checked from the leaf outwards: the first match names
/// the wait, but a page fault's waits inside it (the page's disk read) are the fault's.
const WAIT_POINTS: &[(&str, Resource)] = &[
    ("futex_wait", Resource::Lock),
    ("__futex_wait", Resource::Lock),
    ("futex_wait_queue", Resource::Lock),
    ("futex_lock_pi", Resource::Lock),
    ("pipe_read", Resource::Pipe),
    ("pipe_write", Resource::Pipe),
    ("anon_pipe_read", Resource::Pipe),
    ("anon_pipe_write", Resource::Pipe),
    ("wait_for_partner", Resource::Pipe),
    ("unix_stream_data_wait", Resource::UnixSocket),
    ("unix_stream_read_generic", Resource::UnixSocket),
    ("unix_dgram_recvmsg", Resource::UnixSocket),
    ("unix_wait_for_peer", Resource::UnixSocket),
    ("sk_stream_wait_memory", Resource::TcpSend),
    ("inet_wait_for_connect", Resource::TcpConnect),
    ("do_nanosleep", Resource::Sleep),
    ("hrtimer_nanosleep", Resource::Sleep),
    ("do_handle_mm_fault", Resource::PageFault),
    ("handle_mm_fault", Resource::PageFault),
    ("do_swap_page", Resource::PageFault),
    ("filemap_fault", Resource::PageFault),
    ("io_schedule", Resource::Disk),
    ("folio_wait_bit_common", Resource::Disk),
    ("bit_wait_io", Resource::Disk),
    ("blk_mq_get_tag", Resource::Disk),
    ("rwsem_down_read_slowpath", Resource::KernelLock),
    ("rwsem_down_write_slowpath", Resource::KernelLock),
    ("__mutex_lock", Resource::KernelLock),
    ("locks_lock_inode_wait", Resource::FileLock),
    ("flock_lock_inode_wait", Resource::FileLock),
    ("posix_lock_inode_wait", Resource::FileLock),
    ("do_lock_file_wait", Resource::FileLock),
    ("do_wait", Resource::Child),
    ("kernel_wait4", Resource::Child),
    ("kernel_waitid", Resource::Child),
    ("ep_poll", Resource::Work),
    ("do_epoll_wait", Resource::Work),
    ("do_select", Resource::Work),
    ("do_sys_poll", Resource::Work),
    ("inet_csk_accept", Resource::Work),
    ("sigsuspend", Resource::Idle),
    ("do_sigtimedwait", Resource::Idle),
    ("do_sched_yield", Resource::Preempted),
    ("__do_sys_sched_yield", Resource::Preempted),
    ("sk_wait_data", Resource::Work),
    ("tcp_recvmsg", Resource::Work),
    ("exit_to_user_mode_loop", Resource::Preempted),
    ("irqentry_exit_to_user_mode", Resource::Preempted),
    ("preempt_schedule", Resource::Preempted),
    ("preempt_schedule_irq", Resource::Preempted),
    ("__cond_resched", Resource::Preempted),
];

/// Syscalls whose sleep is one wait whatever the kernel function: the wait of a stack with no
/// wait point (a period with no stack drawn shows only its syscall).
const SYSCALL_WAITS: &[(&str, Resource)] = &[
    ("nanosleep", Resource::Sleep),
    ("clock_nanosleep", Resource::Sleep),
    ("accept", Resource::Work),
    ("accept4", Resource::Work),
    ("epoll_wait", Resource::Work),
    ("epoll_pwait", Resource::Work),
    ("epoll_pwait2", Resource::Work),
];

/// A futex wait is a lock's when a user frame of its stack takes a lock (any of these in its
/// name); otherwise it is a worker parked until it is handed work (a condition variable, a
/// runtime's idle thread: Go's notesleep, tokio's and Java's park): idle.
const LOCK_FRAMES: &[&str] = &[
    "mutex_lock",
    "lll_lock",
    "rwlock",
    "lock_slow",
    "lockSlow",
    "Mutex",
    "RwLock",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "futex_lock",
    // HotSpot: a contended synchronized block, a java.util.concurrent lock.
    "ObjectMonitor::enter",
    "ReentrantLock",
    "AbstractQueuedSynchronizer",
    // CPython's global interpreter lock.
    "take_gil",
];

/// The scheduler's own frames, under every wait: never a wait point.
const SCHEDULER: &[&str] = &[
    "schedule",
    "__schedule",
    "schedule_timeout",
    "schedule_hrtimeout_range",
    "schedule_hrtimeout_range_clock",
    "io_schedule_timeout",
    "wait_woken",
];

/// Library wrappers a wait is called through: the user function is the first frame past them.
const WRAPPERS: &[&str] = &[
    "read",
    "write",
    "recv",
    "send",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "nanosleep",
    "clock_nanosleep",
    "usleep",
    "sleep",
    "epoll_wait",
    "epoll_pwait",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "accept",
    "accept4",
    "connect",
    "syscall",
    "pthread_mutex_lock",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "sem_wait",
    "open",
    "openat",
    "fsync",
    "fdatasync",
    "sendfile",
    "pipe",
    "pipe2",
    "futex",
    "sched_yield",
    "clock_gettime",
    "gettimeofday",
    "fread",
    "fgets",
    "fwrite",
    "getc",
    "pclose",
    "popen",
    "system",
    "flock",
    "fcntl",
    "lockf",
    "msgrcv",
    "semop",
    "wait",
    "waitpid",
];

/// One stack's wait: the resource, the kernel function that names it, the user function that
/// called it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub resource: Resource,
    pub kernel: Option<String>,
    pub function: Option<String>,
    /// The syscall it waited in ("read"), None outside one (a page fault).
    pub syscall: Option<String>,
}

/// The syscall a stack's kernel frames are in: the outermost of `__x64_sys_NAME`, `ksys_NAME`
/// (read and write's, whose `__x64_sys_` is inlined) and `__sys_NAME`.
fn syscall_of(kernel: &[&str]) -> Option<String> {
    kernel.iter().find_map(|k| {
        ["__x64_sys_", "__ia32_sys_", "ksys_", "__sys_", "__do_sys_"]
            .iter()
            .find_map(|prefix| k.strip_prefix(prefix))
            .map(str::to_string)
    })
}

/// A kernel frame's function ("pipe_read_[k]" -> "pipe_read"; ".isra.0" and the like dropped).
pub(super) fn kernel_name(frame: &str) -> Option<&str> {
    let name = frame.strip_suffix("_[k]")?;
    Some(name.split('.').next().unwrap_or(name))
}

pub(super) fn is_wrapper(frame: &str) -> bool {
    frame.starts_with('_')
        || frame.starts_with("runtime.")
        || frame.starts_with("std::")
        || frame.starts_with("core::")
        || frame.starts_with("syscall.")
        || frame.starts_with('[')
        // An address in a file without symbols says less than the named caller outside it.
        || frame.contains("+0x")
        || WRAPPERS.contains(&frame)
}

/// The wait an off-CPU stack (thread name first, then outermost to leaf) was in.
pub fn wait_of(frames: &[String]) -> Wait {
    let frames = frames.get(1..).unwrap_or_default();
    // A bracketed kernel frame is srvprof's ("[kernel stack lost: ...]"): no function waited in.
    let kernel_frames: Vec<&str> = (frames.iter())
        .filter_map(|f| kernel_name(f))
        .filter(|k| !k.starts_with('['))
        .collect();
    let kernel = &kernel_frames;
    let user: Vec<&str> = (frames.iter())
        .filter(|f| kernel_name(f).is_none())
        .map(String::as_str)
        .collect();
    // A bracketed frame ("[no stack]") is srvprof's, no function of the code.
    let function = (user.iter().rev())
        .find(|f| !is_wrapper(f))
        .or(user.last().filter(|f| !f.starts_with('[')))
        .map(|f| f.to_string());
    let points = kernel.iter().rev().filter_map(|k| {
        (WAIT_POINTS.iter())
            .find(|(name, _)| name == k)
            .map(|(name, r)| (*r, name.to_string()))
    });
    // A fault's wait is the fault's, whatever it waited on inside (the page's disk read).
    let named = (points.clone().find(|(r, _)| *r == Resource::PageFault)).or(points.clone().next());
    let takes_lock = || {
        user.iter()
            .any(|f| LOCK_FRAMES.iter().any(|l| f.contains(l)))
    };
    let syscall = syscall_of(&kernel_frames);
    let by_syscall = (syscall.as_deref())
        .and_then(|sc| SYSCALL_WAITS.iter().find(|(name, _)| *name == sc))
        .map(|(_, r)| *r);
    let (resource, kernel) = match (named, by_syscall) {
        (Some((Resource::Lock, k)), _) if !takes_lock() => (Resource::Idle, Some(k)),
        (Some((r, k)), _) => (r, Some(k)),
        (None, Some(r)) => (r, kernel.last().map(|k| k.to_string())),
        // No stack drawn, and a syscall that could wait on anything (a read: a pipe, a socket).
        (None, None) if user.contains(&"[no stack]") => (Resource::Unknown, None),
        (None, None) => match (kernel.iter().rev()).find(|k| !SCHEDULER.contains(k)) {
            Some(k) => (Resource::Other, Some(k.to_string())),
            None => (Resource::Unknown, None),
        },
    };
    // The Go runtime's own waits (sysmon's sleeps, an idle thread's): no request's code calls
    // them; a request's blocking syscall has its caller outside the runtime.
    let runtime_own = function
        .as_deref()
        .is_some_and(|f| f.starts_with("runtime."));
    let resource = match resource {
        Resource::Work | Resource::Preempted => resource,
        _ if runtime_own => Resource::Idle,
        r => r,
    };
    Wait {
        resource,
        kernel,
        function,
        syscall,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tail_account::tests::frames;

    #[test]
    fn a_wait_is_named_by_its_kernel_function_and_the_user_function_that_called_it() {
        let cases = [
            (
                "conn;clone3;start_thread;conn_main;count_request;___pthread_mutex_lock;__GI___lll_lock_wait;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__x64_sys_futex_[k];do_futex_[k];futex_wait_[k];__futex_wait_[k];futex_do_wait_[k];schedule_[k];__schedule_[k]",
                Resource::Lock,
                Some("__futex_wait"),
                Some("count_request"),
            ),
            (
                "worker;start_thread;std::thread::park;std::sys::pal::unix::futex::futex_wait;syscall;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_futex_[k];do_futex_[k];futex_wait_[k];__futex_wait_[k];schedule_[k]",
                Resource::Idle,
                Some("__futex_wait"),
                None,
            ),
            (
                "server;runtime.mstart;runtime.schedule;runtime.findRunnable;runtime.stopm;runtime.notesleep;runtime.futexsleep;runtime.futex;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_futex_[k];do_futex_[k];futex_wait_[k];schedule_[k]",
                Resource::Idle,
                Some("futex_wait"),
                None,
            ),
            (
                "nginx;main;ngx_master_process_cycle;__sigsuspend;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_rt_sigsuspend_[k];sigsuspend_[k];schedule_[k]",
                Resource::Idle,
                Some("sigsuspend"),
                Some("ngx_master_process_cycle"),
            ),
            (
                "conn;conn_main;wait_for_ticket;__GI___libc_read;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_read_[k];vfs_read_[k];pipe_read_[k];schedule_[k];__schedule_[k]",
                Resource::Pipe,
                Some("pipe_read"),
                Some("wait_for_ticket"),
            ),
            (
                "conn;conn_main;wait_for_ticket;__GI___nanosleep;__GI___clock_nanosleep;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__x64_sys_clock_nanosleep_[k];common_nsleep_[k];hrtimer_nanosleep_[k];do_nanosleep_[k];schedule_[k];__schedule_[k]",
                Resource::Sleep,
                Some("do_nanosleep"),
                Some("wait_for_ticket"),
            ),
            (
                "conn;clone3;start_thread;conn_main;__GI___libc_read;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_read_[k];vfs_read_[k];sock_read_iter_[k];sock_recvmsg_[k];tcp_recvmsg_[k];tcp_recvmsg_locked_[k];sk_wait_data_[k];wait_woken_[k];schedule_timeout_[k];schedule_[k];__schedule_[k]",
                Resource::Work,
                Some("sk_wait_data"),
                Some("conn_main"),
            ),
            (
                "nginx;main;ngx_process_events_and_timers;epoll_wait;entry_SYSCALL_64_[k];do_epoll_wait_[k];ep_poll_[k];schedule_hrtimeout_range_[k];schedule_[k]",
                Resource::Work,
                Some("ep_poll"),
                Some("ngx_process_events_and_timers"),
            ),
            (
                "conn;conn_main;touch_page;asm_exc_page_fault_[k];exc_page_fault_[k];handle_mm_fault_[k];__handle_mm_fault_[k];filemap_fault_[k];folio_wait_bit_common_[k];io_schedule_[k];schedule_[k]",
                Resource::PageFault,
                Some("filemap_fault"),
                Some("touch_page"),
            ),
            (
                "nginx;main;ngx_linux_sendfile;sendfile;entry_SYSCALL_64_[k];do_sendfile_[k];filemap_read_[k];folio_wait_bit_common_[k];io_schedule_[k];schedule_[k]",
                Resource::Disk,
                Some("io_schedule"),
                Some("ngx_linux_sendfile"),
            ),
            (
                "conn;conn_main;__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];exit_to_user_mode_loop_[k];schedule_[k];__schedule_[k]",
                Resource::Preempted,
                Some("exit_to_user_mode_loop"),
                Some("conn_main"),
            ),
            (
                "worker;main;serve;flock;entry_SYSCALL_64_[k];__x64_sys_flock_[k];locks_lock_inode_wait_[k];schedule_[k]",
                Resource::FileLock,
                Some("locks_lock_inode_wait"),
                Some("serve"),
            ),
            (
                "conn;conn_main;run_helper;waitpid;entry_SYSCALL_64_[k];do_syscall_64_[k];__do_sys_wait4_[k];kernel_wait4_[k];do_wait_[k];schedule_[k]",
                Resource::Child,
                Some("do_wait"),
                Some("run_helper"),
            ),
            (
                "worker;main;serve;semop;entry_SYSCALL_64_[k];__x64_sys_semtimedop_[k];do_semtimedop_[k];schedule_hrtimeout_range_[k];schedule_[k]",
                Resource::Other,
                Some("do_semtimedop"),
                Some("serve"),
            ),
            (
                "java;start_thread;JavaThread::run;ObjectMonitor::enter(JavaThread*);ObjectMonitor::EnterI(JavaThread*);PlatformEvent::park();__pthread_cond_wait;entry_SYSCALL_64_[k];__x64_sys_futex_[k];futex_wait_[k];schedule_[k]",
                Resource::Lock,
                Some("futex_wait"),
                None,
            ),
            (
                "python3;Py_RunMain;PyEval_EvalFrameDefault;take_gil;pthread_cond_timedwait;entry_SYSCALL_64_[k];__x64_sys_futex_[k];futex_wait_[k];schedule_[k]",
                Resource::Lock,
                Some("futex_wait"),
                None,
            ),
            (
                "hello-go;runtime.mstart;runtime.sysmon;runtime.usleep;entry_SYSCALL_64_[k];do_syscall_64_[k];__x64_sys_nanosleep_[k];hrtimer_nanosleep_[k];do_nanosleep_[k];schedule_[k]",
                Resource::Idle,
                Some("do_nanosleep"),
                Some("runtime.usleep"),
            ),
            (
                "hello-go;main.handler;os.(*File).Read;syscall.Syscall;runtime.entersyscall;entry_SYSCALL_64_[k];do_syscall_64_[k];ksys_read_[k];pipe_read_[k];schedule_[k]",
                Resource::Pipe,
                Some("pipe_read"),
                Some("os.(*File).Read"),
            ),
            (
                "1_scheduler;erts_schedule;sched_yield;entry_SYSCALL_64_[k];do_syscall_64_[k];__do_sys_sched_yield_[k];schedule_[k]",
                Resource::Preempted,
                Some("__do_sys_sched_yield"),
                Some("erts_schedule"),
            ),
            ("conn;[no stack]", Resource::Unknown, None, None),
            (
                "conn;start_thread;conn_main;__GI___libc_read;[kernel stack lost: stack table bucket taken]_[k]",
                Resource::Unknown,
                None,
                Some("conn_main"),
            ),
            (
                "acceptor;[no stack];__do_sys_clock_nanosleep_[k]",
                Resource::Sleep,
                Some("__do_sys_clock_nanosleep"),
                None,
            ),
            (
                "conn;[no stack];__do_sys_read_[k]",
                Resource::Unknown,
                None,
                None,
            ),
        ];
        for (stack, resource, kernel, function) in cases {
            let w = wait_of(&frames(stack));
            assert_eq!(w.resource, resource, "{stack}");
            assert_eq!(w.kernel.as_deref(), kernel, "{stack}");
            if function.is_some() {
                assert_eq!(w.function.as_deref(), function, "{stack}");
            }
        }
    }

    #[test]
    fn the_syscall_of_a_stack_is_its_outermost_entry() {
        let sc = |s: &str| wait_of(&frames(s)).syscall;
        assert_eq!(
            sc(
                "conn;main;read;do_syscall_64_[k];ksys_read_[k];vfs_read_[k];pipe_read_[k];schedule_[k]"
            ),
            Some("read".into())
        );
        assert_eq!(
            sc(
                "a;main;accept;do_syscall_64_[k];__x64_sys_accept_[k];__sys_accept4_[k];inet_csk_accept_[k]"
            ),
            Some("accept".into())
        );
        assert_eq!(
            sc("a;main;touch;exc_page_fault_[k];handle_mm_fault_[k]"),
            None
        );
    }
}
