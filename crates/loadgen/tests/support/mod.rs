//! Test servers whose behaviour is known by construction: plain tokio TCP, hand-written
//! HTTP/1.1. Each counts what it received so tests can compare with the generator's report.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use srvprof_loadgen::{Engine, LoadConfig, LoadError, LoadReport};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a test server answers.
#[derive(Clone, Copy, Debug)]
pub enum Behaviour {
    /// 200 "hello" after this delay.
    Delay(Duration),
    /// Reads the request, then resets (SO_LINGER 0 close) every `n`th connection that sent one;
    /// the others get a 200 and a close.
    ResetEvery(u64),
    /// All responses wait while a one-time stall of `length` lasts; it starts at request `after`.
    StallOnce { after: u64, length: Duration },
    /// Every `n`th request gets a 503, the others a 200.
    ServiceUnavailableEvery(u64),
    /// Answers bytes that are not HTTP.
    Garbage,
    /// Reads requests and never answers.
    Silent,
    /// 200s on a kept-alive connection, then, after the `n`th answer, closes it without a word
    /// (no `Connection: close`), as a server timing out idle connections does.
    CloseAfter(u64),
}

/// Counters kept by the server, the independent source the tests compare with.
#[derive(Default)]
pub struct Counts {
    pub connections: AtomicU64,
    /// Complete requests received.
    pub requests: AtomicU64,
    pub resets: AtomicU64,
    pub non_2xx: AtomicU64,
    stall_until: Mutex<Option<Instant>>,
}

