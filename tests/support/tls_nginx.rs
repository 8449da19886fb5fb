//! nginx with TLS for the https and HTTP/2 tests, with a CA and certificate made by openssl.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, srvprof_bin};

/// The certificate the server presents.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ServerCert {
    /// Signed by the test's CA, for localhost and 127.0.0.1, valid for two days.
    Signed,
    /// Self-signed as `openssl req -x509` makes one (CA:TRUE).
    SelfSigned,
    /// Signed by the test's CA, expired when made.
    Expired,
    /// Signed by the test's CA with CA:TRUE.
    CaTrue,
}

/// nginx serving https on 127.0.0.1, logging per request its connection, the request's number on
/// it, whether the session was resumed and the protocol; its CA, made for the test.
pub struct TlsNginx {
    pub dir: PathBuf,
    pub port: u16,
    child: Child,
}

impl TlsNginx {
    pub fn start(name: &str) -> TlsNginx {
        TlsNginx::with(name, "", 1_000_000)
    }

    /// `listen` takes more parameters (`http2`); a connection carries at most
    /// `keepalive_requests` requests (over HTTP/2 nginx then sends GOAWAY).
    pub fn with(name: &str, listen: &str, keepalive_requests: u32) -> TlsNginx {
        TlsNginx::build(name, listen, keepalive_requests, false)
    }

    /// The same, serving a self-signed certificate for 127.0.0.1 made as a user makes one
    /// (`openssl req -x509 -newkey rsa:2048 -nodes ... -addext subjectAltName=IP:127.0.0.1`:
    /// CA:TRUE, as openssl makes it); `self_signed_cert()` is its file.
    pub fn self_signed(name: &str) -> TlsNginx {
        TlsNginx::build_as(name, "", 1_000_000, false, ServerCert::SelfSigned)
    }

    /// The same, serving a certificate the test's CA signed that expired the moment it was made
    /// (`-days -1`), or one it signed with CA:TRUE (a CA certificate presented as a server's).
    pub fn serving(name: &str, cert: ServerCert) -> TlsNginx {
        TlsNginx::build_as(name, "", 1_000_000, false, cert)
    }

    /// The server's certificate file.
    pub fn server_cert(&self) -> String {
        self.dir.join("srv.crt").display().to_string()
    }

    pub fn self_signed_cert(&self) -> String {
        self.dir.join("srv.crt").display().to_string()
    }

    /// The same, asking every client for a certificate signed by the test's CA; the test's own
    /// is `client_cert()` / `client_key()`.
    pub fn with_client_auth(name: &str) -> TlsNginx {
        TlsNginx::build(name, "", 1_000_000, true)
    }

    pub fn client_cert(&self) -> String {
        self.dir.join("cli.crt").display().to_string()
    }

    pub fn client_key(&self) -> String {
        self.dir.join("cli.key").display().to_string()
    }

    fn build(name: &str, listen: &str, keepalive_requests: u32, client_auth: bool) -> TlsNginx {
        TlsNginx::build_as(
            name,
            listen,
            keepalive_requests,
            client_auth,
            ServerCert::Signed,
        )
    }

    fn build_as(
        name: &str,
        listen: &str,
        keepalive_requests: u32,
        client_auth: bool,
        cert: ServerCert,
    ) -> TlsNginx {
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
        let ca_true = if cert == ServerCert::CaTrue {
            "basicConstraints=critical,CA:TRUE\n"
        } else {
            ""
        };
        std::fs::write(
            dir.join("ext.cnf"),
            format!("subjectAltName=DNS:localhost,IP:127.0.0.1\n{ca_true}"),
        )
        .unwrap();
        let days = if cert == ServerCert::Expired {
            "-1"
        } else {
            "2"
        };
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
            days,
            "-extfile",
            "ext.cnf",
        ]);
        if client_auth {
            openssl(
                &[
                    &["req"][..],
                    &ec,
                    &[
                        "-keyout",
                        "cli.key",
                        "-out",
                        "cli.csr",
                        "-subj",
                        "/CN=srvprof test client",
                    ],
                ]
                .concat(),
            );
            std::fs::write(dir.join("cli.cnf"), "extendedKeyUsage=clientAuth\n").unwrap();
            openssl(&[
                "x509",
                "-req",
                "-in",
                "cli.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "cli.crt",
                "-days",
                "2",
                "-extfile",
                "cli.cnf",
            ]);
        }
        let port = free_port();
        let d = dir.display();
        let verify = if client_auth {
            format!("ssl_verify_client on; ssl_client_certificate {d}/ca.crt;")
        } else {
            String::new()
        };
        if cert == ServerCert::SelfSigned {
            openssl(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "srv.key",
                "-out",
                "srv.crt",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ]);
        }
        std::fs::write(
            dir.join("nginx.conf"),
            format!(
                "worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{ client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
                   log_format tls '$connection $connection_requests $ssl_session_reused $server_protocol $ssl_client_verify';\n\
                   access_log {d}/access.log tls; keepalive_requests {keepalive_requests};\n\
                   server {{ listen 127.0.0.1:{port} ssl {listen}; ssl_certificate {d}/srv.crt; ssl_certificate_key {d}/srv.key; {verify}\n\
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
        // The master listens before it forks its worker: ready is the port answering and the
        // worker there, which tests attach to.
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && !crate::children_of(child.id()).is_empty()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        TlsNginx { dir, port, child }
    }

    /// The master's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("https://localhost:{}/", self.port)
    }

    pub fn ca(&self) -> String {
        self.dir.join("ca.crt").display().to_string()
    }

    /// Per connection nginx served: (requests, whether its session was resumed).
    pub fn connections(&self) -> BTreeMap<u64, (u64, bool)> {
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

    /// How nginx judged each request's client certificate ($ssl_client_verify: SUCCESS, NONE,
    /// FAILED:...), and how many each.
    pub fn client_verify(&self) -> BTreeMap<String, u64> {
        self.log_column(4)
    }

    /// The protocols of the requests nginx logged ("HTTP/2.0", "HTTP/1.1"), and how many each.
    pub fn protocols(&self) -> BTreeMap<String, u64> {
        self.log_column(3)
    }

    /// The values of the access log's column `n` (from 0), and how many requests had each.
    fn log_column(&self, n: usize) -> BTreeMap<String, u64> {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        let mut out = BTreeMap::new();
        for line in log.lines() {
            let value = line.split_whitespace().nth(n).unwrap_or("?");
            *out.entry(value.to_string()).or_insert(0) += 1;
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

/// `srvprof load URL ARGS --out DIR`, `json` being DIR/load.json: (exit status, stdout, stderr,
/// the JSON report or null).
pub fn load(url: &str, args: &[&str], json: &Path) -> (bool, String, String, serde_json::Value) {
    assert!(json.ends_with("load.json"), "{}", json.display());
    let _ = std::fs::remove_file(json);
    let out = Command::new(srvprof_bin())
        .args(["load", url, "--threads", "1"])
        .args(args)
        .arg("--out")
        .arg(json.parent().expect("a folder"))
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
