//! srvprof's HTTP/1.1 load generator, usable on its own.
//!
//! - Closed loop (`connections` each send the next request when the previous answer is complete)
//!   or open loop (`rate` requests per second on a fixed schedule, latency measured from the
//!   intended send time so a server stall shows in the percentiles, as in wrk2).
//! - One single-threaded tokio runtime per worker thread, each owning its connections (one task
//!   per connection, no pool) and its own HDR histograms, so the request loop takes no lock;
//!   histograms are merged once per interval.
//! - One request loop (request_loop.rs) owns pacing, timing, recording, error counting (one
//!   classifier, classify.rs) and reconnects; the engines plug into it as a [`protocol`] each:
//!   the built-in HTTP/1.1 client (the default: the request encoded once, each response parsed in
//!   place with httparse, nothing allocated per request) and hyper's client connection
//!   (`Engine::Hyper`, an independent implementation to compare with).
//! - [`run`] returns a [`LoadReport`] (serde) with percentiles, timeline, errors by kind,
//!   status codes and the client's own CPU use; [`printer`] renders it like wrk.
//!
//! Without its default feature `engine`, the crate is only the report's types (serde data, no
//! tokio, no sockets): what srvprof-analysis reads.

pub mod random;
mod report;

pub use report::{
    ClientCpu, ClockState, ConfigEcho, Engine, ErrorKind, HostShare, Http2Summary, LatencySummary,
    LoadReport, LoadRow, OpenLoopSummary, Protocol, RemoteWriteSummary, SpectrumPoint, TargetStats,
    TargetsSummary, TlsSummary,
};

/// Each item only with the `engine` feature (the load generator itself).
macro_rules! engine {
    ($($item:item)*) => { $( #[cfg(feature = "engine")] $item )* };
}

engine! {
    mod classify;
    pub mod cli;
    mod connection;
    mod duration;
    mod error;
    mod hdr_log;
    pub mod hdr_log_read;
    mod histogram;
    pub mod http_push;
    pub mod http_url;
    mod http2;
    mod http1;
    mod hyper_client;
    mod late;
    #[cfg(test)]
    mod loopback_server;
    pub mod merge;
    mod pacer;
    mod plan;
    pub mod printer;
    mod progress;
    pub mod rate;
    pub mod redact;
    pub mod remote_write;
    mod protocol;
    pub mod push_auth;
    mod request;
    mod request_loop;
    mod run;
    pub mod segment;
    pub mod start;
    mod stats;
    mod sys;
    pub mod targets;
    mod tls;
    mod transport;
    pub mod url_arg;

    pub use error::LoadError;
    pub use progress::{Progress, SoFar};
    pub use request::{RequestTemplate, Target};
    pub use tls::TlsOptions;
    pub use run::{LoadConfig, run, run_with_progress};
    pub use sys::{FD_OVERHEAD, ensure_fd_limit, monotonic_ns, pin_current_thread_to};

    /// Internals the criterion benches measure; not a stable API.
    #[doc(hidden)]
    pub mod bench_api {
        pub use crate::http1::parse_response_head;
        pub use crate::hyper_client::exchange;
        pub use crate::histogram::new_histogram;
    }
}
