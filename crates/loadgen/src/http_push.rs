//! A bounded HTTP POST to a store users already have (Prometheus's remote write, Pyroscope's
//! ingest): http or https (rustls, trusting the system's CAs and those of `--cacert`), with
//! basic auth or a bearer token from push_auth.rs, one connection per push, hyper's client, and
//! the answer read up to [`ANSWER_CAP`].

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::LoadError;
use crate::push_auth::{AuthSource, PushAuth};

/// The receiver's answer quoted in a failure, at most this many bytes of it.
const QUOTED_ANSWER: usize = 300;

/// At most this much of an answer is read: a receiver says what went wrong in far less, and
/// one that sends more is not read on.
pub const ANSWER_CAP: usize = 64 * 1024;

/// Where to push: `http[s]://host[:port]/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as messages and load.json show it (its secret query parameters redacted).
    pub url: String,
    https: bool,
    /// Without an IPv6 literal's brackets: what resolution and TLS take.
    host: String,
    port: u16,
    /// `host[:port]` as the Host header carries it.
    authority: String,
    path_and_query: String,
}

impl Endpoint {
    /// `--remote-write`'s URL.
    pub fn remote_write(text: &str) -> Result<Endpoint, String> {
        Endpoint::parse(text, &crate::push_auth::REMOTE_WRITE)
    }

    /// `--pyroscope`'s URL.
    pub fn pyroscope(text: &str) -> Result<Endpoint, String> {
        Endpoint::parse(text, &crate::push_auth::PYROSCOPE)
    }

    /// The URL, refused when it names no server or holds credentials (their place is `auth`'s).
    pub fn parse(text: &str, auth: &AuthSource) -> Result<Endpoint, String> {
        let shown = crate::redact::url(text);
        let url = crate::http_url::HttpUrl::parse(text)
            .map_err(|why| format!("`{shown}` is not a URL like http://host:port/path: {why}"))?;
        if url.userinfo.is_some() {
            return Err(format!(
                "`{shown}` holds credentials, which would show wherever the URL does; {}",
                auth.where_to()
            ));
        }
        Ok(Endpoint {
            url: shown,
            https: url.https,
            host: url.bare_host().to_string(),
            port: url.port,
            authority: url.authority,
            path_and_query: url.path_and_query,
        })
    }

    /// The URL's path and query, `/` when it has none.
    pub fn path_and_query(&self) -> &str {
        &self.path_and_query
    }
}

/// An endpoint ready to be pushed to: its TLS client (https) and its credentials.
pub struct Receiver {
    endpoint: Endpoint,
    tls: Option<crate::tls::Tls>,
    auth: Option<PushAuth>,
}

