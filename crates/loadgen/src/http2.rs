//! HTTP/2 (`--http2`): the h2 crate's client over TLS (ALPN h2) or cleartext with prior
//! knowledge (h2c). One connection carries `--streams` concurrent streams; each stream is a slot
//! of the request loop, as a connection is in HTTP/1.1, so pacing, timeouts and recording stay
//! the loop's. The streams of a connection share it through [`Shared`]: the first to find it
//! missing or dead opens the next one, the others join it.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use h2::client::SendRequest;

use crate::classify::{Phase, h2_error};
use crate::plan::RunPlan;
use crate::protocol::{Answer, Failure, Protocol};
use crate::report::ErrorKind;
use crate::request::RequestTemplate;
use crate::tls::Handshake;
use crate::transport::CountingStream;

/// Each stream's receive window: a response up to this size never waits for a WINDOW_UPDATE.
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection's receive window, shared by its streams.
const CONNECTION_WINDOW: u32 = 16 << 20;

/// The connection the streams of one `-c` slot share, on their thread.
#[derive(Default)]
pub(crate) struct Shared {
    link: RefCell<Option<Link>>,
    /// Held while a connection is opened, so the streams that find none open one, not N.
    opening: tokio::sync::Mutex<()>,
}

/// One open HTTP/2 connection.
#[derive(Clone)]
struct Link {
    sender: SendRequest<Bytes>,
    /// False once the connection's driver returned (closed by either side, or failed).
    alive: Rc<Cell<bool>>,
    /// Bytes read from its socket, and how many of them completed streams took already.
    bytes: Rc<Cell<u64>>,
    taken: Rc<Cell<u64>>,
}

/// One stream slot: the connection it sends on, and what it read there.
pub(crate) struct H2Stream {
    link: Link,
    /// The TLS handshake of the connection, for the stream that opened it.
    handshake: Option<Handshake>,
    bytes_read: u64,
    responses: u64,
}

impl Protocol for H2Stream {
    type Spare = ();
    type Shared = Shared;

    async fn open(
        plan: &RunPlan,
        shared: &Shared,
        _spare: &mut Option<()>,
        _eager: Option<&RequestTemplate>,
    ) -> Result<(H2Stream, Option<Instant>), ErrorKind> {
        let _opening = shared.opening.lock().await;
        // With keep-alive a connection is shared; without, each request opens its own.
        if plan.keepalive
            && let Some(link) = shared.link.borrow().as_ref().filter(|l| l.alive.get())
        {
            return Ok((H2Stream::on(link.clone(), None), None));
        }
        let (link, connected_at, handshake) = connect(plan).await?;
        if plan.keepalive {
            *shared.link.borrow_mut() = Some(link.clone());
        }
        Ok((H2Stream::on(link, handshake), Some(connected_at)))
    }

    async fn exchange(&mut self, template: &RequestTemplate) -> Result<Answer, Failure> {
        let sender = &mut self.link.sender;
        // The connection ended before this request could go: nothing was sent, it goes again on
        // the next connection, at once after a GOAWAY (the server's request limit, a reload),
        // after the slot's backoff when the connection failed.
        if let Err(e) = poll_fn(|cx| sender.poll_ready(cx)).await {
            // The next stream to open starts a new connection; this one drains.
            self.link.alive.set(false);
            return Err(if e.is_go_away() {
                Failure::Closed
            } else {
                Failure::Stale
            });
        }
        let body = template.body();
        let (response, mut send) = sender
            .send_request(template.h2_request(), body.is_empty())
            .map_err(|e| Failure::Kind(h2_error(&e, Phase::Exchange)))?;
        if !body.is_empty() {
            send.send_data(body.clone(), true)
                .map_err(|e| Failure::Kind(h2_error(&e, Phase::Exchange)))?;
        }
        let alive = &self.link.alive;
        let fail = |e: h2::Error| {
            if e.is_go_away() {
                alive.set(false);
            }
            match refusal(&e) {
                Some(goaway) => Failure::Unprocessed { goaway },
                None => Failure::Kind(h2_error(&e, Phase::Exchange)),
            }
        };
        let response = response.await.map_err(fail)?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(fail)?;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        self.responses += 1;
        // The socket bytes read since the connection's last finished stream are this one's:
        // over the run they add up to all that was read.
        let total = self.link.bytes.get();
        self.bytes_read += total - self.link.taken.replace(total);
        Ok(Answer {
            status,
            keep_alive: true,
        })
    }

    fn handshake(&self) -> Option<Handshake> {
        self.handshake
    }

    fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn responses(&self) -> u64 {
        self.responses
    }

    fn close(self, _spare: &mut Option<()>) {}
}

impl H2Stream {
    fn on(link: Link, handshake: Option<Handshake>) -> H2Stream {
        H2Stream {
            link,
            handshake,
            bytes_read: 0,
            responses: 0,
        }
    }
}

/// A request the server refused before processing it, which RFC 9113 lets a client send again:
/// one past the last stream of a graceful GOAWAY (`Some(true)`), or reset with REFUSED_STREAM
/// (`Some(false)`).
fn refusal(e: &h2::Error) -> Option<bool> {
    if !e.is_remote() {
        return None;
    }
    match e.reason() {
        Some(h2::Reason::NO_ERROR) if e.is_go_away() => Some(true),
        Some(h2::Reason::REFUSED_STREAM) if e.is_reset() => Some(false),
        _ => None,
    }
}

/// A new connection: TCP, TLS with ALPN h2 for https, the HTTP/2 preface and settings; its
/// driver runs as a task of this thread until the connection ends.
async fn connect(plan: &RunPlan) -> Result<(Link, Instant, Option<Handshake>), ErrorKind> {
    let opened = crate::transport::connect(plan).await?;
    if !opened.stream.speaks_h2() {
        // The server chose HTTP/1.1 in ALPN (checked before the run; a server reloaded since).
        return Err(ErrorKind::ProtocolError);
    }
    let bytes = Rc::new(Cell::new(0u64));
    let io = CountingStream::new(opened.stream, bytes.clone());
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| h2_error(&e, Phase::Connect))?;
    let alive = Rc::new(Cell::new(true));
    let flag = alive.clone();
    // It ends when the server closes the connection, or when every stream handle is gone.
    tokio::task::spawn_local(async move {
        let _ = connection.await;
        flag.set(false);
    });
    let link = Link {
        sender,
        alive,
        bytes,
        taken: Rc::new(Cell::new(0)),
    };
    Ok((link, opened.connected_at, opened.handshake))
}

/// The check before the run for `--http2` over cleartext (h2c): the server must answer a PING
/// after HTTP/2's preface (no request is sent: the server's counts stay the run's). `Err` says
/// what went wrong instead.
pub(crate) async fn check_prior_knowledge(tcp: tokio::net::TcpStream) -> Result<(), String> {
    let (sender, mut connection) = h2::client::handshake(tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut ping = connection
        .ping_pong()
        .ok_or_else(|| "no PING available on a new connection".to_string())?;
    let driver = tokio::spawn(connection);
    let pong = ping.ping(h2::Ping::opaque()).await;
    driver.abort();
    drop(sender);
    match pong {
        Ok(_) => Ok(()),
        // The connection died: what the server answered broke HTTP/2.
        Err(e) => Err(match e.get_io() {
            Some(io) => format!("the connection failed ({io})"),
            None => format!("its answer is not HTTP/2 ({e})"),
        }),
    }
}
