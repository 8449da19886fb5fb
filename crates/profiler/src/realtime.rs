//! The sampler's scheduling. It must read at its interval's boundaries even when the load (or
//! anything else) saturates every CPU it may run on; as an ordinary thread it then waits for a
//! scheduler tick and a share of the CPU, tens of milliseconds late. While it samples it is a
//! real-time thread (SCHED_FIFO): woken, it runs at once. It sleeps all but a few milliseconds
//! of each interval, so it cannot starve the load or the server, and the kernel's RT throttling
//! (sched_rt_runtime_us) bounds it anyway. Its CPUs stay the process's own (a taskset is the
//! user's choice); `--cpus` pins only the load's threads.

/// The lowest real-time priority: above every normal thread, below the kernel's own RT threads
/// (migration, threaded interrupts at 50).
pub const SAMPLER_FIFO_PRIORITY: i32 = 1;

/// The calling thread runs SCHED_FIFO until this is dropped.
pub struct RealtimeThread(());

/// Makes the calling thread SCHED_FIFO at SAMPLER_FIFO_PRIORITY (needs CAP_SYS_NICE, which root
/// has). The error says why not, e.g. a container without CAP_SYS_NICE or an RT budget of 0.
pub fn realtime_thread() -> Result<RealtimeThread, std::io::Error> {
    set_policy(
        libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK,
        SAMPLER_FIFO_PRIORITY,
    )?;
    Ok(RealtimeThread(()))
}

impl Drop for RealtimeThread {
    fn drop(&mut self) {
        // Back to a normal thread before the long, CPU-heavy work after sampling (stacks).
        let _ = set_policy(libc::SCHED_OTHER, 0);
    }
}

/// Lets whatever waits for this CPU (the server, the load) run between two pieces of the
/// sampler's work: a real-time thread is not preempted by them, so a reading of a millisecond or
/// two would otherwise hold the CPU for all of it. Woken, the sampler takes the CPU back at once.
pub fn breathe() {
    std::thread::sleep(BREATH);
}

/// Breathes inside a long loop of the sampler's whenever it has held the CPU for HOLD since
/// the last breath: its length grows with what it reads (a file per thread), the CPU it holds at
/// once must not.
pub struct Pace(std::time::Instant);

/// The longest the sampler runs between two breaths in a paced loop.
const HOLD: std::time::Duration = std::time::Duration::from_micros(200);

impl Pace {
    pub fn new() -> Self {
        Self(std::time::Instant::now())
    }

    pub fn tick(&mut self) {
        if self.0.elapsed() >= HOLD {
            breathe();
            self.0 = std::time::Instant::now();
        }
    }
}

impl Default for Pace {
    fn default() -> Self {
        Self::new()
    }
}

/// A pause of breathe(): long enough for a server to handle a request or two that waited.
const BREATH: std::time::Duration = std::time::Duration::from_micros(20);

/// How long background work (unwinding stacks) runs before it yields the CPU to whatever waits
/// for it: as one batch, each of its fifty wake-ups a second took the load's CPU for up to a
/// millisecond, which showed in the p99.
pub const BACKGROUND_CHUNK: std::time::Duration = std::time::Duration::from_micros(100);

/// The calling thread's scheduling policy and RT priority, as the kernel reports them.
/// (Raw system calls: musl's wrappers of the sched_* calls return ENOSYS by design, and the
/// portable binary is built with musl.)
pub fn current_policy() -> (i32, i32) {
    let mut param = zeroed_param();
    // SAFETY: pid 0 is the calling thread; both calls only read or fill what we own.
    unsafe {
        let policy = libc::syscall(libc::SYS_sched_getscheduler, 0) as i32;
        libc::syscall(
            libc::SYS_sched_getparam,
            0,
            &mut param as *mut libc::sched_param,
        );
        (policy & !libc::SCHED_RESET_ON_FORK, param.sched_priority)
    }
}

fn set_policy(policy: i32, priority: i32) -> Result<(), std::io::Error> {
    let mut param = zeroed_param();
    param.sched_priority = priority;
    // SAFETY: pid 0 is the calling thread (Linux: a thread, not the process); param is ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            policy,
            &param as *const libc::sched_param,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A sched_param with every field zero (musl's has more fields than glibc's).
fn zeroed_param() -> libc::sched_param {
    // SAFETY: sched_param is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_thread_is_fifo_while_held_and_normal_after() {
        std::thread::spawn(|| {
            assert_eq!(current_policy(), (libc::SCHED_OTHER, 0));
            match realtime_thread() {
                Ok(guard) => {
                    assert_eq!(current_policy(), (libc::SCHED_FIFO, SAMPLER_FIFO_PRIORITY));
                    drop(guard);
                }
                // Without CAP_SYS_NICE the thread stays as it was.
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
            }
            assert_eq!(current_policy(), (libc::SCHED_OTHER, 0));
        })
        .join()
        .unwrap();
    }
}
