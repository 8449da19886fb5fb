//! One module per subcommand.

pub mod check;
pub mod compare;
pub mod explain;
pub mod merge;
pub mod plan;
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

/// What `probe` and `run` do first: from here on a Ctrl-C or SIGTERM ends the run cleanly (the
/// flag returned), and the privileges and the kernel BTF the probes need are there.
pub fn prepare_to_probe() -> Result<Arc<AtomicBool>, crate::error::SrvprofError> {
    let stop = stop_flag();
    if !crate::procfs::has_bpf_privileges() {
        return Err(crate::error::SrvprofError::NotRoot);
    }
    crate::probes::btf_offsets::require_kernel_btf()?;
    Ok(stop)
}
