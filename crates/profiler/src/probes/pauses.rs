//! Reads and attaches the stop-the-world programs (crates/ebpf/src/pauses.rs): uprobes at a
//! runtime's functions that stop and restart every thread of a process, attached to each server
//! process whose code has them.

use std::num::NonZeroU32;
use std::path::PathBuf;

use aya::Ebpf;
use aya::programs::{UProbe, uprobe::UProbeScope};
use srvprof_common::{NUM_GROUPS, PauseStats, maps};

use super::family::{Attaching, FamilyReader, OwnPrograms};
use super::sched::map_entries;
use super::{Family, read_histograms};
use crate::error::SrvprofError;
use srvprof_analysis::kernel_report::pauses::PauseRecord;
use srvprof_analysis::record::KernelCounters;

pub const STOP_PROGRAM: &str = "world_stops";
pub const START_PROGRAM: &str = "world_starts";

/// The server processes whose pauses are timed, and their runtime.
pub struct Reader {
    paused: Vec<(u32, &'static str)>,
}

impl FamilyReader for Reader {
    const OWN_PROGRAMS: OwnPrograms = &[(STOP_PROGRAM, "uprobe"), (START_PROGRAM, "uprobe")];
    const SKIP: Option<Family> = Some(Family::Pauses);

    fn attach(at: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        let pids = match at.skips(Family::Pauses) {
            true => &[][..],
            false => &at.targets.server_pids[..],
        };
        let result = attach(at.ebpf, pids);
        for program in [STOP_PROGRAM, START_PROGRAM] {
            (at.on_attach)(program, result.as_ref().map(|_| ()));
        }
        Ok(Self { paused: result? })
    }

    fn read(&mut self, ebpf: &mut Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
        let out = &mut counters.families.pauses;
        out.pauses = read(ebpf)?;
        out.pause_hist = read_histograms(ebpf, maps::PAUSE_HIST, NUM_GROUPS)?;
        for p in &mut out.pauses {
            if let Some((_, runtime)) = self.paused.iter().find(|(pid, _)| *pid == p.pid) {
                p.runtime = runtime.to_string();
            }
        }
        Ok(())
    }
}

/// A runtime that stops the world: where its code is in a process, and the functions that stop
/// and restart the world.
struct Runtime {
    name: &'static str,
    object: fn(u32) -> Option<PathBuf>,
    stop: &'static str,
    start: &'static str,
}

const RUNTIMES: [Runtime; 2] = [
    Runtime {
        name: "go",
        object: executable,
        stop: "runtime.stopTheWorldWithSema",
        start: "runtime.startTheWorldWithSema",
    },
    Runtime {
        name: "hotspot",
        object: libjvm,
        stop: "_ZN20SafepointSynchronize5beginEv",
        start: "_ZN20SafepointSynchronize3endEv",
    },
];

fn executable(pid: u32) -> Option<PathBuf> {
    Some(crate::procfs::files::exe(pid))
}

/// The libjvm.so the process has mapped, through its own root (a container's path).
fn libjvm(pid: u32) -> Option<PathBuf> {
    let maps = crate::procfs::maps::parse(&crate::procfs::maps::read(pid));
    let jvm = maps.iter().find(|m| m.path.ends_with("/libjvm.so"))?;
    Some(crate::procfs::files::in_root(pid, &jvm.path))
}

/// Loads both programs and attaches them to each of `pids` whose runtime has the functions.
/// Returns the (pid, runtime) pairs watched; a process with neither runtime is left alone.
fn attach(ebpf: &mut Ebpf, pids: &[u32]) -> Result<Vec<(u32, &'static str)>, SrvprofError> {
    for program in [STOP_PROGRAM, START_PROGRAM] {
        uprobe(ebpf, program)?
            .load()
            .map_err(|e| SrvprofError::ProgramLoad {
                program: program.into(),
                source: e.into(),
            })?;
    }
    let mut watched = Vec::new();
    for &pid in pids {
        let Some(scope) = NonZeroU32::new(pid).map(UProbeScope::OneProcess) else {
            continue;
        };
        for rt in &RUNTIMES {
            let Some(object) = (rt.object)(pid) else {
                continue;
            };
            // Both or neither: a stop without its start would never end.
            let stop = uprobe(ebpf, STOP_PROGRAM)?.attach(rt.stop, &object, scope);
            let Ok(stop) = stop else { continue };
            match uprobe(ebpf, START_PROGRAM)?.attach(rt.start, &object, scope) {
                Ok(_) => {
                    watched.push((pid, rt.name));
                    break;
                }
                Err(_) => {
                    let _ = uprobe(ebpf, STOP_PROGRAM)?.detach(stop);
                }
            }
        }
    }
    Ok(watched)
}

fn uprobe<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe, SrvprofError> {
    let program = ebpf
        .program_mut(name)
        .ok_or_else(|| SrvprofError::ProgramLoad {
            program: name.into(),
            source: "not in the BPF object".into(),
        })?;
    program
        .try_into()
        .map_err(|e: aya::programs::ProgramError| SrvprofError::ProgramLoad {
            program: name.into(),
            source: e.into(),
        })
}

/// Every watched process's pauses so far.
fn read(ebpf: &Ebpf) -> Result<Vec<PauseRecord>, SrvprofError> {
    map_entries(ebpf, maps::PAUSES, |pid: u32, p: PauseStats| PauseRecord {
        pid,
        group: p.group,
        runtime: String::new(),
        pauses: p.count,
        total_ns: p.total_ns,
        max_ns: p.max_ns,
    })
}
