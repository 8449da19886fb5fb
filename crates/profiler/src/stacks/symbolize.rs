//! Stack ids to names with blazesym: user frames per process (ELF symbols, DWARF where present),
//! kernel frames from kallsyms. A frame that does not resolve is kept as `module+0xoffset`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Elf, Kernel, Process, Source},
};
use blazesym::{MaybeDefault, Pid};

use srvprof_analysis::unwind_quality::UnwindTally;

use super::perf_map::StartMaps;
use crate::probes::sched::comm_string;
use crate::probes::stacks::RawStacks;
use crate::procfs::maps::{self as proc_maps, Mapping};
use crate::stacks::ids::UNWOUND_ID_BASE;
use srvprof_analysis::stacks::{FoldedStacks, GROUPS, LineSet, Module, StackKind};
use srvprof_common::{STACK_ID_COLLIDED, StackKey};

/// The kernel frame of a sample whose kernel stack was walked but not kept (its bucket in the
/// kernel's stack table held another stack).
pub const COLLIDED_FRAME: &str = "[kernel stack lost: stack table bucket taken]_[k]";
/// The same for a user stack the kernel walked (a sample the ring had no room for).
pub const COLLIDED_USER_FRAME: &str = "[user stack lost: stack table bucket taken]";

/// Names every frame of every counted stack. A process still running is named through
/// /proc/PID (its mappings, its files as its mount namespace has them). One gone by now (it
/// exited or died during the run) is named from its mappings as the unwinder last read them
/// (`raw.maps`) and the files they name, where the file on disk is still the one that was mapped
/// (same device and inode); other frames keep `module+0xoffset`.
/// JIT code is named from perf maps (`maps`: the JVMs' maps from the run's start, merged with
/// each process's map now). Each stack is named once, with its values per interval of the run
/// (their starts in ms since the measured window's start).
/// The probes' stacks of the run, named (`run` and `probe` alike): the JVMs' perf maps read
/// again first, with the code compiled during the run. None without stacks, or with a sentence
/// on stderr when they could not be read.
pub fn read_named(probes: &mut crate::probes::Probes, maps: &StartMaps) -> Option<FoldedStacks> {
    match probes.read_stacks() {
        Ok(raw) => raw.map(|raw| {
            let tgids: std::collections::BTreeSet<u32> = (raw.oncpu.stacks.iter())
                .chain(&raw.offcpu.stacks)
                .map(|(k, _)| k.tgid)
                .collect();
            let _ = super::perf_map::refresh(&tgids.into_iter().collect::<Vec<_>>());
            fold(&raw, maps)
        }),
        Err(e) => {
            eprintln!("srvprof: no stacks: {e}");
            None
        }
    }
}

