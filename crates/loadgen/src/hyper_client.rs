//! The hyper engine (`--engine hyper`): hyper's HTTP/1.1 client connection, one per task, no
//! pool. Slower than the built-in client (hyper allocates per request: its dispatch channel and
//! the response's header map) but a second, independent HTTP implementation to compare with.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::client::{Backoff, ConnEnd, RunPlan, begin, pause};
use crate::pacer::Pacer;
use crate::report::ErrorKind;
use crate::stats::ThreadRecorder;

/// One TCP connection carrying requests back to back until it fails or the run ends.
pub(crate) async fn keepalive_connection(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
    backoff: &mut Backoff,
) -> ConnEnd {
    if plan.over(Instant::now()) {
        return ConnEnd::Done;
    }
    let bytes_read = Rc::new(Cell::new(0u64));
    let connect_start = Instant::now();
    let connected = connect(plan.addr, connect_start + plan.timeout, &bytes_read).await;
    let io = match connected {
        Ok(io) => {
            recorder
                .borrow_mut()
                .connected(connect_start, connect_start.elapsed());
            io
        }
        Err(kind) => {
            // A connection that cannot open is a request that could not be sent.
            let start = pacer.wait().await.unwrap_or(connect_start);
            let now = Instant::now();
            if plan.over(now) || !begin(plan, recorder, start) {
                return ConnEnd::Done;
            }
            let measured = start >= plan.measure_start;
            recorder.borrow_mut().failure(measured, now, kind, 0);
            pacer.advance();
            pause(plan, now + backoff.after_failure(Duration::ZERO, 0)).await;
            return ConnEnd::Reconnect;
        }
    };
    let opened_at = Instant::now();
    let (mut sender, conn) = match http1::handshake::<_, Full<Bytes>>(io).await {
        Ok(parts) => parts,
        Err(_) => {
            pause(
                plan,
                Instant::now() + backoff.after_failure(Duration::ZERO, 0),
            )
            .await;
            return ConnEnd::Reconnect;
        }
    };
    let mut responses = 0u64;

    // One timer per connection, pushed later for each request: extending a pending timer is
    // lock-free in tokio, registering a new one per request is not.
    let timer = tokio::time::sleep_until((Instant::now() + plan.timeout).into());
    tokio::pin!(timer);
    let requests = async {
        loop {
            let intended = pacer.wait().await;
            if sender.ready().await.is_err() {
                return ConnEnd::Reconnect; // Closed by the server between requests: no request lost.
            }
            let now = Instant::now();
            let start = intended.unwrap_or(now);
            if plan.over(now) || !begin(plan, recorder, start) {
                return ConnEnd::Done;
            }
            pacer.advance();
            bytes_read.set(0);
            timer.as_mut().reset((now + plan.timeout).into());
            let outcome = tokio::select! {
                biased;
                outcome = exchange(&mut sender, plan.template.build()) => outcome,
                _ = timer.as_mut() => Err(ErrorKind::ReadTimeout),
            };
            let done = Instant::now();
            let measured = start >= plan.measure_start;
            let mut rec = recorder.borrow_mut();
            match outcome {
                Ok(status) => {
                    rec.response(measured, start, done, status, bytes_read.get());
                    responses += 1;
                }
                Err(kind) => {
                    rec.failure(measured, done, kind, bytes_read.get());
                    // The client gave up on a slow answer: the server refused nothing.
                    return if kind == ErrorKind::ReadTimeout {
                        ConnEnd::Reconnect
                    } else {
                        ConnEnd::Failed
                    };
                }
            }
        }
    };
    match drive(conn, requests).await {
        // Replaced after the slot's backoff, as in the built-in client.
        ConnEnd::Failed => {
            let wait = backoff.after_failure(opened_at.elapsed(), responses);
            pause(plan, Instant::now() + wait).await;
            ConnEnd::Reconnect
        }
        end => end,
    }
}

