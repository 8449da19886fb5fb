//! Errors a user can meet before or while starting a load run, each one sentence with the fix.

use std::net::SocketAddr;

/// The error underneath a [`LoadError`], or the reason the load generator itself found (a bad URL
/// part, a host with no address), kept as its [`source`](std::error::Error::source).
pub(crate) type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("bad URL `{url}`: {source}; use a URL like http://127.0.0.1:8080/path")]
    BadUrl {
        url: String,
        #[source]
        source: Cause,
    },

    /// TLS could not be set up, or the check before the run could not complete a handshake: the
    /// sentence says why and what to do.
    #[error("{0}")]
    Tls(String),

    /// A `--targets` file that cannot be read or parsed: the sentence names the line.
    #[error("{0}")]
    Targets(String),

    /// A push's receiver (`--remote-write`, `--pyroscope`) cannot be set up: its credentials
    /// cannot be read, or its URL holds them. The sentence says where credentials go.
    #[error("{0}")]
    Push(String),

    /// `--http2` against a server that does not speak it: the sentence says what it did.
    #[error("{0}")]
    Http2(String),

    #[error("cannot resolve host `{host}`: {source}; check the host name or use an IP address")]
    Resolve {
        host: String,
        #[source]
        source: Cause,
    },

    #[error(
        "connection refused by {addr} (port closed): start the server or fix the port in the URL"
    )]
    PortClosed { addr: SocketAddr },

    #[error("cannot connect to {addr}: {source}; check that the server is reachable")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

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

    #[error("cannot read body file {path}: {source}; check the path given to --body-file")]
    BodyFile {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// `what` failed: "cannot spawn worker thread", "cannot build the tokio runtime".
    #[error("cannot start the load generator: {what}: {source}")]
    Runtime {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start the load generator: a worker thread panicked")]
    WorkerPanicked,

    /// `--hdr-log`: the file could not be created (before the run: nothing was measured) or
    /// written (after it: `measured` holds the report, for the caller to print and write before
    /// it fails; [`LoadError::take_measured`]).
    #[error(
        "cannot write the latency log (--hdr-log) to {path}: {source}; check that the directory exists and is writable"
    )]
    HdrLog {
        path: String,
        #[source]
        source: std::io::Error,
        measured: Option<Box<crate::LoadReport>>,
    },
}

impl LoadError {
    /// What the run measured before this error, if it got that far (only the `--hdr-log` file
    /// failed); the error keeps its sentence.
    pub fn take_measured(&mut self) -> Option<crate::LoadReport> {
        match self {
            LoadError::HdrLog { measured, .. } => measured.take().map(|report| *report),
            _ => None,
        }
    }

    /// The `--hdr-log` error after the run, holding what it measured.
    pub(crate) fn with_measured(mut self, report: crate::LoadReport) -> LoadError {
        if let LoadError::HdrLog { measured, .. } = &mut self {
            *measured = Some(Box::new(report));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::io;

    use super::*;
    use crate::cli::LoadArgs;
    use crate::request::Target;

    /// The io::Error a source holds, if that is what it is.
    fn io_source(e: &LoadError) -> Option<&io::Error> {
        e.source()?.downcast_ref::<io::Error>()
    }

    #[test]
    fn bad_url_keeps_the_parser_error_and_its_sentence() {
        let e = Target::parse("http://exa mple.com/").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad URL `http://exa mple.com/`: invalid uri character; use a URL like http://127.0.0.1:8080/path"
        );
        assert!(e.source().unwrap().is::<hyper::http::uri::InvalidUri>());

        // A reason the load generator states itself is the source too, with the same text.
        let e = Target::parse("ftp://127.0.0.1/").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad URL `ftp://127.0.0.1/`: scheme `ftp` is not http or https; use a URL like http://127.0.0.1:8080/path"
        );
        assert_eq!(
            e.source().unwrap().to_string(),
            "scheme `ftp` is not http or https"
        );
    }

    #[test]
    fn resolve_keeps_the_lookup_error() {
        let e = LoadError::Resolve {
            host: "nowhere.invalid".into(),
            source: io::Error::other("failed to lookup address information").into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot resolve host `nowhere.invalid`: failed to lookup address information; check the host name or use an IP address"
        );
        assert!(io_source(&e).is_some());
    }

    #[test]
    fn connect_keeps_the_io_error() {
        let e = LoadError::Connect {
            addr: "10.0.0.1:80".parse().unwrap(),
            source: io::Error::from_raw_os_error(libc::ENETUNREACH),
        };
        assert_eq!(
            e.to_string(),
            "cannot connect to 10.0.0.1:80: Network is unreachable (os error 101); check that the server is reachable"
        );
        assert_eq!(
            io_source(&e).unwrap().raw_os_error(),
            Some(libc::ENETUNREACH)
        );
    }

    #[test]
    fn body_file_keeps_the_io_error() {
        let args = LoadArgs {
            body_file: Some("/nonexistent/srvprof-body".into()),
            ..LoadArgs::default()
        };
        let e = args.to_config().unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read body file /nonexistent/srvprof-body: No such file or directory (os error 2); check the path given to --body-file"
        );
        assert_eq!(io_source(&e).unwrap().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn runtime_keeps_the_io_error_and_a_panic_has_none() {
        let e = LoadError::Runtime {
            what: "cannot build the tokio runtime",
            source: io::Error::from_raw_os_error(libc::EMFILE),
        };
        assert_eq!(
            e.to_string(),
            "cannot start the load generator: cannot build the tokio runtime: Too many open files (os error 24)"
        );
        assert_eq!(io_source(&e).unwrap().raw_os_error(), Some(libc::EMFILE));

        let e = LoadError::WorkerPanicked;
        assert_eq!(
            e.to_string(),
            "cannot start the load generator: a worker thread panicked"
        );
        assert!(e.source().is_none());
    }
}
