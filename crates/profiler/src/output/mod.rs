//! Writing results safely: complete or not at all (temp file + rename), never through a planted
//! symlink, never over a file srvprof did not write (without --force), owned by the sudo user.
//! The run folder's stack files, written and read back: stacks.rs. The server's profile pushed
//! to Pyroscope: pyroscope.rs.

pub mod pyroscope;
pub mod stacks;

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Cause, SrvprofError};

/// Marker every JSON file srvprof writes carries, so a rerun may replace it.
pub const TOOL_MARKER: &str = "\"tool\": \"srvprof\"";

fn write_err(path: &Path, e: impl Into<Cause>) -> SrvprofError {
    SrvprofError::Write {
        path: path.display().to_string(),
        source: e.into(),
    }
}

/// The first 4 KiB of a regular file (not followed through a symbolic link), if it is one.
fn head_of(path: &Path) -> Option<String> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::with_capacity(4096);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(fs::File::open(path).ok()?, 4096),
        &mut bytes,
    )
    .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether `path` is in a run folder: one whose run.json srvprof wrote. The files srvprof writes
/// there (timeline.csv, the folded stacks, the flamegraphs) carry no marker of their own, so the
/// folder's run.json vouches for them: a second `srvprof run --out DIR` replaces the first.
fn in_run_folder(path: &Path) -> bool {
    let Some(dir) = path.parent() else {
        return false;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    dir.join("run.json").as_path() != path && is_run_folder(dir)
}

/// Whether srvprof wrote `dir`'s run.json.
fn is_run_folder(dir: &Path) -> bool {
    head_of(&dir.join("run.json")).is_some_and(|h| h.contains(TOOL_MARKER))
}

/// Whether `path` may be (over)written: absent, or a regular file srvprof wrote (by its marker,
/// or in a run folder), or `force`.
/// Before a run: whether the folder `dir` exists or can be made (its nearest existing parent is
/// writable), so that a run is not measured only to be lost at its end.
pub fn check_can_create(dir: &Path) -> Result<(), SrvprofError> {
    let Some(existing) = dir
        .ancestors()
        .find(|p| p.as_os_str().is_empty() || p.exists())
    else {
        return Ok(());
    };
    let existing = if existing.as_os_str().is_empty() {
        Path::new(".")
    } else {
        existing
    };
    let Ok(c) = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()) else {
        return Ok(());
    };
    // SAFETY: access reads the NUL-terminated path we own.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        return Ok(());
    }
    Err(write_err(
        dir,
        format!(
            "{} cannot be written ({})",
            existing.display(),
            std::io::Error::last_os_error()
        ),
    ))
}

pub fn check_writable(path: &Path, force: bool) -> Result<(), SrvprofError> {
    match fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(meta) if meta.file_type().is_symlink() => Err(write_err(
            path,
            "it is a symbolic link, which srvprof never follows",
        )),
        Ok(_) if force => Ok(()),
        Ok(meta) if meta.is_file() => {
            let head = head_of(path).unwrap_or_default();
            if head.contains(TOOL_MARKER)
                || head.starts_with("# srvprof")
                || head.contains("srvprof-report")
                || in_run_folder(path)
            {
                Ok(())
            } else {
                Err(SrvprofError::WouldOverwrite {
                    path: path.display().to_string(),
                })
            }
        }
        Ok(_) => Err(SrvprofError::WouldOverwrite {
            path: path.display().to_string(),
        }),
    }
}

/// Writes `bytes` to `path` atomically: a reader sees the old file or the whole new one.
pub fn write_atomic(path: &Path, bytes: &[u8], force: bool) -> Result<(), SrvprofError> {
    check_writable(path, force)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| write_err(path, "not a file name"))?;
    let tmp = dir.join(format!(
        ".{}.srvprof-tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| write_err(path, e))?;
    let result = file.write_all(bytes).and_then(|_| file.sync_all());
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(write_err(path, e));
    }
    give_to_invoking_user(&tmp);
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        write_err(path, e)
    })
}

