//! What TLS costs a run: handshakes per request and the server's CPU in TLS code.

use crate::finding::{Finding, FindingKind, Severity};
use crate::run_report::RunReport;

/// From this many handshakes per completed request, each request pays for a connection's TLS
/// setup (a new connection per request makes 1)...
pub const HANDSHAKES_PER_REQUEST: f64 = 0.5;
/// ...or from this share of the server's on-CPU samples in TLS code, TLS is a cost to name.
pub const TLS_CPU_SHARE: f64 = 0.2;
/// The share is judged on at least this many server samples.
pub const MIN_SAMPLES: u64 = 50;

/// An https run whose requests each paid a handshake, or whose server spent a large share of
/// its CPU in TLS code: the handshakes (resumed or full) and their time against the request's,
/// the server's share in TLS code and its top functions, and what to change.
pub fn tls_cost(r: &RunReport) -> Option<Finding> {
    let load = &r.load;
    let tls = load.tls.as_ref()?;
    if load.completed == 0 {
        return None;
    }
    let per_request = tls.handshakes as f64 / load.completed as f64;
    let cpu = (r.tls_cpu.iter()).find(|t| t.group == "server" && t.samples >= MIN_SAMPLES);
    let share = cpu.map_or(0.0, |c| c.share);
    if per_request < HANDSHAKES_PER_REQUEST && share < TLS_CPU_SHARE {
        return None;
    }
    let resumed = tls.resumed as f64 / tls.handshakes.max(1) as f64;
    let (hs_p50, hs_p99) = (
        tls.handshake_us.p50 as f64 / 1e3,
        tls.handshake_us.p99 as f64 / 1e3,
    );
    let lat_p50 = load.latency_us.p50 as f64 / 1e3;
    let cpu_phrase = match cpu {
        Some(c) if c.tls_samples > 0 => format!(
            "; the server spent {:.0}% of its on-CPU samples in TLS code ({})",
            c.share * 100.0,
            c.top.join(", ")
        ),
        Some(c) => format!(
            "; none of the server's {} on-CPU samples ran TLS code",
            c.samples
        ),
        None => String::new(),
    };
    let fix = if per_request >= HANDSHAKES_PER_REQUEST && resumed < 0.5 {
        "Fix: keep connections alive, so a handshake serves many requests, and let sessions resume (server: session tickets or a session cache; client: --tls-resumption on)"
    } else if per_request >= HANDSHAKES_PER_REQUEST {
        "Fix: keep connections alive, so a handshake serves many requests"
    } else {
        "Fix: cheaper ciphers or keys (ECDSA certificates, AES-GCM with AES-NI), or TLS ended by a proxy on other CPUs"
    };
    let mut finding = Finding::new(
        FindingKind::TlsCost,
        Severity::Warning,
        format!(
            "TLS: {} handshakes for {} requests ({per_request:.2} per request, {:.0}% resumed), each taking {hs_p50:.2} ms at the median against a request's {lat_p50:.2} ms{cpu_phrase}. {fix}",
            tls.handshakes,
            load.completed,
            resumed * 100.0
        ),
        &[
            ("handshakes_per_request", per_request),
            ("resumed_share", resumed),
            ("handshake_p50_ms", hs_p50),
            ("handshake_p99_ms", hs_p99),
            ("server_tls_cpu_share", share),
        ],
    );
    if per_request >= HANDSHAKES_PER_REQUEST {
        finding = finding.explaining(hs_p99, load.latency_us.p99 as f64 / 1e3);
    }
    Some(finding)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::test_support::*;
    use crate::tls_code::TlsCpu;

    tables!(tls_cost_table);

    /// An https run of 10,000 requests with `handshakes` handshakes (`resumed` of them resumed)
    /// and the server's share of samples in TLS code.
    fn https(handshakes: u64, resumed: u64, server_share: Option<f64>) -> RunReport {
        let mut r = quiet_run();
        r.load.completed = 10_000;
        r.load.tls = Some(srvprof_loadgen::TlsSummary {
            handshakes,
            resumed,
            ..Default::default()
        });
        if let Some(share) = server_share {
            r.tls_cpu.push(TlsCpu {
                group: "server".into(),
                samples: 1000,
                tls_samples: (share * 1000.0) as u64,
                share,
                top: vec!["EVP_EncryptUpdate".into()],
            });
        }
        r
    }

    fn tls_cost_table() -> Table {
        let cost = |per_request: f64, share: f64| {
            finds(
                FindingKind::TlsCost,
                Severity::Warning,
                &[
                    ("handshakes_per_request", per_request),
                    ("server_tls_cpu_share", share),
                ],
            )
        };
        #[rustfmt::skip]
        let cases = [
            ("plain http", quiet_run(), nothing()),
            ("keep-alive, little TLS CPU", https(4, 0, Some(0.05)), nothing()),
            ("a handshake per request", https(10_000, 9_990, Some(0.1)), cost(1.0, 0.1)),
            ("just below half a handshake per request", https(4_999, 0, None), nothing()),
            ("half a handshake per request", https(5_000, 0, None), cost(0.5, 0.0)),
            ("keep-alive, much TLS CPU", https(4, 0, Some(0.35)), cost(0.0004, 0.35)),
            ("keep-alive, just below the CPU share", https(4, 0, Some(0.19)), nothing()),
        ];
        Table::new(tls_cost, cases)
    }
}
