//! srvprof's HTTP/1.1 load generator, usable on its own.
//!
//! - Closed loop (`connections` each send the next request when the previous answer is complete)
//!   or open loop (`rate` requests per second on a fixed schedule, latency measured from the
//!   intended send time so a server stall shows in the percentiles, as in wrk2).
//! - One single-threaded tokio runtime per worker thread, each owning its connections (one task
//!   per connection, no pool) and its own HDR histograms, so the request loop takes no lock;
//!   histograms are merged once per interval.
//! - Two HTTP/1.1 engines ([`Engine`]): the built-in client (the default: the request encoded
//!   once, each response parsed in place with httparse, nothing allocated per request) and
//!   hyper's client connection (`Engine::Hyper`, an independent implementation to compare with).
//! - [`run`] returns a [`LoadReport`] (serde) with percentiles, timeline, errors by kind,
//!   status codes and the client's own CPU use; [`printer`] renders it like wrk.
//!
//! Without its default feature `engine`, the crate is only the report's types (serde data, no
//! tokio, no sockets): what srvprof-analysis reads.

mod report;

pub use report::{
    ClientCpu, ConfigEcho, Engine, ErrorKind, LatencySummary, LoadReport, SpectrumPoint,
    TimelineEntry,
};

#[cfg(feature = "engine")]
pub mod cli;
#[cfg(feature = "engine")]
mod client;
#[cfg(feature = "engine")]
mod error;
#[cfg(feature = "engine")]
mod http1;
#[cfg(feature = "engine")]
mod hyper_client;
#[cfg(feature = "engine")]
mod pacer;
#[cfg(feature = "engine")]
pub mod printer;
#[cfg(feature = "engine")]
mod progress;
#[cfg(feature = "engine")]
mod request;
#[cfg(feature = "engine")]
mod run;
#[cfg(feature = "engine")]
mod stats;
#[cfg(feature = "engine")]
mod sys;

#[cfg(feature = "engine")]
pub use error::LoadError;
#[cfg(feature = "engine")]
pub use progress::Progress;
#[cfg(feature = "engine")]
pub use request::{RequestTemplate, Target};
#[cfg(feature = "engine")]
pub use run::{LoadConfig, run, run_with_progress};
#[cfg(feature = "engine")]
pub use sys::{FD_OVERHEAD, ensure_fd_limit, monotonic_ns};

/// Internals the criterion benches measure; not a stable API.
#[cfg(feature = "engine")]
#[doc(hidden)]
pub mod bench_api {
    pub use crate::http1::parse_response_head;
    pub use crate::hyper_client::exchange;
    pub use crate::stats::new_histogram;
}
