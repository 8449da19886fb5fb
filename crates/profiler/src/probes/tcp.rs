//! Reads the TCP probes: retransmits by kind, resets.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use srvprof_common::{maps, tcp};

use super::{map_error, map_ref};
use crate::counters::KernelCounters;
use crate::error::SrvprofError;

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let map: PerCpuArray<&MapData, u64> = map_ref(ebpf, maps::TCP_COUNTERS)?;
    counters.tcp = vec![0; tcp::COUNT as usize];
    for i in 0..tcp::COUNT {
        let per_cpu = map
            .get(&i, 0)
            .map_err(|e| map_error(maps::TCP_COUNTERS, e))?;
        counters.tcp[i as usize] = per_cpu.iter().sum();
    }
    Ok(())
}
