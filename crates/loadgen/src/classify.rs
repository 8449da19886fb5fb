//! The one place a failure becomes an [`ErrorKind`]: every protocol's I/O errors, whichever
//! engine met them, are sorted here, so the same failure counts the same way in both.

use std::io;

use crate::report::ErrorKind;

/// Where in a request a failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Opening the connection (TCP connect, and any handshake on top of it).
    Connect,
    /// Sending the request or reading its answer.
    Exchange,
}

/// An I/O error, sorted.
pub(crate) fn io_error(e: &io::Error, phase: Phase) -> ErrorKind {
    match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => return ErrorKind::NoLocalPort,
        Some(libc::EMFILE | libc::ENFILE) => return ErrorKind::TooManyOpenFiles,
        _ => {}
    }
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
        io::ErrorKind::TimedOut if phase == Phase::Connect => ErrorKind::ConnectTimeout,
        io::ErrorKind::TimedOut => ErrorKind::ReadTimeout,
        // The peer reset or closed the connection: at connect (a SYN answered by RST once the
        // listen queue overflowed, a send after it) as in the middle of an answer.
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => ErrorKind::Reset,
        _ => ErrorKind::Other,
    }
}

/// A failed TLS handshake: the TLS error rustls found (a certificate refused, an alert), or the
/// I/O error under it (the server reset the connection).
pub(crate) fn tls_error(e: &io::Error) -> ErrorKind {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(_) => ErrorKind::TlsHandshake,
        None => io_error(e, Phase::Connect),
    }
}

/// A hyper error, sorted: its I/O cause where it has one, else what hyper says it was.
pub(crate) fn hyper_error(err: &hyper::Error, phase: Phase) -> ErrorKind {
    if err.is_parse() || err.is_parse_status() {
        return ErrorKind::ProtocolError;
    }
    if err.is_timeout() {
        return ErrorKind::ReadTimeout;
    }
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io_error(io, phase);
        }
        source = e.source();
    }
    // The server closed the connection before the response was complete.
    if err.is_incomplete_message() || err.is_canceled() || err.is_closed() {
        return ErrorKind::Reset;
    }
    ErrorKind::Other
}

/// An h2 error, sorted: a GOAWAY or a RST_STREAM from the server by its kind, else its I/O
/// cause, else a protocol error (the server's bytes were not HTTP/2).
pub(crate) fn h2_error(err: &h2::Error, phase: Phase) -> ErrorKind {
    if err.is_go_away() && err.is_remote() {
        return ErrorKind::GoAway;
    }
    if err.is_reset() && err.is_remote() {
        return ErrorKind::StreamReset;
    }
    if let Some(io) = err.get_io() {
        return io_error(io, phase);
    }
    if err.is_go_away() || err.is_reset() {
        // Our side ended it: a frame the server sent broke the protocol.
        return ErrorKind::ProtocolError;
    }
    ErrorKind::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_failure_sorts_the_same_at_every_phase_but_timeouts() {
        let e = |k| io::Error::from(k);
        for phase in [Phase::Connect, Phase::Exchange] {
            assert_eq!(io_error(&e(io::ErrorKind::BrokenPipe), phase), ErrorKind::Reset);
            assert_eq!(
                io_error(&e(io::ErrorKind::ConnectionReset), phase),
                ErrorKind::Reset
            );
            assert_eq!(
                io_error(&e(io::ErrorKind::ConnectionRefused), phase),
                ErrorKind::ConnectRefused
            );
            assert_eq!(io_error(&e(io::ErrorKind::Other), phase), ErrorKind::Other);
        }
        assert_eq!(
            io_error(&e(io::ErrorKind::TimedOut), Phase::Connect),
            ErrorKind::ConnectTimeout
        );
        assert_eq!(
            io_error(&e(io::ErrorKind::TimedOut), Phase::Exchange),
            ErrorKind::ReadTimeout
        );
    }

    #[test]
    fn running_out_of_ports_or_descriptors_is_named() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(io_error(&os(libc::EADDRNOTAVAIL), Phase::Connect), ErrorKind::NoLocalPort);
        assert_eq!(io_error(&os(libc::EMFILE), Phase::Connect), ErrorKind::TooManyOpenFiles);
        assert_eq!(io_error(&os(libc::ENFILE), Phase::Exchange), ErrorKind::TooManyOpenFiles);
        assert_eq!(io_error(&os(libc::ECONNREFUSED), Phase::Connect), ErrorKind::ConnectRefused);
    }
}
