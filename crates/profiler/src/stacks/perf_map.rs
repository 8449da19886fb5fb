//! JIT code named from perf maps (/tmp/perf-PID.map: `START SIZE name` per line, hex, with or
//! without 0x: the JVM's Compiler.perfmap writes 0x, V8 and the BEAM do not), and the JVM asked to
//! write its map (`jcmd PID Compiler.perfmap`), so code compiled during the run is named too.

use std::process::{Command, Stdio};
use std::time::Duration;

/// A process's perf map: (start, end, name), sorted by start.
#[derive(Debug, Default)]
pub struct PerfMap {
    ranges: Vec<(u64, u64, String)>,
}

impl PerfMap {
    /// The map of `pid`, read through its root (a container's /tmp) under the pid it has there.
    pub fn read(pid: u32) -> Option<PerfMap> {
        read_text(pid).map(|t| PerfMap::parse(&t))
    }

    pub fn parse(text: &str) -> PerfMap {
        let mut ranges: Vec<(u64, u64, String)> = text.lines().filter_map(parse_line).collect();
        ranges.sort_by_key(|r| r.0);
        PerfMap { ranges }
    }

    /// The name of the code at `addr`, if the map has it (the last entry wins where code was
    /// recompiled at the same place: it is the newest).
    pub fn name(&self, addr: u64) -> Option<&str> {
        let i = self.ranges.partition_point(|r| r.0 <= addr);
        self.ranges[..i]
            .iter()
            .rev()
            .take(8)
            .find(|r| addr < r.1)
            .map(|r| r.2.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

fn read_text(pid: u32) -> Option<String> {
    crate::procfs::files::perf_map_text(pid)
}

/// The JVMs' maps as they were at the start of a run: `jcmd Compiler.perfmap` rewrites the file
/// with the code alive at that moment, so code compiled and freed during the run is named from
/// this first map, the rest from the one written at the end.
#[derive(Debug, Default)]
pub struct StartMaps {
    texts: std::collections::HashMap<u32, String>,
    pub notes: Vec<String>,
}

impl StartMaps {
    pub fn take(pids: &[u32]) -> StartMaps {
        let notes = refresh(pids);
        let texts = pids
            .iter()
            .filter(|&&p| runtime(p) == Runtime::Jvm)
            .filter_map(|&p| Some((p, read_text(p)?)))
            .collect();
        StartMaps { texts, notes }
    }

    /// The map of `pid` now, after the start's (later entries win).
    pub fn with_current(&self, pid: u32) -> Option<PerfMap> {
        let now = read_text(pid);
        if now.is_none() && !self.texts.contains_key(&pid) {
            return None;
        }
        let start = self.texts.get(&pid).map(String::as_str).unwrap_or("");
        Some(PerfMap::parse(&format!(
            "{start}\n{}",
            now.unwrap_or_default()
        )))
    }
}

fn hex(s: &str) -> Option<u64> {
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(s, 16).ok()
}

fn parse_line(line: &str) -> Option<(u64, u64, String)> {
    let mut parts = line.splitn(3, ' ');
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?.trim();
    if name.is_empty() || size == 0 {
        return None;
    }
    Some((start, start.checked_add(size)?, name.to_string()))
}

/// What runs in a process, as far as naming its JIT code goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Runtime {
    Jvm,
    Beam,
    Other,
}

pub fn runtime(pid: u32) -> Runtime {
    let exe = crate::procfs::files::exe_path(pid).unwrap_or_default();
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name == "java" {
        Runtime::Jvm
    } else if name.starts_with("beam") {
        Runtime::Beam
    } else {
        Runtime::Other
    }
}

/// Asks each JVM among `pids` to write its perf map now (JDK 17+: `jcmd PID Compiler.perfmap`),
/// and says in one sentence per process why its JIT code will stay unnamed, if it will.
pub fn refresh(pids: &[u32]) -> Vec<String> {
    let mut notes = Vec::new();
    for &pid in pids {
        match runtime(pid) {
            Runtime::Jvm => {
                if let Err(why) = jcmd_perfmap(pid) {
                    notes.push(format!(
                        "JVM {pid}: its JIT code stays unnamed: `jcmd {pid} Compiler.perfmap` failed ({why}); it needs JDK 17 or later and the JVM's user"
                    ));
                }
            }
            Runtime::Beam if PerfMap::read(pid).is_none() => notes.push(format!(
                "BEAM {pid} writes no perf map, so its JIT code stays unnamed: start it with `erl +JPperf true` (OTP 24 or later)"
            )),
            _ => {}
        }
    }
    notes
}

fn jcmd_perfmap(pid: u32) -> Result<(), String> {
    let mut child = Command::new("jcmd")
        .args([&pid.to_string(), "Compiler.perfmap"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("jcmd: {e}"))?;
    // Bounded: a JVM that does not answer its attach socket must not hold the run.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("exit status {status}")),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("no answer in 15 s".into());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_and_without_0x_are_read_and_looked_up() {
        let map = PerfMap::parse(
            "0x00007f0000001000 0x0000000000000100 Interpreter\n\
             7f0000002000 40 LazyCompile:*handler app.js:10\n\
             0x7f0000003000 0x20 Lio/netty/channel/nio/NioEventLoop;::run\n\
             garbage line\n\
             7f0000004000 0 empty\n",
        );
        assert_eq!(map.name(0x7f00_0000_1000), Some("Interpreter"));
        assert_eq!(map.name(0x7f00_0000_10ff), Some("Interpreter"));
        assert_eq!(map.name(0x7f00_0000_1100), None);
        assert_eq!(
            map.name(0x7f00_0000_2010),
            Some("LazyCompile:*handler app.js:10")
        );
        assert_eq!(
            map.name(0x7f00_0000_301f),
            Some("Lio/netty/channel/nio/NioEventLoop;::run")
        );
        assert_eq!(map.name(0x7f00_0000_4000), None);
        assert_eq!(map.name(0x10), None);
    }

    #[test]
    fn code_recompiled_in_place_is_named_by_its_newest_entry() {
        let map = PerfMap::parse("1000 100 old\n1000 100 new\n");
        assert_eq!(map.name(0x1050), Some("new"));
    }

    #[test]
    fn this_process_is_no_jvm_and_its_pid_is_its_own() {
        let me = std::process::id();
        assert_eq!(runtime(me), Runtime::Other);
        assert_eq!(crate::procfs::files::ns_pid(me), Some(me));
        assert!(refresh(&[me]).is_empty());
    }
}
