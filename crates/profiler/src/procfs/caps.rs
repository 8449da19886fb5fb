//! The capabilities srvprof holds in effect (CapEff in /proc/self/status) against those its
//! probes need: an effective uid of 0 is not enough in a container that dropped them, and a user
//! granted them needs no root.

use std::fs;

const SYS_PTRACE: u32 = 19;
const SYS_ADMIN: u32 = 21;
const PERFMON: u32 = 38;
const BPF: u32 = 39;

/// An effective capability set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps(u64);

impl Caps {
    /// srvprof's own, or none if they cannot be read.
    pub fn of_self() -> Caps {
        Caps::from_status(&fs::read_to_string("/proc/self/status").unwrap_or_default())
    }

    /// From a /proc/PID/status text.
    pub fn from_status(status: &str) -> Caps {
        Caps(
            (status.lines())
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0),
        )
    }

    fn has(self, bit: u32) -> bool {
        self.0 & (1 << bit) != 0
    }

    /// What loading and attaching the probes needs and this set lacks: CAP_BPF and CAP_PERFMON,
    /// or CAP_SYS_ADMIN, which stands for both (and is all kernels before 5.8 know).
    pub fn missing_for_probes(self) -> Vec<&'static str> {
        if self.has(SYS_ADMIN) {
            return Vec::new();
        }
        [(BPF, "CAP_BPF"), (PERFMON, "CAP_PERFMON")]
            .into_iter()
            .filter(|&(bit, _)| !self.has(bit))
            .map(|(_, name)| name)
            .collect()
    }

    /// What else a run needs: CAP_SYS_PTRACE, to read another user's processes (their maps and
    /// binaries, for stacks and symbols; their sockets and threads).
    pub fn missing(self) -> Vec<&'static str> {
        let mut missing = self.missing_for_probes();
        if !self.has(SYS_PTRACE) {
            missing.push("CAP_SYS_PTRACE");
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(hex: &str) -> Caps {
        Caps::from_status(&format!(
            "Name:\tsrvprof\nCapInh:\t0\nCapEff:\t{hex}\nCapBnd:\t0\n"
        ))
    }

    #[test]
    fn the_missing_capabilities_are_named() {
        // Root with every capability (a kernel of 41 of them).
        assert!(caps("000001ffffffffff").missing().is_empty());
        // Root in a container that dropped them all.
        assert_eq!(
            caps("0000000000000000").missing(),
            ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"]
        );
        // A user granted CAP_BPF and CAP_PERFMON only.
        let bpf_perfmon = format!("{:016x}", (1u64 << 39) | (1 << 38));
        assert!(caps(&bpf_perfmon).missing_for_probes().is_empty());
        assert_eq!(caps(&bpf_perfmon).missing(), ["CAP_SYS_PTRACE"]);
        // CAP_SYS_ADMIN stands for both on any kernel.
        let admin_ptrace = format!("{:016x}", (1u64 << 21) | (1 << 19));
        assert!(caps(&admin_ptrace).missing().is_empty());
        assert_eq!(Caps::from_status("no such line"), Caps(0));
    }
}
