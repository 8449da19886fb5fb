//! What srvprof writes and prints in place of secrets: a URL's userinfo, and the values of
//! headers and query parameters whose names say they hold one. The requests still carry them.

/// What a secret is written as.
pub const REDACTED: &str = "<redacted>";

/// Parts of a header's or a query parameter's name that say its value is a secret.
const SECRET_NAME_PARTS: &[&str] = &[
    "auth", "cookie", "token", "secret", "passw", "pwd", "api-key", "apikey", "api_key",
    "credential", "session", "signature", "private",
];

/// Query parameters that hold a secret under a short name (`?key=`, a signed URL's `sig=`).
const SECRET_QUERY_NAMES: &[&str] = &["key", "sig", "code"];

/// A value kept out of Debug output, so a struct holding it can still derive Debug.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value itself, for the request that sends it and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Whether a header or parameter of this name holds a secret (Authorization, Cookie,
/// X-Api-Key, X-Auth-Token...).
pub fn is_secret_name(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
}

/// The headers as they may be shown: secret values replaced.
pub fn headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    (headers.iter())
        .map(|(name, value)| match is_secret_name(name) {
            true => (name.clone(), REDACTED.to_string()),
            false => (name.clone(), value.clone()),
        })
        .collect()
}

/// `text` as it may be shown: userinfo (`user:pass@`) and the values of secret query parameters
/// replaced. Works on text that does not parse as a URL too, for the messages that refuse it.
pub fn url(text: &str) -> String {
    let (scheme, rest) = match text.find("://") {
        Some(i) => text.split_at(i + 3),
        None => ("", text),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => format!("{REDACTED}{}", &authority[at..]),
        None => authority.to_string(),
    };
    let (before_fragment, fragment) = match rest.find('#') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let rest = match before_fragment.split_once('?') {
        Some((path, query)) => format!("{path}?{}", self::query(query)),
        None => before_fragment.to_string(),
    };
    format!("{scheme}{authority}{rest}{fragment}")
}

/// A query's secret values replaced, the rest as written.
fn query(query: &str) -> String {
    (query.split('&'))
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_query_name(name) => format!("{name}={REDACTED}"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn is_secret_query_name(name: &str) -> bool {
    is_secret_name(name) || SECRET_QUERY_NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_headers_are_named_so() {
        for name in ["Authorization", "proxy-authorization", "Cookie", "Set-Cookie", "X-Api-Key", "X-Auth-Token", "X-Vault-Token", "Client-Secret", "X-Password", "api_key"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["Host", "Accept", "Content-Type", "User-Agent", "X-Request-Id", "Connection"] {
            assert!(!is_secret_name(name), "{name}");
        }
        let shown = headers(&[("Authorization".into(), "Bearer s3cret".into()), ("Accept".into(), "*/*".into())]);
        assert_eq!(shown, [("Authorization".into(), REDACTED.into()), ("Accept".into(), "*/*".into())]);
    }

    #[test]
    fn urls_lose_their_userinfo_and_secret_parameters_only() {
        for (given, shown) in [
            ("http://user:s3cret@127.0.0.1:8080/a?b=1", "http://<redacted>@127.0.0.1:8080/a?b=1"),
            ("https://tok@host", "https://<redacted>@host"),
            ("http://a@b@host/p@q", "http://<redacted>@host/p@q"),
            ("http://host/x?user=ann&access_token=s3cret&sig=s3cret#f", "http://host/x?user=ann&access_token=<redacted>&sig=<redacted>#f"),
            ("user:s3cret@host:80/x", "<redacted>@host:80/x"),
            ("http://h/?api_key", "http://h/?api_key"),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
        ] {
            assert_eq!(url(given), shown, "{given}");
        }
        assert_eq!(format!("{:?}", Secret::new("s3cret".into())), REDACTED);
    }
}
