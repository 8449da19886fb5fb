//! How well a run's stacks were unwound, per group (server, client) and kind (on-CPU, off-CPU):
//! the share of stacks with a user part whose outermost frame is where a thread starts, the share
//! with a frame left unnamed, the mean user depth, and which method unwound them. A flamegraph
//! whose stacks stop short puts the time under the wrong parents; these say how far to trust it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where every thread's stack begins: the process entry, libc's thread start, Go's goroutine and
/// thread starts. A stack whose outermost user frame is one of these was unwound whole.
const THREAD_STARTS: &[&str] = &[
    "_start",
    "main",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "runtime.goexit",
    "runtime.goexit.abi0",
    "runtime.mstart",
    "runtime.mstart.abi0",
    "runtime.rt0_go",
    "runtime.rt0_go.abi0",
];

/// True when `frame` is a thread's first frame (glibc's internal `__GI_` aliases included).
pub fn is_thread_start(frame: &str) -> bool {
    let bare = frame.strip_prefix("__GI_").unwrap_or(frame);
    THREAD_STARTS.contains(&frame) || THREAD_STARTS.contains(&bare)
}

/// True when `frame` has no symbol: `module+0xoffset` or `[unknown]+0x...`.
pub fn is_unnamed(frame: &str) -> bool {
    frame.starts_with('[') || frame.contains("+0x")
}

/// How unwinding one stack in user space ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnwindEnd {
    /// The code marks its frame as the outermost: CFI with no return address (`_start`,
    /// `clone3`), or a frame pointer of zero, which JIT runtimes set at their stacks' roots (the
    /// BEAM at each Erlang process's first frame and at its scheduler loop).
    Root,
    /// JIT code whose frame pointer leads to another stack, which the sample did not copy (the
    /// BEAM's JIT calling C code: the Erlang frames are on the process's own stack).
    StackSwitch,
    /// The stack goes on beyond the bytes copied (its end, or more untouched pages in a row than
    /// the copy skips over).
    CopyEnded,
    /// No rule led further: no CFI there, and its frame pointer leads nowhere.
    Lost,
    /// Deeper than the frames kept.
    TooDeep,
}

impl UnwindEnd {
    /// Why a stack that ended this way stops short, in a clause.
    fn why(self) -> &'static str {
        match self {
            UnwindEnd::Root => "the code marks it as the outermost frame",
            UnwindEnd::StackSwitch => {
                "that JIT code's frame pointer leads to another stack, which the sample did not copy (the BEAM's JIT keeps each Erlang process's frames on the process's own stack, so the Erlang callers of C code are out of reach; perf --call-graph dwarf stops there too)"
            }
            UnwindEnd::CopyEnded => {
                "the stack is deeper than the 64 KiB copied, or holds more than 16 KiB in a row the thread never touched (a large local buffer), which the copy cannot read"
            }
            UnwindEnd::Lost => {
                "no CFI covers the code there and its frame pointer leads nowhere: code built without unwind tables and without frame pointers, or a runtime switching stacks there (Go's runtime.systemstack)"
            }
            UnwindEnd::TooDeep => "the stack is deeper than the frames kept",
        }
    }
}

