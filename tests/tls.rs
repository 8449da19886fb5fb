//! https against nginx with a certificate the test makes with openssl (its own CA): every TLS
//! handshake srvprof counts, and each resumed one, is one nginx logged ($connection,
//! $ssl_session_reused); a handshake that cannot succeed is one sentence with the fix, before
//! the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use srvprof_integration::*;

/// nginx serving https on 127.0.0.1, logging per request its connection, the request's number on
/// it and whether the session was resumed; its CA, made for the test.
struct TlsNginx {
    dir: PathBuf,
    port: u16,
    child: Child,
}

impl TlsNginx {
    fn start(name: &str) -> TlsNginx {
        let dir = std::env::temp_dir().join(format!("srvprof-tls-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=srvprof test CA",
                ],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    "srv.key",
                    "-out",
                    "srv.csr",
                    "-subj",
                    "/CN=localhost",
                ],
            ]
            .concat(),
        );
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ]);
        let port = free_port();
        let d = dir.display();
        std::fs::write(
            dir.join("nginx.conf"),
            format!(
                "worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{ client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
                   log_format tls '$connection $connection_requests $ssl_session_reused';\n\
                   access_log {d}/access.log tls; keepalive_requests 1000000;\n\
                   server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {d}/srv.crt; ssl_certificate_key {d}/srv.key;\n\
                     location / {{ return 200 \"hello\"; }} }} }}\n"
            ),
        )
        .unwrap();
        let child = Command::new("/usr/sbin/nginx")
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-p")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..50 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        TlsNginx { dir, port, child }
    }

    fn url(&self) -> String {
        format!("https://localhost:{}/", self.port)
    }

    fn ca(&self) -> String {
        self.dir.join("ca.crt").display().to_string()
    }

    /// Per connection nginx served: (requests, whether its session was resumed).
    fn connections(&self) -> BTreeMap<u64, (u64, bool)> {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        let mut out = BTreeMap::new();
        for line in log.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (conn, reused) = (f[0].parse().unwrap(), f[2] == "r");
            let e = out.entry(conn).or_insert((0, reused));
            e.0 += 1;
        }
        out
    }
}

impl Drop for TlsNginx {
    fn drop(&mut self) {
        // SAFETY: the master stops its worker on SIGTERM.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// `srvprof load URL ARGS --out FILE`: (exit status, stdout, stderr, the JSON report or null).
fn load(url: &str, args: &[&str], json: &Path) -> (bool, String, String, serde_json::Value) {
    let out = Command::new(srvprof_bin())
        .args(["load", url, "--threads", "1"])
        .args(args)
        .arg("--out")
        .arg(json)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(json)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        report,
    )
}

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
