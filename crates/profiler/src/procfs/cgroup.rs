//! The control groups that limit the watched processes' CPU time: found from /proc/PID/cgroup
//! and the mounted hierarchies (cgroup v1's cpu controller, or v2's unified hierarchy when it has
//! the cpu controller), walked up to the nearest group with a quota (cpu.cfs_quota_us in v1,
//! cpu.max in v2), whose cpu.stat counts the periods that ran out of it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use srvprof_analysis::record::CgroupCpu;

/// A mounted hierarchy with the cpu controller.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuHierarchy {
    pub version: u8,
    pub mount: PathBuf,
}

/// The hierarchies with the cpu controller, from /proc/self/mountinfo.
pub fn cpu_hierarchies() -> Vec<CpuHierarchy> {
    let info = crate::procfs::own_mountinfo();
    let mut out: Vec<CpuHierarchy> = info
        .lines()
        .filter_map(|l| {
            let (mount_part, fs_part) = l.split_once(" - ")?;
            let mount = PathBuf::from(mount_part.split(' ').nth(4)?);
            let mut fs_fields = fs_part.split(' ');
            let (fstype, options) = (fs_fields.next()?, fs_fields.nth(1).unwrap_or(""));
            let version = match fstype {
                "cgroup" if options.split(',').any(|o| o == "cpu") => 1,
                "cgroup2" if has_cpu_controller(&mount) => 2,
                _ => return None,
            };
            Some(CpuHierarchy { version, mount })
        })
        .collect();
    out.dedup();
    out
}

fn has_cpu_controller(v2_mount: &Path) -> bool {
    fs::read_to_string(v2_mount.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
}

/// The process's group in `h`, from the text of its /proc/PID/cgroup.
pub fn cgroup_path(proc_cgroup: &str, h: &CpuHierarchy) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let ours = match h.version {
            2 => id == "0" && controllers.is_empty(),
            _ => controllers.split(',').any(|c| c == "cpu"),
        };
        ours.then(|| path.to_string())
    })
}

/// A quota: CPU time per period and the period, µs.
fn quota(h: &CpuHierarchy, dir: &Path) -> Option<(u64, u64)> {
    let read = |f: &str| fs::read_to_string(dir.join(f)).ok();
    if h.version == 2 {
        let text = read("cpu.max")?;
        let mut f = text.split_whitespace();
        let quota = f.next()?.parse().ok()?; // "max": no quota
        let period = f.next()?.parse().ok()?;
        return Some((quota, period));
    }
    let quota: i64 = read("cpu.cfs_quota_us")?.trim().parse().ok()?;
    let period: u64 = read("cpu.cfs_period_us")?.trim().parse().ok()?;
    (quota > 0).then_some((quota as u64, period))
}

/// The group itself or its nearest ancestor with a quota: its path and quota.
pub fn limiting(h: &CpuHierarchy, path: &str) -> Option<(String, u64, u64)> {
    let mut p = path.trim_end_matches('/').to_string();
    loop {
        let dir = h.mount.join(p.trim_start_matches('/'));
        if let Some((q, period)) = quota(h, &dir) {
            return Some((if p.is_empty() { "/".into() } else { p }, q, period));
        }
        if p.is_empty() {
            return None;
        }
        p.truncate(p.rfind('/').unwrap_or(0));
    }
}

/// cpu.stat's periods, throttled periods and throttled time (ns).
pub fn throttling(h: &CpuHierarchy, path: &str) -> Option<(u64, u64, u64)> {
    let dir = h.mount.join(path.trim_start_matches('/'));
    let text = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let field = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    let throttled_ns = match h.version {
        2 => field("throttled_usec")? * 1000,
        _ => field("throttled_time")?,
    };
    Some((field("nr_periods")?, field("nr_throttled")?, throttled_ns))
}

