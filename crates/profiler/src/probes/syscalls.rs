//! Reads the syscall probes.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use srvprof_common::{BlockedTable, MAX_SYSCALL_NR, NUM_GROUPS, SyscallTable, maps};

use super::family::{Attaching, FamilyReader};
use super::{map_error, map_ref};
use crate::error::SrvprofError;
use srvprof_analysis::record::{CountNs, KernelCounters};

/// The programs that count and time syscalls (skipped with ProbeTargets::skip_syscalls), attached
/// by the probes' loop, each to the BTF tracepoint of its name.
pub const PROGRAMS: &[&str] = &["sys_enter", "sys_exit"];

pub struct Reader;

impl FamilyReader for Reader {
    const PROGRAMS: &'static [&'static str] = PROGRAMS;

    fn attach(_: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        Ok(Self)
    }

    fn read(&mut self, ebpf: &mut Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
        read(ebpf, counters)
    }
}

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuArray<&MapData, SyscallTable> = map_ref(ebpf, maps::SYSCALLS)?;
    let blocked_map: PerCpuArray<&MapData, BlockedTable> = map_ref(ebpf, maps::BLOCKED_SYSCALLS)?;
    counters.syscalls.clear();
    let mut unblocked = Vec::new();
    let mut blocked = Vec::new();
    for group in 0..NUM_GROUPS {
        let per_cpu = map
            .get(&group, 0)
            .map_err(|e| map_error(maps::SYSCALLS, e))?;
        let blocked_per_cpu = blocked_map
            .get(&group, 0)
            .map_err(|e| map_error(maps::BLOCKED_SYSCALLS, e))?;
        for nr in 0..MAX_SYSCALL_NR {
            let (mut total, mut rest, mut asleep) =
                (CountNs::default(), CountNs::default(), CountNs::default());
            for table in per_cpu.iter() {
                let slot = &table.by_nr[nr as usize];
                total.count += slot.count;
                total.total_ns += slot.total_ns;
                rest.count += slot.unblocked;
                rest.total_ns += slot.rest_ns;
            }
            for table in blocked_per_cpu.iter() {
                let ct = &table.by_nr[nr as usize];
                asleep.count += ct.count;
                asleep.total_ns += ct.total_ns;
            }
            if total.count > 0 {
                counters.syscalls.push((group, nr, total));
            }
            if rest.count > 0 || rest.total_ns > 0 {
                unblocked.push((group, nr, rest));
            }
            if asleep.count > 0 {
                blocked.push((group, nr, asleep));
            }
        }
    }
    counters.unblocked_syscalls = Some(unblocked);
    counters.blocked_syscalls = Some(blocked);
    Ok(())
}
