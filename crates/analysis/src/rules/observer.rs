//! What watching cost, when it is a material part of the latency it explains.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// The probes' run time over the server's CPU time: every request's work is stretched by about
/// this share, and a loaded server's latency with it.
pub const MATERIAL_CPU_SHARE: f64 = 0.05;
/// The share of requests in flight while one of srvprof's flips held a CPU (flips a second ×
/// (a request's mean latency + a flip's mean length)): from here on, p99 can be made of them...
pub const MATERIAL_REQUESTS_MET: f64 = 0.01;
/// ...when a flip is this long next to p99.
pub const MATERIAL_FLIP_OF_P99: f64 = 0.1;

/// The probes took a material share of the server's CPU, or srvprof's own attaches and detaches
/// met enough requests, long enough, to be in p99.
pub fn observer_cost(r: &RunReport) -> Option<Finding> {
    let o = r.observer.as_ref()?;
    let lat = &r.load.latency_us;
    let p99_us = lat.p99 as f64;
    let share = o.share_of_server_cpu.unwrap_or(0.0);
    let met = o.flips_per_s * (lat.mean + o.flip_mean_us) / 1e6;
    let stalls = p99_us > 0.0
        && met >= MATERIAL_REQUESTS_MET
        && o.flip_max_us >= MATERIAL_FLIP_OF_P99 * p99_us;
    let heavy = share >= MATERIAL_CPU_SHARE;
    if !heavy && !stalls {
        return None;
    }
    let mut parts = Vec::new();
    if heavy {
        let top = o.programs.first().map_or(String::new(), |p| {
            format!(
                " (most in {}: {:.0} calls/s of {:.0} ns)",
                p.program, p.calls_per_s, p.ns_per_call
            )
        });
        parts.push(format!(
            "its probes ran {} per request, {:.1}% of the server's CPU time{top}, so the server's work and its latency here read up to about that much higher than unwatched",
            o.bpf_us_per_request
                .map_or("?".into(), |us| format!("{us:.2} us")),
            share * 100.0
        ));
    }
    if stalls {
        parts.push(format!(
            "its {:.1} program attaches and detaches a second each held a CPU up to {:.2} ms against a p99 of {:.2} ms, in flight for {:.1}% of requests",
            o.flips_per_s,
            o.flip_max_us / 1e3,
            p99_us / 1e3,
            met * 100.0
        ));
    }
    Some(Finding::new(
        FindingKind::ObserverCost,
        Severity::Warning,
        format!(
            "watching cost the server: {} (--stacks off and --syscalls off cost less)",
            parts.join("; and ")
        ),
        &[
            ("share_of_server_cpu", share),
            ("bpf_us_per_request", o.bpf_us_per_request.unwrap_or(0.0)),
            ("flips_per_s", o.flips_per_s),
            ("flip_max_us", o.flip_max_us),
            ("requests_met_by_flips", met),
        ],
    ))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::observer::ObserverCost;
    use crate::rules::test_support::*;

    tables!(observer_cost_table);

    /// A quiet run (p99 1 ms, mean 0 here) watched at `share` of the server's CPU, with `flips`
    /// a second of `flip_us` each.
    fn watched(share: f64, flips: f64, flip_us: f64) -> RunReport {
        let mut r = quiet_run();
        r.load.latency_us.mean = 500.0;
        r.observer = Some(ObserverCost {
            timed_s: 1.0,
            share_of_server_cpu: Some(share),
            bpf_us_per_request: Some(share * 1000.0),
            flips_per_s: flips,
            flip_max_us: flip_us,
            flip_mean_us: flip_us,
            ..Default::default()
        });
        r
    }

    fn observer_cost_table() -> Table {
        let costs = |evidence: &'static [(&'static str, f64)]| {
            finds(FindingKind::ObserverCost, Severity::Warning, evidence)
        };
        // 20 flips/s × (500 + 200 µs) = 1.4 % of requests; 2/s = 0.14 %.
        #[rustfmt::skip]
        let cases = [
            ("not timed", quiet_run(), nothing()),
            ("cheap and rare", watched(0.02, 2.0, 200.0), nothing()),
            ("just under the CPU share", watched(0.0499, 0.0, 0.0), nothing()),
            ("a material CPU share", watched(0.05, 0.0, 0.0), costs(&[("share_of_server_cpu", 0.05)])),
            ("flips meeting 1.4% of requests", watched(0.01, 20.0, 200.0), costs(&[("flips_per_s", 20.0)])),
            ("as many flips, too short for p99", watched(0.01, 20.0, 90.0), nothing()),
            ("long flips, too rare for p99", watched(0.01, 2.0, 200.0), nothing()),
        ];
        Table::new(observer_cost, cases)
    }
}
