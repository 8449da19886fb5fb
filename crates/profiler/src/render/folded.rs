//! Folded stacks, the text format inferno, FlameGraph and speedscope read:
//! `comm;outermost frame;...;leaf frame value`, one stack per line.

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
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoldedStacks {
    pub oncpu: Vec<FoldedLine>,
    pub offcpu: Vec<FoldedLine>,
    /// How well they were unwound, per group and kind (run.json's `stacks`); empty when read
    /// back from files.
    pub quality: Vec<srvprof_analysis::unwind_quality::UnwindQuality>,
}

impl FoldedStacks {
    pub fn lines(&self, kind: StackKind) -> &[FoldedLine] {
        match kind {
            StackKind::OnCpu => &self.oncpu,
            StackKind::OffCpu => &self.offcpu,
        }
    }

    /// Reads the per-group files a run wrote (missing files: no stacks of that kind).
    pub fn read_dir(dir: &Path) -> FoldedStacks {
        let mut out = FoldedStacks::default();
        for kind in StackKind::ALL {
            for (group, name) in GROUPS {
                let path = dir.join(format!("{}-{name}.folded", kind.file_stem()));
                if let Ok(text) = std::fs::read_to_string(path) {
                    let lines = parse(&text, group);
                    match kind {
                        StackKind::OnCpu => out.oncpu.extend(lines),
                        StackKind::OffCpu => out.offcpu.extend(lines),
                    }
                }
            }
        }
        out
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
                let text = to_text(lines.iter().filter(|l| l.group == group));
                output::write_atomic(
                    &dir.join(format!("{stem}-{name}.folded")),
                    text.as_bytes(),
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

pub fn parse(text: &str, group: u32) -> Vec<FoldedLine> {
    text.lines()
        .filter_map(|line| {
            let (stack, value) = line.trim_end().rsplit_once(' ')?;
            Some(FoldedLine {
                group,
                frames: stack.split(';').map(str::to_string).collect(),
                value: value.parse().ok()?,
            })
        })
        .collect()
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
}
