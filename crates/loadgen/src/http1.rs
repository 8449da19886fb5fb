//! The hot-path HTTP/1.1 client: the request is encoded once before the run, each response is
//! parsed in place by httparse (the parser hyper uses) from one read buffer per connection, and
//! the body is skipped as it arrives. Nothing is allocated per request.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::classify::{Phase, io_error};
use crate::plan::RunPlan;
use crate::protocol::{Answer, Failure, Protocol};
use crate::report::ErrorKind;
use crate::request::RequestTemplate;
use crate::tls::Handshake;
use crate::transport::Stream;

/// Read buffer of a connection; grows (once, up to MAX_HEAD) only for huge response heads.
const READ_BUF: usize = 16 * 1024;
const MAX_HEAD: usize = 256 * 1024;
const MAX_HEADERS: usize = 64;

/// The parts of a response the generator needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    pub status: u16,
    /// The connection may carry another request.
    pub keep_alive: bool,
}

impl From<Response> for Answer {
    fn from(r: Response) -> Answer {
        Answer {
            status: r.status,
            keep_alive: r.keep_alive,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

pub(crate) struct Connection {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes read from the socket since the connection opened.
    pub bytes_read: u64,
    /// Complete responses received on this connection.
    pub responses: u64,
    /// Bytes of the request an eager open already sent; the next exchange sends the rest.
    presend: Option<usize>,
    handshake: Option<Handshake>,
}

impl Protocol for Connection {
    type Spare = Vec<u8>;
    type Shared = ();

    async fn open(
        plan: &RunPlan,
        _shared: &(),
        spare: &mut Option<Vec<u8>>,
        eager: Option<&RequestTemplate>,
    ) -> Result<(Connection, Option<Instant>), ErrorKind> {
        let buf = spare.take().unwrap_or_else(Connection::new_buffer);
        // Over TLS the request waits for the handshake: no eager send.
        if let Some(template) = eager.filter(|_| plan.tls.is_none()) {
            let request = template.encoded();
            let (mut conn, connected_at, sent) =
                Connection::open_and_send(plan.addr, buf, request).await?;
            conn.presend = Some(sent);
            Ok((conn, Some(connected_at)))
        } else {
            let opened = crate::transport::connect(plan).await?;
            let connected_at = opened.connected_at;
            let mut conn = Connection::with_stream(opened.stream, buf);
            conn.handshake = opened.handshake;
            Ok((conn, Some(connected_at)))
        }
    }

    fn handshake(&self) -> Option<Handshake> {
        self.handshake
    }

    #[inline]
    async fn exchange(&mut self, template: &RequestTemplate) -> Result<Answer, Failure> {
        let (request, head) = (template.encoded(), template.is_head());
        match self.presend.take() {
            Some(sent) => self
                .finish_request(&request[sent..], head)
                .await
                .map(Answer::from)
                .map_err(Failure::Kind),
            None => self.roundtrip(request, head).await.map(Answer::from),
        }
    }

    fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn responses(&self) -> u64 {
        self.responses
    }

    fn close(self, spare: &mut Option<Vec<u8>>) {
        *spare = Some(self.into_buffer());
    }
}

impl Connection {
    #[cfg(test)]
    pub async fn open(addr: SocketAddr) -> Result<Connection, ErrorKind> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| connect_error_kind(&e))?;
        let _ = stream.set_nodelay(true);
        Ok(Connection::with_stream(Stream::Tcp(stream), Connection::new_buffer()))
    }

    /// A connection on `stream`, reading into `buf` (one an earlier connection left, so
    /// `--no-keepalive` allocates nothing per request).
    fn with_stream(stream: Stream, buf: Vec<u8>) -> Connection {
        Connection {
            stream,
            buf,
            start: 0,
            end: 0,
            bytes_read: 0,
            responses: 0,
            presend: None,
            handshake: None,
        }
    }

    /// `--no-keepalive`: open a connection and send `request` on it. On loopback (and wherever the
    /// handshake completes inside `connect`) the request goes out right after `connect` returns,
    /// which saves the wakeup for writability, the SO_ERROR check and TCP_NODELAY (a request sent
    /// in one call never waits for Nagle); otherwise it waits for the connect like any client.
    /// Returns the connection, when it was known to be connected and how many bytes of the
    /// request went out (`finish_request` sends the rest).
    pub async fn open_and_send(
        addr: SocketAddr,
        buf: Vec<u8>,
        request: &[u8],
    ) -> Result<(Connection, Instant, usize), ErrorKind> {
        let std_stream = crate::sys::start_connect(&addr).map_err(|e| connect_error_kind(&e))?;
        let sent = match crate::sys::send_nosignal(&std_stream, request) {
            Ok(n) => Some(n),
            // Still connecting (SYN_SENT): wait for writability below.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            // The connect failed (refused, unreachable) and the send reports why.
            Err(e) => return Err(connect_error_kind(&e)),
        };
        let connected_at = sent.map(|_| Instant::now());
        let stream = TcpStream::from_std(std_stream).map_err(|e| io_error_kind(&e))?;
        let (sent, connected_at) = match (sent, connected_at) {
            (Some(n), Some(at)) => (n, at),
            _ => {
                stream
                    .writable()
                    .await
                    .map_err(|e| connect_error_kind(&e))?;
                if let Some(e) = stream.take_error().map_err(|e| io_error_kind(&e))? {
                    return Err(connect_error_kind(&e));
                }
                (0, Instant::now())
            }
        };
        Ok((Connection::with_stream(Stream::Tcp(stream), buf), connected_at, sent))
    }

    /// Close the connection and keep its read buffer for the next one.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// A read buffer for `open_with_buffer`.
    pub fn new_buffer() -> Vec<u8> {
        vec![0; READ_BUF]
    }

    /// Write one encoded request and read its whole response.
    pub async fn roundtrip(&mut self, request: &[u8], head: bool) -> Result<Response, Failure> {
        let reused = self.responses > 0;
        let read_before = self.bytes_read;
        let result = async {
            self.stream
                .write_all(request)
                .await
                .map_err(|e| io_error_kind(&e))?;
            self.read_response(head).await
        }
        .await;
        match result {
            Ok(response) => {
                self.responses += 1;
                Ok(response)
            }
            Err(ErrorKind::Reset) if reused && self.bytes_read == read_before => {
                Err(Failure::Stale)
            }
            Err(kind) => Err(Failure::Kind(kind)),
        }
    }

    /// Send what `open_and_send` could not (`unsent`, usually nothing), then read the whole
    /// response.
    pub async fn finish_request(
        &mut self,
        unsent: &[u8],
        head: bool,
    ) -> Result<Response, ErrorKind> {
        if !unsent.is_empty() {
            // The request goes out in more than one segment: never let Nagle hold the last one.
            self.stream.set_nodelay();
            self.stream
                .write_all(unsent)
                .await
                .map_err(|e| io_error_kind(&e))?;
        }
        let response = self.read_response(head).await?;
        self.responses += 1;
        Ok(response)
    }

    async fn read_response(&mut self, head: bool) -> Result<Response, ErrorKind> {
        let (status, framing, keep_alive) = self.read_head(head).await?;
        let keep_alive = self.skip_body(framing).await? && keep_alive;
        Ok(Response { status, keep_alive })
    }

    /// Parse the status line and headers; informational (1xx) heads are skipped.
    async fn read_head(&mut self, head: bool) -> Result<(u16, Framing, bool), ErrorKind> {
        loop {
            if self.end > self.start {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut response = httparse::Response::new(&mut headers);
                match response.parse(&self.buf[self.start..self.end]) {
                    Ok(httparse::Status::Complete(len)) => {
                        let status = response.code.unwrap_or(0);
                        let (framing, keep_alive) =
                            framing_of(&response, head).ok_or(ErrorKind::ProtocolError)?;
                        self.start += len;
                        if (100..200).contains(&status) && status != 101 {
                            continue;
                        }
                        return Ok((status, framing, keep_alive));
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Err(ErrorKind::ProtocolError),
                }
            }
            if self.fill().await? == 0 {
                return Err(ErrorKind::Reset); // Closed before the response was complete.
            }
        }
    }

    /// Consume the body; returns false when it ended with the connection.
    async fn skip_body(&mut self, framing: Framing) -> Result<bool, ErrorKind> {
        match framing {
            Framing::Empty => Ok(true),
            Framing::Length(n) => self.skip(n).await.map(|_| true),
            Framing::Chunked => {
                loop {
                    let size = loop {
                        match httparse::parse_chunk_size(&self.buf[self.start..self.end]) {
                            Ok(httparse::Status::Complete((len, size))) => {
                                self.start += len;
                                break size;
                            }
                            Ok(httparse::Status::Partial) => self.fill_or_reset().await?,
                            Err(_) => return Err(ErrorKind::ProtocolError),
                        }
                    };
                    if size == 0 {
                        break;
                    }
                    self.skip(size).await?;
                    self.expect_crlf().await?;
                }
                // Trailer lines up to the empty line.
                loop {
                    match self.buf[self.start..self.end]
                        .windows(2)
                        .position(|w| w == b"\r\n")
                    {
                        Some(0) => {
                            self.start += 2;
                            return Ok(true);
                        }
                        Some(pos) => self.start += pos + 2,
                        None => self.fill_or_reset().await?,
                    }
                }
            }
            Framing::UntilClose => {
                loop {
                    self.start = self.end;
                    if self.fill().await? == 0 {
                        break;
                    }
                }
                Ok(false)
            }
        }
    }

    async fn skip(&mut self, mut remaining: u64) -> Result<(), ErrorKind> {
        loop {
            let take = ((self.end - self.start) as u64).min(remaining);
            self.start += take as usize;
            remaining -= take;
            if remaining == 0 {
                return Ok(());
            }
            self.fill_or_reset().await?;
        }
    }

    async fn expect_crlf(&mut self) -> Result<(), ErrorKind> {
        while self.end - self.start < 2 {
            self.fill_or_reset().await?;
        }
        if &self.buf[self.start..self.start + 2] != b"\r\n" {
            return Err(ErrorKind::ProtocolError);
        }
        self.start += 2;
        Ok(())
    }

    async fn fill_or_reset(&mut self) -> Result<(), ErrorKind> {
        match self.fill().await? {
            0 => Err(ErrorKind::Reset),
            _ => Ok(()),
        }
    }

    /// Read more bytes after `end`; 0 means the server closed the connection.
    async fn fill(&mut self) -> Result<usize, ErrorKind> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                return Err(ErrorKind::ProtocolError); // A response head larger than MAX_HEAD.
            }
        }
        let n = self
            .stream
            .read(&mut self.buf[self.end..])
            .await
            .map_err(|e| io_error_kind(&e))?;
        self.end += n;
        self.bytes_read += n as u64;
        Ok(n)
    }
}

