//! Writing results safely: complete or not at all (temp file + rename), never through a planted
//! symlink, never over a file srvprof did not write (without --force), owned by the sudo user.
//! The run folder's stack files, written and read back: stacks.rs. The server's profile pushed
//! to Pyroscope: pyroscope.rs.

pub mod pyroscope;
pub mod stacks;

use std::path::Path;

use srvprof_files::{Kind, OutDir};

use crate::error::{Cause, SrvprofError};

/// Marker every JSON file srvprof writes carries, so a rerun may replace it.
pub const TOOL_MARKER: &str = "\"tool\": \"srvprof\"";

pub fn write_err(path: &Path, e: impl Into<Cause>) -> SrvprofError {
    SrvprofError::Write {
        path: path.display().to_string(),
        source: e.into(),
    }
}

/// Opens the output folder `dir` before anything is measured, making it (mode 0700 until
/// `OutDir::finish`) if it is new: a path that cannot be a folder of the user's stops the run
/// before it starts, and every file goes in through the handle (srvprof_files).
pub fn open_dir(dir: &Path) -> Result<OutDir, SrvprofError> {
    OutDir::open(dir).map_err(|e| write_err(dir, e))
}

/// The first 4 KiB of `name` in `out`, if it is a regular file (not followed through a link).
fn head_of(out: &OutDir, name: &str) -> Option<String> {
    out.head(name, 4096)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Whether srvprof wrote `out`'s run.json: then the files it writes beside it (timeline.csv,
/// the folded stacks, the flamegraphs), which carry no marker of their own, may be replaced by
/// a second `srvprof run --out DIR`.
fn is_run_folder(out: &OutDir) -> bool {
    head_of(out, "run.json").is_some_and(|h| h.contains(TOOL_MARKER))
}

/// Whether `name` in `out` may be (over)written: absent, or a regular file srvprof wrote (by its
/// marker, or in a run folder), or `force`. Never a symbolic link.
pub fn check_writable(out: &OutDir, name: &str, force: bool) -> Result<(), SrvprofError> {
    let would_overwrite = || SrvprofError::WouldOverwrite {
        path: out.join(name).display().to_string(),
    };
    match out.kind(name) {
        None => Ok(()),
        Some(Kind::Link) => Err(write_err(
            &out.join(name),
            "it is a symbolic link, which srvprof never follows",
        )),
        Some(_) if force => Ok(()),
        Some(Kind::File) => {
            let head = head_of(out, name).unwrap_or_default();
            let ours = head.contains(TOOL_MARKER)
                || head.starts_with("# srvprof")
                || head.contains("srvprof-report")
                || (name != "run.json" && is_run_folder(out));
            if ours { Ok(()) } else { Err(would_overwrite()) }
        }
        Some(_) => Err(would_overwrite()),
    }
}

/// Writes `bytes` to `name` in `out` atomically: a reader sees the old file or the whole new one.
pub fn write_atomic(
    out: &OutDir,
    name: &str,
    bytes: &[u8],
    force: bool,
) -> Result<(), SrvprofError> {
    check_writable(out, name, force)?;
    out.write(name, bytes)
        .map_err(|e| write_err(&out.join(name), e))
}

/// The text of an input file someone else may have written (run.json, probe.json, load.json,
/// folded stacks): a regular file, not a link, at most srvprof_files::MAX_INPUT bytes; `hint`
/// says what to give instead.
pub fn read_input(path: &Path, hint: &str) -> Result<String, SrvprofError> {
    srvprof_files::read_input_string(path, srvprof_files::MAX_INPUT)
        .map_err(|e| SrvprofError::Usage(format!("cannot read {}: {e}; {hint}", path.display())))
}

/// Whether `name` is one of the files a run writes beside its run.json.
fn is_run_output(name: &str) -> bool {
    name == "timeline.csv"
        || name == "report.html"
        || (["oncpu", "offcpu", "slowest-"]
            .iter()
            .any(|p| name.starts_with(p))
            && (name.ends_with(".folded") || name.ends_with(".timed")))
        || (name.starts_with("flamegraph-") && name.ends_with(".svg"))
        || (name.starts_with("profile-") && name.ends_with(".pb.gz"))
}

/// In a run folder about to get a new run, removes the previous run's outputs, so none it wrote
/// and this one does not (another group's stacks, a window's flamegraph) is read as this run's.
/// Only regular files srvprof names so, and only in a folder whose run.json srvprof wrote.
pub fn clear_run_folder(out: &OutDir) {
    if !is_run_folder(out) {
        return;
    }
    for name in out.names() {
        if is_run_output(&name) {
            let _ = out.remove_file(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("srvprof-output-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_run_folder_that_cannot_be_made_is_refused_before_the_run() {
        // /proc/sys refuses new entries, even to root.
        let refused = open_dir(Path::new("/proc/sys/srvprof-run-x")).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "could not write /proc/sys/srvprof-run-x: srvprof-run-x cannot be made in its folder (No such file or directory (os error 2)); choose another --out path or fix its permissions"
        );
    }

    #[test]
    fn refuses_a_planted_symlink_and_leaves_its_target_alone() {
        let d = tmpdir("symlink");
        let victim = d.join("victim");
        fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("run.json")).unwrap();
        let out = open_dir(&d).unwrap();
        let e = write_atomic(&out, "run.json", b"{}", false).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn replaces_its_own_file_but_not_a_foreign_one_without_force() {
        let d = tmpdir("overwrite");
        let out = open_dir(&d).unwrap();
        let ours = |a: u32| format!("{{{TOOL_MARKER}, \"a\": {a}}}");
        write_atomic(&out, "ours.json", ours(1).as_bytes(), false).unwrap();
        write_atomic(&out, "ours.json", ours(2).as_bytes(), false).unwrap();
        assert!(
            fs::read_to_string(d.join("ours.json"))
                .unwrap()
                .contains("\"a\": 2")
        );
        let foreign = d.join("notes.txt");
        fs::write(&foreign, "mine").unwrap();
        assert!(matches!(
            write_atomic(&out, "notes.txt", b"x", false),
            Err(SrvprofError::WouldOverwrite { .. })
        ));
        assert_eq!(fs::read_to_string(&foreign).unwrap(), "mine");
        write_atomic(&out, "notes.txt", b"x", true).unwrap();
        assert_eq!(fs::read_to_string(&foreign).unwrap(), "x");
        let leftovers: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("srvprof-tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn a_new_run_clears_the_previous_run_s_outputs_and_nothing_else() {
        let d = tmpdir("clear");
        let outputs = [
            "timeline.csv",
            "oncpu-client.timed",
            "offcpu-server.folded",
            "slowest-oncpu-server.diff.folded",
            "flamegraph-oncpu-server-3s-5s.svg",
            "profile-client.pb.gz",
        ];
        let theirs = ["notes.folded", "plot.svg", "run-2.json"];
        for name in outputs.iter().chain(&theirs) {
            fs::write(d.join(name), "x").unwrap();
        }
        let out = open_dir(&d).unwrap();
        // No srvprof run.json: nobody's run folder, nothing goes.
        clear_run_folder(&out);
        assert!(outputs.iter().all(|n| d.join(n).exists()));
        fs::write(d.join("run.json"), format!("{{{TOOL_MARKER}}}")).unwrap();
        clear_run_folder(&out);
        for name in outputs {
            assert!(!d.join(name).exists(), "{name} kept");
        }
        for name in theirs.iter().chain(&["run.json"]) {
            assert!(d.join(name).exists(), "{name} removed");
        }
    }

    #[test]
    fn a_run_folder_s_unmarked_files_are_replaced_once_its_run_json_is_srvprof_s() {
        let d = tmpdir("run-folder");
        let out = open_dir(&d).unwrap();
        fs::write(d.join("timeline.csv"), "t_s,throughput_rps\n").unwrap();
        // No run.json: the folder is nobody's, the file is kept.
        assert!(matches!(
            check_writable(&out, "timeline.csv", false),
            Err(SrvprofError::WouldOverwrite { .. })
        ));
        // A run.json someone else wrote vouches for nothing.
        fs::write(d.join("run.json"), "{\"tool\": \"other\"}").unwrap();
        assert!(check_writable(&out, "timeline.csv", false).is_err());
        // srvprof's run.json: the folder is a run's, its files may be replaced.
        write_atomic(
            &out,
            "run.json",
            format!("{{{TOOL_MARKER}}}").as_bytes(),
            true,
        )
        .unwrap();
        write_atomic(&out, "timeline.csv", b"t_s,throughput_rps\n1,2\n", false).unwrap();
        assert!(
            fs::read_to_string(d.join("timeline.csv"))
                .unwrap()
                .contains("1,2")
        );
        // A run.json that is a symbolic link to srvprof's vouches for nothing.
        let other = tmpdir("run-folder-link");
        fs::write(other.join("timeline.csv"), "mine").unwrap();
        std::os::unix::fs::symlink(d.join("run.json"), other.join("run.json")).unwrap();
        let other = open_dir(&other).unwrap();
        assert!(check_writable(&other, "timeline.csv", false).is_err());
    }
}
