//! The run folder's stack files: every kind and group's whole-run and timed files written, and
//! read back (the stacks and their formats: srvprof_analysis::stacks).

use std::path::Path;

use srvprof_analysis::stacks::*;
use srvprof_files::OutDir;

use crate::error::SrvprofError;
use crate::output;

/// Reads the per-group files a run wrote (missing files: no stacks of that kind), with their
/// times where the timed file has them. A file that is there but is not a regular file of
/// srvprof's size (a planted link, a device) is refused, not read.
pub fn read_dir(dir: &Path) -> Result<FoldedStacks, SrvprofError> {
    let mut out = FoldedStacks::default();
    for kind in StackKind::ALL {
        let mut set = LineSet::default();
        for (group, name) in GROUPS {
            let stem = format!("{}-{name}", kind.file_stem());
            let read = |file: String| -> Result<Option<String>, SrvprofError> {
                let path = dir.join(file);
                if std::fs::symlink_metadata(&path).is_err() {
                    return Ok(None);
                }
                output::read_input(&path, "give a folder written by `srvprof run --out DIR`")
                    .map(Some)
            };
            let Some(all) = read(format!("{stem}.folded"))? else {
                continue;
            };
            let timed = read(format!("{stem}.timed"))?.unwrap_or_default();
            out.read_group(&mut set, group, &all, &timed);
        }
        out.set(kind, set.finish());
    }
    Ok(out)
}

/// Writes `oncpu.folded`, `offcpu.folded` and, per kind and group, the whole-run file and the
/// timed one.
pub fn write_dir(stacks: &FoldedStacks, dir: &OutDir, force: bool) -> Result<(), SrvprofError> {
    for kind in StackKind::ALL {
        let stem = kind.file_stem();
        let all = to_text(stacks.lines(kind).iter());
        output::write_atomic(dir, &format!("{stem}.folded"), all.as_bytes(), force)?;
        for (group, name) in GROUPS {
            let file = format!("{stem}-{name}");
            let Some((folded, timed)) = stacks.group_files(kind, group, &file) else {
                continue;
            };
            output::write_atomic(dir, &format!("{file}.folded"), folded.as_bytes(), force)?;
            if let Some(timed) = timed {
                output::write_atomic(dir, &format!("{file}.timed"), timed.as_bytes(), force)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_folder_s_stacks_read_back_as_written() {
        let mut set = LineSet::default();
        let frames = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let slow = set.add(0, frames(&["w", "main", "slow_path"]), 6);
        set.add_at(slow, 3000, 6);
        let fast = set.add(0, frames(&["w", "main", "fast"]), 9);
        set.add_at(fast, -1000, 5);
        set.add(1, frames(&["c", "send"]), 2);
        let mut stacks = FoldedStacks {
            interval_ms: Some(1000),
            ..Default::default()
        };
        stacks.set(StackKind::OnCpu, set.finish());
        let dir = std::env::temp_dir().join(format!("srvprof-folded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_dir(&stacks, &output::open_dir(&dir).unwrap(), true).unwrap();
        let back = read_dir(&dir).unwrap();
        let timed = std::fs::read_to_string(dir.join("oncpu-server.timed")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, stacks);
        assert!(timed.ends_with("-1000 1 5\n3000 2 6\n"), "{timed}");
    }
}
