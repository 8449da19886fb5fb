//! Reads the syscall probes.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use srvprof_common::{MAX_SYSCALL_NR, NUM_GROUPS, SyscallTable, maps};

use super::{map_error, map_ref};
use crate::error::SrvprofError;
use srvprof_analysis::record::{CountNs, KernelCounters};

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuArray<&MapData, SyscallTable> = map_ref(ebpf, maps::SYSCALLS)?;
    counters.syscalls.clear();
    for group in 0..NUM_GROUPS {
        let per_cpu = map
            .get(&group, 0)
            .map_err(|e| map_error(maps::SYSCALLS, e))?;
        for nr in 0..MAX_SYSCALL_NR {
            let mut total = CountNs::default();
            for table in per_cpu.iter() {
                let ct = &table.by_nr[nr as usize];
                total.count += ct.count;
                total.total_ns += ct.total_ns;
            }
            if total.count > 0 {
                counters.syscalls.push((group, nr, total));
            }
        }
    }
    Ok(())
}
