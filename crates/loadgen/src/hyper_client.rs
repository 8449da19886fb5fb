//! The hyper engine (`--engine hyper`): hyper's HTTP/1.1 client connection, one per task, no
//! pool. Slower than the built-in client (hyper allocates per request: its dispatch channel and
//! the response's header map) but a second, independent HTTP implementation to compare with.

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

use crate::classify::{Phase, hyper_error};
use crate::plan::RunPlan;
use crate::protocol::{Answer, Failure, Protocol};
use crate::report::ErrorKind;
use crate::request::RequestTemplate;
use crate::tls::Handshake;
use crate::transport::CountingStream;

type HyperConnection = http1::Connection<TokioIo<CountingStream>, Full<Bytes>>;

/// One hyper client connection: its request side, and the connection future that does its I/O,
/// polled by each exchange in this same task (no task spawned per connection); None once it
/// ended, dropped then, which fails a request still waiting on it (hyper cancels it).
pub(crate) struct HyperConn {
    sender: SendRequest<Full<Bytes>>,
    conn: Option<Pin<Box<HyperConnection>>>,
    handshake: Option<Handshake>,
    bytes_read: Rc<Cell<u64>>,
    responses: u64,
}

impl Protocol for HyperConn {
    type Spare = ();
    type Shared = ();

    async fn open(
        plan: &RunPlan,
        _shared: &(),
        _spare: &mut Option<()>,
        _eager: Option<&RequestTemplate>,
    ) -> Result<(HyperConn, Option<Instant>), ErrorKind> {
        let opened = crate::transport::connect(plan).await?;
        let bytes_read = Rc::new(Cell::new(0u64));
        let io = TokioIo::new(CountingStream::new(opened.stream, bytes_read.clone()));
        let (sender, conn) = http1::handshake::<_, Full<Bytes>>(io)
            .await
            .map_err(|e| hyper_error(&e, Phase::Connect))?;
        let conn = HyperConn {
            sender,
            conn: Some(Box::pin(conn)),
            bytes_read,
            responses: 0,
            handshake: opened.handshake,
        };
        Ok((conn, Some(opened.connected_at)))
    }

    async fn exchange(&mut self, template: &RequestTemplate) -> Result<Answer, Failure> {
        let (reused, before) = (self.responses > 0, self.bytes_read.get());
        let HyperConn { sender, conn, .. } = self;
        let request = async {
            // Closed by the server while idle: nothing was sent, the request may go again.
            if sender.ready().await.is_err() {
                return Err(Failure::Stale);
            }
            exchange_answer(sender, template.build())
                .await
                .map_err(Failure::Kind)
        };
        match drive(conn, request).await {
            Ok(answer) => {
                self.responses += 1;
                Ok(answer)
            }
            Err(Failure::Kind(ErrorKind::Reset)) if reused && self.bytes_read.get() == before => {
                Err(Failure::Stale)
            }
            Err(f) => Err(f),
        }
    }

    fn handshake(&self) -> Option<Handshake> {
        self.handshake
    }

    fn bytes_read(&self) -> u64 {
        self.bytes_read.get()
    }

    fn responses(&self) -> u64 {
        self.responses
    }

    fn close(self, _spare: &mut Option<()>) {}
}

/// Poll hyper's connection and the request side together until the request side is done. It
/// always finishes: a connection that ends (the server closed it) is dropped at once, and hyper
/// fails the request still pending on it.
async fn drive<T>(
    conn: &mut Option<Pin<Box<HyperConnection>>>,
    request: impl Future<Output = T>,
) -> T {
    tokio::pin!(request);
    loop {
        let Some(c) = conn.as_mut() else {
            return request.await;
        };
        tokio::select! {
            biased;
            end = &mut request => return end,
            _ = c.as_mut() => *conn = None,
        }
    }
}

/// Send one request and read the whole response: its status, and whether the connection stays
/// open for another (not after `Connection: close`).
#[inline]
async fn exchange_answer(
    sender: &mut SendRequest<Full<Bytes>>,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Answer, ErrorKind> {
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| hyper_error(&e, Phase::Exchange))?;
    let status = response.status().as_u16();
    let keep_alive = !(response.headers().get_all(hyper::header::CONNECTION).iter())
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        frame.map_err(|e| hyper_error(&e, Phase::Exchange))?;
    }
    Ok(Answer { status, keep_alive })
}

/// Send one request and read the whole response (the criterion benches' entry point).
#[inline]
pub async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: hyper::Request<Full<Bytes>>,
) -> Result<u16, ErrorKind> {
    exchange_answer(sender, request).await.map(|a| a.status)
}
