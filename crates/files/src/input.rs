//! Files srvprof reads from folders someone else may have written (`report`, `merge`,
//! `compare`): regular files only, never through a symbolic link, and never more than a cap, so a
//! planted link cannot copy a root-only file into a report and a huge file cannot exhaust memory.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest input srvprof reads: ten times the folded stacks of an hour-long run.
pub const MAX_INPUT: u64 = 256 << 20;

fn refuse(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// The bytes of the regular file `path`, at most `cap` of them.
pub fn read_input(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        // Not through a link at the last step; a FIFO must not block the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                refuse("it is a symbolic link, which srvprof does not read through".into())
            }
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refuse("it is not a regular file".into()));
    }
    if meta.len() > cap {
        return Err(too_big(meta.len(), cap));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow after the look at its size: the cap holds whatever it does.
    Read::take(&file, cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_big(bytes.len() as u64, cap));
    }
    drop::<File>(file);
    Ok(bytes)
}

/// The text of the regular file `path`, at most `cap` bytes of UTF-8.
pub fn read_input_string(path: &Path, cap: u64) -> io::Result<String> {
    String::from_utf8(read_input(path, cap)?).map_err(|_| refuse("it is not UTF-8 text".into()))
}

fn too_big(len: u64, cap: u64) -> io::Error {
    refuse(format!(
        "it holds {len} bytes, more than the {cap} srvprof reads"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("srvprof-input-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_link_to_another_file_is_not_read_through() {
        let d = scratch("link");
        std::fs::write(d.join("secret"), "root only").unwrap();
        std::os::unix::fs::symlink(d.join("secret"), d.join("oncpu.folded")).unwrap();
        let e = read_input(&d.join("oncpu.folded"), MAX_INPUT).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(
            read_input(&d.join("secret"), MAX_INPUT).unwrap(),
            b"root only"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let d = scratch("fifo");
        let fifo = std::ffi::CString::new(d.join("run.json").into_os_string().into_encoded_bytes())
            .unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = read_input(&d.join("run.json"), MAX_INPUT).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_input(Path::new("/dev/zero"), MAX_INPUT).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_over_the_cap_is_refused() {
        let d = scratch("cap");
        std::fs::write(d.join("latency.hlog"), vec![b'x'; 4097]).unwrap();
        let e = read_input(&d.join("latency.hlog"), 4096).unwrap_err();
        assert!(e.to_string().contains("4097 bytes"), "{e}");
        assert_eq!(
            read_input(&d.join("latency.hlog"), 4097).unwrap().len(),
            4097
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
