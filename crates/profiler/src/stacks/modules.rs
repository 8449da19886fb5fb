//! The ELF files user stacks are unwound with, each read and parsed once whichever processes map
//! it: its CFI sections and segments, read through /proc/PID/map_files (the very file mapped),
//! and the vDSO from the process's memory.

use std::collections::HashMap;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use object::{Object, ObjectSection, ObjectSegment};

use crate::procfs::maps::Mapping;

/// What unwinding needs of one ELF file, read once however many processes and mappings use
/// it (nginx's workers, the same libc everywhere).
#[derive(Clone)]
pub(super) struct ModuleFile {
    pub(super) info: ExplicitModuleSectionInfo<Arc<[u8]>>,
    /// Each loadable segment's (file offset, virtual address).
    pub(super) segments: Vec<(u64, u64, u64)>,
}

/// Files read so far, by device and inode.
#[derive(Default)]
pub(super) struct FileCache {
    pub(super) files: HashMap<(String, u64), Option<ModuleFile>>,
}

impl FileCache {
    /// The module of one mapping: its file read through /proc/PID/map_files (the very file
    /// mapped, even in another mount namespace or deleted since), else /proc/PID/root; the
    /// vDSO from the process's memory.
    pub(super) fn module(&mut self, pid: u32, m: &Mapping) -> Option<Module<Arc<[u8]>>> {
        let file = if m.path == VDSO {
            read_memory(pid, m.start, m.end).and_then(|d| ModuleFile::parse(d.as_slice()))
        } else {
            self.files
                .entry((m.dev.clone(), m.inode))
                .or_insert_with(|| {
                    // Only the headers and the sections unwinding needs are read, not the whole
                    // file: a debug build's DWARF is most of it (srvprof's own: 20 of 158 MB).
                    // Reading it all stalled this thread for over a second on a busy disk, and
                    // the samples queued meanwhile overflowed the ring.
                    let file = crate::procfs::files::mapped_file(pid, m.start, m.end, &m.path)?;
                    ModuleFile::parse(&object::ReadCache::new(file))
                })
                .clone()
        }?;
        // The load bias: where the segment this mapping maps was placed. It is the segment whose
        // file offset rounds down to the mapping's (lld's read-only segment may extend into the
        // page the code segment starts in, so containing the offset is not enough).
        let &(seg_offset, seg_address, _) = file
            .segments
            .iter()
            .find(|(off, _, _)| off & !0xfff == m.offset)
            .or_else(|| {
                file.segments
                    .iter()
                    .find(|(off, _, size)| off & !0xfff <= m.offset && m.offset < off + size)
            })?;
        let bias = m
            .start
            .wrapping_sub(m.offset)
            .wrapping_sub(seg_address.wrapping_sub(seg_offset));
        Some(Module::new(m.path.clone(), m.start..m.end, bias, file.info))
    }
}

impl ModuleFile {
    pub(super) fn parse<'data, R: object::ReadRef<'data>>(data: R) -> Option<ModuleFile> {
        let file = object::File::parse(data).ok()?;
        let segments = file
            .segments()
            .map(|seg| {
                let (off, size) = seg.file_range();
                (off, seg.address(), size)
            })
            .collect();
        let section = |name: &str| {
            file.section_by_name(name).and_then(|s| {
                let data: Arc<[u8]> = Arc::from(s.data().ok()?);
                Some((s.address()..s.address() + s.size(), data))
            })
        };
        let text = section(".text");
        let eh_frame = section(".eh_frame");
        let eh_frame_hdr = section(".eh_frame_hdr");
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: text.as_ref().map(|t| t.0.clone()),
            text: text.map(|t| t.1),
            got_svma: file
                .section_by_name(".got")
                .map(|s| s.address()..s.address() + s.size()),
            eh_frame_svma: eh_frame.as_ref().map(|t| t.0.clone()),
            eh_frame: eh_frame.map(|t| t.1),
            eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|t| t.0.clone()),
            eh_frame_hdr: eh_frame_hdr.map(|t| t.1),
            debug_frame: section(".debug_frame").map(|t| t.1),
            ..Default::default()
        };
        Some(ModuleFile { info, segments })
    }
}

/// The kernel's vDSO (gettimeofday, clock_gettime): an ELF image in the process's memory.
pub(super) const VDSO: &str = "[vdso]";

fn read_memory(pid: u32, start: u64, end: u64) -> Option<Vec<u8>> {
    crate::procfs::files::memory(pid, start, end)
}
