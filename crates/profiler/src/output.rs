//! Writing results safely: complete or not at all (temp file + rename), never through a planted
//! symlink, never over a file srvprof did not write (without --force), owned by the sudo user.

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

/// Whether `path` may be (over)written: absent, or a regular file srvprof wrote, or `force`.
pub fn check_writable(path: &Path, force: bool) -> Result<(), SrvprofError> {
    match fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(meta) if meta.file_type().is_symlink() => Err(write_err(
            path,
            "it is a symbolic link, which srvprof never follows",
        )),
        Ok(_) if force => Ok(()),
        Ok(meta) if meta.is_file() => {
            let head = fs::read(path)
                .map(|b| b[..b.len().min(4096)].to_vec())
                .unwrap_or_default();
            let head = String::from_utf8_lossy(&head);
            if head.contains(TOOL_MARKER)
                || head.starts_with("# srvprof")
                || head.contains("srvprof-report")
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

/// Under sudo, files belong to the user who ran sudo (SUDO_UID/SUDO_GID), not to root.
pub fn give_to_invoking_user(path: &Path) {
    let id = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        let _ = std::os::unix::fs::lchown(path, Some(uid), Some(gid));
    }
}

#[cfg(test)]
mod tests {
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
}