pub fn fold(raw: &RawStacks, maps: &StartMaps) -> FoldedStacks {
    let symbolizer = Symbolizer::builder().enable_code_info(false).build();
    let keys = (raw.oncpu.stacks.iter())
        .chain(&raw.offcpu.stacks)
        .map(|(k, _)| k);

    // Kernel addresses of all stacks at once; user addresses per process.
    let mut kernel_addrs: Vec<u64> = Vec::new();
    let mut user_addrs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for key in keys {
        if let Some(f) = raw
            .frames
            .get(&key.kernel_stack_id)
            .filter(|_| key.kernel_stack_id >= 0)
        {
            kernel_addrs.extend(f);
        }
        if let Some(f) = raw
            .frames
            .get(&key.user_stack_id)
            .filter(|_| key.user_stack_id >= 0)
        {
            user_addrs.entry(key.tgid).or_default().extend(f);
        }
    }
    let kernel_src = Source::Kernel(Kernel {
        vmlinux: MaybeDefault::None,
        ..Kernel::default()
    });
    let kernel_names = names(&symbolizer, &kernel_src, kernel_addrs, |a| {
        format!("[kernel]+{a:#x}")
    });
    let mut user_names: HashMap<u32, HashMap<u64, String>> = HashMap::new();
    let mut frame_modules: BTreeMap<String, Module> = BTreeMap::new();
    let mut build_ids: HashMap<(u32, String), Option<String>> = HashMap::new();
    for (tgid, addrs) in user_addrs {
        let live = proc_maps::read(tgid);
        let gone = live.is_empty();
        let modules = match raw.maps.get(&tgid) {
            Some(last) if gone => ProcessMaps::parse(last),
            _ => ProcessMaps::parse(&live),
        };
        let jit = maps.with_current(tgid).unwrap_or_default();
        let fallback = |a: u64| {
            jit.name(a)
                .map(clean)
                .unwrap_or_else(|| modules.module_offset(a))
        };
        let named = if gone {
            names_from_files(&symbolizer, &modules, addrs, fallback)
        } else {
            // Perf maps are read here, not by blazesym: its parser refuses the JVM's 0x addresses.
            let mut process = Process::new(Pid::from(tgid));
            process.perf_map = false;
            names(&symbolizer, &Source::Process(process), addrs, fallback)
        };
        for (addr, name) in &named {
            let Some(file) = modules.file(*addr) else {
                continue;
            };
            let path = file.path.as_str();
            // The file as the process sees it (its mount namespace), read through its root; for
            // a process gone, the file on disk if it is still the one mapped.
            let build_id = (build_ids.entry((tgid, path.to_string())))
                .or_insert_with(|| match gone {
                    false => {
                        super::build_id::build_id_of(&crate::procfs::files::in_root(tgid, path))
                    }
                    true if file.still_on_disk() => super::build_id::build_id_of(Path::new(path)),
                    true => None,
                })
                .clone();
            frame_modules.entry(name.clone()).or_insert_with(|| Module {
                path: path.to_string(),
                build_id,
            });
        }
        user_names.insert(tgid, named);
    }

    // A stack's frames, and its user frames apart (outermost first).
    let frames_of = |key: &StackKey| -> (Vec<String>, Vec<String>) {
        let mut frames = vec![clean(&comm_string(&key.comm))];
        let mut user = Vec::new();
        if let (Some(f), Some(named), true) = (
            raw.frames.get(&key.user_stack_id),
            user_names.get(&key.tgid),
            key.user_stack_id >= 0,
        ) {
            user.extend(f.iter().rev().map(|a| named[a].clone()));
        }
        if key.user_stack_id == STACK_ID_COLLIDED {
            frames.push(COLLIDED_USER_FRAME.into());
        }
        frames.extend(user.iter().cloned());
        if let Some(f) = raw
            .frames
            .get(&key.kernel_stack_id)
            .filter(|_| key.kernel_stack_id >= 0)
        {
            // `_[k]` marks kernel frames, as FlameGraph and inferno colour them.
            frames.extend(f.iter().rev().map(|a| format!("{}_[k]", kernel_names[a])));
        } else if key.kernel_stack_id == STACK_ID_COLLIDED {
            // Taken in the kernel: not the user code's own time.
            frames.push(COLLIDED_FRAME.into());
        }
        if frames.len() == 1 {
            frames.push("[no stack]".into());
            // Off-CPU time with no stack drawn: the syscall it slept in (plus one), as the kernel
            // frame that enters it.
            if key.syscall > 0 {
                let name = srvprof_analysis::names::syscall_name(key.syscall - 1);
                frames.push(format!("__do_sys_{name}_[k]"));
            }
        }
        (frames, user)
    };
    let method = |key: &StackKey| {
        if key.user_stack_id >= UNWOUND_ID_BASE {
            "cfi"
        } else if key.user_stack_id >= 0 {
            "frame_pointers"
        } else {
            "none"
        }
    };
    let interval_ns = raw.interval_ns.unwrap_or(0) as i128;
    let at_ms = |interval: i64| (interval as i128 * interval_ns / 1_000_000) as i64;
    let mut quality = Vec::new();
    let mut stacks = FoldedStacks {
        interval_ms: raw.interval_ns.map(|ns| (ns / 1_000_000) as i64),
        modules: frame_modules,
        ..Default::default()
    };
    for kind in StackKind::ALL {
        let counts = match kind {
            StackKind::OnCpu => &raw.oncpu,
            StackKind::OffCpu => &raw.offcpu,
        };
        // Off-CPU time in microseconds, each interval's rounded: a stack's whole-run value is
        // its intervals' and the rounded rest.
        let unit = |v: u64| match kind {
            StackKind::OnCpu => v,
            StackKind::OffCpu => (v + 500) / 1000,
        };
        let mut timed = vec![(0u64, 0u64); counts.stacks.len()];
        for r in &counts.rows {
            let t = &mut timed[r.stack as usize];
            *t = (t.0 + r.value, t.1 + unit(r.value));
        }
        let mut set = LineSet::default();
        let mut tallies: HashMap<u32, UnwindTally> = HashMap::new();
        let lines: Vec<u32> = (counts.stacks.iter().zip(&timed))
            .map(|((key, total), (raw_timed, timed))| {
                let value = timed + unit(total.saturating_sub(*raw_timed));
                let (frames, user) = frames_of(key);
                let end = raw.ends.get(&key.user_stack_id).copied();
                let tally = tallies.entry(key.group).or_default();
                tally.add(&user, method(key), end, value);
                let frames = match kind {
                    StackKind::OnCpu => without_switch_tracing(frames),
                    StackKind::OffCpu => without_tracing_frames(frames),
                };
                let line = set.add(key.group, frames, value);
                if let (StackKind::OffCpu, Some(&periods)) = (kind, raw.offcpu_periods.get(key)) {
                    set.add_periods(line, periods);
                }
                line
            })
            .collect();
        for r in &counts.rows {
            set.add_at(lines[r.stack as usize], at_ms(r.interval), unit(r.value));
        }
        stacks.set(kind, set.finish());
        for (group, name) in GROUPS {
            let kind = kind.file_stem();
            let mut q = tallies
                .remove(&group)
                .unwrap_or_default()
                .finish(name, kind);
            q.mean_copy_bytes = raw
                .copied
                .get(&(group, kind == "offcpu"))
                .filter(|(n, _)| *n > 0)
                .map(|(n, bytes)| *bytes as f64 / *n as f64);
            if kind == "oncpu" && raw.interval_ns.is_some() {
                q.sample_hz = Some(raw.sample_hz);
            }
            quality.push(q);
        }
    }
    stacks.quality = quality;
    stacks
}