/// The unwind quality of one group's stacks of one kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnwindQuality {
    /// "server" or "client".
    pub group: String,
    /// "oncpu" (weights are samples) or "offcpu" (weights are microseconds).
    pub kind: String,
    /// Weight of all stacks, and of those with a user part (the shares below are of these).
    pub weight: u64,
    pub with_user: u64,
    /// Share unwound to their start: the outermost user frame is a thread's start (main,
    /// start_thread, clone3, runtime.goexit...) or one the code marks as outermost (UnwindEnd::Root).
    pub reach_start: f64,
    /// Share with at least one user frame left unnamed (module+offset).
    pub with_unnamed: f64,
    pub mean_user_depth: f64,
    /// Weight per method: "cfi" (unwound in user space from .eh_frame / .debug_frame, frame
    /// pointers where a function has none) or "frame_pointers" (the kernel's walk).
    pub methods: BTreeMap<String, u64>,
    /// Mean bytes of user stack copied per stack unwound in user space (the part of a sample's
    /// cost in its interrupt that grows with the copy), None when none was.
    #[serde(default)]
    pub mean_copy_bytes: Option<f64>,
    /// The outermost frame most of the stacks that stop short stop at, and why it may be.
    pub stops_at: Option<String>,
    pub why: Option<String>,
    /// On-CPU: the sampling rate (Hz), the group's samples in the measured span, and what its
    /// threads' time on a CPU there (switch-in to switch-out) calls for at that rate; None
    /// off-CPU.
    #[serde(default)]
    pub sample_hz: Option<u64>,
    #[serde(default)]
    pub measured_samples: Option<u64>,
    #[serde(default)]
    pub expected_samples: Option<f64>,
    /// The samples the rest of the scheduler's charge would call for: a thread woken on an idle
    /// CPU is charged from its wakeup, while the CPU still leaves idle, and a timer there lands
    /// on the idle task (perf's samplers miss the same). expected_samples plus these is the
    /// scheduler's CPU time (schedstat, /proc/PID/stat) at the rate.
    #[serde(default)]
    pub precharged_samples: Option<f64>,
}

/// Adds up stacks one by one into an UnwindQuality.
#[derive(Debug, Default)]
pub struct UnwindTally {
    weight: u64,
    with_user: u64,
    reach_start: u64,
    with_unnamed: u64,
    depth_weighted: u64,
    methods: BTreeMap<String, u64>,
    /// Outermost frame of the stacks that stop short -> (weight, method, weight per end).
    stops: BTreeMap<String, Stop>,
}

#[derive(Debug, Default)]
struct Stop {
    weight: u64,
    method: String,
    ends: BTreeMap<UnwindEnd, u64>,
}

impl UnwindTally {
    /// One stack: its user frames, outermost first, the method that unwound them, how the
    /// unwinding ended (None for the kernel's frame-pointer walk, which does not say), its weight.
    pub fn add(
        &mut self,
        user_frames: &[String],
        method: &str,
        end: Option<UnwindEnd>,
        weight: u64,
    ) {
        self.weight += weight;
        let Some(outermost) = user_frames.first() else {
            return;
        };
        self.with_user += weight;
        *self.methods.entry(method.to_string()).or_default() += weight;
        self.depth_weighted += weight * user_frames.len() as u64;
        if user_frames.iter().any(|f| is_unnamed(f)) {
            self.with_unnamed += weight;
        }
        if is_thread_start(outermost) || end == Some(UnwindEnd::Root) {
            self.reach_start += weight;
        } else {
            let stop = self.stops.entry(outermost.clone()).or_insert_with(|| Stop {
                method: method.to_string(),
                ..Stop::default()
            });
            stop.weight += weight;
            if let Some(end) = end {
                *stop.ends.entry(end).or_default() += weight;
            }
        }
    }

