//! What the request loop asks of a connection, whichever way it speaks HTTP: open it, carry one
//! request at a time, say how much it read. The loop (request_loop.rs) owns everything else:
//! pacing, timeouts, recording, reconnects; each engine (http1.rs, hyper_client.rs, http2.rs) is
//! only this.

use std::time::Instant;

use crate::plan::RunPlan;
use crate::report::ErrorKind;
use crate::request::RequestTemplate;

/// How a request failed on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A reused keep-alive connection was closed before any byte of the answer: the server
    /// dropped an idle connection, so the request may be retried on a new one.
    Stale,
    /// The connection was closed gracefully before this request went (an HTTP/2 GOAWAY: a
    /// request limit, a reload): it goes at once on a new one, without a backoff.
    Closed,
    /// HTTP/2: the server refused this request before processing it (a stream past a graceful
    /// GOAWAY's last, or REFUSED_STREAM): it goes again at once, on a new stream, counted.
    Unprocessed { goaway: bool },
    Kind(ErrorKind),
}

impl Failure {
    /// As the report counts it, when it is not retried.
    pub(crate) fn kind(self) -> ErrorKind {
        match self {
            Failure::Stale | Failure::Closed => ErrorKind::Reset,
            Failure::Unprocessed { goaway: true } => ErrorKind::GoAway,
            Failure::Unprocessed { goaway: false } => ErrorKind::StreamReset,
            Failure::Kind(kind) => kind,
        }
    }
}

impl From<ErrorKind> for Failure {
    fn from(kind: ErrorKind) -> Failure {
        Failure::Kind(kind)
    }
}

/// The parts of a response the loop needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub status: u16,
    /// The connection may carry another request.
    pub keep_alive: bool,
}

/// One connection of one engine.
pub(crate) trait Protocol: Sized {
    /// What a closed connection leaves for the next one of its slot (the built-in client's read
    /// buffer, so `--no-keepalive` allocates nothing per request).
    type Spare;

    /// What the slots that share a connection share (HTTP/2's streams); `()` where each slot
    /// has its own.
    type Shared: Default;

    /// Open a connection to the plan's target, with `spare` if there is one, or join the one
    /// `shared` holds. `eager`: the connection's only request (`--no-keepalive`), which may go
    /// out with the connect. Returns the connection and, when it opened a new one, when that
    /// was known to be connected (the connect time's end).
    async fn open(
        plan: &RunPlan,
        shared: &Self::Shared,
        spare: &mut Option<Self::Spare>,
        eager: Option<&RequestTemplate>,
    ) -> Result<(Self, Option<Instant>), ErrorKind>;

    /// Send `request` (the rest of it, after an eager open) and read the whole answer.
    async fn exchange(&mut self, request: &RequestTemplate) -> Result<Answer, Failure>;

    /// Its TLS handshake, when it has one.
    fn handshake(&self) -> Option<crate::tls::Handshake>;

    /// Bytes read from the socket since the connection opened.
    fn bytes_read(&self) -> u64;

    /// Complete answers received on this connection.
    fn responses(&self) -> u64;

    /// Close it, keeping what the next connection can reuse.
    fn close(self, spare: &mut Option<Self::Spare>);
}