/// Creates an output folder (and parents), owned by the invoking user under sudo.
pub fn create_dir(path: &Path) -> Result<(), SrvprofError> {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.file_type().is_symlink() {
            return Err(write_err(
                path,
                "it is a symbolic link, which srvprof never follows",
            ));
        }
        if meta.is_dir() {
            return Ok(());
        }
        return Err(write_err(path, "it exists and is not a folder"));
    }
    fs::create_dir_all(path).map_err(|e| write_err(path, e))?;
    give_to_invoking_user(path);
    Ok(())
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
/// Only files srvprof names so, and only in a folder whose run.json srvprof wrote.
pub fn clear_run_folder(dir: &Path) {
    if !is_run_folder(dir) {
        return;
    }
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && entry.file_name().to_str().is_some_and(is_run_output) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Under sudo, files belong to the user who ran sudo (SUDO_UID/SUDO_GID), not to root.
pub fn give_to_invoking_user(path: &Path) {
    let id = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        let _ = std::os::unix::fs::lchown(path, Some(uid), Some(gid));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_folder_that_cannot_be_made_is_refused_before_the_run() {
        let fresh = std::env::temp_dir().join(format!("srvprof-create-{}", std::process::id()));
        assert!(check_can_create(&fresh.join("a/b")).is_ok());
        // /proc/sys refuses new entries, even to root.
        let refused = check_can_create(Path::new("/proc/sys/srvprof-run-x")).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "could not write /proc/sys/srvprof-run-x: /proc/sys cannot be written (Permission denied (os error 13)); choose another --out path or fix its permissions"
        );
    }

    use super::*;

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("srvprof-output-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn refuses_a_planted_symlink_and_leaves_its_target_alone() {
        let d = tmpdir("symlink");
        let victim = d.join("victim");
        fs::write(&victim, "precious").unwrap();
        let out = d.join("run.json");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        assert!(write_atomic(&out, b"{}", true).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn replaces_its_own_file_but_not_a_foreign_one_without_force() {
        let d = tmpdir("overwrite");
        let ours = d.join("ours.json");
        write_atomic(
            &ours,
            format!("{{{TOOL_MARKER}, \"a\": 1}}").as_bytes(),
            false,
        )
        .unwrap();
        write_atomic(
            &ours,
            format!("{{{TOOL_MARKER}, \"a\": 2}}").as_bytes(),
            false,
        )
        .unwrap();
        assert!(fs::read_to_string(&ours).unwrap().contains("\"a\": 2"));
        let foreign = d.join("notes.txt");
        fs::write(&foreign, "mine").unwrap();
        assert!(matches!(
            write_atomic(&foreign, b"x", false),
            Err(SrvprofError::WouldOverwrite { .. })
        ));
        assert_eq!(fs::read_to_string(&foreign).unwrap(), "mine");
        write_atomic(&foreign, b"x", true).unwrap();
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
        // No srvprof run.json: nobody's run folder, nothing goes.
        clear_run_folder(&d);
        assert!(outputs.iter().all(|n| d.join(n).exists()));
        fs::write(d.join("run.json"), format!("{{{TOOL_MARKER}}}")).unwrap();
        clear_run_folder(&d);
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
        let csv = d.join("timeline.csv");
        fs::write(&csv, "t_s,throughput_rps\n").unwrap();
        // No run.json: the folder is nobody's, the file is kept.
        assert!(matches!(
            check_writable(&csv, false),
            Err(SrvprofError::WouldOverwrite { .. })
        ));
        // A run.json someone else wrote vouches for nothing.
        fs::write(d.join("run.json"), "{\"tool\": \"other\"}").unwrap();
        assert!(check_writable(&csv, false).is_err());
        // srvprof's run.json: the folder is a run's, its files may be replaced.
        write_atomic(
            &d.join("run.json"),
            format!("{{{TOOL_MARKER}}}").as_bytes(),
            true,
        )
        .unwrap();
        write_atomic(&csv, b"t_s,throughput_rps\n1,2\n", false).unwrap();
        assert!(fs::read_to_string(&csv).unwrap().contains("1,2"));
        // A run.json that is a symbolic link to srvprof's vouches for nothing.
        let other = tmpdir("run-folder-link");
        fs::write(other.join("timeline.csv"), "mine").unwrap();
        std::os::unix::fs::symlink(d.join("run.json"), other.join("run.json")).unwrap();
        assert!(check_writable(&other.join("timeline.csv"), false).is_err());
    }
}
