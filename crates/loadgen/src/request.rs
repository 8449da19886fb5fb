//! The target (URL → socket address) and the request built once before the run.
//!
//! Every request of a run is identical, so the method, URI, headers and body are parsed and
//! validated once; the hot path only clones reference-counted parts into a new `Request`.

use std::net::{SocketAddr, ToSocketAddrs};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::header::{
    AUTHORIZATION, CONNECTION, CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue,
};
use hyper::{Method, Uri};

use crate::LoadError;
use crate::error::Cause;
use crate::http_url::HttpUrl;

/// Where the requests go: the resolved address and the parts of the URL the request needs.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// `host[:port]` as the Host header carries it.
    pub authority: String,
    /// Origin-form request target (`/path?query`).
    pub path_and_query: String,
    /// https: the host name TLS sends (SNI) and checks the certificate against.
    pub tls_host: Option<String>,
    /// The URL's `user:password`, sent as basic auth as curl sends it (never in the Host header).
    pub userinfo: Option<crate::redact::Secret>,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, LoadError> {
        let parsed = HttpUrl::parse(url).map_err(|source| LoadError::BadUrl {
            url: crate::redact::url(url),
            source,
        })?;
        let bare_host = parsed.bare_host();
        let resolve_error = |source: Cause| LoadError::Resolve {
            host: bare_host.to_string(),
            source,
        };
        let addr = (bare_host, parsed.port)
            .to_socket_addrs()
            .map_err(|e| resolve_error(e.into()))?
            .next()
            .ok_or_else(|| resolve_error("no address found".into()))?;
        Ok(Target {
            addr,
            tls_host: parsed.https.then(|| bare_host.to_string()),
            authority: parsed.authority,
            path_and_query: parsed.path_and_query,
            userinfo: parsed.userinfo,
        })
    }
}

/// The request every connection sends, parsed once.
#[derive(Clone, Debug)]
pub struct RequestTemplate {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// The whole request as it goes on the wire, for the built-in HTTP/1.1 client.
    encoded: Bytes,
    /// HTTP/2: the absolute URI (its scheme and authority become :scheme and :authority) and
    /// the headers without Host and Connection, which HTTP/2 forbids.
    h2_uri: Uri,
    h2_headers: HeaderMap,
}

impl RequestTemplate {
    pub fn new(
        target: &Target,
        method: &str,
        headers: &[(String, String)],
        body: Option<&[u8]>,
        keepalive: bool,
    ) -> Result<RequestTemplate, LoadError> {
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|_| LoadError::InvalidOption(format!("bad HTTP method `{method}`")))?;
        let uri = target
            .path_and_query
            .parse::<Uri>()
            .map_err(|e| LoadError::BadUrl {
                url: target.path_and_query.clone(),
                source: e.into(),
            })?;
        let mut map = HeaderMap::new();
        map.insert(
            HOST,
            HeaderValue::from_str(&target.authority)
                .map_err(|e| LoadError::InvalidOption(format!("bad host: {e}")))?,
        );
        if !keepalive {
            // The server closes first, so TIME_WAIT lands on the server, not on our ports.
            map.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| LoadError::InvalidOption(format!("bad header name `{name}` in -H")))?;
            let value = HeaderValue::from_str(value.trim()).map_err(|_| {
                let shown = match crate::redact::is_secret_name(name.as_str()) {
                    true => crate::redact::REDACTED,
                    false => value.as_str(),
                };
                LoadError::InvalidOption(format!(
                    "bad value `{shown}` of header `{name}` in -H: a header value holds no control characters"
                ))
            })?;
            // A user's Host or Connection replaces ours; other names may repeat.
            if name == HOST || name == CONNECTION {
                map.insert(name, value);
            } else {
                map.append(name, value);
            }
        }
        // As curl does: the URL's user and password become basic auth, unless -H gives one.
        if let Some(userinfo) = &target.userinfo
            && !map.contains_key(AUTHORIZATION)
        {
            let mut value = HeaderValue::from_str(&basic_auth(userinfo.expose())).map_err(|_| {
                LoadError::InvalidOption(
                    "the URL's user and password do not make a header value; percent-encode their special characters".into(),
                )
            })?;
            value.set_sensitive(true);
            map.insert(AUTHORIZATION, value);
        }
        let body = Bytes::copy_from_slice(body.unwrap_or_default());
        let encoded = encode(&method, &uri, &map, &body);
        let scheme = if target.tls_host.is_some() {
            "https"
        } else {
            "http"
        };
        let authority = map
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or(&target.authority);
        let h2_uri = format!("{scheme}://{authority}{}", target.path_and_query)
            .parse::<Uri>()
            .map_err(|e| LoadError::InvalidOption(format!("bad Host header `{authority}`: {e}")))?;
        // Only what HTTP/2 may carry: without -H the map stays empty, and cloning it per request
        // allocates nothing.
        let mut h2_headers = HeaderMap::new();
        for (name, value) in map.iter().filter(|(n, _)| **n != HOST && **n != CONNECTION) {
            h2_headers.append(name.clone(), value.clone());
        }
        Ok(RequestTemplate {
            method,
            uri,
            headers: map,
            body,
            encoded,
            h2_uri,
            h2_headers,
        })
    }

    /// The request's bytes on the wire (request line, headers, body).
    #[inline]
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }

    /// HEAD responses carry no body whatever their headers say.
    #[inline]
    pub fn is_head(&self) -> bool {
        self.method == Method::HEAD
    }

    /// A fresh request: reference-count bumps for URI and body, one copy of the small header map
    /// (hyper takes ownership of each request, so the map cannot be reused).
    #[inline]
    pub fn build(&self) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }

    /// The request for HTTP/2 (its body goes apart, as DATA).
    #[inline]
    pub fn h2_request(&self) -> Request<()> {
        let mut req = Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.h2_uri.clone();
        *req.headers_mut() = self.h2_headers.clone();
        req
    }

    #[inline]
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    pub fn body_len(&self) -> usize {
        self.body.len()
    }
}

