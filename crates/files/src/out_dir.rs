//! The folder srvprof writes into, opened once and held by a handle: every file is created
//! relative to it, so a symbolic link planted in the folder, or a folder swapped for a link while
//! a run measures, sends nothing elsewhere.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::owner;

/// An open output folder.
#[derive(Debug)]
pub struct OutDir {
    fd: OwnedFd,
    path: PathBuf,
    /// Made by this srvprof: mode 0700 until `finish` opens it up to the user's umask.
    made: bool,
}

/// What a name in the folder is, not following a symbolic link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Folder,
    Link,
    Other,
}

/// How far the last step of a path may go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// Made if absent, reused if it is a folder of the invoking user (or srvprof's own).
    OpenOrMake,
    /// Made, and refused if it exists: a name srvprof picked itself.
    MakeNew,
    /// An existing folder of anyone: the folder a single named file goes into.
    Existing,
}

fn other(why: impl Into<String>) -> io::Error {
    io::Error::other(why.into())
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| other("the name holds a NUL byte"))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: openat reads the NUL-terminated name we own; the fd returned is ours to own.
    let fd = check(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: fd is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat_at(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: zeroed is a valid stat; fstatat fills it from the NUL-terminated name we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

fn stat_fd(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: zeroed is a valid stat; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

fn kind_of(st: &libc::stat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Folder,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    }
}

/// Under sudo, gives what srvprof made to the user who ran sudo: by handle, so a path swapped
/// meanwhile cannot redirect it.
fn give_to_invoking_user(fd: RawFd) {
    if let Some((uid, gid)) = owner::invoking_user() {
        // SAFETY: fchown on a descriptor we hold.
        let _ = unsafe { libc::fchown(fd, uid, gid) };
    }
}

/// The process's umask, read without changing it (Linux 4.7 and later show it in status).
fn umask() -> libc::mode_t {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| libc::mode_t::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// One step down the path from the folder `dir` to `name`: the folder's handle, and whether it
/// was made here.
fn step(dir: RawFd, name: &CStr, last: Option<Last>) -> io::Result<(OwnedFd, bool)> {
    const DIR_FLAGS: libc::c_int = libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW;
    // A name made or removed by someone else between our look and our act: look again.
    for _ in 0..3 {
        match stat_at(dir, name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && last != Some(Last::Existing) => {
                let mode = if last.is_some() { 0o700 } else { 0o777 };
                // SAFETY: mkdirat reads the NUL-terminated name we own.
                if let Err(e) = check(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) }) {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        continue;
                    }
                    let why = format!(
                        "{} cannot be made in its folder ({e})",
                        name.to_string_lossy()
                    );
                    return Err(io::Error::new(e.kind(), why));
                }
                let fd = open_at(dir, name, DIR_FLAGS, 0)?;
                give_to_invoking_user(fd.as_raw_fd());
                return Ok((fd, true));
            }
            Err(e) => return Err(e),
            // Whatever took the name first (a folder, a link, a file) is not srvprof's to use.
            Ok(_) if last == Some(Last::MakeNew) => {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            Ok(st) => match kind_of(&st) {
                Kind::Link if last.is_some() => {
                    return Err(other("it is a symbolic link, which srvprof never follows"));
                }
                // Like the kernel's protected_symlinks: a link on the way is followed only if it
                // is root's or the user's own.
                Kind::Link if !owner::trusted(st.st_uid) => {
                    return Err(other(format!(
                        "{} on the way is a symbolic link of user {}, which srvprof does not follow",
                        name.to_string_lossy(),
                        st.st_uid
                    )));
                }
                Kind::Link => {
                    return Ok((
                        open_at(dir, name, libc::O_DIRECTORY | libc::O_RDONLY, 0)?,
                        false,
                    ));
                }
                Kind::Folder => {
                    let fd = match open_at(dir, name, DIR_FLAGS, 0) {
                        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => continue,
                        r => r?,
                    };
                    if last == Some(Last::OpenOrMake) {
                        let uid = stat_fd(fd.as_raw_fd())?.st_uid;
                        if !owner::may_reuse(uid) {
                            return Err(other(format!("it is a folder of user {uid}, not yours")));
                        }
                    }
                    return Ok((fd, false));
                }
                _ => return Err(other("it exists and is not a folder")),
            },
        }
    }
    Err(other("it kept changing while srvprof opened it"))
}

/// Opens `path` step by step from / or the working folder.
fn walk(path: &Path, last: Last) -> io::Result<(OwnedFd, bool)> {
    let start = if path.is_absolute() { c"/" } else { c"." };
    let mut fd = open_at(libc::AT_FDCWD, start, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
    let steps: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            Component::ParentDir => Some(OsStr::new("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    let mut made = false;
    for (i, name) in steps.iter().enumerate() {
        let is_last = i + 1 == steps.len() && *name != OsStr::new("..");
        let (next, m) = step(fd.as_raw_fd(), &c_name(name)?, is_last.then_some(last))?;
        fd = next;
        made = m;
    }
    if !made {
        // SAFETY: faccessat reads the NUL-terminated "." relative to a descriptor we hold.
        check(unsafe {
            libc::faccessat(fd.as_raw_fd(), c".".as_ptr(), libc::W_OK, libc::AT_EACCESS)
        })?;
    }
    Ok((fd, made))
}

fn checked_name(name: &str) -> io::Result<CString> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(other(format!("{name:?} is not a file name")));
    }
    c_name(OsStr::new(name))
}

impl OutDir {
    /// Opens the output folder `path`, making it (mode 0700) and its missing parents. An
    /// existing one must be a folder, not a symbolic link, of the invoking user or srvprof's own.
    pub fn open(path: &Path) -> io::Result<OutDir> {
        Self::open_as(path, Last::OpenOrMake)
    }

    /// Makes the output folder `path`, which must not exist yet: a name srvprof picked.
    pub fn create_new(path: &Path) -> io::Result<OutDir> {
        Self::open_as(path, Last::MakeNew)
    }

    /// The existing folder a single named file goes into, whoever owns it.
    pub fn parent_of(file: &Path) -> io::Result<OutDir> {
        let parent = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Self::open_as(parent, Last::Existing)
    }

    fn open_as(path: &Path, last: Last) -> io::Result<OutDir> {
        if path.as_os_str().is_empty() {
            return Err(other("an empty folder name"));
        }
        let (fd, made) = walk(path, last)?;
        Ok(OutDir {
            fd,
            path: path.to_path_buf(),
            made,
        })
    }

    /// The folder's path, as given: for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in the folder: for messages.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What `name` is in the folder, if it exists.
    pub fn kind(&self, name: &str) -> Option<Kind> {
        let st = stat_at(self.fd.as_raw_fd(), &checked_name(name).ok()?).ok()?;
        Some(kind_of(&st))
    }

    /// The first `limit` bytes of the regular file `name`, not through a symbolic link.
    pub fn head(&self, name: &str, limit: u64) -> Option<Vec<u8>> {
        let c = checked_name(name).ok()?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        let fd = open_at(self.fd.as_raw_fd(), &c, flags, 0).ok()?;
        if kind_of(&stat_fd(fd.as_raw_fd()).ok()?) != Kind::File {
            return None;
        }
        let mut bytes = Vec::new();
        File::from(fd).take(limit).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }

    /// The names in the folder.
    pub fn names(&self) -> Vec<String> {
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        listing
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }

    /// Removes the regular file `name`, never a folder or what a link points to.
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        let c = checked_name(name)?;
        if kind_of(&stat_at(self.fd.as_raw_fd(), &c)?) != Kind::File {
            return Err(other(format!("{name} is not a regular file")));
        }
        // SAFETY: unlinkat reads the NUL-terminated name we own.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
    }

    /// Writes `bytes` to `name` whole: a reader sees the old file or all of the new one.
    pub fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut file = self.create(name)?;
        file.write_all(bytes)?;
        file.commit()
    }

    /// A new file that takes the place of `name` when committed, and is removed if dropped
    /// before: created beside it with O_EXCL and O_NOFOLLOW, so nothing planted is written to.
    pub fn create(&self, name: &str) -> io::Result<PendingFile> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let target = checked_name(name)?;
        let tmp = c_name(OsStr::new(&format!(
            ".{name}.srvprof-tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        )))?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
        let fd = open_at(self.fd.as_raw_fd(), &tmp, flags, 0o644)?;
        give_to_invoking_user(fd.as_raw_fd());
        Ok(PendingFile {
            dir: self.fd.try_clone()?,
            tmp,
            target,
            file: Some(File::from(fd)),
        })
    }

    /// The run is complete: a folder srvprof made opens up from 0700 to the user's umask.
    pub fn finish(&self) -> io::Result<()> {
        if self.made {
            // SAFETY: fchmod on a descriptor we hold.
            check(unsafe { libc::fchmod(self.fd.as_raw_fd(), 0o777 & !umask()) })?;
        }
        Ok(())
    }
}

/// A file being written in an `OutDir`, under a temporary name until `commit`.
pub struct PendingFile {
    /// The folder's handle, its own: the file may outlive the `OutDir` value.
    dir: OwnedFd,
    tmp: CString,
    target: CString,
    file: Option<File>,
}

impl PendingFile {
    /// Flushes the file to disk and renames it into place.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("committed once");
        file.sync_all()?;
        drop(file);
        let dir = self.dir.as_raw_fd();
        // SAFETY: renameat reads two NUL-terminated names we own, relative to the held folder.
        let renamed =
            check(unsafe { libc::renameat(dir, self.tmp.as_ptr(), dir, self.target.as_ptr()) });
        if renamed.is_err() {
            // SAFETY: as above.
            let _ = unsafe { libc::unlinkat(dir, self.tmp.as_ptr(), 0) };
        }
        renamed.map(|_| ())
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.as_mut().expect("not committed").write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().expect("not committed").flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // SAFETY: unlinkat reads the NUL-terminated temporary name we own.
            let _ = unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.tmp.as_ptr(), 0) };
        }
    }
}

#[cfg(test)]
mod tests;
