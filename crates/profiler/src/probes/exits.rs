//! Reads exit records from the EXITS ring buffer.

use aya::maps::{MapData, RingBuf};
use srvprof_common::{ExitEvent, maps};

use super::family::{Attaching, FamilyReader};
use super::{Family, take_ring};
use crate::error::SrvprofError;

/// The exits' ring, drained by the sampler between readings (`Probes::drain_exits`).
pub struct Reader {
    ring: RingBuf<MapData>,
}

impl FamilyReader for Reader {
    const PROGRAMS: &'static [&'static str] = &["sched_process_exit"];
    const SKIP: Option<Family> = Some(Family::Exits);

    fn attach(at: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        Ok(Self {
            ring: take_ring(at.ebpf, maps::EXITS)?,
        })
    }
}

impl Reader {
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
