//! The reclaim programs (ebpf/src/memory.rs): memory a watched thread reclaimed itself, counted
//! in its thread figures (read by sched.rs).

use super::Family;
use super::family::{Attaching, FamilyReader};
use crate::error::SrvprofError;

pub struct Reader;

impl FamilyReader for Reader {
    const PROGRAMS: &'static [&'static str] = &[
        "mm_vmscan_direct_reclaim_begin",
        "mm_vmscan_direct_reclaim_end",
        "mm_vmscan_memcg_reclaim_begin",
        "mm_vmscan_memcg_reclaim_end",
    ];
    const SKIP: Option<Family> = Some(Family::Reclaim);

    fn attach(_: &mut Attaching<'_>) -> Result<Self, SrvprofError> {
        Ok(Self)
    }
}
