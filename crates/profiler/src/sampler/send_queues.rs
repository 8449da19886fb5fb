//! A watch of the server's connections' send queues through a run's warm-up, in a thread of its
//! own: an answer the path paces raises no kernel counter, so the programs that time answers'
//! transfers attach when a walk of the server's namespace finds one backed up. A walk goes over
//! every socket of the table without a break, TIME_WAIT ones included (2-9 ms for 20,000 here),
//! so walks are made only in the warm-up, which the load runs but nothing measures, never
//! during the measured span (nor in `probe`, which has none); an ordinary thread makes them,
//! which the server competes with as usual, and the sampler only reads its flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::probes::tcp::{
    SEND_QUEUE_BACKED_UP, SEND_QUEUE_DRAIN_MS, SEND_QUEUE_LOOK_NS, SOCKETS_WALKED_PER_S,
};

/// The watch: running until it finds a backed-up connection or is dropped.
pub struct SendQueueWatch {
    found: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SendQueueWatch {
    /// Walks the namespace of `pid` for connections on `ports` at once, then every
    /// SEND_QUEUE_LOOK_NS or, on a larger table, as often as SOCKETS_WALKED_PER_S allows, until
    /// one is found backed up.
    pub fn start(pid: u32, ports: Vec<u16>) -> Self {
        let found = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (found_in, stop_in) = (found.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("srvprof-sendq".into())
            .spawn(move || {
                // This thread only walks: it enters the server's namespace once.
                if !crate::sockdiag::enter_net_namespace_of(pid) {
                    return;
                }
                while !stop_in.load(Ordering::Relaxed) {
                    let backed_up = crate::sockdiag::send_queue_backed_up(
                        &ports,
                        SEND_QUEUE_BACKED_UP,
                        SEND_QUEUE_DRAIN_MS,
                    );
                    if backed_up == Some(true) {
                        found_in.store(true, Ordering::Relaxed);
                        return;
                    }
                    let sockets = crate::procfs::tcp_sockets(pid).unwrap_or(0);
                    let walk_ns = sockets * 1_000_000_000 / SOCKETS_WALKED_PER_S;
                    std::thread::park_timeout(Duration::from_nanos(
                        walk_ns.max(SEND_QUEUE_LOOK_NS),
                    ));
                }
            })
            .ok();
        Self {
            found,
            stop,
            thread,
        }
    }

    /// Whether a walk has found a backed-up connection.
    pub fn found(&self) -> bool {
        self.found.load(Ordering::Relaxed)
    }
}

impl Drop for SendQueueWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
