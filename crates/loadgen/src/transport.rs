//! The byte stream a connection runs on: plain TCP, or TLS over it for https:// targets. Both
//! engines open theirs here, so TCP and TLS are set up, timed and sorted alike.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::classify::{Phase, io_error, tls_error};
use crate::plan::RunPlan;
use crate::report::ErrorKind;
use crate::tls::Handshake;

pub(crate) enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A connection opened: its stream, when TCP was connected, and its TLS handshake if any.
pub(crate) struct Opened {
    pub stream: Stream,
    pub connected_at: Instant,
    pub handshake: Option<Handshake>,
}

/// TCP to the plan's address, then TLS when the URL is https.
pub(crate) async fn connect(plan: &RunPlan) -> Result<Opened, ErrorKind> {
    let tcp = TcpStream::connect(plan.addr)
        .await
        .map_err(|e| io_error(&e, Phase::Connect))?;
    let connected_at = Instant::now();
    // Requests are small and latency-bound: never wait for Nagle.
    let _ = tcp.set_nodelay(true);
    match &plan.tls {
        None => Ok(Opened {
            stream: Stream::Tcp(tcp),
            connected_at,
            handshake: None,
        }),
        Some(tls) => {
            let (stream, handshake) = tls.connect(tcp).await.map_err(|e| tls_error(&e))?;
            Ok(Opened {
                stream: Stream::Tls(Box::new(stream)),
                connected_at,
                handshake: Some(handshake),
            })
        }
    }
}

impl Stream {
    /// It may carry HTTP/2: cleartext (the caller asked for prior knowledge), or TLS whose ALPN
    /// chose h2.
    pub(crate) fn speaks_h2(&self) -> bool {
        match self {
            Stream::Tcp(_) => true,
            Stream::Tls(s) => s.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }

    pub(crate) fn set_nodelay(&self) {
        let tcp = match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        };
        let _ = tcp.set_nodelay(true);
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A stream that counts the bytes read from it into a cell its connection's owner reads (hyper
/// and h2 own the stream itself).
pub(crate) struct CountingStream {
    inner: Stream,
    bytes_read: Rc<Cell<u64>>,
}

impl CountingStream {
    pub(crate) fn new(inner: Stream, bytes_read: Rc<Cell<u64>>) -> CountingStream {
        CountingStream { inner, bytes_read }
    }
}

impl AsyncRead for CountingStream {
    #[inline]
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.bytes_read.set(self.bytes_read.get() + n);
        poll
    }
}

impl AsyncWrite for CountingStream {
    #[inline]
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    #[inline]
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    #[inline]
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
