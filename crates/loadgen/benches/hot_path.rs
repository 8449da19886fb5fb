//! The per-request work of the load generator: the request (pre-encoded for the built-in client,
//! built per request for hyper), parsing a response head (built-in client), one hyper exchange
//! (encode, parse, drain) and recording a latency.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::Full;
use srvprof_loadgen::bench_api::{exchange, new_histogram, parse_response_head};
use srvprof_loadgen::{RequestTemplate, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sun, 22 Nov 2026 00:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: keep-alive\r\n\r\nhello world";

fn template() -> RequestTemplate {
    let target = Target::parse("http://127.0.0.1:8080/index.html").unwrap();
    RequestTemplate::new(
        &target,
        "GET",
        &[("Accept".into(), "*/*".into())],
        None,
        true,
    )
    .unwrap()
}

fn request_encoding(c: &mut Criterion) {
    let tpl = template();
    // What the built-in client does per request: borrow the bytes encoded before the run.
    c.bench_function("request_encoded_builtin", |b| {
        b.iter(|| black_box(black_box(&tpl).encoded().len()))
    });
    // What the hyper engine does per request: a new Request from the template's parts.
    c.bench_function("request_build_hyper", |b| b.iter(|| black_box(tpl.build())));
    c.bench_function("request_encode_from_parts", |b| {
        b.iter(|| {
            let target = Target::parse("http://127.0.0.1:8080/index.html").unwrap();
            black_box(RequestTemplate::new(&target, "GET", &[], None, true).unwrap())
        })
    });
}

fn response_parsing(c: &mut Criterion) {
    c.bench_function("response_parse_builtin", |b| {
        b.iter(|| black_box(parse_response_head(black_box(RESPONSE))))
    });
}

/// A full client exchange over an in-memory pipe; the other end answers each request with a
/// fixed nginx-like response, so the figure is hyper's encode + parse + our drain.
fn hyper_exchange(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tpl = template();
    c.bench_function("hyper_exchange_duplex", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (client_io, mut server_io) = tokio::io::duplex(64 * 1024);
                let server = tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut pending = 0usize;
                    loop {
                        let n = match server_io.read(&mut buf[pending..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        pending += n;
                        let mut start = 0;
                        while let Some(end) = buf[start..pending]
                            .windows(4)
                            .position(|w| w == b"\r\n\r\n")
                        {
                            start += end + 4;
                            if server_io.write_all(RESPONSE).await.is_err() {
                                return;
                            }
                        }
                        buf.copy_within(start..pending, 0);
                        pending -= start;
                    }
                });
                let io = hyper_util::rt::TokioIo::new(client_io);
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake::<_, Full<Bytes>>(io)
                        .await
                        .unwrap();
                let conn = tokio::spawn(conn);
                let started = Instant::now();
                for _ in 0..iters {
                    sender.ready().await.unwrap();
                    let status = exchange(&mut sender, tpl.build()).await.unwrap();
                    black_box(status);
                }
                let took = started.elapsed();
                drop(sender);
                let _ = conn.await;
                server.abort();
                took
            })
        })
    });
}

fn histogram_record(c: &mut Criterion) {
    let mut h = new_histogram();
    let mut v = 1u64;
    c.bench_function("histogram_record", |b| {
        b.iter(|| {
            // Spread values over the range a real run sees (µs to seconds).
            v = (v * 1_103_515_245 + 12_345) % 5_000_000 + 1;
            h.saturating_record(black_box(v));
        })
    });
    let mut other = new_histogram();
    other.record(1234).unwrap();
    c.bench_function("histogram_merge_interval", |b| {
        b.iter(|| h.add(black_box(&other)).unwrap())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = request_encoding, response_parsing, hyper_exchange, histogram_record
}
criterion_main!(benches);
