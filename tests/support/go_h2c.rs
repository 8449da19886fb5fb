//! tests/fixtures/h2c, Go's net/http with HTTP/2 over cleartext, built and started by a test.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, spawn_in_own_group, target_dir, workspace_root};

/// tests/fixtures/h2c: Go's net/http with HTTP/2 over cleartext, answering after `delay`, and
/// counting what it served at /stats (over HTTP/1.1).
pub struct GoH2c {
    child: Child,
    pub port: u16,
}

impl GoH2c {
    pub fn start(delay: &str) -> GoH2c {
        let src = workspace_root().join("tests/fixtures/h2c");
        let bin = target_dir().join("h2c-server");
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(&src)
            .env("PATH", go_path())
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=mod -buildvcs=false")
            .output()
            .expect("go build");
        assert!(
            out.status.success(),
            "go build tests/fixtures/h2c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let child = spawn_in_own_group(
            Command::new(&bin)
                .args(["--port", &port.to_string(), "--delay", delay])
                .stdout(Stdio::null()),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the h2c server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        GoH2c { child, port }
    }

    /// /stats over HTTP/1.1: requests served over HTTP/2, their connections, the most streams
    /// one connection had in the handler at once.
    pub fn stats(&self) -> serde_json::Value {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.write_all(b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

impl Drop for GoH2c {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// PATH with Go's usual homes.
fn go_path() -> String {
    format!(
        "/usr/local/go/bin:/usr/lib/go/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    )
}
