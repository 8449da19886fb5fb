//! https against nginx with a certificate the test makes with openssl (its own CA): every TLS
//! handshake srvprof counts, and each resumed one, is one nginx logged ($connection,
//! $ssl_session_reused); a handshake that cannot succeed is one sentence with the fix, before
//! the run.

use srvprof_integration::tls_nginx::{TlsNginx, load};
use srvprof_integration::*;

/// What srvprof counted against what nginx logged: handshakes are connections, resumed ones
/// those whose session nginx reused.
fn handshakes_match(nginx: &TlsNginx, report: &serde_json::Value) -> (u64, u64) {
    let tls = &report["tls"];
    let (ours, ours_resumed) = (
        tls["handshakes"].as_u64().unwrap(),
        tls["resumed"].as_u64().unwrap(),
    );
    let conns = nginx.connections();
    let theirs = conns.len() as u64;
    let theirs_resumed = conns.values().filter(|(_, r)| *r).count() as u64;
    let requests: u64 = conns.values().map(|(n, _)| n).sum();
    eprintln!(
        "srvprof: {ours} handshakes, {ours_resumed} resumed; nginx: {theirs} connections, {theirs_resumed} resumed, {requests} requests"
    );
    assert_eq!(requests, report["completed"].as_u64().unwrap());
    assert_eq!((ours, ours_resumed), (theirs, theirs_resumed));
    (ours, ours_resumed)
}

#[test]
fn keepalive_https_handshakes_once_per_connection_as_nginx_counts() {
    require_root();
    let nginx = TlsNginx::start("keepalive");
    let json = nginx.dir.join("load.json");
    let (ok, stdout, stderr, report) = load(
        &nginx.url(),
        &["--cacert", &nginx.ca(), "-c", "4", "-n", "2000"],
        &json,
    );
    assert!(ok, "{stderr}");
    assert_eq!(
        (report["completed"].as_u64(), report["errors"].as_u64()),
        (Some(2000), Some(0))
    );
    let (handshakes, _) = handshakes_match(&nginx, &report);
    assert_eq!(handshakes, 4);
    assert!(stdout.contains("4 TLS handshakes"), "{stdout}");
}

#[test]
fn a_new_connection_per_request_pays_a_handshake_each_resumed_or_not() {
    require_root();
    for (resumption, name) in [("on", "resume-on"), ("off", "resume-off")] {
        let nginx = TlsNginx::start(name);
        let json = nginx.dir.join("load.json");
        let (ok, _, stderr, report) = load(
            &nginx.url(),
            &[
                "--cacert",
                &nginx.ca(),
                "-c",
                "2",
                "-n",
                "300",
                "--no-keepalive",
                "--tls-resumption",
                resumption,
            ],
            &json,
        );
        assert!(ok, "{stderr}");
        assert_eq!(report["completed"].as_u64(), Some(300), "{report}");
        let (handshakes, resumed) = handshakes_match(&nginx, &report);
        assert_eq!(handshakes, 300);
        if resumption == "on" {
            // The check before the run leaves a session ticket: every connection can resume.
            assert!(resumed >= 250, "{resumed} of 300 resumed");
        } else {
            assert_eq!(resumed, 0);
        }
        assert!(report["tls"]["handshake_us"]["p50"].as_u64().unwrap() > 0);
    }
}

#[test]
fn a_handshake_that_cannot_succeed_is_one_sentence_with_the_fix() {
    require_root();
    let nginx = TlsNginx::start("refused");
    let json = nginx.dir.join("load.json");
    // The test's CA is not among the system's.
    let (ok, _, stderr, report) = load(&nginx.url(), &["-n", "10"], &json);
    assert!(!ok && report.is_null());
    assert!(
        stderr.contains("not signed by a CA this client trusts") && stderr.contains("--cacert"),
        "{stderr}"
    );
    // A name the certificate was not issued for.
    let (ok, _, stderr, _) = load(
        &nginx.url(),
        &[
            "-n",
            "10",
            "--cacert",
            &nginx.ca(),
            "--sni",
            "wrong.example",
        ],
        &json,
    );
    assert!(!ok);
    assert!(stderr.contains("not valid for `wrong.example`"), "{stderr}");
    // --insecure accepts it, and the handshake is the real one.
    let (ok, _, stderr, report) = load(&nginx.url(), &["-n", "10", "-c", "1", "--insecure"], &json);
    assert!(ok, "{stderr}");
    assert_eq!(report["tls"]["handshakes"].as_u64(), Some(1));
    // https to a port that speaks plain HTTP.
    let plain = Server::start("nginx-hello", &[]);
    let url = plain.url().replacen("http://", "https://", 1);
    let (ok, _, stderr, _) = load(&url, &["-n", "10"], &json);
    assert!(!ok);
    assert!(
        stderr.contains("TLS") && stderr.lines().count() <= 2,
        "{stderr}"
    );
    // No request reached nginx in the refused runs.
    assert_eq!(
        nginx.connections().values().map(|(n, _)| n).sum::<u64>(),
        10
    );
}
