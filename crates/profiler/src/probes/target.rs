//! Which processes are watched: the userspace half of crates/ebpf/src/target.rs. TARGET_TGIDS maps
//! each watched process to its group; TARGET_BITMAP is the in-kernel prefilter every event passes
//! first. (The task_struct offsets that file also reads are found in btf_offsets.rs.)

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray},
};
use srvprof_common::{TARGET_BITMAP_WORDS, lost, maps};

use super::{map_error, map_mut, map_ref};
use crate::error::SrvprofError;

/// The events each LOST_EVENTS index counts, summed over the CPUs (srvprof_common::lost).
pub fn lost(ebpf: &Ebpf) -> Result<Vec<u64>, SrvprofError> {
    let map: PerCpuArray<&MapData, u64> = map_ref(ebpf, maps::LOST_EVENTS)?;
    (0..lost::COUNT)
        .map(|i| {
            let per_cpu = map
                .get(&i, 0)
                .map_err(|e| map_error(maps::LOST_EVENTS, e))?;
            Ok(per_cpu.iter().sum())
        })
        .collect()
}

/// Watches these processes as `group` (server or client): the hash first, then the prefilter bits.
pub fn add(ebpf: &mut Ebpf, pids: &[u32], group: u32) -> Result<(), SrvprofError> {
    {
        let mut tgids: HashMap<&mut MapData, u32, u32> = map_mut(ebpf, maps::TARGET_TGIDS)?;
        for pid in pids {
            tgids
                .insert(pid, group, 0)
                .map_err(|e| map_error(maps::TARGET_TGIDS, e))?;
        }
    }
    set_bits(ebpf, pids)
}

/// The processes watched now, with their group; children forked during the run included.
pub fn watched(ebpf: &Ebpf) -> Result<Vec<(u32, u32)>, SrvprofError> {
    let tgids: HashMap<&MapData, u32, u32> = map_ref(ebpf, maps::TARGET_TGIDS)?;
    Ok(tgids.iter().filter_map(Result::ok).collect())
}

/// Sets the TARGET_BITMAP bits of these processes. Two forks on two CPUs may race on one word,
/// so the bits of every watched process are set again before each reading: the hash is the truth.
pub fn set_bits(ebpf: &mut Ebpf, pids: &[u32]) -> Result<(), SrvprofError> {
    let mut bitmap: Array<&mut MapData, u64> = map_mut(ebpf, maps::TARGET_BITMAP)?;
    for &pid in pids {
        let word = pid / 64;
        if word >= TARGET_BITMAP_WORDS {
            continue; // beyond the bitmap: the programs fall back to the hash lookup
        }
        let bits = bitmap
            .get(&word, 0)
            .map_err(|e| map_error(maps::TARGET_BITMAP, e))?;
        let wanted = bits | (1u64 << (pid % 64));
        if wanted != bits {
            bitmap
                .set(word, wanted, 0)
                .map_err(|e| map_error(maps::TARGET_BITMAP, e))?;
        }
    }
    Ok(())
}
