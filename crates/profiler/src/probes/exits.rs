//! Reads exit records from the EXITS ring buffer.

use aya::{
    Ebpf,
    maps::{MapData, RingBuf},
};
use srvprof_common::{ExitEvent, maps};

use super::take_ring;
use crate::error::SrvprofError;

/// Attached by the probes' loop, to the BTF tracepoint of its name.
pub const PROGRAMS: &[&str] = &["sched_process_exit"];

pub struct ExitReader {
    ring: RingBuf<MapData>,
}

impl ExitReader {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, SrvprofError> {
        Ok(Self {
            ring: take_ring(ebpf, maps::EXITS)?,
        })
    }

    pub fn drain(&mut self) -> Vec<ExitEvent> {
        let mut events = Vec::new();
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<ExitEvent>() {
                // SAFETY: the BPF side writes exactly one ExitEvent per record.
                events.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const ExitEvent) });
            }
        }
        events
    }
}

/// (exit status, killing signal) from the kernel's task->exit_code.
pub fn decode_exit_code(exit_code: u32) -> (Option<i32>, Option<i32>) {
    let signal = (exit_code & 0x7f) as i32;
    if signal != 0 {
        (None, Some(signal))
    } else {
        (Some(((exit_code >> 8) & 0xff) as i32), None)
    }
}
