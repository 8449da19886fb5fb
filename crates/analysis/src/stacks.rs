//! Stacks as srvprof keeps them: folded stacks, the text format inferno, FlameGraph and
//! speedscope read:
//! `comm;outermost frame;...;leaf frame value`, one stack per line.
//!
//! Beside each group's whole-run file (`oncpu-server.folded`, each stack once, heaviest first),
//! a timed one (`oncpu-server.timed`) keeps when: for each interval of the run's grid (the
//! timeline's rows), the value each stack had in it, as `START_MS LINE VALUE`: the interval's
//! start in ms since the measured window started (negative in the warm-up), the stack's line in
//! the whole-run file (from 1), and its value. A stack is written once however many intervals
//! it was seen in, so the file grows with the distinct stacks of each interval, not with the
//! samples. What a stack's total holds beyond its timed values was counted without a time
//! (samples the ring had no room for).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use srvprof_common::{GROUP_CLIENT, GROUP_SERVER};

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
    /// Off-CPU: the periods its value is the time of, estimated from the drawn ones (each
    /// standing for the periods it was drawn from); 0 where not known (on-CPU samples, stacks
    /// read back from files, the kernel's own keys).
    pub periods: u64,
}

/// A stack's value in one interval of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct At {
    /// The interval's start, ms since the measured window started.
    pub at_ms: i64,
    /// The stack: its index in its kind's lines.
    pub line: u32,
    pub value: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoldedStacks {
    /// Each (group, stack) once, with its whole-run value.
    pub oncpu: Vec<FoldedLine>,
    pub offcpu: Vec<FoldedLine>,
    /// When: the lines' values per interval, in time order.
    pub oncpu_at: Vec<At>,
    pub offcpu_at: Vec<At>,
    /// The intervals' length (ms); None when the stacks have no times.
    pub interval_ms: Option<i64>,
    /// How well they were unwound, per group and kind (run.json's `stacks`); empty when read
    /// back from files.
    pub quality: Vec<crate::unwind_quality::UnwindQuality>,
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

/// One kind's stacks as they are gathered: equal (group, frames) merged into one line.
#[derive(Debug, Default)]
pub struct LineSet {
    lines: Vec<FoldedLine>,
    index: HashMap<(u32, Vec<String>), u32>,
    at: Vec<At>,
}

impl LineSet {
    /// Adds to a stack's whole-run value; its line.
    pub fn add(&mut self, group: u32, frames: Vec<String>, value: u64) -> u32 {
        let lines = &mut self.lines;
        let i = *(self.index.entry((group, frames))).or_insert_with_key(|(group, frames)| {
            lines.push(FoldedLine {
                group: *group,
                frames: frames.clone(),
                value: 0,
                periods: 0,
            });
            (lines.len() - 1) as u32
        });
        self.lines[i as usize].value += value;
        i
    }

    /// Adds to the off-CPU periods a line's value is the time of.
    pub fn add_periods(&mut self, line: u32, periods: u64) {
        self.lines[line as usize].periods += periods;
    }

    /// Says when part of a line's value (already added) fell.
    pub fn add_at(&mut self, line: u32, at_ms: i64, value: u64) {
        self.at.push(At { at_ms, line, value });
    }

    /// The lines, each group's heaviest first (lines of no value left out), and their times in
    /// time order, one per interval and line.
    pub fn finish(self) -> (Vec<FoldedLine>, Vec<At>) {
        let mut order: Vec<u32> = (0..self.lines.len() as u32)
            .filter(|&i| self.lines[i as usize].value > 0)
            .collect();
        let key = |i: &u32| {
            let l = &self.lines[*i as usize];
            (l.group, std::cmp::Reverse(l.value), &l.frames)
        };
        order.sort_by(|a, b| key(a).cmp(&key(b)));
        let mut new_index = vec![u32::MAX; self.lines.len()];
        for (n, &i) in order.iter().enumerate() {
            new_index[i as usize] = n as u32;
        }
        let mut at: Vec<At> = (self.at.into_iter())
            .filter(|a| a.value > 0 && new_index[a.line as usize] != u32::MAX)
            .map(|a| At {
                line: new_index[a.line as usize],
                ..a
            })
            .collect();
        at.sort_unstable();
        at.dedup_by(|later, kept| {
            let same = (later.at_ms, later.line) == (kept.at_ms, kept.line);
            if same {
                kept.value += later.value;
            }
            same
        });
        let mut lines = self.lines;
        let lines = order
            .iter()
            .map(|&i| std::mem::take(&mut lines[i as usize]))
            .collect();
        (lines, at)
    }
}

impl FoldedStacks {
    pub fn lines(&self, kind: StackKind) -> &[FoldedLine] {
        match kind {
            StackKind::OnCpu => &self.oncpu,
            StackKind::OffCpu => &self.offcpu,
        }
    }

    /// When each kind's lines' values fell.
    pub fn at(&self, kind: StackKind) -> &[At] {
        match kind {
            StackKind::OnCpu => &self.oncpu_at,
            StackKind::OffCpu => &self.offcpu_at,
        }
    }

    /// Sets one kind's lines and their times.
    pub fn set(&mut self, kind: StackKind, (lines, at): (Vec<FoldedLine>, Vec<At>)) {
        match kind {
            StackKind::OnCpu => (self.oncpu, self.oncpu_at) = (lines, at),
            StackKind::OffCpu => (self.offcpu, self.offcpu_at) = (lines, at),
        }
    }

    /// Each group's on-CPU samples whose running function is TLS code (https runs' `tls_cpu`).
    pub fn tls_cpu(&self) -> Vec<crate::tls_code::TlsCpu> {
        GROUPS
            .iter()
            .map(|(group, name)| {
                let mut tally = crate::tls_code::TlsTally::default();
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

    /// One group's stacks of one kind.
    pub fn of_group(&self, kind: StackKind, group: u32) -> Vec<FoldedLine> {
        (self.lines(kind).iter())
            .filter(|l| l.group == group)
            .cloned()
            .collect()
    }

    /// Whether any stack has a time.
    pub fn is_timed(&self) -> bool {
        !self.oncpu_at.is_empty() || !self.offcpu_at.is_empty()
    }

    /// One kind's lines with no time of their own (a process with too few stacks drawn to share
    /// its time out: the kernel's keys, whole-run values), absent from every window.
    pub fn untimed(&self, kind: StackKind) -> impl Iterator<Item = &FoldedLine> {
        let mut timed = vec![false; self.lines(kind).len()];
        for a in self.at(kind) {
            if let Some(t) = timed.get_mut(a.line as usize) {
                *t = true;
            }
        }
        (self.lines(kind).iter().zip(timed)).filter_map(|(l, t)| (!t).then_some(l))
    }

    /// The stacks whose interval starts in [from_ms, to_ms), ms since the measured window
    /// started, with their values in those intervals.
    pub fn window(&self, from_ms: i64, to_ms: i64) -> FoldedStacks {
        let mut out = FoldedStacks {
            interval_ms: self.interval_ms,
            ..Default::default()
        };
        for kind in StackKind::ALL {
            let lines = self.lines(kind);
            let mut set = LineSet::default();
            for a in self.at(kind) {
                if a.at_ms >= from_ms && a.at_ms < to_ms {
                    let l = &lines[a.line as usize];
                    set.add(l.group, l.frames.clone(), a.value);
                }
            }
            out.set(kind, (set.finish().0, Vec::new()));
        }
        out
    }

    /// One kind and group's files: the whole-run stacks (`FILE.folded`, in the lines' order) and
    /// their times (`FILE.timed`, when the stacks have times); None for a group with no stacks
    /// of the kind (the client's, unless `--stacks all`).
    pub fn group_files(
        &self,
        kind: StackKind,
        group: u32,
        file: &str,
    ) -> Option<(String, Option<String>)> {
        let lines = self.lines(kind);
        // Each line's number in the group's file.
        let mut number = vec![0u32; lines.len()];
        let mut text = String::new();
        let mut n = 0;
        for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.group == group) {
            n += 1;
            number[i] = n;
            let _ = writeln!(text, "{} {}", l.frames.join(";"), l.value);
        }
        if n == 0 {
            return None;
        }
        let timed = self.interval_ms.map(|interval_ms| {
            let mut timed = format!(
                "# srvprof timed stacks: per interval of {interval_ms} ms, its start (ms since the measured window started), a line of {file}.folded (from 1) and that stack's value in the interval\ninterval_ms {interval_ms}\n"
            );
            for a in self.at(kind).iter().filter(|a| number[a.line as usize] > 0) {
                let _ = writeln!(timed, "{} {} {}", a.at_ms, number[a.line as usize], a.value);
            }
            timed
        });
        Some((text, timed))
    }

    /// Adds one group's files as [`FoldedStacks::group_files`] wrote them to a kind's lines,
    /// and keeps their interval length.
    /// Lines past MAX_READ_TOTAL (a file someone else wrote) are left out.
    pub fn read_group(&mut self, set: &mut LineSet, group: u32, folded: &str, timed: &str) {
        let mut total = 0u64;
        let mut within = |value: u64| {
            let fits = value <= MAX_READ_TOTAL - total;
            if fits {
                total += value;
            }
            fits
        };
        let lines: Vec<Option<u32>> = (parse(folded, group).into_iter())
            .map(|l| within(l.value).then(|| set.add(l.group, l.frames, l.value)))
            .collect();
        let (interval_ms, at) = parse_timed(timed);
        self.interval_ms = self.interval_ms.or(interval_ms);
        let mut total = 0u64;
        for (at_ms, n, value) in at {
            let line = n
                .checked_sub(1)
                .and_then(|i| lines.get(i))
                .copied()
                .flatten();
            if let Some(line) = line
                && value <= MAX_READ_TOTAL - total
            {
                total += value;
                set.add_at(line, at_ms, value);
            }
        }
    }
}

/// The most one group's lines (or their times) may add up to when read from a file: 2^52, 142
/// years of off-CPU µs, beyond any run, so that no sum of them overflows, even in ns.
pub const MAX_READ_TOTAL: u64 = 1 << 52;

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
                periods: 0,
            })
        })
        .collect()
}

