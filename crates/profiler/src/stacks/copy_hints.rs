//! How much of each sampled thread's user stack the BPF side copies (StackCopyHint), learned from
//! the thread's unwound samples. Copying is the sample's main cost in the interrupt (~0.3 us per
//! KiB here), so a copy should hold the thread's frames and little more:
//! - `bytes`: the deepest any of its unwindings read, with a margin; twice that after a sample ran
//!   out of copied stack. Until a sample is unwound, all a sample may (USER_STACK_BYTES).
//! - `end`: just above the outermost frame (main, start_thread) its complete stacks reached. Above
//!   it are the thread's start-up data (the main thread's argv, environment and auxiliary vector,
//!   8 KiB and more for nginx's worker), which no unwinding reads; a copy from below `end` stops
//!   there. A thread whose stack was found above its `end` (a runtime that switches stacks, a
//!   reused thread id) keeps `bytes` alone from then on.

use std::collections::{HashMap, HashSet};

use aya::maps::{HashMap as BpfHashMap, MapData};
use srvprof_common::{StackCopyHint, USER_STACK_BYTES};

/// Bytes copied beyond the deepest a thread's unwinding has read so far, rounded up to a page.
const COPY_MARGIN: u64 = 2048;
/// Bytes copied above the outermost frame's return address.
const END_MARGIN: u64 = 256;
const FULL: u64 = USER_STACK_BYTES as u64;

/// What one sample's copy and unwinding came to.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// The sample's stack pointer.
    pub sp: u64,
    /// Bytes copied from it.
    pub copied: u64,
    /// The deepest the unwinding read, in bytes from `sp`.
    pub deepest_read: u64,
    /// The unwinding wanted stack beyond the copy.
    pub read_past_copy: bool,
    /// The unwinding reached the thread's outermost frame.
    pub reached_root: bool,
}

/// The hint after `cur` (None: no hint, a full copy) has seen `o`. `ends` is false for a thread
/// that is not to get an `end` any more. Returns the hint, and whether the thread's `end` was
/// found wrong (its stack was above it).
pub fn next(cur: Option<StackCopyHint>, ends: bool, o: &Outcome) -> (Option<StackCopyHint>, bool) {
    let (bytes, end) = cur.map_or((FULL, 0), |h| (u64::from(h.bytes), h.end));
    let to_end = (end > o.sp).then(|| end - o.sp).filter(|&n| n < bytes);
    let cut_at_end = to_end.is_some_and(|n| o.copied >= n);
    if o.read_past_copy && cut_at_end {
        // This sample's frames went on above `end`: not a stack `end` can be trusted on.
        return (hint(bytes, 0), true);
    }
    // A copy that ended short of its limit ended at the stack mapping's end: reading past it is
    // the unwinder probing above the outermost frame, not a stack that needed more.
    // A copy that ran out at its limit doubles it.
    let bytes = if o.read_past_copy && !cut_at_end && o.copied >= bytes && bytes < FULL {
        (bytes * 2).min(FULL)
    } else {
        let need = ((o.deepest_read + COPY_MARGIN).div_ceil(4096) * 4096).min(FULL);
        // The most any sample needed; from a full copy (none yet, or doubled to it), this one's.
        if bytes < FULL { need.max(bytes) } else { need }
    };
    let end = if ends && o.reached_root && o.deepest_read > 0 {
        end.max(o.sp + o.deepest_read + END_MARGIN)
    } else {
        end
    };
    (hint(bytes, end), false)
}

/// The hint for `bytes` and `end`, None when it says nothing (a full copy).
fn hint(bytes: u64, end: u64) -> Option<StackCopyHint> {
    (bytes < FULL || end != 0).then_some(StackCopyHint {
        bytes: bytes.min(FULL) as u32,
        _pad: 0,
        end,
    })
}

/// The BPF map of hints, and what was last written to it.
pub struct CopyHints {
    map: BpfHashMap<MapData, u32, StackCopyHint>,
    set: HashMap<u32, StackCopyHint>,
    /// Threads whose stack was found above their `end`.
    no_end: HashSet<u32>,
}

impl CopyHints {
    pub fn new(map: BpfHashMap<MapData, u32, StackCopyHint>) -> Self {
        Self {
            map,
            set: HashMap::new(),
            no_end: HashSet::new(),
        }
    }

