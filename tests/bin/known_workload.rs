//! A process whose kernel behaviour is known by construction, driven line by line on stdin so a
//! test can snapshot the kernel's counters between steps. Each command answers "ok ..." on stdout.
//!
//! sleep N MS        N nanosleeps of MS milliseconds (N voluntary context switches, N clock_nanosleep)
//! syscalls M        M getppid syscalls
//! paced S K         for S seconds, K getppid syscalls at every millisecond tick (absolute
//!                   sleeps, so a late tick catches up): a syscall rate fixed by construction,
//!                   whatever tracing costs; answers "ok TOTAL"
//! spin MS           burn MS milliseconds of user CPU time
//! fork-signal SIG   fork a child that dies by signal SIG (default action); answers its pid
//! fork-exit CODE    fork a child that exits with CODE; answers its pid
//! thread-exit       start a thread that exits at once; answers its tid
//! pingpong N        a thread "pong" and this one pass a byte N times each way over two pipes;
//!                   answers "ok PONG_TID PONG_NVCSW": every voluntary switch of pong is a block in
//!                   read() that only this thread's write ends, so it is woken by this thread that
//!                   many times
//! exit CODE         exit the whole process with CODE

use std::io::{BufRead, Write};

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let arg = |i: usize| {
            words
                .get(i)
                .and_then(|w| w.parse::<i64>().ok())
                .unwrap_or(0)
        };
        let answer = match words.first().copied() {
            Some("sleep") => {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: arg(2) * 1_000_000,
                };
                for _ in 0..arg(1) {
                    // SAFETY: a valid timespec, no remainder wanted.
                    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                }
                "ok".to_string()
            }
            Some("syscalls") => {
                for _ in 0..arg(1) {
                    // SAFETY: getppid has no preconditions.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                }
                "ok".to_string()
            }
            Some("paced") => paced(arg(1) as u64, arg(2) as u64),
            Some("spin") => {
                // Bounded by this thread's CPU time, not wall time, so a busy machine does not shorten it.
                let end = thread_cpu_ns() + arg(1) as u64 * 1_000_000;
                let mut x = 1u64;
                while thread_cpu_ns() < end {
                    for _ in 0..1000 {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                }
                format!("ok {}", x & 1)
            }
            Some("fork-signal") | Some("fork-exit") => {
                let by_signal = words[0] == "fork-signal";
                let value = arg(1) as i32;
                // SAFETY: the child only calls async-signal-safe functions before it dies.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    unsafe {
                        if by_signal {
                            libc::signal(value, libc::SIG_DFL);
                            libc::raise(value);
                        }
                        libc::_exit(value);
                    }
                }
                let mut status = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                format!("ok {pid} {status}")
            }
            Some("thread-exit") => {
                let handle = std::thread::spawn(|| unsafe { libc::gettid() });
                let tid = handle.join().unwrap_or(0);
                format!("ok {tid}")
            }
            Some("pingpong") => pingpong(arg(1) as usize),
            Some("exit") => std::process::exit(arg(1) as i32),
            _ => "error unknown command".to_string(),
        };
        let _ = writeln!(out, "{answer}");
        let _ = out.flush();
    }
}

fn pingpong(rounds: usize) -> String {
    let (mut ping_r, mut ping_w) = pipe();
    let (mut pong_r, mut pong_w) = pipe();
    let pong = std::thread::Builder::new()
        .name("pong".into())
        .spawn(move || {
            use std::io::{Read, Write};
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let mut byte = [0u8; 1];
            for _ in 0..rounds {
                ping_r.read_exact(&mut byte).expect("ping");
                pong_w.write_all(&byte).expect("pong");
            }
            // This thread's own count, before it exits (its /proc entry goes with it).
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: getrusage writes into the struct we own.
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
            (tid, usage.ru_nvcsw)
        })
        .expect("spawn pong");
    {
        use std::io::{Read, Write};
        let mut byte = [7u8; 1];
        for _ in 0..rounds {
            ping_w.write_all(&byte).expect("ping");
            pong_r.read_exact(&mut byte).expect("pong");
        }
    }
    let (tid, nvcsw) = pong.join().expect("pong thread");
    format!("ok {tid} {nvcsw}")
}

fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn paced(seconds: u64, per_tick: u64) -> String {
    let mut tick = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut tick) };
    let mut total = 0u64;
    for _ in 0..seconds * 1000 {
        tick.tv_nsec += 1_000_000;
        if tick.tv_nsec >= 1_000_000_000 {
            tick.tv_nsec -= 1_000_000_000;
            tick.tv_sec += 1;
        }
        // SAFETY: an absolute sleep to a valid time, no remainder wanted.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &tick,
                std::ptr::null_mut(),
            )
        };
        for _ in 0..per_tick {
            // SAFETY: getppid has no preconditions.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        total += per_tick;
    }
    format!("ok {total}")
}
