//! GNU build-ids: of the targets' executables (read through /proc/PID/exe while they run), of the
//! files frames were found in, and of the running kernel, for pprof's mappings.

use std::path::Path;

use object::{NativeEndian, Object};
use srvprof_common::GROUP_SERVER;

/// A target process's executable: its path and GNU build-id (lowercase hex).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Executable {
    pub path: String,
    pub build_id: Option<String>,
}

impl Executable {
    /// Read through /proc/PID/exe while the process runs (none once it is gone).
    pub fn of_pid(pid: u32) -> Option<Executable> {
        let path = crate::procfs::files::exe_path(pid)?.display().to_string();
        let build_id = build_id_of(&crate::procfs::files::exe(pid));
        Some(Executable { path, build_id })
    }
}

/// The GNU build-id (lowercase hex) of the ELF file at `path`, if it has one.
pub fn build_id_of(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    elf.build_id().ok().flatten().map(hex)
}

/// The executables of the server's and the client's processes and the kernel's build-id, read
/// while they run.
#[derive(Clone, Debug, Default)]
pub struct Binaries {
    pub server: Vec<Executable>,
    pub client: Vec<Executable>,
    pub kernel_build_id: Option<String>,
}

impl Binaries {
    pub fn read(server_pids: &[u32], client_pids: &[u32]) -> Binaries {
        let of = |pids: &[u32]| {
            let mut out: Vec<Executable> = Vec::new();
            for e in pids.iter().filter_map(|&pid| Executable::of_pid(pid)) {
                if !out.contains(&e) {
                    out.push(e);
                }
            }
            out
        };
        Binaries {
            server: of(server_pids),
            client: of(client_pids),
            kernel_build_id: kernel_build_id(),
        }
    }

    pub fn of_group(&self, group: u32) -> &[Executable] {
        if group == GROUP_SERVER {
            &self.server
        } else {
            &self.client
        }
    }
}

/// The running kernel's GNU build-id, from its ELF notes in /sys/kernel/notes.
pub fn kernel_build_id() -> Option<String> {
    let notes = crate::procfs::files::kernel_notes()?;
    gnu_build_id(&notes)
}

fn gnu_build_id(notes: &[u8]) -> Option<String> {
    type Elf = object::elf::FileHeader64<NativeEndian>;
    let mut iter = object::read::elf::NoteIterator::<Elf>::new(NativeEndian, 4, notes).ok()?;
    while let Ok(Some(note)) = iter.next() {
        if note.name() == object::elf::ELF_NOTE_GNU
            && note.n_type(NativeEndian) == object::elf::NT_GNU_BUILD_ID
        {
            return Some(hex(note.desc()));
        }
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_gnu_build_id_among_notes() {
        let mut notes = Vec::new();
        // A Xen note first, then the build-id: namesz, descsz, type, name and desc padded to 4.
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 1u32, &[1u8, 2, 3][..]),
            (&b"GNU\0"[..], 3, &[0xab, 0xcd, 0x01, 0x23][..]),
        ] {
            notes.extend((name.len() as u32).to_ne_bytes());
            notes.extend((desc.len() as u32).to_ne_bytes());
            notes.extend(kind.to_ne_bytes());
            notes.extend(name);
            notes.extend(desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(gnu_build_id(&notes).as_deref(), Some("abcd0123"));
    }
}
