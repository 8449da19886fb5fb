//! What the request loop asks of a connection, whichever way it speaks HTTP: open it, carry one
//! request at a time, say how much it read. The loop (request_loop.rs) owns everything else:
//! pacing, timeouts, recording, reconnects; each engine (http1.rs, hyper_client.rs) is only this.

use std::time::Instant;

use crate::plan::RunPlan;
use crate::report::ErrorKind;

/// How a request failed on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A reused keep-alive connection was closed before any byte of the answer: the server
    /// dropped an idle connection, so the request may be retried on a new one.
    Stale,
    Kind(ErrorKind),
}

impl Failure {
    /// As the report counts it, when it is not retried.
    pub(crate) fn kind(self) -> ErrorKind {
        match self {
            Failure::Stale => ErrorKind::Reset,
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

    /// Open a connection to the plan's target, with `spare` if there is one. `eager`: its only
    /// request is the plan's next (`--no-keepalive`), which may go out with the connect. Returns
    /// the connection and when it was known to be connected (the connect time's end).
    async fn open(
        plan: &RunPlan,
        spare: &mut Option<Self::Spare>,
        eager: bool,
    ) -> Result<(Self, Instant), ErrorKind>;

    /// Send the plan's request (the rest of it, after an eager open) and read the whole answer.
    async fn exchange(&mut self, plan: &RunPlan) -> Result<Answer, Failure>;

    /// Its TLS handshake, when it has one.
    fn handshake(&self) -> Option<crate::tls::Handshake>;

    /// Bytes read from the socket since the connection opened.
    fn bytes_read(&self) -> u64;

    /// Complete answers received on this connection.
    fn responses(&self) -> u64;

    /// Close it, keeping what the next connection can reuse.
    fn close(self, spare: &mut Option<Self::Spare>);
}
