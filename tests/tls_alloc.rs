//! Allocations per request of the built-in HTTP/1.1 client over TLS, after the handshakes:
//! a counting allocator (this test binary's own, process-wide) sees the load generator run
//! in this process against nginx over https with keep-alive; the difference between a run of
//! N and of 3N requests, over 2N, is what one more request costs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use srvprof_integration::require_root;
use srvprof_integration::tls_nginx::TlsNginx;
use srvprof_loadgen::{LoadConfig, TlsOptions};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_for(nginx: &TlsNginx, n: u64) -> u64 {
    let config = LoadConfig {
        url: nginx.url(),
        connections: 4,
        threads: 1,
        requests: Some(n),
        duration: None,
        timeout: Duration::from_secs(10),
        tls: TlsOptions {
            cacert: Some(nginx.dir.join("ca.crt")),
            resumption: true,
            ..Default::default()
        },
        ..LoadConfig::default()
    };
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let r = srvprof_loadgen::run(&config, Arc::new(AtomicBool::new(false))).unwrap();
    assert_eq!(r.completed, n);
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn allocations_per_request_over_tls_after_the_handshake() {
    require_root();
    let nginx = TlsNginx::start("tls-alloc");
    let small = allocations_for(&nginx, 2_000);
    let large = allocations_for(&nginx, 6_000);
    let per_request = (large as f64 - small as f64) / 4_000.0;
    eprintln!(
        "{small} allocations for 2,000 requests, {large} for 6,000: {per_request:.2} per request"
    );
    // rustls' buffered connection allocates a record buffer for each record it writes and each
    // it reads: about 2 per request; the built-in client itself allocates none (tests in
    // crates/loadgen/tests/no_alloc.rs). A third would be a regression of ours.
    assert!(
        per_request <= 2.5,
        "{per_request:.2} allocations per request"
    );
}
