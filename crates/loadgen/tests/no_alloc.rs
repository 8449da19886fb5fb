//! The built-in client's request loop allocates nothing per request: a counting allocator sees
//! the same number of allocations for 2,000 and for 20,000 requests, give or take the
//! per-interval and per-run work. (Its own test binary: the allocator is process-wide.)

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use srvprof_loadgen::{Engine, LoadConfig};
use support::{Behaviour, TestServer, config, run};

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

/// Allocations (client and test server together) during a keep-alive run of `n` requests.
fn allocations_for(server: &TestServer, engine: Engine, n: u64) -> u64 {
    allocations_at(server, engine, n, None)
}

/// The same, open loop at `rate` requests per second when given.
fn allocations_at(server: &TestServer, engine: Engine, n: u64, rate: Option<f64>) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let r = run(&LoadConfig {
        connections: 10,
        threads: 1,
        requests: Some(n),
        duration: None,
        rate: rate.map(srvprof_loadgen::rate::RateSchedule::steady),
        engine,
        ..config(&server.url())
    });
    assert_eq!(r.completed, n);
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn builtin_client_allocates_nothing_per_request() {
    // The server answers without timers, so it allocates nothing per request either.
    let server = TestServer::start(Behaviour::Delay(Duration::ZERO));
    let small = allocations_for(&server, Engine::Builtin, 2_000);
    let large = allocations_for(&server, Engine::Builtin, 20_000);
    let per_request = large.saturating_sub(small) as f64 / 18_000.0;
    eprintln!("builtin: {small} allocations for 2000 requests, {large} for 20000");
    assert!(per_request < 0.01, "{per_request} allocations per request");

    // Open loop: the schedule (one timer per thread) allocates nothing per request either.
    let rate = Some(40_000.0);
    let small = allocations_at(&server, Engine::Builtin, 2_000, rate);
    let large = allocations_at(&server, Engine::Builtin, 20_000, rate);
    let per_request = large.saturating_sub(small) as f64 / 18_000.0;
    eprintln!("builtin open loop: {small} allocations for 2000 requests, {large} for 20000");
    assert!(per_request < 0.01, "{per_request} allocations per request");

    // For contrast, hyper's client allocates on every request.
    let small = allocations_for(&server, Engine::Hyper, 2_000);
    let large = allocations_for(&server, Engine::Hyper, 20_000);
    let per_request = large.saturating_sub(small) as f64 / 18_000.0;
    eprintln!("hyper: {per_request:.1} allocations per request");
    assert!(per_request >= 1.0, "{per_request} allocations per request");
}