    pub fn finish(self, group: &str, kind: &str) -> UnwindQuality {
        let n = self.with_user.max(1) as f64;
        let stop = self
            .stops
            .into_iter()
            .max_by_key(|(_, stop)| stop.weight)
            .map(|(frame, stop)| {
                let end = stop.ends.iter().max_by_key(|(_, w)| **w).map(|(e, _)| *e);
                let why = if stop.method == "frame_pointers" {
                    "the kernel's frame-pointer walk stopped there (a binary built without frame pointers: the walk reads garbage); these stacks found the user-stack ring full, so none of them was unwound from CFI (server.user_stack_ring_full counts them)"
                } else if frame.starts_with("[anon]") || frame.starts_with("[unknown]") {
                    "code in anonymous memory with no perf map (JIT code): nothing names it, and nothing says how to step out of it"
                } else if let Some(end) = end {
                    end.why()
                } else {
                    "unwinding stopped there"
                };
                (frame, why.to_string())
            });
        UnwindQuality {
            group: group.into(),
            kind: kind.into(),
            weight: self.weight,
            with_user: self.with_user,
            reach_start: self.reach_start as f64 / n,
            with_unnamed: self.with_unnamed as f64 / n,
            mean_user_depth: self.depth_weighted as f64 / n,
            methods: self.methods,
            mean_copy_bytes: None,
            stops_at: stop.as_ref().map(|(f, _)| f.clone()),
            why: stop.map(|(_, w)| w),
            sample_hz: None,
            measured_samples: None,
            expected_samples: None,
            precharged_samples: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn thread_starts_are_known_by_name_and_glibc_alias() {
        for f in [
            "_start",
            "main",
            "start_thread",
            "clone3",
            "__GI___clone3",
            "runtime.goexit.abi0",
        ] {
            assert!(is_thread_start(f), "{f}");
        }
        for f in [
            "ngx_worker_process_cycle",
            "nginx+0x51398",
            "mio::poll::Poll::poll",
            "mainloop",
        ] {
            assert!(!is_thread_start(f), "{f}");
        }
    }

    #[test]
    fn unnamed_frames_are_module_offsets_and_unknowns() {
        assert!(is_unnamed("nginx+0x51398"));
        assert!(is_unnamed("[unknown]+0x7c"));
        assert!(is_unnamed("[anon]+0x12"));
        assert!(!is_unnamed("ngx_http_core_run_phases"));
        assert!(!is_unnamed(
            "<std::sys::thread::unix::Thread>::new::thread_start"
        ));
    }

    #[test]
    fn shares_are_weighted_and_the_commonest_stop_is_named() {
        let mut t = UnwindTally::default();
        let lost = Some(UnwindEnd::Lost);
        t.add(
            &frames(&["_start", "main", "ngx_x+0x10", "leaf"]),
            "cfi",
            Some(UnwindEnd::Root),
            6,
        );
        t.add(&frames(&["[anon]+0x40", "leaf"]), "cfi", lost, 3);
        t.add(&frames(&["lib.so+0x9", "leaf"]), "cfi", lost, 1);
        t.add(&[], "none", None, 10);
        let q = t.finish("server", "oncpu");
        assert_eq!((q.weight, q.with_user), (20, 10));
        assert!((q.reach_start - 0.6).abs() < 1e-12);
        assert!((q.with_unnamed - 1.0).abs() < 1e-12);
        assert!((q.mean_user_depth - (6.0 * 4.0 + 3.0 * 2.0 + 2.0) / 10.0).abs() < 1e-12);
        assert_eq!(q.methods["cfi"], 10);
        assert_eq!(q.stops_at.as_deref(), Some("[anon]+0x40"));
        assert!(q.why.unwrap().contains("perf map"));
        let mut t = UnwindTally::default();
        t.add(
            &frames(&["[unknown]+0xd4b4f2030303220", "leaf"]),
            "frame_pointers",
            None,
            3,
        );
        assert!(
            t.finish("server", "offcpu")
                .why
                .unwrap()
                .contains("frame-pointer walk")
        );
    }

    #[test]
    fn a_root_the_code_marks_counts_as_the_start_and_the_commonest_end_says_why() {
        let mut t = UnwindTally::default();
        // An Erlang process's first frame: the BEAM's JIT set its frame pointer to zero.
        t.add(
            &frames(&["$hello_erl:conn/3", "$gen_tcp:send/2"]),
            "cfi",
            Some(UnwindEnd::Root),
            5,
        );
        // C code called from Erlang: the JIT stub's frame pointer leads to the process's stack.
        let stub = "$global::call_light_bif_shared";
        t.add(
            &frames(&[stub, "erts_port_output"]),
            "cfi",
            Some(UnwindEnd::StackSwitch),
            3,
        );
        t.add(
            &frames(&[stub, "erts_port_control"]),
            "cfi",
            Some(UnwindEnd::Lost),
            1,
        );
        let q = t.finish("server", "oncpu");
        assert!((q.reach_start - 5.0 / 9.0).abs() < 1e-12);
        assert_eq!(q.stops_at.as_deref(), Some(stub));
        assert!(q.why.unwrap().contains("another stack"));
    }

    #[test]
    fn no_user_stacks_make_zero_shares_not_nan() {
        let q = UnwindTally::default().finish("client", "offcpu");
        assert_eq!((q.weight, q.with_user, q.reach_start), (0, 0, 0.0));
        assert_eq!(q.stops_at, None);
    }
}