/// `Basic` and `user:password` in base64 (RFC 7617).
pub(crate) fn basic_auth(userinfo: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(userinfo)
    )
}

/// HTTP/1.1 encoding of a request; Content-Length is added when there is a body (or the
/// method expects one) and the caller did not set it.
fn encode(method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let wants_length =
        !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if wants_length && !headers.contains_key(CONTENT_LENGTH) {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_url_with_port_and_query() {
        let t = Target::parse("http://127.0.0.1:8080/a/b?x=1").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path_and_query, "/a/b?x=1");
    }

    #[test]
    fn defaults_path_and_port() {
        let t = Target::parse("http://127.0.0.1").unwrap();
        assert_eq!(t.addr.port(), 80);
        assert_eq!(t.path_and_query, "/");
    }

    #[test]
    fn https_goes_to_443_with_its_host_for_tls_and_garbage_is_refused() {
        let t = Target::parse("https://127.0.0.1/").unwrap();
        assert_eq!((t.addr.port(), t.tls_host.as_deref()), (443, Some("127.0.0.1")));
        assert_eq!(Target::parse("http://127.0.0.1/").unwrap().tls_host, None);
        assert!(matches!(
            Target::parse("127.0.0.1:80"),
            Err(LoadError::BadUrl { .. })
        ));
        assert!(matches!(
            Target::parse("ftp://127.0.0.1/"),
            Err(LoadError::BadUrl { .. })
        ));
    }

    #[test]
    fn a_url_that_is_not_a_server_is_refused_in_one_sentence() {
        for (url, words) in [
            ("http://127.0.0.1:99999/", "port `99999` is not a number from 1 to 65535"),
            ("http://127.0.0.1:0/", "port `0` is not a number from 1 to 65535"),
            ("http://127.0.0.1:8o/", "port `8o` is not a number from 1 to 65535"),
            ("http://:8080/", "no host"),
            ("ftp://127.0.0.1/", "scheme `ftp` is not http or https"),
            ("127.0.0.1:8080", "no scheme"),
        ] {
            let e = Target::parse(url).unwrap_err().to_string();
            assert!(e.contains(words) && !e.contains('\n'), "{url}: {e}");
        }
    }

    #[test]
    fn the_urls_user_and_password_go_as_basic_auth_never_in_the_host_header() {
        let t = Target::parse("http://us%65r:s3cret@127.0.0.1:8080/").unwrap();
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert!(!format!("{t:?}").contains("s3cret"));
        let tpl = RequestTemplate::new(&t, "GET", &[], None, true).unwrap();
        let req = tpl.build();
        assert_eq!(req.headers()[HOST], "127.0.0.1:8080");
        // base64 of user:s3cret
        assert_eq!(req.headers()[AUTHORIZATION], "Basic dXNlcjpzM2NyZXQ=");
        // -H Authorization wins, as over curl's -u.
        let given = [("Authorization".to_string(), "Bearer t".to_string())];
        let tpl = RequestTemplate::new(&t, "GET", &given, None, true).unwrap();
        assert_eq!(tpl.build().headers().get_all(AUTHORIZATION).iter().count(), 1);
        assert_eq!(tpl.build().headers()[AUTHORIZATION], "Bearer t");
        let bad = [("Authorization".to_string(), "Bearer s3cret\u{7}".to_string())];
        let e = RequestTemplate::new(&t, "GET", &bad, None, true).unwrap_err().to_string();
        assert!(!e.contains("s3cret") && e.contains("authorization"), "{e}");
    }

    #[test]
    fn user_headers_override_host() {
        let t = Target::parse("http://127.0.0.1:1/").unwrap();
        let tpl = RequestTemplate::new(
            &t,
            "POST",
            &[
                ("Host".into(), "example".into()),
                ("X-A".into(), "1".into()),
            ],
            Some(b"hi"),
            false,
        )
        .unwrap();
        let req = tpl.build();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.headers()[HOST], "example");
        assert_eq!(req.headers()["x-a"], "1");
        assert_eq!(req.headers()[CONNECTION], "close");
        assert_eq!(
            tpl.encoded(),
            b"POST / HTTP/1.1\r\nhost: example\r\nconnection: close\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nhi"
        );
    }

    #[test]
    fn http2_requests_carry_the_authority_in_the_uri_and_no_connection_headers() {
        let t = Target::parse("https://127.0.0.1:8443/p?q=1").unwrap();
        let tpl = RequestTemplate::new(
            &t,
            "GET",
            &[
                ("Host".into(), "example:8443".into()),
                ("X-A".into(), "1".into()),
            ],
            None,
            false,
        )
        .unwrap();
        let req = tpl.h2_request();
        assert_eq!(req.uri(), "https://example:8443/p?q=1");
        assert_eq!(req.headers().len(), 1);
        assert_eq!(req.headers()["x-a"], "1");
        let plain = RequestTemplate::new(&t, "GET", &[], None, true).unwrap();
        assert!(plain.h2_request().headers().is_empty());
    }
}
