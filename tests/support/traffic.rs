//! Load shapes for tests that compare figures across tools: steady (wrk) and bursty (ab bursts at
//! random times with idle gaps). Every run is bounded in requests and in time.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to its end, killing it and failing if it takes longer than `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {:?}: {e}", cmd.get_program()));
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().expect("collect output")
}

/// A small deterministic generator (xorshift64*), so a failing shape can be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A seed from the clock, or SRVPROF_TEST_SEED when set (to replay a run).
    pub fn seed_from_env_or_clock() -> u64 {
        std::env::var("SRVPROF_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What a load shape did, for the test's report.
#[derive(Debug, Default)]
pub struct LoadDone {
    pub requests: u64,
    /// (start, length) of each burst, from the shape's start; one entry for steady load.
    pub bursts: Vec<(Duration, Duration)>,
    pub elapsed: Duration,
}

/// Steady load: `wrk -t1 -cCONNS -dSECS` pinned to `cpu`, keep-alive. Bounded by wrk's own
/// duration (and killed if it overruns by 10 s).
pub fn steady_wrk(url: &str, connections: u32, secs: u32, cpu: &str) -> LoadDone {
    let started = Instant::now();
    let out = output_within(
        Command::new("taskset")
            .args(["-c", cpu, "wrk", "-t1"])
            .arg(format!("-c{connections}"))
            .arg(format!("-d{secs}s"))
            .arg(url),
        Duration::from_secs(u64::from(secs) + 10),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "74866 requests in 2.03s, 10.85MB read"
    let requests = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("wrk printed no request count: {text}"));
    assert!(
        !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "wrk saw errors: {text}"
    );
    let elapsed = started.elapsed();
    LoadDone {
        requests,
        bursts: vec![(Duration::ZERO, elapsed)],
        elapsed,
    }
}

/// How many requests make a burst of `ab -k -c 20` last about `target` on this machine now: one
/// calibration burst of 5000, scaled, within 500..=5000. (5000 take 67 ms on a quiet machine here
/// and 200 ms while other jobs share its two CPUs; tracing makes a burst some 10-40 % longer.)
pub fn ab_burst_size(url: &str, target: Duration, cpu: &str) -> u32 {
    let started = Instant::now();
    let out = output_within(
        Command::new("taskset")
            .args(["-c", cpu, "ab", "-q", "-k", "-c", "20", "-n", "5000"])
            .arg(url),
        Duration::from_secs(5),
    );
    assert!(
        out.status.success(),
        "ab failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let took = started.elapsed();
    (5000.0 * target.as_secs_f64() / took.as_secs_f64()).clamp(500.0, 5000.0) as u32
}

/// Bursty load: up to `bursts` runs of `ab -k -c 20 -n REQUESTS` (see [`ab_burst_size`]),
/// pinned to `cpu`, each after an idle gap drawn uniformly from `gap_ms`, all within `budget`:
/// a burst that could not finish before it is not started. Each burst must complete all its
/// requests without failure.
pub fn ab_bursts(
    url: &str,
    bursts: u32,
    requests: u32,
    gap_ms: (f64, f64),
    budget: Duration,
    cpu: &str,
    rng: &mut Rng,
) -> LoadDone {
    let started = Instant::now();
    let mut done = LoadDone::default();
    // A burst takes well under a second here; refuse to start one closer than that to the end.
    let burst_limit = Duration::from_secs(1);
    for _ in 0..bursts {
        let gap = Duration::from_secs_f64(rng.uniform(gap_ms.0, gap_ms.1) / 1e3);
        if started.elapsed() + gap + burst_limit > budget {
            break;
        }
        std::thread::sleep(gap);
        let burst_start = started.elapsed();
        let out = output_within(
            Command::new("taskset")
                .args(["-c", cpu, "ab", "-q", "-k", "-c", "20", "-n"])
                .arg(requests.to_string())
                .arg(url),
            burst_limit,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "ab failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("ab printed no {name}: {text}"))
        };
        assert_eq!(field("Complete requests:"), u64::from(requests), "{text}");
        assert_eq!(field("Failed requests:"), 0, "{text}");
        done.requests += u64::from(requests);
        done.bursts
            .push((burst_start, started.elapsed() - burst_start));
    }
    done.elapsed = started.elapsed();
    done
}
