//! What a probe family's userspace half does. Each probes/X.rs that declares a `Reader` is found
//! by build.rs and joined up in `Readers`: its programs go in the attach loop, its `attach` runs
//! once they are attached and its `read` at every reading, with no line outside its own file.

use aya::Ebpf;
use srvprof_analysis::record::KernelCounters;

use super::{Family, ProbeTargets, TcpNames};
use crate::error::SrvprofError;

/// What a family's `attach` has to work with.
pub(crate) struct Attaching<'a> {
    pub ebpf: &'a mut Ebpf,
    pub targets: &'a ProbeTargets,
    /// The kernel's names of TCP states and reset reasons (read from its BTF before loading).
    pub tcp_names: &'a TcpNames,
    /// Hears each program a family attaches its own way (for `check`).
    pub on_attach: &'a mut dyn FnMut(&str, Result<(), &SrvprofError>),
}

impl Attaching<'_> {
    /// Whether `--skip-probes` leaves `family` detached.
    pub fn skips(&self, family: Family) -> bool {
        self.targets.skip.contains(&family)
    }
}

/// Programs a family attaches its own way, each with its ELF section (`uprobe`, ...).
pub(crate) type OwnPrograms = &'static [(&'static str, &'static str)];

/// A family's userspace half: its programs, how it attaches what the loop does not, and how it
/// reads its maps into the record.
pub(crate) trait FamilyReader: Sized {
    /// Its programs attached by Probes::attach's loop, each to the BTF tracepoint of its name.
    const PROGRAMS: &'static [&'static str] = &[];
    /// The programs it attaches its own way.
    const OWN_PROGRAMS: OwnPrograms = &[];
    /// The `--skip-probes` switch that leaves its programs detached (None: they always attach).
    const SKIP: Option<Family> = None;

    /// Once the loop has attached every family's PROGRAMS: attaches the rest, keeps what its
    /// readings need.
    fn attach(at: &mut Attaching<'_>) -> Result<Self, SrvprofError>;

    /// At every reading: its maps into the record.
    fn read(
        &mut self,
        _ebpf: &mut Ebpf,
        _counters: &mut KernelCounters,
    ) -> Result<(), SrvprofError> {
        Ok(())
    }
}