/// Body framing and keep-alive from a parsed head (RFC 9112 section 6.3); None when invalid.
fn framing_of(response: &httparse::Response<'_, '_>, head: bool) -> Option<(Framing, bool)> {
    let status = response.code?;
    let mut keep_alive = response.version? == 1;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(h.value).ok()?.trim();
            let n: u64 = value.parse().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = last_token_is(h.value, b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            if contains_token(h.value, b"close") {
                keep_alive = false;
            } else if contains_token(h.value, b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    let framing = if head || status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Some((framing, keep_alive))
}

fn contains_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

fn last_token_is(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .next_back()
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

fn connect_error_kind(e: &io::Error) -> ErrorKind {
    io_error(e, Phase::Connect)
}

fn io_error_kind(e: &io::Error) -> ErrorKind {
    io_error(e, Phase::Exchange)
}

/// Parse one response from `bytes` the way the hot path does (for benches and unit tests):
/// returns status, keep-alive and the head's length.
#[doc(hidden)]
pub fn parse_response_head(bytes: &[u8]) -> Option<(u16, bool, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(bytes).ok()? {
        httparse::Status::Complete(len) => {
            let (_, keep_alive) = framing_of(&response, false)?;
            Some((response.code?, keep_alive, len))
        }
        httparse::Status::Partial => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// Serve `answer` once to whoever connects, then return what the client sent.
    async fn one_answer(answer: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            s.write_all(answer).await.unwrap();
            // Keep the socket open a moment so keep-alive responses are not cut.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        });
        (addr, server)
    }

    async fn roundtrip(answer: &'static [u8]) -> (Result<Response, Failure>, u64) {
        let (addr, server) = one_answer(answer).await;
        let mut conn = Connection::open(addr).await.unwrap();
        let r = conn
            .roundtrip(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false)
            .await;
        server.abort();
        (r, conn.bytes_read)
    }

    #[tokio::test]
    async fn content_length_body() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        let (r, bytes) = roundtrip(answer).await;
        assert_eq!(
            r,
            Ok(Response {
                status: 200,
                keep_alive: true
            })
        );
        assert_eq!(bytes, answer.len() as u64);
    }

    #[tokio::test]
    async fn chunked_body_with_trailer() {
        let answer = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
        let (r, bytes) = roundtrip(answer).await;
        assert_eq!(
            r,
            Ok(Response {
                status: 404,
                keep_alive: true
            })
        );
        assert_eq!(bytes, answer.len() as u64);
    }

    #[tokio::test]
    async fn body_until_close_and_http10() {
        let (r, _) = roundtrip(b"HTTP/1.0 200 OK\r\n\r\nsome body").await;
        assert_eq!(
            r,
            Ok(Response {
                status: 200,
                keep_alive: false
            })
        );
    }

    #[tokio::test]
    async fn informational_head_is_skipped_and_close_honoured() {
        let (r, _) = roundtrip(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(
            r,
            Ok(Response {
                status: 201,
                keep_alive: false
            })
        );
    }

    #[tokio::test]
    async fn garbage_is_a_protocol_error_and_truncation_a_reset() {
        let (r, _) = roundtrip(b"HELLO THERE\r\n\r\n").await;
        assert_eq!(r, Err(Failure::Kind(ErrorKind::ProtocolError)));
        let (r, _) = roundtrip(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel").await;
        assert_eq!(r, Err(Failure::Kind(ErrorKind::Reset)));
    }

    #[tokio::test]
    async fn new_connection_sends_at_once_and_reports_refusal() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        let (addr, server) = one_answer(answer).await;
        let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let (mut conn, _, sent) =
            Connection::open_and_send(addr, Connection::new_buffer(), request)
                .await
                .unwrap();
        // Loopback completes the handshake inside connect(): the whole request is out already.
        assert_eq!(sent, request.len());
        let r = conn.finish_request(&request[sent..], false).await;
        assert_eq!(
            r,
            Ok(Response {
                status: 200,
                keep_alive: false
            })
        );
        assert_eq!(conn.bytes_read, answer.len() as u64);
        server.abort();

        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let refused = Connection::open_and_send(closed, Connection::new_buffer(), request).await;
        assert_eq!(refused.err(), Some(ErrorKind::ConnectRefused));
    }

    /// A SYN the server drops (its accept queue is full) leaves the connect in progress: the
    /// request waits for the handshake instead of failing, and goes out whole once it completes.
    #[tokio::test]
    async fn new_connection_waits_for_a_slow_handshake() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        // Fill the accept queue so that the kernel drops the next SYN.
        let mut fillers = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(s)) = tokio::time::timeout(
                std::time::Duration::from_millis(100),
                TcpStream::connect(addr),
            )
            .await
            {
                fillers.push(s);
            }
        }
        let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let client = tokio::spawn(async move {
            let (mut conn, _, sent) =
                Connection::open_and_send(addr, Connection::new_buffer(), request)
                    .await
                    .unwrap();
            let r = conn.finish_request(&request[sent..], false).await;
            (sent, r)
        });
        // Serve everything that arrives; the dropped SYN is retransmitted after about 1 s.
        let server = tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    if s.read(&mut buf).await.unwrap_or(0) > 0 {
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                            .await;
                    }
                });
            }
        });
        let (sent, r) = tokio::time::timeout(std::time::Duration::from_secs(10), client)
            .await
            .expect("the request completes after the SYN retransmit")
            .unwrap();
        server.abort();
        drop(fillers);
        assert_eq!(sent, 0, "the handshake was still in progress");
        assert_eq!(
            r,
            Ok(Response {
                status: 200,
                keep_alive: true
            })
        );
    }

    #[test]
    fn head_parser() {
        assert_eq!(
            parse_response_head(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy"),
            Some((503, true, 40))
        );
        assert_eq!(parse_response_head(b"HTTP/1.1 200 OK\r\n"), None);
    }
}