/// Off-CPU stacks are taken inside the sched_switch tracepoint: the frames from the tracepoint
/// down (the tracepoint iterator, the BPF trampoline, srvprof's own program) say nothing.
fn without_tracing_frames(mut frames: Vec<String>) -> Vec<String> {
    if let Some(i) = frames
        .iter()
        .position(|f| f.starts_with("__traceiter_") || f.starts_with("__bpf_trace_"))
    {
        frames.truncate(i.max(2));
    }
    frames
}

/// An on-CPU tick taken at a thread's switch-out (its interrupt had not arrived) was taken inside
/// the sched_switch tracepoint: the frames from there down are srvprof's, and the thread was in
/// the schedule. No timer interrupt lands in that tracepoint, so no other sample has them.
fn without_switch_tracing(frames: Vec<String>) -> Vec<String> {
    let at_switch = frames.iter().any(|f| {
        f.starts_with("__traceiter_sched_switch") || f.starts_with("__bpf_trace_sched_switch")
    });
    match at_switch {
        true => without_tracing_frames(frames),
        false => frames,
    }
}

/// address -> name for every distinct address; unresolved ones named by `fallback`.
fn names(
    symbolizer: &Symbolizer,
    src: &Source,
    mut addrs: Vec<u64>,
    fallback: impl Fn(u64) -> String,
) -> HashMap<u64, String> {
    addrs.sort_unstable();
    addrs.dedup();
    let resolved = resolve(symbolizer, src, Input::AbsAddr(&addrs));
    (addrs.iter().zip(resolved))
        .map(|(&a, name)| (a, name.unwrap_or_else(|| fallback(a))))
        .collect()
}