/// Every group with a quota over the watched processes ((pid, group) pairs), with its counters
/// now. A process under no quota adds nothing.
pub fn read(hierarchies: &[CpuHierarchy], watched: &[(u32, u32)]) -> Vec<CgroupCpu> {
    let mut found: BTreeMap<(u8, String, u32), CgroupCpu> = BTreeMap::new();
    for &(pid, group) in watched {
        let Some(text) = crate::procfs::cgroups_of(pid) else {
            continue;
        };
        for h in hierarchies {
            let Some((path, quota_us, period_us)) =
                cgroup_path(&text, h).and_then(|p| limiting(h, &p))
            else {
                continue;
            };
            let c = found
                .entry((h.version, path.clone(), group))
                .or_insert_with(|| CgroupCpu {
                    path,
                    version: h.version,
                    quota_us,
                    period_us,
                    group,
                    ..CgroupCpu::default()
                });
            c.pids.push(pid);
        }
    }
    let h_of = |v: u8| hierarchies.iter().find(|h| h.version == v);
    found
        .into_values()
        .filter_map(|mut c| {
            let (periods, throttled, ns) = throttling(h_of(c.version)?, &c.path)?;
            (c.nr_periods, c.nr_throttled, c.throttled_ns) = (periods, throttled, ns);
            Some(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hierarchy of files under a directory of its own (`name`: tests run in parallel).
    fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("srvprof-cgroup-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for (path, text) in files {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        root
    }

    #[test]
    fn v2_quota_is_found_on_an_ancestor_and_its_stat_read_in_ns() {
        let mount = tree(
            "v2",
            &[
                ("cpu.max", "max 100000\n"),
                ("pods/cpu.max", "30000 100000\n"),
                (
                    "pods/cpu.stat",
                    "usage_usec 9\nnr_periods 85\nnr_throttled 81\nthrottled_usec 5400000\n",
                ),
                ("pods/web/cpu.max", "max 100000\n"),
            ],
        );
        let h = CpuHierarchy { version: 2, mount };
        let proc_cgroup = "0::/pods/web\n";
        let path = cgroup_path(proc_cgroup, &h).unwrap();
        assert_eq!(path, "/pods/web");
        assert_eq!(limiting(&h, &path), Some(("/pods".into(), 30_000, 100_000)));
        assert_eq!(throttling(&h, "/pods"), Some((85, 81, 5_400_000_000)));
        fs::remove_dir_all(&h.mount).unwrap();
    }

    #[test]
    fn v1_reads_the_cpu_controller_line_and_no_quota_is_none() {
        let mount = tree(
            "v1",
            &[
                ("cpu.cfs_quota_us", "-1\n"),
                ("cpu.cfs_period_us", "100000\n"),
                ("web/cpu.cfs_quota_us", "-1\n"),
                ("web/cpu.cfs_period_us", "100000\n"),
            ],
        );
        let h = CpuHierarchy { version: 1, mount };
        let proc_cgroup = "4:memory:/x\n2:cpuacct:/y\n1:cpu:/web\n0::/\n";
        assert_eq!(cgroup_path(proc_cgroup, &h).as_deref(), Some("/web"));
        assert_eq!(cgroup_path("3:cpu,cpuacct:/a\n", &h).as_deref(), Some("/a"));
        assert_eq!(limiting(&h, "/web"), None);
        fs::write(h.mount.join("web/cpu.cfs_quota_us"), "30000\n").unwrap();
        fs::write(
            h.mount.join("web/cpu.stat"),
            "nr_periods 60\nnr_throttled 57\nthrottled_time 4200000000\nnr_bursts 0\n",
        )
        .unwrap();
        assert_eq!(limiting(&h, "/web"), Some(("/web".into(), 30_000, 100_000)));
        assert_eq!(throttling(&h, "/web"), Some((60, 57, 4_200_000_000)));
        fs::remove_dir_all(&h.mount).unwrap();
    }

    #[test]
    fn this_machines_hierarchies_are_found() {
        // Every Linux machine srvprof runs on mounts a cpu controller, v1 or v2.
        let found = cpu_hierarchies();
        assert!(
            !found.is_empty(),
            "no cpu controller in /proc/self/mountinfo"
        );
        for h in &found {
            assert!(h.mount.is_dir(), "{h:?}");
        }
    }
}
