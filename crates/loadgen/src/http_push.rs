//! A bounded HTTP POST to a store users already have (Prometheus's remote write, Pyroscope's
//! ingest): plain http, one connection per push, hyper's client.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// The receiver's answer quoted in a failure, at most this many bytes of it.
const QUOTED_ANSWER: usize = 300;

/// Where to push: `http://host[:port]/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as messages and load.json show it (its secret query parameters redacted).
    pub url: String,
    host: String,
    port: u16,
    /// `host[:port]` as the Host header carries it.
    authority: String,
    path_and_query: String,
}

impl Endpoint {
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let url = crate::http_url::HttpUrl::parse(text).map_err(|why| {
            format!(
                "`{}` is not a URL like http://host:port/path: {why}",
                crate::redact::url(text)
            )
        })?;
        if url.https {
            return Err(format!(
                "`{text}`: pushing over https is not supported yet; give the receiver's plain http:// address (or a local TLS proxy's)"
            ));
        }
        Ok(Endpoint {
            url: crate::redact::url(text),
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

/// POST `body` to `path_and_query` on the endpoint's server with `headers`; Ok on a 2xx answer,
/// else one sentence saying what went wrong. The caller bounds it in time.
pub async fn post(
    endpoint: &Endpoint,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<(), String> {
    let stream = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", endpoint.authority))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {}: {e}", endpoint.authority))?;
    // The connection's I/O, polled beside the request; it ends with the exchange.
    let conn = tokio::spawn(conn);
    let mut request = hyper::Request::post(path_and_query)
        .header(hyper::header::HOST, endpoint.authority.as_str())
        .header(
            hyper::header::USER_AGENT,
            concat!("srvprof/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{} did not answer: {e}", endpoint.authority))?;
    let status = response.status();
    let answer = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    conn.abort();
    if status.is_success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&answer[..answer.len().min(QUOTED_ANSWER)]);
    Err(format!("the receiver answered {status}: {}", text.trim()))
}


/// [`post`] from a thread without a runtime, given up after `timeout`.
pub fn post_blocking(
    endpoint: &Endpoint,
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
        tokio::time::timeout(timeout, post(endpoint, path_and_query, headers, body))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", timeout.as_secs())))
    })
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
    use super::*;

    #[test]
    fn a_port_out_of_range_is_refused_not_taken_for_another() {
        for url in ["http://127.0.0.1:99999/api/v1/write", "http://127.0.0.1:0/w"] {
            let e = Endpoint::parse(url).unwrap_err();
            assert!(e.contains("is not a number from 1 to 65535"), "{url}: {e}");
        }
    }

    #[test]
    fn only_http_urls_are_taken() {
        let e = Endpoint::parse("http://127.0.0.1:9090/api/v1/write").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path_and_query()),
            ("127.0.0.1", 9090, "/api/v1/write")
        );
        assert_eq!(Endpoint::parse("http://[::1]/w").unwrap().host, "::1");
        assert_eq!(Endpoint::parse("http://pyroscope:4040").unwrap().path_and_query(), "/");
        assert!(Endpoint::parse("https://x/api/v1/write").unwrap_err().contains("https"));
        assert!(Endpoint::parse("prometheus:9090").is_err());
    }
}

