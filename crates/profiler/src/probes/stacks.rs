//! Attaches the stack programs (cpu-clock sampling on every online CPU, off-CPU on sched_switch)
//! and reads the stack counts and frames once, at the end of a run.

use std::collections::HashMap as StdHashMap;

use aya::{
    Btf, Ebpf,
    maps::{HashMap, MapData, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use srvprof_analysis::unwind_quality::UnwindEnd;
use srvprof_common::{StackKey, maps};

use super::{attach_one, map_error, map_ref};
use crate::error::{Cause, SrvprofError};
use crate::stacks::ids::{KERNEL_ID_BASE, UNWOUND_ID_BASE};
use crate::stacks::timed::{Row, StackRef};
use crate::stacks::unwind::UnwoundStacks;

pub const ONCPU_PROGRAM: &str = "oncpu_sample";
pub const OFFCPU_PROGRAM: &str = "offcpu_switch";

/// Stack counts as the kernel aggregated them, with the frames of every stack id they use.
#[derive(Clone, Debug, Default)]
pub struct RawStacks {
    /// cpu-clock samples.
    pub oncpu: Counts,
    /// Off-CPU nanoseconds.
    pub offcpu: Counts,
    /// Per off-CPU stack unwound in user space, the periods its drawn ones stand for.
    pub offcpu_periods: StdHashMap<StackKey, u64>,
    /// stack id -> instruction pointers, leaf first.
    pub frames: StdHashMap<i32, Vec<u64>>,
    /// User stack id (unwound in user space) -> how its unwinding ended.
    pub ends: StdHashMap<i32, UnwindEnd>,
    /// Sampling frequency, Hz.
    pub sample_hz: u64,
    /// The length of the intervals the rows are in (ns), when the run's grid became known.
    pub interval_ns: Option<u64>,
    /// Per process, its executable mappings as last read while it ran (lines of
    /// /proc/PID/maps): what names the frames of a process gone by the end.
    pub maps: StdHashMap<u32, String>,
    /// Per (group, off-CPU), the stacks unwound in user space and the bytes of user stack their
    /// samples copied.
    pub copied: StdHashMap<(u32, bool), (u64, u64)>,
}

/// Values per stack over the whole run, and per interval of the run's grid.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Each stack once, with its whole-run total.
    pub stacks: Vec<(StackKey, u64)>,
    /// What of a stack's total (`stack`: its index in `stacks`) fell in each interval (k: the
    /// interval starting k intervals after the measured window's start). The rest of a total
    /// was counted without a time: on-CPU samples the ring had no room for, off-CPU time of
    /// processes shown by the kernel's keys.
    pub rows: Vec<Row>,
}

impl Counts {
    /// Adds to a stack's total; its index.
    fn add(&mut self, index: &mut StdHashMap<StackKey, u32>, key: StackKey, value: u64) -> u32 {
        let i = *index.entry(key).or_insert_with(|| {
            self.stacks.push((key, 0));
            (self.stacks.len() - 1) as u32
        });
        self.stacks[i as usize].1 += value;
        i
    }

    /// Adds to a stack's total, in an interval.
    fn add_timed(
        &mut self,
        index: &mut StdHashMap<StackKey, u32>,
        key: StackKey,
        interval: i64,
        value: u64,
    ) {
        let stack = self.add(index, key, value);
        self.rows.push(Row {
            interval,
            stack,
            value,
        });
    }
}

/// The off-CPU program, on sched_switch.
pub fn attach_offcpu(ebpf: &mut Ebpf, btf: &Btf) -> Result<(), SrvprofError> {
    attach_one(ebpf, btf, OFFCPU_PROGRAM, "sched_switch")
}

/// aya could not read the online CPUs from `what` (a file under /sys); `source` says why.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
struct OnlineCpusError {
    what: &'static str,
    #[source]
    source: std::io::Error,
}

/// The on-CPU sampler's period at `hz` samples a second, ns.
pub fn period_ns(hz: u64) -> u64 {
    1_000_000_000 / hz.max(1)
}

/// The on-CPU sampler: the software cpu-clock event on every online CPU.
pub fn attach_sampler(ebpf: &mut Ebpf, hz: u64) -> Result<(), SrvprofError> {
    let load_err = |source: Cause| SrvprofError::ProgramLoad {
        program: ONCPU_PROGRAM.into(),
        source,
    };
    let prog: &mut PerfEvent = ebpf
        .program_mut(ONCPU_PROGRAM)
        .ok_or_else(|| load_err("not in the BPF object".into()))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| load_err(e.into()))?;
    prog.load().map_err(|e| load_err(e.into()))?;
    let cpus = aya::util::online_cpus()
        .map_err(|(what, source)| load_err(OnlineCpusError { what, source }.into()))?;
    let period_ns = period_ns(hz);
    // The CPUs' timers are spread over the period, not started together: a sample's program
    // (copying the stack, ~10 us) delays whatever its CPU was doing, a lock holder included,
    // and another CPU sampling at that same moment would catch its threads waiting on it
    // (measured: 43-86 % of nginx's samples in a spinlock's slow path, none by perf).
    let stagger = std::time::Duration::from_nanos(period_ns / cpus.len().max(1) as u64);
    for (i, cpu) in cpus.into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(stagger);
        }
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            // cpu-clock counts nanoseconds: a fixed period of 1e9/hz samples at exactly hz per
            // second of CPU time, without the burst of frequency mode's adaptive start.
            SamplePolicy::Period(period_ns),
            false,
        )
        .map_err(|e| SrvprofError::ProgramAttach {
            program: ONCPU_PROGRAM.into(),
            tracepoint: format!("perf_event cpu-clock on CPU {cpu}"),
            source: e.into(),
        })?;
    }
    Ok(())
}

