//! Errors a user can meet before or while starting a load run, each one sentence with the fix.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("bad URL `{url}`: {reason}; use a URL like http://127.0.0.1:8080/path")]
    BadUrl { url: String, reason: String },

    #[error("https is not supported yet; use http://")]
    HttpsUnsupported,

    #[error("cannot resolve host `{host}`: {reason}; check the host name or use an IP address")]
    Resolve { host: String, reason: String },

    #[error(
        "connection refused by {addr} (port closed): start the server or fix the port in the URL"
    )]
    PortClosed { addr: SocketAddr },

    #[error("cannot connect to {addr}: {reason}; check that the server is reachable")]
    Connect { addr: SocketAddr, reason: String },

    #[error(
        "-c {connections} needs about {needed} open files but the limit is {limit} (hard limit {hard_limit}); lower -c or raise the limit with `ulimit -n {needed}` (as root `ulimit -Hn {needed}` first if above the hard limit)"
    )]
    FdLimit {
        connections: usize,
        needed: u64,
        limit: u64,
        hard_limit: u64,
    },

    #[error("invalid option: {0}")]
    InvalidOption(String),

    #[error("cannot read body file {path}: {reason}; check the path given to --body-file")]
    BodyFile { path: String, reason: String },

    #[error("cannot start the load generator: {0}")]
    Runtime(String),
}
