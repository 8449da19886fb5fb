//! Folded stacks, the text format inferno, FlameGraph and speedscope read:
//! `comm;outermost frame;...;leaf frame value`, one stack per line.
//!
//! Beside each whole-run file, a timed one (`oncpu-server.timed.folded`) keeps when: its first
//! frame is `@MS`, the start of the 10 ms the samples were taken in (off-CPU: the periods ended
//! in), in milliseconds since the measured window started (negative in the warm-up). Stacks the
//! kernel counted without a time (samples the ring had no room for) are only in the whole-run file.

use std::collections::BTreeMap;
use std::path::Path;

use srvprof_common::{GROUP_CLIENT, GROUP_SERVER};

use crate::error::SrvprofError;
use crate::output;

/// On-CPU values are cpu-clock samples; off-CPU values are microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackKind {
    OnCpu,
    OffCpu,
}

impl StackKind {
    pub const ALL: [StackKind; 2] = [StackKind::OnCpu, StackKind::OffCpu];

    pub fn file_stem(self) -> &'static str {
        match self {
            StackKind::OnCpu => "oncpu",
            StackKind::OffCpu => "offcpu",
        }
    }

    /// What one unit of a value is.
    pub fn unit(self) -> &'static str {
        match self {
            StackKind::OnCpu => "samples",
            StackKind::OffCpu => "us",
        }
    }
}

pub const GROUPS: [(u32, &str); 2] = [(GROUP_SERVER, "server"), (GROUP_CLIENT, "client")];

/// One stack: thread name first, then frames from the outermost to the leaf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldedLine {
    pub group: u32,
    pub frames: Vec<String>,
    pub value: u64,
    /// When: the start of its 10 ms bucket, ms since the measured window started; None when
    /// the kernel counted it without a time.
    pub at_ms: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoldedStacks {
    pub oncpu: Vec<FoldedLine>,
    pub offcpu: Vec<FoldedLine>,
    /// How well they were unwound, per group and kind (run.json's `stacks`); empty when read
    /// back from files.
    pub quality: Vec<srvprof_analysis::unwind_quality::UnwindQuality>,
    /// A user frame's name -> the file it was found in (the first, should two files name a
    /// function alike), for pprof's mappings; empty when read back from files.
    pub modules: BTreeMap<String, Module>,
}

/// A file user frames were found in, as the process maps it, and its GNU build-id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    pub path: String,
    pub build_id: Option<String>,
}

impl FoldedStacks {
    pub fn lines(&self, kind: StackKind) -> &[FoldedLine] {
        match kind {
            StackKind::OnCpu => &self.oncpu,
            StackKind::OffCpu => &self.offcpu,
        }
    }

    /// One group's stacks of one kind.
    /// Each group's on-CPU samples whose running function is TLS code (https runs' `tls_cpu`).
    pub fn tls_cpu(&self) -> Vec<srvprof_analysis::tls_code::TlsCpu> {
        GROUPS
            .iter()
            .map(|(group, name)| {
                let mut tally = srvprof_analysis::tls_code::TlsTally::default();
                for l in self.oncpu.iter().filter(|l| l.group == *group) {
                    let module = (l.frames.last())
                        .and_then(|leaf| self.modules.get(leaf))
                        .map(|m| m.path.as_str());
                    tally.add(&l.frames, module, l.value);
                }
                tally.finish(name)
            })
            .collect()
    }

    pub fn of_group(&self, kind: StackKind, group: u32) -> Vec<FoldedLine> {
        (self.lines(kind).iter())
            .filter(|l| l.group == group)
            .cloned()
            .collect()
    }

