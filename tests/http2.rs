//! HTTP/2 (`--http2`) against servers the tests start: nginx over TLS (ALPN h2), and Go's
//! net/http over cleartext with prior knowledge (h2c), an HTTP/2 implementation independent of
//! the h2 crate srvprof uses. Every request srvprof counts is one the server logged, on as many
//! connections as srvprof says it opened; `--streams N` puts N requests in flight at once on each
//! connection, as the server counts them; a GOAWAY that cuts streams short is an error of its
//! own kind; a server without HTTP/2 is one sentence before the run.

use std::path::PathBuf;

use srvprof_integration::go_h2c::GoH2c;
use srvprof_integration::tls_nginx::{TlsNginx, load};
use srvprof_integration::*;

fn json_path(name: &str) -> PathBuf {
    let dir = fresh_run_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("load.json")
}

#[test]
fn h2_over_tls_carries_every_request_nginx_logs_on_the_connections_srvprof_opened() {
    require_root();
    for streams in ["1", "10"] {
        let nginx = TlsNginx::with(&format!("h2-{streams}"), "http2", 1_000_000);
        let json = nginx.dir.join("load.json");
        let (ok, stdout, stderr, report) = load(
            &nginx.url(),
            &[
                "--http2",
                "--cacert",
                &nginx.ca(),
                "-c",
                "2",
                "--streams",
                streams,
                "-n",
                "3000",
            ],
            &json,
        );
        assert!(ok, "{stderr}");
        eprintln!("--streams {streams}: {stdout}");
        assert_eq!(
            (report["completed"].as_u64(), report["errors"].as_u64()),
            (Some(3000), Some(0)),
            "{report}"
        );
        assert_eq!(report["config"]["protocol"], "h2");
        assert_eq!(
            report["config"]["streams"].as_u64(),
            Some(streams.parse().unwrap())
        );
        // Every request nginx logged came over HTTP/2, on the connections srvprof opened.
        let protocols = nginx.protocols();
        assert_eq!(protocols.get("HTTP/2.0"), Some(&3000), "{protocols:?}");
        assert_eq!(protocols.len(), 1, "{protocols:?}");
        let connections = nginx.connections().len() as u64;
        assert_eq!(connections, 2);
        assert_eq!(report["connections_opened"].as_u64(), Some(connections));
        assert_eq!(report["tls"]["handshakes"].as_u64(), Some(connections));
    }
}

#[test]
fn h2c_streams_are_in_flight_together_as_the_go_server_counts_them() {
    require_root();
    for streams in [1u64, 8] {
        // Each answer takes 20 ms: only requests in flight together finish faster than 50/s.
        let server = GoH2c::start("20ms");
        let url = format!("http://127.0.0.1:{}/", server.port);
        let json = json_path(&format!("h2c-{streams}"));
        let n = 100 * streams;
        let (ok, stdout, stderr, report) = load(
            &url,
            &[
                "--http2",
                "-c",
                "2",
                "--streams",
                &streams.to_string(),
                "-n",
                &n.to_string(),
            ],
            &json,
        );
        assert!(ok, "{stderr}");
        let stats = server.stats();
        eprintln!("--streams {streams}: server {stats}; {stdout}");
        assert_eq!(report["config"]["protocol"], "h2c");
        assert_eq!(report["completed"].as_u64(), Some(n), "{report}");
        assert_eq!(stats["h2_requests"].as_u64(), Some(n));
        assert_eq!(stats["connections"].as_u64(), Some(2));
        assert_eq!(report["connections_opened"].as_u64(), Some(2));
        assert_eq!(stats["max_streams"].as_u64(), Some(streams));
        // 2 connections x N streams of 20 ms answers: about 100 x N per second.
        let rps = report["throughput_rps"].as_f64().unwrap();
        let ideal = 100.0 * streams as f64;
        assert!(
            rps > 0.6 * ideal && rps < 1.05 * ideal,
            "{rps} req/s, ideal {ideal}"
        );
    }
}

#[test]
fn streams_a_graceful_goaway_refused_go_again_and_none_is_lost() {
    require_root();
    // nginx ends each HTTP/2 connection with a graceful GOAWAY after 50 requests; streams the
    // client had sent past that were not processed (RFC 9113 8.7) and go again.
    let nginx = TlsNginx::with("h2-goaway", "http2", 50);
    let json = nginx.dir.join("load.json");
    let (ok, stdout, stderr, report) = load(
        &nginx.url(),
        &[
            "--http2",
            "--cacert",
            &nginx.ca(),
            "-c",
            "1",
            "--streams",
            "10",
            "-n",
            "1000",
        ],
        &json,
    );
    assert!(ok, "{stderr}");
    eprintln!("{stdout}");
    let per_connection = nginx.connections();
    let served: u64 = per_connection.values().map(|(n, _)| n).sum();
    let connections = per_connection.len() as u64;
    eprintln!(
        "nginx served {served} on {connections} connections; srvprof {}",
        report["http2"]
    );
    assert_eq!(
        (report["completed"].as_u64(), report["errors"].as_u64()),
        (Some(1000), Some(0)),
        "{}",
        report["errors_by_kind"]
    );
    assert_eq!(served, 1000);
    assert_eq!(connections, 1000 / 50);
    assert!(per_connection.values().all(|(n, _)| *n == 50));
    assert_eq!(report["connections_opened"].as_u64(), Some(connections));
    // Ten streams in flight when each GOAWAY came: some were past it.
    let retried = report["http2"]["retried_after_goaway"].as_u64().unwrap();
    assert!(retried > 0 && retried < 1000, "{retried}");
}

