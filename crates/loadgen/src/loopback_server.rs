//! Tests' HTTP/1.1 server on loopback: a std listener on a thread of its own that answers each
//! request it reads, keeps every byte it was sent, and stops when the test is done with it.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A 200 with a two-byte body.
pub(crate) const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// No test waits on the server longer than this, whatever the client does.
const DEADLINE: Duration = Duration::from_secs(20);

/// How a connection is carried: plain TCP, or TLS over it.
pub(crate) type Wrap = Box<dyn Fn(TcpStream) -> Option<Box<dyn ReadWrite>> + Send>;

pub(crate) trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

pub(crate) struct LoopbackServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Bytes of answers written before the client went away.
    written: Arc<AtomicU64>,
    thread: JoinHandle<Vec<u8>>,
}

impl LoopbackServer {
    /// Answers every request with `answer`, over plain TCP.
    pub(crate) fn start(answer: &'static [u8]) -> LoopbackServer {
        LoopbackServer::start_with(answer, Box::new(|tcp| Some(Box::new(tcp) as Box<dyn ReadWrite>)))
    }

    /// Answers every request with `answer`, each connection carried as `wrap` makes it.
    pub(crate) fn start_with(answer: &'static [u8], wrap: Wrap) -> LoopbackServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, written) = (stop.clone(), written.clone());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let end = Instant::now() + DEADLINE;
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    match listener.accept() {
                        Ok((tcp, _)) => {
                            let _ = tcp.set_nonblocking(false);
                            let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
                            let _ = tcp.set_write_timeout(Some(Duration::from_secs(5)));
                            small_send_buffer(&tcp);
                            if let Some(mut stream) = wrap(tcp) {
                                serve(&mut *stream, answer, &mut seen, &written);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => break,
                    }
                }
                seen
            })
        };
        LoopbackServer {
            addr,
            stop,
            written,
            thread,
        }
    }

    /// Stops the server; what every connection sent it, one after the other.
    pub(crate) fn finish(self) -> (Vec<u8>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.thread.join().expect("the loopback server ends");
        (seen, self.written.load(Ordering::Relaxed))
    }
}

/// Requests on one connection, each answered, until the client closes it or goes quiet.
fn serve(stream: &mut dyn ReadWrite, answer: &[u8], seen: &mut Vec<u8>, written: &AtomicU64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(head_end) = find(&buf, b"\r\n\r\n").map(|i| i + 4) else {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let length = content_length(&buf[..head_end]);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        seen.extend(buf.drain(..head_end + length));
        // In pieces, so what the client took before it went away is counted.
        for piece in answer.chunks(16 * 1024) {
            if stream.write_all(piece).and_then(|()| stream.flush()).is_err() {
                return;
            }
            written.fetch_add(piece.len() as u64, Ordering::Relaxed);
        }
    }
}

/// A send buffer of 64 KiB (the kernel doubles it), not one that grows to megabytes: what the
/// server counts as written is then close to what the client read.
fn small_send_buffer(tcp: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 64 * 1024;
    // SAFETY: a valid socket, and an int option of the size given.
    unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &[u8]) -> usize {
    let head = String::from_utf8_lossy(head).to_ascii_lowercase();
    (head.lines())
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
