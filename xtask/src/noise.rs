//! `cargo xtask test --noisy[=PERCENT]`: a busy neighbour on every CPU while the integration
//! tests run, a stand-in for another machine of this kind or a shared host. Each CPU gets a
//! thread pinned to it that spins PERCENT of each cycle and sleeps the rest, so every test's
//! bounds are tried with the scheduler sharing each CPU, as it does on a busy host. The cycles
//! are drawn between 5 and 15 ms: a fixed 10 ms one, its sleeps overshooting to ~10.1 ms, locks
//! in step with a 99 Hz sampler's timer and leans every per-CPU grid (srvprof's and perf's)
//! toward or away from the neighbour for a whole test, as no busy host does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The duty cycle's mean period: shorter than a test's measured seconds, longer than a time slice.
const CYCLE: Duration = Duration::from_millis(10);

/// The default share of each CPU the neighbour takes.
pub const DEFAULT_PERCENT: u32 = 25;

/// The neighbour's threads; dropping it stops them.
pub struct Noise {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Noise {
    /// Starts one spinning thread per online CPU, each busy `percent` of the time.
    pub fn start(percent: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let percent = percent.min(100);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = (0..cpus)
            .map(|cpu| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    pin_to(cpu);
                    let mut draw = fastrand::Rng::new();
                    while !stop.load(Ordering::Relaxed) {
                        let cycle = CYCLE / 2 + CYCLE.mul_f64(draw.f64());
                        let busy = cycle * percent / 100;
                        let start = Instant::now();
                        while start.elapsed() < busy {
                            std::hint::spin_loop();
                        }
                        std::thread::sleep(cycle.saturating_sub(start.elapsed()));
                    }
                })
            })
            .collect();
        eprintln!(
            "xtask {}: a neighbour busy {percent}% of each of {cpus} CPUs",
            crate::elapsed()
        );
        Self { stop, threads }
    }
}

impl Drop for Noise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity on the calling thread
    // have no other preconditions.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Takes `--noisy` or `--noisy=PERCENT` out of the test arguments: the neighbour's share, if any.
pub fn take_flag(args: &mut Vec<String>) -> anyhow::Result<Option<u32>> {
    let Some(i) = args
        .iter()
        .position(|a| a == "--noisy" || a.starts_with("--noisy="))
    else {
        return Ok(None);
    };
    let arg = args.remove(i);
    match arg.strip_prefix("--noisy=") {
        None => Ok(Some(DEFAULT_PERCENT)),
        Some(p) => match p.parse::<u32>() {
            Ok(p) if (1..=90).contains(&p) => Ok(Some(p)),
            _ => anyhow::bail!(
                "--noisy={p}: give the neighbour's share of each CPU as a percentage from 1 to 90"
            ),
        },
    }
}
