//! What every bench shares about the machine it runs on: which CPU the server and the client
//! get, and the tools it finds on the PATH.

use std::path::PathBuf;

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
