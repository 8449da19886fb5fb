//! /proc/PID/maps, parsed in one place: each line a [`Mapping`].

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Readable, writable, executable, private: `r-xp`.
    pub perms: String,
    /// Where in the file the mapping starts.
    pub offset: u64,
    /// The file's device (major:minor, hex, as maps has it) and inode; 00:00 and 0 for memory
    /// that is no file's.
    pub dev: String,
    pub inode: u64,
    /// The file's path (" (deleted)" after it when the file was removed since), a name such as
    /// `[vdso]`, `[heap]` or `[vsyscall]`, or empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    /// One line; None when it is not one.
    pub fn parse(line: &str) -> Option<Mapping> {
        let mut parts = line.splitn(6, ' ').filter(|p| !p.is_empty());
        let (start, end) = parts.next()?.split_once('-')?;
        let perms = parts.next()?.to_string();
        let offset = u64::from_str_radix(parts.next()?, 16).ok()?;
        let dev = parts.next()?.to_string();
        let inode = parts.next()?.parse().ok()?;
        let path = parts.next().unwrap_or("").trim().to_string();
        Some(Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            perms,
            offset,
            dev,
            inode,
            path,
        })
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    pub fn executable(&self) -> bool {
        self.perms.contains('x')
    }

    /// Backed by a file still at its path when the maps were read (not removed since).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/') && !self.path.ends_with(" (deleted)")
    }

    /// The file's name without its directories, or the mapping's name (`[vdso]`), or `[anon]`.
    pub fn module_name(&self) -> &str {
        match self.path.as_str() {
            "" => "[anon]",
            p => p.rsplit('/').next().unwrap_or(p),
        }
    }

    /// Whether the file at `path` now is still the one mapped: same device and inode.
    pub fn still_on_disk(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return false;
        };
        let dev = meta.dev();
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        meta.ino() == self.inode && format!("{major:02x}:{minor:02x}") == self.dev
    }
}

/// Every mapping of a maps text.
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(Mapping::parse).collect()
}

/// A process's maps as text, empty when it is gone.
pub fn read(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_kind_parse() {
        let text = "\
55d0c09fe000-55d0c0a2e000 r-xp 00002000 08:01 1234                       /usr/sbin/nginx
7f1e2a000000-7f1e2a021000 rw-p 00000000 00:00 0 
7ffd5b5f2000-7ffd5b5f4000 r-xp 00000000 00:00 0                          [vdso]
7f1e2b000000-7f1e2b100000 r-xp 00010000 fd:02 99                         /opt/my app/lib.so (deleted)
";
        let maps = parse(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(
            maps[0],
            Mapping {
                start: 0x55d0c09fe000,
                end: 0x55d0c0a2e000,
                perms: "r-xp".into(),
                offset: 0x2000,
                dev: "08:01".into(),
                inode: 1234,
                path: "/usr/sbin/nginx".into(),
            }
        );
        assert!(maps[0].executable() && maps[0].is_file() && maps[0].contains(0x55d0c09fe000));
        assert_eq!(maps[0].module_name(), "nginx");
        assert_eq!(
            (maps[1].path.as_str(), maps[1].module_name()),
            ("", "[anon]")
        );
        assert!(!maps[1].executable());
        assert_eq!(maps[2].module_name(), "[vdso]");
        assert!(!maps[2].is_file());
        // A path with a space is whole; a removed file is not a file to read.
        assert_eq!(maps[3].path, "/opt/my app/lib.so (deleted)");
        assert!(!maps[3].is_file());
        assert_eq!(Mapping::parse("not a maps line"), None);
    }
}
