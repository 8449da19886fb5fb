//! The exit program (ebpf/src/exits.rs): a watched thread that exits or dies by a signal.

names! {
    maps: [EXITS],
    globals: [],
}

pub const EXIT_RING_BYTES: u32 = 256 * 1024;

/// A watched thread exited. `exit_code` is the kernel's task->exit_code:
/// the low 7 bits are the killing signal, bits 8..15 the exit status.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitEvent {
    pub ts_ns: u64,
    pub tid: u32,
    pub tgid: u32,
    pub group: u32,
    pub exit_code: u32,
    pub comm: [u8; 16],
}

pod!(ExitEvent);