/// A timed file: its interval length (ms) and its `(start ms, line, value)` rows.
pub fn parse_timed(text: &str) -> (Option<i64>, Vec<(i64, usize, u64)>) {
    let mut interval_ms = None;
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(ms) = line.strip_prefix("interval_ms ") {
            interval_ms = ms.trim().parse().ok();
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let mut next = || fields.next();
        if let (Some(at), Some(n), Some(v)) = (next(), next(), next())
            && let (Ok(at), Ok(n), Ok(v)) = (at.parse(), n.parse(), v.parse())
        {
            rows.push((at, n, v));
        }
    }
    (interval_ms, rows)
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

    fn line(group: u32, frames: &[&str], value: u64) -> FoldedLine {
        FoldedLine {
            group,
            frames: frames.iter().map(|s| s.to_string()).collect(),
            value,
            periods: 0,
        }
    }

    #[test]
    fn merges_equal_stacks_and_round_trips() {
        let lines = [
            line(0, &["spin", "start_thread", "srvprof_busy_spin"], 5),
            line(0, &["spin", "start_thread", "srvprof_busy_spin"], 7),
            line(0, &["spin", "start_thread", "other fn"], 3),
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

    /// Stacks as a run gathers them: the same stack in several intervals and several times in
    /// one, part of a total without a time, and a client stack beside the server's.
    fn gathered() -> FoldedStacks {
        let mut set = LineSet::default();
        let mut add = |group, frames: &[&str], value, at_ms: Option<i64>| {
            let l = set.add(group, frames.iter().map(|s| s.to_string()).collect(), value);
            if let Some(at) = at_ms {
                set.add_at(l, at, value);
            }
        };
        add(0, &["w", "main", "slow_path"], 4, Some(3000));
        add(0, &["w", "main", "slow_path"], 2, Some(3000));
        add(0, &["w", "main", "fast"], 5, Some(-1000));
        add(0, &["w", "main", "fast"], 1, Some(4000));
        add(0, &["w", "main", "fast"], 3, None);
        add(1, &["c", "send"], 2, Some(3000));
        let mut stacks = FoldedStacks {
            interval_ms: Some(1000),
            ..Default::default()
        };
        stacks.set(StackKind::OnCpu, set.finish());
        stacks
    }

    #[test]
    fn each_stack_is_kept_once_with_its_values_per_interval() {
        let stacks = gathered();
        assert_eq!(
            stacks.oncpu,
            vec![
                line(0, &["w", "main", "fast"], 9),
                line(0, &["w", "main", "slow_path"], 6),
                line(1, &["c", "send"], 2),
            ]
        );
        let at = |at_ms, line, value| At { at_ms, line, value };
        assert_eq!(
            stacks.oncpu_at,
            vec![
                at(-1000, 0, 5),
                at(3000, 1, 6),
                at(3000, 2, 2),
                at(4000, 0, 1)
            ]
        );
    }

    #[test]
    fn timed_files_round_trip_and_the_untimed_rest_is_kept() {
        let stacks = gathered();
        let (folded, timed) = stacks
            .group_files(StackKind::OnCpu, 0, "oncpu-server")
            .unwrap();
        let timed = timed.unwrap();
        let rows: Vec<&str> = timed.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            rows,
            ["interval_ms 1000", "-1000 1 5", "3000 2 6", "4000 1 1"]
        );
        let (client, client_timed) = stacks
            .group_files(StackKind::OnCpu, 1, "oncpu-client")
            .unwrap();
        let client_timed = client_timed.unwrap();
        assert_eq!(client_timed.lines().last(), Some("3000 1 2"));
        assert_eq!(
            stacks.group_files(StackKind::OffCpu, 0, "offcpu-server"),
            None
        );
        let mut back = FoldedStacks::default();
        let mut set = LineSet::default();
        back.read_group(&mut set, 0, &folded, &timed);
        back.read_group(&mut set, 1, &client, &client_timed);
        back.set(StackKind::OnCpu, set.finish());
        assert_eq!(back.oncpu, stacks.oncpu);
        assert_eq!(back.oncpu_at, stacks.oncpu_at);
        assert_eq!(back.interval_ms, Some(1000));
        let total = |l: &[FoldedLine]| l.iter().map(|l| l.value).sum::<u64>();
        // The untimed 3 stay in the whole-run total and in no window.
        assert_eq!(total(&back.oncpu), 17);
        let w = stacks.window(3000, 4000);
        assert_eq!(
            w.oncpu,
            vec![
                line(0, &["w", "main", "slow_path"], 6),
                line(1, &["c", "send"], 2)
            ]
        );
        assert_eq!(total(&stacks.window(-1000, 0).oncpu), 5);
        assert_eq!(total(&stacks.window(i64::MIN, i64::MAX).oncpu), 14);
    }
}
