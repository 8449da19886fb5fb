//! What every bench shares about the machine it runs on: which CPU the server and the client
//! get, the tools it finds on the PATH, the open-files limit, stopping what it started.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The CPU every bench's client (wrk, ab, `srvprof run` / `load`) is pinned to.
pub const CLIENT_CPU: &str = "0";
/// The CPU the benches' nginx is pinned to (the grid's servers name theirs in `SERVERS`).
pub const SERVER_CPU: &str = "1";

/// Where `tool` is on the PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// Fails on the first of `tools` that is not on the PATH, saying to run `fix`.
pub fn require_tools(tools: &[&str], fix: &str) -> Result<()> {
    for tool in tools {
        if which(tool).is_none() {
            bail!("`{tool}` is not installed; run `{fix}`");
        }
    }
    Ok(())
}

/// Raises the soft open-files limit to the hard one when it is below `needed` (children inherit
/// it: wrk and the servers do not raise their own); returns the soft limit in force after.
pub fn raise_fd_limit(needed: u64) -> Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            bail!("cannot read the open-files limit (getrlimit failed)");
        }
        if limit.rlim_cur < needed && limit.rlim_max > limit.rlim_cur {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                ..limit
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Ok(limit.rlim_cur)
}

/// Sends the child `signal` (as `kill -<signal>` names it: TERM, INT) and waits up to `grace`
/// for it to exit; SIGKILL after that.
pub fn stop(child: &mut Child, signal: &str, grace: Duration) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}