    /// Reads the per-group files a run wrote (missing files: no stacks of that kind), with their
    /// times where the timed file has them.
    pub fn read_dir(dir: &Path) -> FoldedStacks {
        let mut out = FoldedStacks::default();
        for kind in StackKind::ALL {
            for (group, name) in GROUPS {
                let stem = format!("{}-{name}", kind.file_stem());
                let read = |file: String| std::fs::read_to_string(dir.join(file)).ok();
                let Some(all) = read(format!("{stem}.folded")) else {
                    continue;
                };
                let timed = read(format!("{stem}.timed.folded")).unwrap_or_default();
                let lines = with_times(parse(&all, group), parse_timed(&timed, group));
                match kind {
                    StackKind::OnCpu => out.oncpu.extend(lines),
                    StackKind::OffCpu => out.offcpu.extend(lines),
                }
            }
        }
        out
    }

    /// The stacks whose time falls in [from_ms, to_ms), ms since the measured window started.
    pub fn window(&self, from_ms: i64, to_ms: i64) -> FoldedStacks {
        let within = |lines: &[FoldedLine]| -> Vec<FoldedLine> {
            (lines.iter())
                .filter(|l| l.at_ms.is_some_and(|t| t >= from_ms && t < to_ms))
                .cloned()
                .collect()
        };
        FoldedStacks {
            oncpu: within(&self.oncpu),
            offcpu: within(&self.offcpu),
            ..Default::default()
        }
    }

    /// Writes `oncpu.folded`, `offcpu.folded` and one file per kind and group.
    pub fn write_dir(&self, dir: &Path, force: bool) -> Result<(), SrvprofError> {
        for kind in StackKind::ALL {
            let lines = self.lines(kind);
            let stem = kind.file_stem();
            output::write_atomic(
                &dir.join(format!("{stem}.folded")),
                to_text(lines.iter()).as_bytes(),
                force,
            )?;
            for (group, name) in GROUPS {
                let of_group = || lines.iter().filter(move |l| l.group == group);
                if of_group().next().is_none() {
                    // A group with none (the client's, unless `--stacks all`) gets no files.
                    continue;
                }
                output::write_atomic(
                    &dir.join(format!("{stem}-{name}.folded")),
                    to_text(of_group()).as_bytes(),
                    force,
                )?;
                output::write_atomic(
                    &dir.join(format!("{stem}-{name}.timed.folded")),
                    to_timed_text(of_group()).as_bytes(),
                    force,
                )?;
            }
        }
        Ok(())
    }
}

/// Lines with equal frames merged, heaviest first.
pub fn to_text<'a>(lines: impl Iterator<Item = &'a FoldedLine>) -> String {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines {
        *merged.entry(l.frames.join(";")).or_default() += l.value;
    }
    let mut rows: Vec<(String, u64)> = merged.into_iter().filter(|(_, v)| *v > 0).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut text = String::new();
    for (stack, value) in rows {
        text.push_str(&stack);
        text.push(' ');
        text.push_str(&value.to_string());
        text.push('\n');
    }
    text
}

/// The timed lines, merged per 10 ms and stack, in time order: `@MS;comm;...;leaf value`.
pub fn to_timed_text<'a>(lines: impl Iterator<Item = &'a FoldedLine>) -> String {
    let mut merged: BTreeMap<(i64, String), u64> = BTreeMap::new();
    for l in lines {
        if let Some(at) = l.at_ms {
            *merged.entry((at, l.frames.join(";"))).or_default() += l.value;
        }
    }
    let mut text = String::new();
    for ((at, stack), value) in merged.into_iter().filter(|(_, v)| *v > 0) {
        text.push_str(&format!("@{at};{stack} {value}\n"));
    }
    text
}

pub fn parse(text: &str, group: u32) -> Vec<FoldedLine> {
    text.lines()
        .filter_map(|line| {
            let (stack, value) = line.trim_end().rsplit_once(' ')?;
            Some(FoldedLine {
                group,
                frames: stack.split(';').map(str::to_string).collect(),
                value: value.parse().ok()?,
                at_ms: None,
            })
        })
        .collect()
}

