//! The kernel's own accounting of BPF program run time (sysctl kernel.bpf_stats_enabled): what a
//! watcher's programs cost per request, without the noise of a throughput comparison. It leaves
//! out what attaching costs outside the programs (the traced syscall path, the dispatch), so it
//! comes next to the throughput figures, not instead of them.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context, Result};

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Turns the kernel's per-program run-time accounting on, and back to what it was when dropped.
pub struct StatsOn {
    before: String,
}

impl StatsOn {
    pub fn enable() -> Result<Self> {
        let before = std::fs::read_to_string(SYSCTL).context("reading kernel.bpf_stats_enabled")?;
        std::fs::write(SYSCTL, "1").context("enabling kernel.bpf_stats_enabled")?;
        Ok(Self { before })
    }
}

impl Drop for StatsOn {
    fn drop(&mut self) {
        let _ = std::fs::write(SYSCTL, self.before.trim());
    }
}

/// Ids of every BPF program loaded now.
pub fn loaded_ids() -> Result<Vec<u64>> {
    Ok(prog_show()?
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_u64())
        .collect())
}

fn prog_show() -> Result<serde_json::Value> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .context("running bpftool prog show")?;
    serde_json::from_slice(&out.stdout).context("parsing bpftool prog show")
}

/// Cumulative run time (ns) of each of these programs, by name.
pub fn run_ns_by_name(ids: &[u64]) -> Result<BTreeMap<String, u64>> {
    let progs = prog_show()?;
    let mut by_name = BTreeMap::new();
    for p in progs.as_array().into_iter().flatten() {
        let id = p["id"].as_u64().unwrap_or(0);
        if ids.contains(&id) {
            let name = p["name"].as_str().unwrap_or("?").to_string();
            *by_name.entry(name).or_default() += p["run_time_ns"].as_u64().unwrap_or(0);
        }
    }
    Ok(by_name)
}

/// `after - before`, per program name.
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, ns)| {
            (
                name.clone(),
                ns.saturating_sub(before.get(name).copied().unwrap_or(0)),
            )
        })
        .collect()
}
