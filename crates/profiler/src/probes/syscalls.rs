//! Reads the syscall probes, and names x86_64 syscalls.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap},
};
use srvprof_common::{CountTime, SyscallKey, maps};

use super::{map_error, map_ref};
use crate::counters::{CountNs, KernelCounters};
use crate::error::SrvprofError;

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuHashMap<&MapData, SyscallKey, CountTime> = map_ref(ebpf, maps::SYSCALLS)?;
    counters.syscalls.clear();
    for entry in map.iter() {
        let (key, per_cpu) = entry.map_err(|e| map_error(maps::SYSCALLS, e))?;
        let mut total = CountNs::default();
        for ct in per_cpu.iter() {
            total.count += ct.count;
            total.total_ns += ct.total_ns;
        }
        counters.syscalls.push((key.group, key.nr, total));
    }
    counters.syscalls.sort_by_key(|(g, nr, _)| (*g, *nr));
    Ok(())
}

/// The syscall's name on this architecture, or `syscall_N`.
pub fn syscall_name(nr: u32) -> String {
    syscalls::Sysno::new(nr as usize)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall_{nr}"))
}