impl Counts {
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::SeqCst)
    }
    pub fn non_2xx(&self) -> u64 {
        self.non_2xx.load(Ordering::SeqCst)
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TestServer {
    /// Start a server on 127.0.0.1 (port 0) on its own one-thread runtime.
    pub fn start(behaviour: Behaviour) -> TestServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("server runtime");
        // A deep accept queue, so thousands of connections opening at once are not dropped.
        let listener = runtime
            .block_on(async {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind("127.0.0.1:0".parse().unwrap())?;
                socket.listen(4096)
            })
            .expect("listen on 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        runtime.spawn(async move {
            // Connections the server accepted that sent at least one request, for ResetEvery.
            let requesting = Arc::new(AtomicU64::new(0));
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.connections.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                let requesting = requesting.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, behaviour, &c, &requesting).await;
                });
            }
        });
        TestServer {
            addr,
            counts,
            runtime: Some(runtime),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

pub const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
const OK_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy";

async fn serve(
    mut stream: TcpStream,
    behaviour: Behaviour,
    counts: &Counts,
    requesting: &AtomicU64,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut filled = 0usize;
    let mut first = true;
    let mut answered = 0u64;
    loop {
        // Read one request: headers up to the blank line, then Content-Length bytes of body.
        let (head_end, body_len) = loop {
            if let Some(end) = find_head_end(&buf[..filled]) {
                break (end, content_length(&buf[..end]));
            }
            if filled == buf.len() {
                return Ok(());
            }
            let n = stream.read(&mut buf[filled..]).await?;
            if n == 0 {
                return Ok(());
            }
            filled += n;
        };
        while filled < head_end + body_len {
            let n = stream.read(&mut buf[filled..]).await?;
            if n == 0 {
                return Ok(());
            }
            filled += n;
        }
        let close = has_connection_close(&buf[..head_end]);
        buf.copy_within(head_end + body_len..filled, 0);
        filled -= head_end + body_len;
        let nth = counts.requests.fetch_add(1, Ordering::SeqCst) + 1;
        let nth_conn = if first {
            first = false;
            requesting.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            0
        };

        let response: &[u8] = match behaviour {
            Behaviour::Delay(d) => {
                if !d.is_zero() {
                    tokio::time::sleep(d).await;
                }
                if close { OK_CLOSE } else { OK }
            }
            Behaviour::ResetEvery(n) => {
                if nth_conn > 0 && nth_conn.is_multiple_of(n) {
                    counts.resets.fetch_add(1, Ordering::SeqCst);
                    stream.set_zero_linger()?;
                    return Ok(()); // Dropping the stream sends RST.
                }
                OK_CLOSE
            }
            Behaviour::StallOnce { after, length } => {
                let until = {
                    let mut stall = counts.stall_until.lock().unwrap();
                    if nth == after {
                        *stall = Some(Instant::now() + length);
                    }
                    *stall
                };
                if let Some(until) = until
                    && until > Instant::now()
                {
                    tokio::time::sleep_until(until.into()).await;
                }
                if close { OK_CLOSE } else { OK }
            }
            Behaviour::ServiceUnavailableEvery(n) => {
                if nth.is_multiple_of(n) {
                    counts.non_2xx.fetch_add(1, Ordering::SeqCst);
                    UNAVAILABLE
                } else if close {
                    OK_CLOSE
                } else {
                    OK
                }
            }
            Behaviour::Garbage => {
                stream.write_all(b"HELLO THERE\r\n\r\n").await?;
                return Ok(());
            }
            Behaviour::Silent => {
                // Hold the connection open until the client gives up.
                let mut sink = [0u8; 1024];
                while stream.read(&mut sink).await? > 0 {}
                return Ok(());
            }
            Behaviour::CloseAfter(n) => {
                answered += 1;
                if answered == n {
                    stream.write_all(OK).await?;
                    return Ok(()); // Dropping the stream closes it.
                }
                OK
            }
        };
        stream.write_all(response).await?;
        if close || response == OK_CLOSE {
            return Ok(());
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn header_value<'a>(head: &'a [u8], name: &str) -> Option<&'a str> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

fn content_length(head: &[u8]) -> usize {
    header_value(head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn has_connection_close(head: &[u8]) -> bool {
    header_value(head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
}

/// Tests run one at a time: timing assertions must not share the two CPUs with another test.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A config for `url` with short, test-friendly defaults.
pub fn config(url: &str) -> LoadConfig {
    LoadConfig {
        url: url.to_string(),
        connections: 4,
        threads: 2,
        duration: Some(Duration::from_secs(1)),
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// A config for exactly `requests` requests over `connections` with `engine` against `server`,
/// then stop (no duration).
pub fn exactly(
    server: &TestServer,
    engine: Engine,
    connections: usize,
    requests: u64,
) -> LoadConfig {
    LoadConfig {
        connections,
        requests: Some(requests),
        duration: None,
        engine,
        ..config(&server.url())
    }
}

/// Run and return the report, panicking with the error's sentence on failure.
pub fn run(config: &LoadConfig) -> LoadReport {
    let stop = Arc::new(AtomicBool::new(false));
    srvprof_loadgen::run(config, stop).unwrap_or_else(|e| panic!("run failed: {e}"))
}

/// [`run`], then [`assert_accounted`] on the report.
pub fn run_accounted(config: &LoadConfig) -> LoadReport {
    let r = run(config);
    assert_accounted(&r);
    r
}

/// Runs `config`, which must be refused (`why`) rather than run: the error.
pub fn run_refused(config: &LoadConfig, why: &str) -> LoadError {
    let stop = Arc::new(AtomicBool::new(false));
    match srvprof_loadgen::run(config, stop) {
        Ok(r) => panic!(
            "expected an error ({why}), got a report of {} requests",
            r.requests
        ),
        Err(e) => e,
    }
}

/// Asserts that `range` holds `value`, naming it `what` if not.
pub fn assert_within<T, R>(what: &str, value: T, range: R)
where
    T: PartialOrd + std::fmt::Debug,
    R: RangeBounds<T> + std::fmt::Debug,
{
    assert!(
        range.contains(&value),
        "{what} {value:?}, expected within {range:?}"
    );
}

/// The bookkeeping every report must satisfy.
pub fn assert_accounted(r: &LoadReport) {
    assert_eq!(
        r.requests,
        r.completed + r.errors,
        "requests = completed + errors"
    );
    assert_eq!(
        r.sent + r.carried_in,
        r.completed + r.errors + r.unfinished,
        "every request sent has one outcome (warmup requests answered in the window carried in)"
    );
    let by_kind: u64 = r.errors_by_kind.values().sum();
    assert_eq!(by_kind, r.errors, "errors_by_kind adds up to errors");
    let answered: u64 = r.status_codes.values().sum();
    assert_eq!(
        answered,
        r.completed + r.errors_by_kind["non_2xx"],
        "status codes add up to answered requests"
    );
    let timeline_completed: u64 = r.timeline.iter().map(|e| e.completed).sum();
    let timeline_errors: u64 = r.timeline.iter().map(|e| e.errors).sum();
    assert_eq!(
        timeline_completed, r.completed,
        "timeline completed adds up"
    );
    assert_eq!(timeline_errors, r.errors, "timeline errors add up");
}
