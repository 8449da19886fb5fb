//! The window the syscall and softirq programs time in (sampled mode): a start recorded before the
//! window opened belongs to an event whose end the programs missed, so it is not timed. The
//! programs are attached for the window only.

use aya_ebpf::{macros::map, maps::Array};
use srvprof_common::window;

/// [START_NS, LEN_NS], written by userspace as it opens a window.
#[map]
static TRACE_WINDOW: Array<u64> = Array::with_max_entries(window::COUNT, 0);

#[inline(always)]
fn get(index: u32) -> u64 {
    TRACE_WINDOW.get(index).copied().unwrap_or(0)
}

/// Set at load time for `--empty-window-programs` (srvprof_common::globals::WINDOW_PROGRAMS_EMPTY).
#[unsafe(no_mangle)]
static WINDOW_PROGRAMS_EMPTY: u64 = 0;

/// Whether the syscall and softirq programs return at once: the kernel's traced path and the
/// dispatch to them are all that is left of their cost (a setting for measuring, never a mode).
#[inline(always)]
pub fn programs_empty() -> bool {
    crate::target::global(&WINDOW_PROGRAMS_EMPTY) != 0
}

/// When the current window opened (0 in exact mode: the programs stay attached).
#[inline(always)]
pub fn start_ns() -> u64 {
    get(window::START_NS)
}

/// Whether a softirq beginning `now` is counted and timed: inside the span userspace counts
/// packets over (window::SOFTIRQ_FROM_NS; all along in exact mode, where both edges are 0).
#[inline(always)]
pub fn softirq_span_holds(now: u64) -> bool {
    let until = get(window::SOFTIRQ_UNTIL_NS);
    now >= softirq_span_start() && (until == 0 || now < until)
}

/// When the current span began: a start recorded before it belongs to an earlier window, whose
/// exit the programs missed.
#[inline(always)]
pub fn softirq_span_start() -> u64 {
    get(window::SOFTIRQ_FROM_NS)
}

/// A timed duration weighted for the chance it had to be timed at all. In sampled mode a period of
/// length d that ends inside a window of length W was timed only if it also began inside it, which
/// happens with probability (W - d) / W; weighting it by W / (W - d) keeps the estimated total
/// unbiased for long syscalls (epoll_wait, accept) as for short ones. Capped at 10x.
/// Returns the call of length `d` so weighted, and `part` of it (its time awake) weighted the
/// same way, the window's length read once.
#[inline(always)]
pub fn weighted_with_part(d: u64, part: u64) -> (u64, u64) {
    let w = get(window::LEN_NS);
    if w == 0 {
        return (d, part);
    }
    // Plain arithmetic (saturating_mul would need 128-bit helpers BPF lacks): d and w are
    // nanoseconds well below 2^32 * 10 in practice, and the products stay far below 2^64.
    if d >= w - w / 10 {
        return (d.wrapping_mul(10), part.wrapping_mul(10));
    }
    // checked_div: a plain `/` brings a divide-by-zero panic path the verifier rejects.
    let scale = |x: u64| x.wrapping_mul(w).checked_div(w - d).unwrap_or(x);
    (scale(d), scale(part))
}