#[test]
fn streams_the_server_resets_are_errors_of_their_kind() {
    require_root();
    let server = GoH2c::start("0s");
    let url = format!("http://127.0.0.1:{}/abort", server.port);
    let json = json_path("h2c-abort");
    let (ok, stdout, stderr, report) = load(
        &url,
        &["--http2", "-c", "1", "--streams", "4", "-n", "40"],
        &json,
    );
    // Nothing succeeded: a failed run, with its report.
    assert!(!ok && stderr.contains("no request succeeded"), "{stderr}");
    let stats = server.stats();
    eprintln!("server {stats}; {stdout}");
    assert_eq!(report["completed"].as_u64(), Some(0));
    assert_eq!(report["errors_by_kind"]["stream_reset"].as_u64(), Some(40));
    assert_eq!(stats["aborted"].as_u64(), Some(40));
    assert!(
        stdout.contains("stream_reset: the server reset HTTP/2 streams"),
        "{stdout}"
    );
}

#[test]
fn a_server_without_http2_is_one_sentence_before_the_run() {
    require_root();
    // TLS without h2 in ALPN.
    let nginx = TlsNginx::start("h2-absent");
    let json = nginx.dir.join("load.json");
    let (ok, _, stderr, report) = load(
        &nginx.url(),
        &["--http2", "--cacert", &nginx.ca(), "-n", "10"],
        &json,
    );
    assert!(!ok && report.is_null());
    assert!(
        stderr.contains("did not choose HTTP/2 in the TLS handshake (ALPN: http/1.1)")
            && stderr.contains("drop --http2"),
        "{stderr}"
    );
    // Cleartext HTTP/1.1 only.
    let plain = Server::start("nginx-hello", &[]);
    let (ok, _, stderr, _) = load(&plain.url(), &["--http2", "-n", "10"], &json);
    assert!(!ok);
    assert!(
        stderr.contains("does not speak HTTP/2 over cleartext") && stderr.lines().count() <= 2,
        "{stderr}"
    );
    // Options that need HTTP/2 or keep-alive.
    let (ok, _, stderr, _) = load(&plain.url(), &["--streams", "4", "-n", "10"], &json);
    assert!(
        !ok && stderr.contains("--streams needs --http2"),
        "{stderr}"
    );
    // No request of the refused runs reached nginx.
    assert_eq!(nginx.connections().len(), 0);
}

/// `srvprof run` drives HTTP/2 with its probes attached: its per-request figures give the
/// streams per connection and the requests each connection carried, as nginx logged them.
#[test]
fn srvprof_run_over_http2_gives_streams_and_requests_per_connection_as_nginx_logs_them() {
    require_root();
    let nginx = TlsNginx::with("h2-run", "http2", 1_000_000);
    let (url, ca) = (nginx.url(), nginx.ca());
    let run = RunArgs::pid(nginx.pid())
        .load(2, "3s", "0s")
        .args(&["--url", &url, "--cacert", &ca, "--http2", "--streams", "8"])
        .run_ok("h2-run");
    let per_request = &run["per_request"];
    let logged = nginx.connections();
    let completed = run["load"]["completed"].as_u64().unwrap();
    let served: u64 = logged.values().map(|(n, _)| n).sum();
    eprintln!(
        "{per_request}; nginx {served} requests on {} connections",
        logged.len()
    );
    assert_eq!(run["load"]["config"]["protocol"], "h2");
    assert_eq!(per_request["streams_per_connection"].as_u64(), Some(8));
    assert_eq!(logged.len(), 2);
    // nginx logs requests in flight when the window closed as well: those are srvprof's
    // unfinished ones.
    let unfinished = run["load"]["unfinished"].as_u64().unwrap();
    assert!(
        served >= completed && served <= completed + unfinished + 16,
        "{served} vs {completed}"
    );
    let per_connection = per_request["requests_per_connection"].as_f64().unwrap();
    assert!(
        (per_connection - completed as f64 / 2.0).abs() < 1.0,
        "{per_connection}"
    );
    assert!(
        (per_request["tls_handshakes"].as_f64().unwrap() - 2.0 / completed as f64).abs() < 1e-6
    );
}
