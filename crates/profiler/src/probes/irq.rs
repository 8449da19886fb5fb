//! Reads the interrupt probes: softirqs per vector and hardirqs per line, per CPU.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use srvprof_common::{CountTime, NR_SOFTIRQS, SoftirqSlot, maps};

use super::family::{Attaching, FamilyReader};
use super::{Family, map_error, map_ref};
use crate::error::SrvprofError;
use srvprof_analysis::record::{CountNs, KernelCounters};

/// Attached by the probes' loop, each to the BTF tracepoint of its name (in sampled mode the
/// softirq ones for the syscall programs' window).
pub const PROGRAMS: &[&str] = &[
    SOFTIRQ_PROGRAMS[0],
    SOFTIRQ_PROGRAMS[1],
    "irq_handler_entry",
    "irq_handler_exit",
];
/// The programs that time softirqs.
pub const SOFTIRQ_PROGRAMS: [&str; 2] = ["softirq_entry", "softirq_exit"];

pub struct Reader;

impl FamilyReader for Reader {
    const PROGRAMS: &'static [&'static str] = PROGRAMS;
    const SKIP: Option<Family> = Some(Family::Irq);

    fn attach(_: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        Ok(Self)
    }

    fn read(&mut self, ebpf: &mut Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
        read(ebpf, counters)
    }
}

fn count_ns(ct: &CountTime) -> CountNs {
    CountNs {
        count: ct.count,
        total_ns: ct.total_ns,
    }
}

pub fn read(ebpf: &Ebpf, counters: &mut KernelCounters) -> Result<(), SrvprofError> {
    let soft: PerCpuArray<&MapData, SoftirqSlot> = map_ref(ebpf, maps::SOFTIRQS)?;
    let ncpus = aya::util::nr_cpus().unwrap_or(1);
    counters.softirqs = vec![vec![CountNs::default(); NR_SOFTIRQS as usize]; ncpus];
    for vec in 0..NR_SOFTIRQS {
        let per_cpu = soft
            .get(&vec, 0)
            .map_err(|e| map_error(maps::SOFTIRQS, e))?;
        for (cpu, ct) in per_cpu.iter().enumerate().take(ncpus) {
            counters.softirqs[cpu][vec as usize] = CountNs {
                count: ct.count,
                total_ns: ct.total_ns,
            };
        }
    }
    let hard: PerCpuHashMap<&MapData, u32, CountTime> = map_ref(ebpf, maps::HARDIRQS)?;
    counters.hardirqs.clear();
    for entry in hard.iter() {
        let (irq, per_cpu) = entry.map_err(|e| map_error(maps::HARDIRQS, e))?;
        counters
            .hardirqs
            .push((irq, per_cpu.iter().take(ncpus).map(count_ns).collect()));
    }
    counters.hardirqs.sort_by_key(|(irq, _)| *irq);
    Ok(())
}
