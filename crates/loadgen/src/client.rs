//! The request loop: one task per connection, each on its worker thread's single-threaded
//! runtime, sharing that thread's recorder without locks.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Sleep, sleep_until};

use crate::report::ErrorKind;
use crate::request::RequestTemplate;
use crate::stats::ThreadRecorder;

/// A pause after a failed connect so a dead server does not turn into a busy loop.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Everything the connections of all threads share; read-only except the request budget.
pub(crate) struct RunPlan {
    pub template: RequestTemplate,
    pub addr: SocketAddr,
    pub keepalive: bool,
    pub timeout: Duration,
    pub connections: usize,
    pub run_start: Instant,
    pub measure_start: Instant,
    /// End of the measured window (`-d`).
    pub measure_end: Option<Instant>,
    /// Total measured requests (`-n`).
    pub request_budget: Option<u64>,
    pub requests_claimed: AtomicU64,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    pub ramp_up: Duration,
    pub stop: Arc<AtomicBool>,
}

impl RunPlan {
    /// Take one request from `-n`; false when all were taken.
    #[inline]
    fn claim(&self) -> bool {
        match self.request_budget {
            None => true,
            Some(limit) => self.requests_claimed.fetch_add(1, Ordering::Relaxed) < limit,
        }
    }

    #[inline]
    fn over(&self, now: Instant) -> bool {
        self.stop.load(Ordering::Relaxed) || self.measure_end.is_some_and(|end| now >= end)
    }
}

/// When each request of one connection should go out.
struct Pacer {
    /// Open loop: intended time of the next request and the spacing between requests.
    next: Option<(Instant, Duration)>,
}

impl Pacer {
    fn new(plan: &RunPlan, index: usize, started: Instant) -> Pacer {
        let next = plan.rate.map(|rate| {
            let period = Duration::from_secs_f64(plan.connections as f64 / rate);
            // Spread connections over one period so the schedule is even, not bursty.
            let offset = Duration::from_secs_f64(index as f64 / rate);
            ((plan.run_start + offset).max(started), period)
        });
        Pacer { next }
    }

    /// Wait for the next intended send time; returns when the request starts (its latency
    /// origin): the intended time in open loop, so a stalled server shows in the percentiles.
    #[inline]
    async fn wait(&self) -> Option<Instant> {
        let (at, _) = self.next?;
        if at > Instant::now() {
            sleep_until(at.into()).await;
        }
        Some(at)
    }

    #[inline]
    fn advance(&mut self) {
        if let Some((at, period)) = &mut self.next {
            *at += *period;
        }
    }
}

/// How a keep-alive connection ended.
enum ConnEnd {
    /// Open a new connection and go on.
    Reconnect,
    /// The run is over for this connection.
    Done,
}

pub(crate) async fn connection(
    plan: Arc<RunPlan>,
    recorder: Rc<RefCell<ThreadRecorder>>,
    index: usize,
) {
    let ramp = plan
        .ramp_up
        .mul_f64(index as f64 / plan.connections.max(1) as f64);
    let start_at = plan.run_start + ramp;
    if start_at > Instant::now() {
        sleep_until(start_at.into()).await;
    }
    let mut pacer = Pacer::new(&plan, index, start_at);
    if plan.keepalive {
        while let ConnEnd::Reconnect = keepalive_connection(&plan, &recorder, &mut pacer).await {}
    } else {
        per_request_connections(&plan, &recorder, &mut pacer).await;
    }
}

/// One TCP connection carrying requests back to back until it fails or the run ends.
async fn keepalive_connection(
    plan: &RunPlan,
    recorder: &RefCell<ThreadRecorder>,
    pacer: &mut Pacer,
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
            sleep_until((now + RECONNECT_BACKOFF).into()).await;
            return ConnEnd::Reconnect;
        }
    };
    let (mut sender, conn) = match http1::handshake::<_, Full<Bytes>>(io).await {
        Ok(parts) => parts,
        Err(_) => return ConnEnd::Reconnect,
    };

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
                Ok(status) => rec.response(measured, start, done, status, bytes_read.get()),
                Err(kind) => {
                    rec.failure(measured, done, kind, bytes_read.get());
                    return ConnEnd::Reconnect;
                }
            }
        }
    };
    drive(conn, requests).await
}

/// `--no-keepalive`: a new TCP connection for every request; connect time is part of latency.
async fn per_request_connections(
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

/// Count a request attempt; false when `-n` is used up.
#[inline]
fn begin(plan: &RunPlan, recorder: &RefCell<ThreadRecorder>, start: Instant) -> bool {
    if start >= plan.measure_start && !plan.claim() {
        return false;
    }
    recorder.borrow_mut().begin(start);
    true
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

/// Per-thread half of a run: this thread's connections on its own single-threaded runtime.
pub(crate) async fn run_thread_connections(
    plan: Arc<RunPlan>,
    recorder: Rc<RefCell<ThreadRecorder>>,
    connection_indices: Vec<usize>,
) {
    const TICK: Duration = Duration::from_millis(10);
    let mut tasks = tokio::task::JoinSet::new();
    for index in connection_indices {
        tasks.spawn_local(connection(plan.clone(), recorder.clone(), index));
    }
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break },
            _ = tokio::time::sleep(TICK) => {}
        }
        let now = Instant::now();
        recorder.borrow_mut().tick(now);
        if plan.over(now) {
            // Requests still in flight stay counted as unfinished.
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            break;
        }
    }
}