/// `--no-keepalive`: a new TCP connection for every request; connect time is part of latency.
pub(crate) async fn per_request_connections(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
) {
    let bytes_read = Rc::new(Cell::new(0u64));
    // Reused for every request (see keepalive_connection).
    let timer = tokio::time::sleep_until((Instant::now() + plan.timeout).into());
    tokio::pin!(timer);
    loop {
        let intended = pacer.wait().await;
        let now = Instant::now();
        let start = intended.unwrap_or(now);
        if plan.over(now) || !begin(plan, recorder, start) {
            return;
        }
        pacer.advance();
        bytes_read.set(0);
        timer.as_mut().reset((now + plan.timeout).into());
        let outcome = match connect_until(plan.addr, timer.as_mut(), &bytes_read).await {
            Err(kind) => Err(kind),
            Ok(io) => {
                recorder.borrow_mut().connected(start, now.elapsed());
                one_request(plan, io, timer.as_mut()).await
            }
        };
        let done = Instant::now();
        let measured = start >= plan.measure_start;
        let mut rec = recorder.borrow_mut();
        match outcome {
            Ok(status) => rec.response(measured, start, done, status, bytes_read.get()),
            Err(kind) => rec.failure(measured, done, kind, bytes_read.get()),
        }
    }
}

async fn one_request(
    plan: &RunPlan,
    io: TokioIo<CountingStream>,
    timer: Pin<&mut Sleep>,
) -> Result<u16, ErrorKind> {
    let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(io)
        .await
        .map_err(|e| classify(&e))?;
    let exchange = async {
        tokio::select! {
            biased;
            outcome = exchange(&mut sender, plan.template.build()) => outcome,
            _ = timer => Err(ErrorKind::ReadTimeout),
        }
    };
    drive(conn, exchange).await
}

/// Poll hyper's connection and our request side in this one task. The request side always
/// finishes, because hyper fails its pending request when the connection dies; when it finishes,
/// dropping the connection closes the socket.
async fn drive<C, R, T>(conn: C, requests: R) -> T
where
    C: Future<Output = hyper::Result<()>>,
    R: Future<Output = T>,
{
    tokio::pin!(conn);
    tokio::pin!(requests);
    let mut conn_done = false;
    loop {
        tokio::select! {
            biased;
            end = &mut requests => return end,
            _ = &mut conn, if !conn_done => conn_done = true,
        }
    }
}

/// Send one request and read the whole response.
#[inline]
pub async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: hyper::Request<Full<Bytes>>,
) -> Result<u16, ErrorKind> {
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| classify(&e))?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        frame.map_err(|e| classify(&e))?;
    }
    Ok(status)
}

async fn connect(
    addr: SocketAddr,
    deadline: Instant,
    bytes_read: &Rc<Cell<u64>>,
) -> Result<TokioIo<CountingStream>, ErrorKind> {
    let timer = tokio::time::sleep_until(deadline.into());
    tokio::pin!(timer);
    connect_until(addr, timer, bytes_read).await
}

/// Open a TCP connection, giving up when `timer` fires.
async fn connect_until(
    addr: SocketAddr,
    timer: Pin<&mut Sleep>,
    bytes_read: &Rc<Cell<u64>>,
) -> Result<TokioIo<CountingStream>, ErrorKind> {
    let connected = tokio::select! {
        biased;
        connected = TcpStream::connect(addr) => connected,
        _ = timer => return Err(ErrorKind::ConnectTimeout),
    };
    let stream = match connected {
        Err(e) => {
            return Err(match e.kind() {
                io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
                io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
                io::ErrorKind::ConnectionReset => ErrorKind::Reset,
                _ => ErrorKind::Other,
            });
        }
        Ok(s) => s,
    };
    // Requests are small and latency-bound: never wait for Nagle.
    let _ = stream.set_nodelay(true);
    Ok(TokioIo::new(CountingStream {
        inner: stream,
        bytes_read: bytes_read.clone(),
    }))
}

/// Sort a hyper error into the kinds the report counts.
pub(crate) fn classify(err: &hyper::Error) -> ErrorKind {
    if err.is_parse() || err.is_parse_status() {
        return ErrorKind::ProtocolError;
    }
    if err.is_timeout() {
        return ErrorKind::ReadTimeout;
    }
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof => ErrorKind::Reset,
                io::ErrorKind::TimedOut => ErrorKind::ReadTimeout,
                io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
                _ => ErrorKind::Other,
            };
        }
        source = e.source();
    }
    // The server closed the connection before the response was complete.
    if err.is_incomplete_message() || err.is_canceled() || err.is_closed() {
        return ErrorKind::Reset;
    }
    ErrorKind::Other
}

/// A TCP stream that counts the bytes read from it.
pub(crate) struct CountingStream {
    inner: TcpStream,
    bytes_read: Rc<Cell<u64>>,
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
