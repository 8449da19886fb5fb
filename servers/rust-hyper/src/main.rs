//! srvprof reference server: tokio + hyper 1 hello world.
//!
//! usage: srvprof-hello-hyper --port PORT [--backlog N] [--workers N] [--no-keepalive]
//! GET /      -> "hello world" (11 bytes)
//! GET /512b  -> 511 x 'a' + '\n' (512 bytes)
//! Listens on 127.0.0.1 only. Prints nothing except errors (stderr).

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::exit;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

static HELLO: &[u8] = b"hello world";
static BODY_512: [u8; 512] = {
    let mut b = [b'a'; 512];
    b[511] = b'\n';
    b
};

struct Args {
    port: u16,
    backlog: u32,
    workers: Option<usize>,
    keepalive: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("srvprof-hello-hyper: {msg}");
    eprintln!("usage: srvprof-hello-hyper --port PORT [--backlog N] [--workers N] [--no-keepalive]");
    exit(2)
}

fn parse_args() -> Args {
    let mut a = Args { port: 0, backlog: 511, workers: None, keepalive: true };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| usage(&format!("{name} needs a value")));
        match flag.as_str() {
            "--port" => a.port = value("--port").parse().unwrap_or_else(|_| usage("bad --port")),
            "--backlog" => a.backlog = value("--backlog").parse().unwrap_or_else(|_| usage("bad --backlog")),
            "--workers" => {
                let n: usize = value("--workers").parse().unwrap_or_else(|_| usage("bad --workers"));
                if n == 0 {
                    usage("--workers must be >= 1");
                }
                a.workers = Some(n);
            }
            "--no-keepalive" => a.keepalive = false,
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.port == 0 {
        usage("--port is required");
    }
    a
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body): (StatusCode, &'static [u8]) = match req.uri().path() {
        "/" => (StatusCode::OK, HELLO),
        "/512b" => (StatusCode::OK, &BODY_512),
        _ => (StatusCode::NOT_FOUND, b"not found\n"),
    };
    // Full<Bytes> has an exact size hint, so hyper sends Content-Length.
    let mut resp = Response::new(Full::new(Bytes::from_static(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(resp)
}

fn main() {
    let args = parse_args();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_io().enable_time();
    if let Some(n) = args.workers {
        rt.worker_threads(n);
    }
    let rt = rt.build().unwrap_or_else(|e| {
        eprintln!("srvprof-hello-hyper: cannot start runtime: {e}");
        exit(1)
    });
    if let Err(e) = rt.block_on(serve(args)) {
        eprintln!("srvprof-hello-hyper: {e}");
        exit(1);
    }
}

async fn serve(args: Args) -> std::io::Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let sock = TcpSocket::new_v4()?;
    sock.set_reuseaddr(true)?;
    sock.bind(addr).map_err(|e| std::io::Error::new(e.kind(), format!("bind {addr}: {e}")))?;
    let listener = sock.listen(args.backlog)?;
    let keepalive = args.keepalive;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and friends: report, back off briefly, keep serving.
                eprintln!("srvprof-hello-hyper: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .keep_alive(keepalive)
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}
