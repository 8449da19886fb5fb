//! One module per subcommand.

pub mod check;
pub mod compare;
pub mod probe;
pub mod report;
pub mod run;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// A flag set by Ctrl-C or SIGTERM, so a run stops early and still writes what it measured.
pub fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
    }
    stop
}

/// Sleeps up to `dur`, waking early when `stop` is set.
pub fn sleep_unless_stopped(dur: std::time::Duration, stop: &AtomicBool) {
    let end = std::time::Instant::now() + dur;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(std::time::Duration::from_millis(50)));
    }
}
