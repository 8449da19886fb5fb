//! The stop-the-world uprobes (ebpf/src/pauses.rs): a runtime's pauses per process.

names! {
    maps: [PAUSES, PAUSE_START, PAUSE_HIST],
    globals: [],
}

/// A watched process's stop-the-world pauses so far (pauses.rs): how many, their summed and
/// longest length (ns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PauseStats {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub group: u32,
    pub _pad: u32,
}

pod!(PauseStats);