/// Names a gone process's addresses by file offset in the files it had mapped, each file still
/// on disk as the very one mapped; the rest get `fallback`.
fn names_from_files(
    symbolizer: &Symbolizer,
    maps: &ProcessMaps,
    mut addrs: Vec<u64>,
    fallback: impl Fn(u64) -> String,
) -> HashMap<u64, String> {
    addrs.sort_unstable();
    addrs.dedup();
    let mut named: HashMap<u64, String> = addrs.iter().map(|&a| (a, fallback(a))).collect();
    // file -> (addresses, their offsets in the file)
    let mut by_file: BTreeMap<&str, (&Mapping, Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for &a in &addrs {
        if let Some(f) = maps.file(a) {
            let (_, in_file, offsets) =
                by_file
                    .entry(f.path.as_str())
                    .or_insert((f, vec![], vec![]));
            in_file.push(a);
            offsets.push(a - f.start + f.offset);
        }
    }
    // One look at each file on disk, not one per address.
    for (path, (file, in_file, offsets)) in by_file {
        if !file.still_on_disk() {
            continue;
        }
        let src = Source::Elf(Elf::new(path));
        let resolved = resolve(symbolizer, &src, Input::FileOffset(&offsets));
        for (a, name) in in_file.into_iter().zip(resolved) {
            if let Some(name) = name {
                named.insert(a, name);
            }
        }
    }
    named
}

/// blazesym's name for each input, in their order, as the folded files carry names: one entry
/// per input, None where it found none (all of them when the source cannot be read).
fn resolve(symbolizer: &Symbolizer, src: &Source, input: Input<&[u64]>) -> Vec<Option<String>> {
    let n = input.as_inner_ref().len();
    let mut names: Vec<Option<String>> = (symbolizer.symbolize(src, input).unwrap_or_default())
        .into_iter()
        .map(|r| match r {
            Symbolized::Sym(sym) => Some(clean(&demangle(&sym.name))),
            _ => None,
        })
        .collect();
    names.resize(n, None);
    names
}

/// A symbol's name demangled, when it carries a mangling prefix: Rust's (`_R`, or legacy `_ZN...E`
/// with a hash) or C++'s (`_Z`). Others are kept as they are: a C function named `c` is not the
/// C++ type `char`, which is what a demangler makes of it.
fn demangle(name: &str) -> std::borrow::Cow<'_, str> {
    if !(name.starts_with("_Z") || name.starts_with("_R") || name.starts_with("__Z")) {
        return name.into();
    }
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}").into();
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle().ok())
        .map_or(name.into(), Into::into)
}

/// Folded files split on ';' and the last ' '; keep names from breaking that.
fn clean(name: &str) -> String {
    name.replace(';', ":").replace('\n', " ")
}

/// A process's mappings (/proc/PID/maps), to name an unresolved address `module+0xoffset` and
/// to find the file an address lies in.
struct ProcessMaps(Vec<Mapping>);

impl ProcessMaps {
    fn parse(text: &str) -> Self {
        Self(proc_maps::parse(text))
    }

    /// The mapped file `addr` lies in, if a file still at its path backs it.
    fn file(&self, addr: u64) -> Option<&Mapping> {
        (self.0.iter()).find(|m| m.is_file() && m.contains(addr))
    }