/// Off-CPU time per thread name of a process and syscall slept in (tgid, comm, syscall).
pub type Who = (u32, [u8; 16], u32);
pub type OffcpuTotals = StdHashMap<Who, u64>;

fn who(k: &StackKey) -> Who {
    (k.tgid, k.comm, k.syscall)
}

fn totals_of(exact: &[(StackKey, u64)]) -> OffcpuTotals {
    let mut out = StdHashMap::new();
    for (key, ns) in exact {
        *out.entry(who(key)).or_default() += ns;
    }
    out
}

/// The kernel's exact off-CPU time so far per thread name and syscall: read when the run's
/// interval grid starts, so that the draws before and after it are each scaled to their own.
pub fn offcpu_totals(ebpf: &Ebpf) -> Result<OffcpuTotals, SrvprofError> {
    let map: HashMap<&MapData, StackKey, u64> = map_ref(ebpf, maps::OFFCPU_STACKS)?;
    let exact: Vec<(StackKey, u64)> = map.iter().filter_map(Result::ok).collect();
    Ok(totals_of(&exact))
}

/// A process's off-CPU stacks are the ones unwound in user space once this many of its periods
/// were (a sample of them, scaled to the kernel's exact total); below, the kernel's walk.
pub const MIN_OFFCPU_UNWOUND_PERIODS: u64 = 10;

