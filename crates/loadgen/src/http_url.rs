//! The one reading of every http(s) URL srvprof takes (load targets, `--targets` lines,
//! `--remote-write`, `--pyroscope`): `http::Uri` (through hyper) parses it, and what `Uri` lets
//! through yet names no server (a port out of range, no host, another scheme) is refused here
//! with the reason.

use std::error::Error;

/// Why a URL is refused: `http::Uri`'s own error, or a reason stated here.
pub type UrlError = Box<dyn Error + Send + Sync>;

/// An http or https URL that names a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    pub https: bool,
    /// The host as the URL writes it: an IPv6 literal keeps its brackets.
    pub host: String,
    /// The URL's port, else the scheme's.
    pub port: u16,
    /// `host[:port]` as the URL writes them, without userinfo: what the Host header carries.
    pub authority: String,
    /// Origin form, `/` when the URL has no path.
    pub path_and_query: String,
    /// `user:password` before the host, percent-decoded (Debug shows `<redacted>`).
    pub userinfo: Option<crate::redact::Secret>,
}

impl HttpUrl {
    pub fn parse(text: &str) -> Result<HttpUrl, UrlError> {
        let uri = text.parse::<hyper::Uri>()?;
        let https = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            Some(other) => return Err(format!("scheme `{other}` is not http or https").into()),
            None => return Err("no scheme (http:// or https://)".into()),
        };
        let authority = uri.authority().ok_or("no host after the scheme")?;
        let host = authority.host();
        if host.is_empty() || host == "[]" {
            return Err("no host after the scheme".into());
        }
        let (userinfo, host_port) = match authority.as_str().rsplit_once('@') {
            Some((userinfo, rest)) => (Some(userinfo), rest),
            None => (None, authority.as_str()),
        };
        // Uri leaves a port it cannot read as u16 unread (`port()` is None): it is read here.
        let port = match host_port.strip_prefix(host).and_then(|p| p.strip_prefix(':')) {
            None if https => 443,
            None => 80,
            Some(text) => match text.parse::<u16>() {
                Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => port,
                _ => return Err(format!("port `{text}` is not a number from 1 to 65535").into()),
            },
        };
        let path_and_query = uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or("/");
        // `http://h?q` has a query and no path: the request target still starts with /.
        let path_and_query = if path_and_query.starts_with('/') {
            path_and_query.to_string()
        } else {
            format!("/{path_and_query}")
        };
        Ok(HttpUrl {
            https,
            host: host.to_string(),
            port,
            authority: host_port.to_string(),
            path_and_query,
            userinfo: userinfo.map(|u| crate::redact::Secret::new(percent_decode(u))),
        })
    }

    /// The host without an IPv6 literal's brackets: what resolution and TLS take.
    pub fn bare_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

/// `%XX` sequences decoded (RFC 3986), as curl decodes a URL's user and password.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        HttpUrl::parse(url).expect_err(url).to_string()
    }

    #[test]
    fn ports_hosts_and_paths_as_the_url_writes_them() {
        let u = HttpUrl::parse("http://127.0.0.1:8080/a?b=1").unwrap();
        assert_eq!((u.https, u.port, u.authority.as_str(), u.path_and_query.as_str()), (false, 8080, "127.0.0.1:8080", "/a?b=1"));
        let u = HttpUrl::parse("HTTPS://[::1]").unwrap();
        assert_eq!((u.https, u.port, u.host.as_str(), u.bare_host(), u.path_and_query.as_str()), (true, 443, "[::1]", "::1", "/"));
        assert_eq!(HttpUrl::parse("http://[::1]:65535/").unwrap().port, 65535);
        assert_eq!(HttpUrl::parse("http://h?x=1").unwrap().path_and_query, "/?x=1");
    }

    #[test]
    fn userinfo_is_kept_apart_from_the_host_and_decoded() {
        let u = HttpUrl::parse("http://us%65r:p%40ss@127.0.0.1:9/").unwrap();
        assert_eq!(u.authority, "127.0.0.1:9");
        assert_eq!(u.userinfo.as_ref().unwrap().expose(), "user:p@ss");
        assert!(!format!("{u:?}").contains("p@ss"));
    }

    #[test]
    fn what_names_no_server_is_refused_with_the_reason() {
        for port in ["99999", "0", "65536", "8o", "", "-1", "+80"] {
            let url = format!("http://127.0.0.1:{port}/");
            let why = refused(&url);
            assert_eq!(why, format!("port `{port}` is not a number from 1 to 65535"), "{url}");
        }
        assert!(refused("http://[::1]:70000/").contains("70000"));
        assert!(refused("http://:80/").contains("no host"));
        assert!(refused("http:///x").contains("invalid"), "{}", refused("http:///x"));
        assert!(refused("ftp://h/").contains("scheme `ftp`"));
        assert!(refused("127.0.0.1:8080").contains("no scheme"));
        assert!(refused("/just/a/path").contains("no scheme"));
        assert!(refused("http://exa mple/").contains("invalid uri character"));
    }
}