    /// Learns from one of `tid`'s samples, and writes the map when its hint changed.
    pub fn learn(&mut self, tid: u32, o: &Outcome) {
        let cur = self.set.get(&tid).copied();
        let (want, end_wrong) = next(cur, !self.no_end.contains(&tid), o);
        if end_wrong {
            self.no_end.insert(tid);
        }
        if want == cur {
            return;
        }
        let ok = match want {
            Some(h) => self.map.insert(tid, h, 0).is_ok(),
            None => self.map.remove(&tid).is_ok(),
        };
        if ok {
            match want {
                Some(h) => self.set.insert(tid, h),
                None => self.set.remove(&tid),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SP: u64 = 0x7ffc_0000_1000;

    fn outcome(copied: u64, deepest: u64, past: bool, root: bool) -> Outcome {
        Outcome {
            sp: SP,
            copied,
            deepest_read: deepest,
            read_past_copy: past,
            reached_root: root,
        }
    }

    #[test]
    fn a_main_thread_copies_to_its_outermost_frame_not_its_environment() {
        // nginx's worker as measured: main's frame 3,464 bytes above sp, the stack's end 12 KiB.
        let (h, _) = next(None, true, &outcome(12040, 3464, false, true));
        let h = h.expect("a hint");
        assert_eq!(h.bytes, 8192);
        assert_eq!(h.end, SP + 3464 + END_MARGIN);
        // A later sample 600 bytes deeper copies to the same end: 4,320 bytes, not 12 KiB.
        let sp = SP - 600;
        assert_eq!(h.end - sp, 3464 + 600 + END_MARGIN);
    }

    #[test]
    fn the_end_only_grows_and_only_from_complete_stacks() {
        let (h, _) = next(None, true, &outcome(12040, 3464, false, true));
        let (h2, _) = next(h, true, &outcome(4000, 1000, false, false));
        assert_eq!(
            h2.unwrap().end,
            h.unwrap().end,
            "a stack that stopped early says nothing"
        );
        let (h3, _) = next(h2, true, &outcome(4000, 1000, false, true));
        assert_eq!(
            h3.unwrap().end,
            h.unwrap().end,
            "a lower root does not lower it"
        );
    }

    #[test]
    fn a_stack_above_its_end_drops_the_end_for_good() {
        let (h, _) = next(None, true, &outcome(12040, 3464, false, true));
        let end = h.unwrap().end;
        // A sample whose copy stopped at the end and whose frames went on above it.
        let o = outcome(end - SP, end - SP, true, false);
        let (h2, wrong) = next(h, true, &o);
        assert!(wrong);
        assert_eq!(h2.unwrap().end, 0);
        // And it is not set again while the thread is marked.
        let (h3, _) = next(h2, false, &outcome(12040, 3464, false, true));
        assert_eq!(h3.unwrap().end, 0);
    }

    #[test]
    fn running_out_of_bytes_doubles_them_up_to_a_full_copy() {
        let (h, _) = next(None, false, &outcome(12040, 3464, false, true));
        assert_eq!(h.unwrap().bytes, 8192);
        // A deeper stack: its copy reached the 8 KiB limit and the unwinding wanted more.
        let (h, _) = next(h, false, &outcome(8192, 8192, true, false));
        assert_eq!(h.unwrap().bytes, 16384);
        // A shallow sample after it does not shrink it back.
        let (h, _) = next(h, false, &outcome(12040, 3464, false, true));
        assert_eq!(h.unwrap().bytes, 16384);
        let mut h = h;
        for _ in 0..2 {
            h = next(
                h,
                false,
                &outcome(u64::from(h.unwrap().bytes), 9000, true, false),
            )
            .0;
        }
        assert_eq!(h, None, "a full copy, no hint");
    }

    #[test]
    fn reading_past_a_copy_that_ended_at_the_mapping_is_not_running_out() {
        let (h, _) = next(None, false, &outcome(12040, 3464, false, true));
        let (h2, wrong) = next(h, false, &outcome(2000, 1990, true, true));
        assert!(!wrong);
        assert_eq!(h2.unwrap().bytes, 8192);
    }
}