/// The kernel's counts and frames, with the stacks unwound in user space.
///
/// On-CPU, every sample is unwound (the kernel counts only those the ring had no room for).
/// Off-CPU, the kernel times every period, a draw of them (OFFCPU_UNWIND_PER_S) with their
/// stacks, the rest under their thread's name and syscall alone: for a process with enough drawn
/// periods, each thread name's exact off-CPU total in each syscall is shared among the unwound
/// stacks in it in proportion to their weighted times (none drawn: the thread's "[no stack]").
/// Otherwise the kernel's keys are shown as they are, the undrawn time as
/// the thread's "[no stack]".
pub fn read(
    ebpf: &Ebpf,
    sample_hz: u64,
    mut unwound: UnwoundStacks,
    grid: Option<(u64, u64)>,
    at_grid: Option<&OffcpuTotals>,
) -> Result<RawStacks, SrvprofError> {
    let counts = |name: &str| -> Result<Vec<(StackKey, u64)>, SrvprofError> {
        let map: HashMap<&MapData, StackKey, u64> = map_ref(ebpf, name)?;
        Ok(map.iter().filter_map(Result::ok).collect())
    };
    let traces: StackTraceMap<&MapData> = map_ref(ebpf, maps::STACK_TRACES)?;
    let kernel_frames = |id: i32| -> Result<Vec<u64>, SrvprofError> {
        let trace = traces
            .get(&(id as u32), 0)
            .map_err(|e| map_error(maps::STACK_TRACES, e))?;
        Ok(trace.frames().iter().map(|f| f.ip).collect())
    };
    let mut frames = StdHashMap::new();
    let mut ends = StdHashMap::new();
    // The key with its unwound user stack's id (the kernel took none: its user_stack_id is -1).
    // None unwound, a sample of a process gone before it was, keeps -1 and shows the kernel
    // frames alone.
    // The syscall only shares the time out: a stack's lines are one whatever it was.
    let with_unwound = |(mut key, user): StackRef| -> StackKey {
        if user >= 0 {
            key.user_stack_id = user;
        }
        key.syscall = 0;
        key
    };

    let on = std::mem::take(&mut unwound.oncpu).finish(grid);
    let (mut oncpu, mut index) = (Counts::default(), StdHashMap::new());
    for r in on.rows.iter() {
        let key = with_unwound(on.stacks[r.stack as usize]);
        oncpu.add_timed(&mut index, key, r.interval, r.value);
    }
    for &(id, n) in &on.untimed {
        oncpu.add(&mut index, with_unwound(on.stacks[id as usize]), n);
    }
    for (key, n) in counts(maps::ONCPU_STACKS)? {
        oncpu.add(&mut index, key, n);
    }

    // Off-CPU time is shared out per thread name of a process and syscall slept in (tgid,
    // comm, syscall): a busy thread's sampled periods, each standing for many, vary more than
    // a quiet thread's, and its rare long wait in one syscall more than its frequent short ones
    // in another; one total for all would let that noise move time between them.
    let off = std::mem::take(&mut unwound.offcpu).finish(grid);
    let exact = counts(maps::OFFCPU_STACKS)?;
    let exact_total = totals_of(&exact);
    // Each phase's draws are scaled to its own exact time when the totals were read at the
    // grid's start: the periods before it (the grid's negative intervals, or no grid) and
    // those after it (a rare wait drawn a few times would otherwise take its share of the whole
    // run's time in whichever phase its draws fell).
    let before = |who: &Who| at_grid.map(|t| t.get(who).copied().unwrap_or(0));
    let (mut sampled_rows, mut sampled_before) = (OffcpuTotals::new(), OffcpuTotals::new());
    for r in off.rows.iter() {
        let phase = match r.interval >= 0 {
            true => &mut sampled_rows,
            false => &mut sampled_before,
        };
        *phase
            .entry(who(&off.stacks[r.stack as usize].0))
            .or_default() += r.value;
    }
    for &(id, w) in &off.untimed {
        *sampled_before
            .entry(who(&off.stacks[id as usize].0))
            .or_default() += w;
    }
    let sampled_total = |who: &Who| {
        sampled_rows.get(who).copied().unwrap_or(0) + sampled_before.get(who).copied().unwrap_or(0)
    };
    let from_cfi = |k: &StackKey| {
        unwound.offcpu_periods.get(&k.tgid).copied().unwrap_or(0) >= MIN_OFFCPU_UNWOUND_PERIODS
            && sampled_total(&who(k)) > 0
    };
    // `timed`: a period after the grid's start, else one before it.
    let scaled = |key: &StackKey, w: u64, timed: bool| -> u64 {
        let who = who(key);
        let total = exact_total.get(&who).copied().unwrap_or(0);
        let (sampled, exact) = match (before(&who), timed) {
            (Some(b), true) => (sampled_rows.get(&who).copied(), total.saturating_sub(b)),
            (Some(b), false) => (sampled_before.get(&who).copied(), b),
            (None, _) => (Some(sampled_total(&who)), total),
        };
        let scale = match sampled.filter(|s| *s > 0) {
            Some(s) => exact as f64 / s as f64,
            None => total as f64 / sampled_total(&who) as f64,
        };
        (w as f64 * scale).round() as u64
    };
    let (mut offcpu, mut index) = (Counts::default(), StdHashMap::new());
    // Shown as the kernel keyed them, one line per stack whatever the syscall; a thread's time
    // with no stack drawn, per syscall (the syscall names the wait when nothing else does).
    for (key, ns) in exact.iter().filter(|(k, _)| !from_cfi(k)) {
        let key = match key.user_stack_id < 0 && key.kernel_stack_id < 0 {
            true => *key,
            false => StackKey { syscall: 0, ..*key },
        };
        offcpu.add(&mut index, key, *ns);
    }
    // Each drawn stack's time before and after scaling: its periods are scaled alike, so that
    // its time over its periods stays its drawn periods' mean length.
    let mut drawn: StdHashMap<StackRef, (u64, u64)> = StdHashMap::new();
    for r in off.rows.iter() {
        let stack = off.stacks[r.stack as usize];
        if from_cfi(&stack.0) {
            let ns = scaled(&stack.0, r.value, r.interval >= 0);
            let d = drawn.entry(stack).or_default();
            *d = (d.0 + r.value, d.1 + ns);
            offcpu.add_timed(&mut index, with_unwound(stack), r.interval, ns);
        }
    }
    for &(id, w) in &off.untimed {
        let stack = off.stacks[id as usize];
        if from_cfi(&stack.0) {
            let ns = scaled(&stack.0, w, false);
            let d = drawn.entry(stack).or_default();
            *d = (d.0 + w, d.1 + ns);
            offcpu.add(&mut index, with_unwound(stack), ns);
        }
    }

    for (key, _) in oncpu.stacks.iter().chain(offcpu.stacks.iter()) {
        for id in [key.user_stack_id, key.kernel_stack_id] {
            if id < 0 || frames.contains_key(&id) {
                continue;
            }
            if id >= KERNEL_ID_BASE {
                if let Some(kernel) = unwound.kernel_stack(id) {
                    frames.insert(id, kernel);
                }
            } else if id >= UNWOUND_ID_BASE {
                if let Some(user) = unwound.user_stack(id) {
                    ends.insert(id, user.end);
                    frames.insert(id, user.frames);
                }
            } else {
                frames.insert(id, kernel_frames(id)?);
            }
        }
    }
    let mut offcpu_periods = StdHashMap::new();
    for (&stack, &periods) in &unwound.offcpu_drawn {
        if from_cfi(&stack.0) {
            let (raw, ns) = drawn.get(&stack).copied().unwrap_or((1, 1));
            let periods = (periods as f64 * ns as f64 / raw.max(1) as f64).round() as u64;
            *offcpu_periods.entry(with_unwound(stack)).or_default() += periods;
        }
    }
    Ok(RawStacks {
        oncpu,
        offcpu,
        offcpu_periods,
        frames,
        ends,
        sample_hz,
        interval_ns: grid.map(|(_, interval)| interval),
        maps: std::mem::take(&mut unwound.maps),
        copied: std::mem::take(&mut unwound.copied),
    })
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn online_cpus_error_reads_as_before_and_keeps_the_io_error() {
        let e = SrvprofError::ProgramLoad {
            program: ONCPU_PROGRAM.into(),
            source: OnlineCpusError {
                what: "/sys/devices/system/cpu/online",
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            }
            .into(),
        };
        assert_eq!(
            e.to_string(),
            "the eBPF program oncpu_sample could not be loaded (/sys/devices/system/cpu/online: No such file or directory (os error 2)); run `srvprof check` to see which prerequisite is missing"
        );
        let io = e.source().unwrap().source().unwrap();
        assert!(io.is::<std::io::Error>());
    }
}
