//! Reads the syscall probes, and names x86_64 syscalls.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use srvprof_common::{CountTime, MAX_SYSCALL_NR, maps};

use super::{map_error, map_ref};
use crate::counters::{CountNs, KernelCounters};
use crate::error::SrvprofError;

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuArray<&MapData, CountTime> = map_ref(ebpf, maps::SYSCALLS)?;
    counters.syscalls.clear();
    for (index, per_cpu) in map.iter().enumerate() {
        let per_cpu = per_cpu.map_err(|e| map_error(maps::SYSCALLS, e))?;
        let mut total = CountNs::default();
        for ct in per_cpu.iter() {
            total.count += ct.count;
            total.total_ns += ct.total_ns;
        }
        if total.count > 0 {
            let index = index as u32;
            counters
                .syscalls
                .push((index / MAX_SYSCALL_NR, index % MAX_SYSCALL_NR, total));
        }
    }
    Ok(())
}

/// The syscall's name on this architecture, or `syscall_N`.
pub fn syscall_name(nr: u32) -> String {
    syscalls::Sysno::new(nr as usize)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall_{nr}"))
}
