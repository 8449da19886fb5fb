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
