//! `srvprof run --pyroscope URL`: the server's profile pushed to Pyroscope's ingest API, caught by
//! a receiver in the test that answers as Pyroscope does: the query names the app with the run's
//! id and the host, the measured window and the pprof format, and the body is the run folder's
//! gzip'd pprof, a Profile with samples.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use prost::Message;
use srvprof::render::pprof::proto::Profile;
use srvprof_integration::*;

/// One request as the receiver read it.
pub(crate) struct Caught {
    pub(crate) request_line: String,
    headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// A receiver on a free loopback port that takes one POST, answers 200 and hands it over.
pub(crate) fn receiver() -> (String, mpsc::Receiver<Caught>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = BufReader::new(stream);
        let mut request_line = String::new();
        reader.read_line(&mut request_line).unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
        let length: usize = (headers.iter())
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .expect("a Content-Length");
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = reader.into_inner();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        let _ = tx.send(Caught {
            request_line: request_line.trim_end().to_string(),
            headers,
            body,
        });
    });
    (url, rx)
}

/// The decoded value of each `name=value` of a query.
pub(crate) fn query_params(query: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    };
    (query.split('&'))
        .map(|p| {
            let (n, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(n), decode(v))
        })
        .collect()
}

#[test]
fn the_servers_profile_is_pushed_to_pyroscopes_ingest_with_its_run_and_window() {
    require_root();
    let (url, caught) = receiver();
    let nginx = Server::start("nginx-hello", &["--cpus", "0"]);
    let run = RunArgs::pid(nginx.pid())
        .load(4, "2s", "500ms")
        .args(&["--cpus", "1", "--run-id", "pyroscope-test"])
        .args(&["--pyroscope", &url])
        .run_ok("pyroscope");
    let request = caught
        .recv_timeout(Duration::from_secs(30))
        .expect("srvprof pushed nothing to the receiver");

    let (method_path, _) = request.request_line.rsplit_once(' ').unwrap();
    let path = method_path.strip_prefix("POST ").expect("a POST");
    let (route, query) = path.split_once('?').expect("a query");
    assert_eq!(route, "/ingest");
    let params = query_params(query);
    let param = |name: &str| {
        (params.iter().find(|(n, _)| n == name))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {name} in {query}"))
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        param("name"),
        format!("srvprof{{run=pyroscope-test,host={}}}", host.trim())
    );
    assert_eq!(run["load"]["config"]["run_id"], "pyroscope-test");
    assert_eq!(param("format"), "pprof");
    let (from, until): (u64, u64) = (
        param("from").parse().unwrap(),
        param("until").parse().unwrap(),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // The measured window: 2 s, ended before the push.
    assert!(
        (2..=4).contains(&(until - from)),
        "from {from} until {until}"
    );
    assert!(
        until <= now + 1 && now - from < 120,
        "from {from} until {until}, now {now}"
    );
    let content_type = (request.headers.iter())
        .find(|(n, _)| n == "content-type")
        .map(|(_, v)| v.as_str());
    assert_eq!(content_type, Some("application/octet-stream"));

    // The body is the run folder's profile, gzip'd pprof with the server's samples.
    let written = std::fs::read(run_dir("pyroscope").join("profile-server.pb.gz")).unwrap();
    assert_eq!(request.body, written);
    assert_eq!(&request.body[..2], &[0x1f, 0x8b], "gzip");
    let mut pprof = Vec::new();
    flate2::read::GzDecoder::new(request.body.as_slice())
        .read_to_end(&mut pprof)
        .unwrap();
    let profile = Profile::decode(pprof.as_slice()).expect("a pprof Profile");
    assert!(!profile.sample.is_empty(), "no samples");
    let types: Vec<&str> = (profile.sample_type.iter())
        .map(|t| profile.string_table[t.r#type as usize].as_str())
        .collect();
    assert!(types.contains(&"cpu"), "{types:?}");
    let on_cpu: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    assert!(on_cpu > 0, "nginx under load was sampled on the CPU");
}