impl Receiver {
    /// https trusts the system's CAs and `cacert`'s; the certificate is always checked (a push
    /// carries credentials: `--insecure` is the load's alone).
    pub fn new(
        endpoint: Endpoint,
        cacert: Option<&Path>,
        auth: Option<PushAuth>,
    ) -> Result<Receiver, LoadError> {
        let tls = match endpoint.https {
            true => {
                let options = crate::tls::TlsOptions {
                    cacert: cacert.map(Path::to_path_buf),
                    resumption: true,
                    ..Default::default()
                };
                Some(crate::tls::Tls::new(&options, &endpoint.host, &[b"http/1.1"])?)
            }
            false => None,
        };
        Ok(Receiver {
            endpoint,
            tls,
            auth,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// POST `body` to `path_and_query` on the receiver with `headers`; Ok on a 2xx answer, else
    /// one sentence saying what went wrong. The caller bounds it in time.
    pub async fn post(
        &self,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(), String> {
        let e = &self.endpoint;
        let tcp = tokio::net::TcpStream::connect((e.host.as_str(), e.port))
            .await
            .map_err(|err| format!("cannot connect to {}: {err}", e.authority))?;
        let mut request = hyper::Request::post(path_and_query)
            .header(hyper::header::HOST, e.authority.as_str())
            .header(
                hyper::header::USER_AGENT,
                concat!("srvprof/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(auth) = &self.auth {
            let mut value = hyper::header::HeaderValue::from_str(auth.header_value())
                .map_err(|_| "the credentials do not make a header value".to_string())?;
            value.set_sensitive(true);
            request = request.header(hyper::header::AUTHORIZATION, value);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|err| format!("cannot build the request: {err}"))?;
        match &self.tls {
            None => exchange(TokioIo::new(tcp), &e.authority, request).await,
            Some(tls) => {
                let (stream, _) = tls.connect(tcp).await.map_err(|err| {
                    format!(
                        "the TLS handshake with {} failed: {}",
                        e.authority,
                        crate::tls::explain(&err, &e.host)
                    )
                })?;
                exchange(TokioIo::new(stream), &e.authority, request).await
            }
        }
    }

    /// [`Receiver::post`] from a thread without a runtime, given up after `timeout`.
    pub fn post_blocking(
        &self,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        timeout: std::time::Duration,
    ) -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build a runtime to push with: {e}"))?;
        runtime.block_on(async {
            tokio::time::timeout(timeout, self.post(path_and_query, headers, body))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} s", timeout.as_secs())))
        })
    }
}

/// One request over `io` and its answer's status, with at most [`ANSWER_CAP`] of its body.
async fn exchange<T>(
    io: T,
    authority: &str,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake with {authority}: {e}"))?;
    // The connection's I/O, polled beside the request; dropped with the exchange, so an answer
    // longer than the cap is never read on.
    let conn = tokio::spawn(conn);
    let answered = sender.send_request(request).await;
    let outcome = match answered {
        Err(e) => Err(format!("{authority} did not answer: {e}")),
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => {
            let status = response.status();
            let answer = read_capped(response.into_body()).await;
            let text = String::from_utf8_lossy(&answer[..answer.len().min(QUOTED_ANSWER)]);
            Err(format!("the receiver answered {status}: {}", text.trim()))
        }
    };
    conn.abort();
    outcome
}

/// The body's first [`ANSWER_CAP`] bytes (fewer if it fails or ends first).
async fn read_capped(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < ANSWER_CAP {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            _ => break,
        }
    }
    out.truncate(ANSWER_CAP);
    out
}

/// Percent-encoding of a query parameter's value (RFC 3986: unreserved characters as they are).
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::loopback_server::{LoopbackServer, OK, ReadWrite};
    use crate::push_auth::REMOTE_WRITE;

    const WITHIN: Duration = Duration::from_secs(10);

    #[test]
    fn a_port_out_of_range_is_refused_not_taken_for_another() {
        for url in ["http://127.0.0.1:99999/api/v1/write", "http://127.0.0.1:0/w"] {
            let e = Endpoint::remote_write(url).unwrap_err();
            assert!(e.contains("is not a number from 1 to 65535"), "{url}: {e}");
        }
    }

    #[test]
    fn http_and_https_urls_are_taken() {
        let e = Endpoint::remote_write("http://127.0.0.1:9090/api/v1/write").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path_and_query()),
            ("127.0.0.1", 9090, "/api/v1/write")
        );
        assert_eq!(Endpoint::remote_write("http://[::1]/w").unwrap().host, "::1");
        assert_eq!(Endpoint::pyroscope("http://pyroscope:4040").unwrap().path_and_query(), "/");
        let https = Endpoint::remote_write("https://x/api/v1/write").unwrap();
        assert_eq!((https.https, https.port), (true, 443));
        assert!(Endpoint::remote_write("prometheus:9090").is_err());
        assert!(Endpoint::pyroscope("ftp://x/").unwrap_err().contains("scheme `ftp`"));
    }

    /// A credentials file for the test, removed by the caller.
    fn credentials(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("srvprof-push-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn credentials_go_from_their_file_never_in_the_url_or_the_host_header() {
        let server = LoopbackServer::start(OK);
        let port = server.addr.port();
        let url = format!("http://user:s3cret@127.0.0.1:{port}/api/v1/write");
        let refused = Endpoint::remote_write(&url).unwrap_err();
        assert!(
            refused.contains("--remote-write-auth-file")
                && refused.contains("SRVPROF_REMOTE_WRITE_AUTH")
                && !refused.contains("s3cret"),
            "{refused}"
        );
        let file = credentials("basic", "user:s3cret\n");
        let auth = PushAuth::read(Some(&file), &REMOTE_WRITE).unwrap();
        std::fs::remove_file(&file).unwrap();
        let endpoint = Endpoint::remote_write(&format!("http://127.0.0.1:{port}/api/v1/write")).unwrap();
        let receiver = Receiver::new(endpoint, None, auth).unwrap();
        let pushed = receiver.post_blocking("/api/v1/write", &[], b"x".to_vec(), WITHIN);
        let (seen, _) = server.finish();
        let seen = String::from_utf8_lossy(&seen);
        pushed.unwrap();
        assert!(seen.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")), "{seen}");
        // base64 of user:s3cret
        assert!(seen.contains("\r\nauthorization: Basic dXNlcjpzM2NyZXQ=\r\n"), "{seen}");
    }

    /// A loopback https server with the certificate `cert` (its key beside it).
    fn https_server(cert: &Path) -> LoopbackServer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
        let key = PrivateKeyDer::from_pem_file(cert.with_file_name("key.pem")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let config = Arc::new(config);
        LoopbackServer::start_with(
            OK,
            Box::new(move |tcp| {
                let tls = rustls::ServerConnection::new(config.clone()).ok()?;
                Some(Box::new(rustls::StreamOwned::new(tls, tcp)) as Box<dyn ReadWrite>)
            }),
        )
    }

    #[test]
    fn pushes_go_over_https_trusting_cacert_with_a_bearer_token() {
        let cert = crate::tls::tests::self_signed("push");
        let server = https_server(&cert);
        let url = format!("https://127.0.0.1:{}/api/v1/write", server.addr.port());
        let auth = PushAuth::parse("s3cret-token", "test").unwrap();
        let untrusted = Receiver::new(Endpoint::remote_write(&url).unwrap(), None, None)
            .unwrap()
            .post_blocking("/api/v1/write", &[], b"x".to_vec(), WITHIN)
            .unwrap_err();
        let receiver = Receiver::new(Endpoint::remote_write(&url).unwrap(), Some(&cert), Some(auth)).unwrap();
        let pushed = receiver.post_blocking("/api/v1/write", &[], b"x".to_vec(), WITHIN);
        let (seen, _) = server.finish();
        let seen = String::from_utf8_lossy(&seen);
        pushed.unwrap();
        assert!(untrusted.contains("--cacert"), "{untrusted}");
        assert!(seen.contains("POST /api/v1/write HTTP/1.1\r\n"), "{seen}");
        assert!(seen.contains("\r\nauthorization: Bearer s3cret-token\r\n"), "{seen}");
    }

    #[test]
    fn a_huge_answer_is_not_read_whole() {
        const SIZE: usize = 10 << 20;
        let mut answer =
            format!("HTTP/1.1 500 Internal Server Error\r\ncontent-length: {SIZE}\r\n\r\n").into_bytes();
        answer.resize(answer.len() + SIZE, b'x');
        let server = LoopbackServer::start(Vec::leak(answer));
        let url = format!("http://127.0.0.1:{}/w", server.addr.port());
        let receiver = Receiver::new(Endpoint::remote_write(&url).unwrap(), None, None).unwrap();
        let pushed = receiver.post_blocking("/w", &[], b"x".to_vec(), WITHIN);
        let (_, written) = server.finish();
        let error = pushed.unwrap_err();
        assert!(error.contains("500") && error.len() < 1000, "{error}");
        assert!(
            written < 1 << 20,
            "the receiver wrote {written} bytes of {SIZE} before srvprof went away"
        );
    }
}