    fn module_offset(&self, addr: u64) -> String {
        match self.0.iter().find(|m| m.contains(addr)) {
            Some(m) => format!("{}+{:#x}", m.module_name(), addr - m.start + m.offset),
            None => format!("[unknown]+{addr:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::stacks::Counts;
    use crate::stacks::timed::Row;

    #[test]
    fn a_stack_lost_to_a_collision_is_a_frame_saying_so() {
        let key = |kernel_stack_id| StackKey {
            tgid: std::process::id(),
            group: 0,
            user_stack_id: -1,
            kernel_stack_id,
            comm: *b"worker\0\0\0\0\0\0\0\0\0\0",
            ..Default::default()
        };
        let mut user_lost = key(-1);
        user_lost.user_stack_id = STACK_ID_COLLIDED;
        let raw = RawStacks {
            oncpu: Counts {
                stacks: vec![(key(STACK_ID_COLLIDED), 3), (key(-1), 2), (user_lost, 1)],
                rows: vec![],
            },
            ..RawStacks::default()
        };
        let folded = fold(&raw, &StartMaps::default());
        let mut lines: Vec<(Vec<String>, u64)> = (folded.oncpu.iter())
            .map(|l| (l.frames.clone(), l.value))
            .collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                (vec!["worker".to_string(), COLLIDED_FRAME.to_string()], 3),
                (vec!["worker".to_string(), "[no stack]".to_string()], 2),
                (
                    vec!["worker".to_string(), COLLIDED_USER_FRAME.to_string()],
                    1
                ),
            ]
        );
    }

    #[test]
    fn each_stack_keeps_its_values_per_interval_and_its_untimed_rest() {
        let key = |tgid, comm: &[u8; 16]| StackKey {
            tgid,
            group: 0,
            user_stack_id: -1,
            kernel_stack_id: -1,
            comm: *comm,
            ..Default::default()
        };
        let (a, b) = (
            *b"a\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
            *b"b\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        );
        let row = |interval, stack, value| Row {
            interval,
            stack,
            value,
        };
        let raw = RawStacks {
            // Two processes whose stacks name alike merge into one line; 4 of a's samples have
            // no time.
            oncpu: Counts {
                stacks: vec![(key(1, &a), 10), (key(2, &a), 3), (key(1, &b), 1)],
                rows: vec![row(0, 0, 5), row(2, 0, 1), row(2, 1, 3), row(-1, 2, 1)],
            },
            // Nanoseconds, written in µs: each interval's rounded, and the rounded rest.
            offcpu: Counts {
                stacks: vec![(key(1, &a), 4_400)],
                rows: vec![row(0, 0, 1_400), row(1, 0, 1_600)],
            },
            interval_ns: Some(1_000_000_000),
            ..RawStacks::default()
        };
        let f = fold(&raw, &StartMaps::default());
        let names = |s: &[srvprof_analysis::stacks::FoldedLine]| -> Vec<(String, u64)> {
            s.iter().map(|l| (l.frames[0].clone(), l.value)).collect()
        };
        assert_eq!(
            names(&f.oncpu),
            [("a".to_string(), 13), ("b".to_string(), 1)]
        );
        let at = |at_ms, line, value| srvprof_analysis::stacks::At { at_ms, line, value };
        assert_eq!(f.oncpu_at, [at(-1000, 1, 1), at(0, 0, 5), at(2000, 0, 4)]);
        assert_eq!(names(&f.offcpu), [("a".to_string(), 4)]);
        assert_eq!(f.offcpu_at, [at(0, 0, 1), at(1000, 0, 2)]);
        assert_eq!(f.interval_ms, Some(1000));
    }

    #[test]
    fn every_address_gets_a_name_when_the_source_cannot_be_read() {
        let symbolizer = Symbolizer::builder().enable_code_info(false).build();
        let src = Source::Elf(Elf::new("/nonexistent/srvprof-test"));
        let named = names(&symbolizer, &src, vec![0x20, 0x10, 0x20], |a| {
            format!("x+{a:#x}")
        });
        assert_eq!(named.len(), 2);
        assert_eq!(named[&0x10], "x+0x10");
        assert_eq!(named[&0x20], "x+0x20");
    }

    #[test]
    fn only_names_with_a_mangling_prefix_are_demangled() {
        for plain in ["a", "b", "c", "i", "main", "ngx_http_core_run_phases"] {
            assert_eq!(demangle(plain), plain);
        }
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }

    #[test]
    fn unresolved_addresses_become_module_plus_file_offset() {
        let maps = ProcessMaps::parse(
            "55d0c0a00000-55d0c0a10000 r-xp 00002000 08:01 1234 /usr/sbin/nginx\n",
        );
        assert_eq!(maps.module_offset(0x55d0c0a00010), "nginx+0x2010");
        assert_eq!(maps.module_offset(0x10), "[unknown]+0x10");
    }

    #[test]
    fn only_mappings_a_file_still_backs_are_files() {
        let maps = ProcessMaps::parse(
            "7f00-7f10 r-xp 00028000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6
7f10-7f20 r-xp 00000000 00:00 0 [vdso]
7f20-7f30 rwxp 00000000 00:00 0
7f30-7f40 r-xp 00000000 00:05 77 /memfd:doublemapper (deleted)
",
        );
        let libc = maps.file(0x7f08).unwrap();
        assert_eq!(
            (libc.path.as_str(), libc.offset, libc.inode),
            ("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x28000, 1234)
        );
        for addr in [0x7f18, 0x7f28, 0x7f38] {
            assert_eq!(maps.file(addr), None, "{addr:#x}");
        }
    }
}