/// A timed file's lines, their `@MS` frame read into at_ms.
pub fn parse_timed(text: &str, group: u32) -> Vec<FoldedLine> {
    (parse(text, group).into_iter())
        .filter_map(|mut l| {
            let at = l.frames.first()?.strip_prefix('@')?.parse().ok()?;
            l.frames.remove(0);
            l.at_ms = Some(at);
            Some(l)
        })
        .collect()
}

/// The timed lines, and what the whole-run lines hold beyond them (counted without a time).
fn with_times(all: Vec<FoldedLine>, timed: Vec<FoldedLine>) -> Vec<FoldedLine> {
    let mut timed_total: BTreeMap<&[String], u64> = BTreeMap::new();
    for l in &timed {
        *timed_total.entry(&l.frames).or_default() += l.value;
    }
    let untimed: Vec<FoldedLine> = (all.into_iter())
        .filter_map(|mut l| {
            l.value = l
                .value
                .saturating_sub(timed_total.get(l.frames.as_slice()).copied().unwrap_or(0));
            (l.value > 0).then_some(l)
        })
        .collect();
    timed.into_iter().chain(untimed).collect()
}

/// The leaf frame with the largest total value, and that total.
pub fn hottest_leaf(lines: &[FoldedLine]) -> Option<(String, u64)> {
    let mut by_leaf: BTreeMap<&str, u64> = BTreeMap::new();
    for l in lines {
        if let Some(leaf) = l.frames.last() {
            *by_leaf.entry(leaf.as_str()).or_default() += l.value;
        }
    }
    by_leaf
        .into_iter()
        .max_by_key(|(_, v)| *v)
        .map(|(k, v)| (k.to_string(), v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_equal_stacks_and_round_trips() {
        let line = |frames: &[&str], value| FoldedLine {
            group: 0,
            frames: frames.iter().map(|s| s.to_string()).collect(),
            value,
            at_ms: None,
        };
        let lines = [
            line(&["spin", "start_thread", "srvprof_busy_spin"], 5),
            line(&["spin", "start_thread", "srvprof_busy_spin"], 7),
            line(&["spin", "start_thread", "other fn"], 3),
        ];
        let text = to_text(lines.iter());
        assert_eq!(
            text,
            "spin;start_thread;srvprof_busy_spin 12\nspin;start_thread;other fn 3\n"
        );
        let back = parse(&text, 0);
        assert_eq!(back[1].frames[2], "other fn");
        assert_eq!(
            hottest_leaf(&back),
            Some(("srvprof_busy_spin".to_string(), 12))
        );
    }

    #[test]
    fn timed_lines_round_trip_and_the_untimed_rest_is_kept() {
        let line = |frames: &[&str], value, at_ms| FoldedLine {
            group: 0,
            frames: frames.iter().map(|s| s.to_string()).collect(),
            value,
            at_ms,
        };
        let lines = [
            line(&["w", "main", "slow_path"], 4, Some(3010)),
            line(&["w", "main", "slow_path"], 2, Some(3010)),
            line(&["w", "main", "fast"], 5, Some(-20)),
            line(&["w", "main", "fast"], 3, None),
        ];
        let all = to_text(lines.iter());
        let timed = to_timed_text(lines.iter());
        assert_eq!(timed, "@-20;w;main;fast 5\n@3010;w;main;slow_path 6\n");
        let back = with_times(parse(&all, 0), parse_timed(&timed, 0));
        let stacks = FoldedStacks {
            oncpu: back,
            ..Default::default()
        };
        let total = |l: &[FoldedLine]| l.iter().map(|l| l.value).sum::<u64>();
        assert_eq!(total(&stacks.oncpu), 14);
        // The untimed 3 stay in the whole-run total and in no window.
        assert!(
            stacks
                .oncpu
                .contains(&line(&["w", "main", "fast"], 3, None))
        );
        let w = stacks.window(3000, 4000);
        assert_eq!(
            w.oncpu,
            vec![line(&["w", "main", "slow_path"], 6, Some(3010))]
        );
        assert_eq!(total(&stacks.window(-1000, 0).oncpu), 5);
    }
}
