//! The credentials of a push (`--remote-write`, `--pyroscope`), read from a file or an
//! environment variable, never from the command line, where `ps` and shell history would show
//! them: `USER:PASSWORD` for basic auth, or a bearer token.

use std::path::Path;

use crate::LoadError;
use crate::redact::Secret;

/// Where one push's credentials may come from: its option's file, else its variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthSource {
    /// The option naming the file.
    pub option: &'static str,
    /// The environment variable read when the option is not given.
    pub env: &'static str,
}

pub const REMOTE_WRITE: AuthSource = AuthSource {
    option: "--remote-write-auth-file",
    env: "SRVPROF_REMOTE_WRITE_AUTH",
};

pub const PYROSCOPE: AuthSource = AuthSource {
    option: "--pyroscope-auth-file",
    env: "SRVPROF_PYROSCOPE_AUTH",
};

impl AuthSource {
    /// The sentence's end that says where credentials go instead.
    pub fn where_to(&self) -> String {
        format!(
            "put USER:PASSWORD or a bearer token in a file given with {}, or in the environment variable {}",
            self.option, self.env
        )
    }
}

/// The Authorization header's value for a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushAuth(Secret);

impl PushAuth {
    /// From `file` when given, else from the environment variable; None when neither is set.
    pub fn read(file: Option<&Path>, source: &AuthSource) -> Result<Option<PushAuth>, LoadError> {
        let (text, whence) = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    LoadError::Push(format!(
                        "cannot read the credentials file {} given with {} ({e}); give a readable file holding USER:PASSWORD or a bearer token",
                        path.display(),
                        source.option
                    ))
                })?;
                (text, format!("{} ({})", path.display(), source.option))
            }
            None => match std::env::var(source.env) {
                Ok(text) => (text, source.env.to_string()),
                Err(std::env::VarError::NotPresent) => return Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(LoadError::Push(format!(
                        "{} is not UTF-8; set it to USER:PASSWORD or a bearer token",
                        source.env
                    )));
                }
            },
        };
        PushAuth::parse(&text, &whence).map(Some)
    }

    /// `USER:PASSWORD` makes basic auth, `Bearer TOKEN` or a bare token a bearer token (bearer
    /// tokens hold no colon, RFC 6750); `whence` names where the text came from.
    pub fn parse(text: &str, whence: &str) -> Result<PushAuth, LoadError> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let line = lines.next().ok_or_else(|| {
            LoadError::Push(format!(
                "{whence} is empty; write USER:PASSWORD (basic auth) or a bearer token in it"
            ))
        })?;
        if lines.next().is_some() {
            return Err(LoadError::Push(format!(
                "{whence} holds more than one line; write USER:PASSWORD (basic auth) or a bearer token on one line"
            )));
        }
        let value = match line.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                format!("Bearer {}", token.trim())
            }
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("basic") => line.to_string(),
            _ if line.contains(':') => crate::request::basic_auth(line),
            _ => format!("Bearer {line}"),
        };
        if value.bytes().any(|b| b.is_ascii_control()) {
            return Err(LoadError::Push(format!(
                "{whence} holds control characters; write USER:PASSWORD or a bearer token in plain text"
            )));
        }
        Ok(PushAuth(Secret::new(value)))
    }

    /// The Authorization header's value, for the push that sends it.
    pub(crate) fn header_value(&self) -> &str {
        self.0.expose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> String {
        PushAuth::parse(text, "test").unwrap().header_value().to_string()
    }

    #[test]
    fn user_and_password_are_basic_auth_and_a_token_is_a_bearer_token() {
        // base64 of 123456:glc_s3cret
        assert_eq!(value("123456:glc_s3cret\n"), "Basic MTIzNDU2OmdsY19zM2NyZXQ=");
        assert_eq!(value("eyJhbGciOi.s3cret"), "Bearer eyJhbGciOi.s3cret");
        assert_eq!(value("  bearer s3cret  \n\n"), "Bearer s3cret");
        assert_eq!(value("Basic dTpw"), "Basic dTpw");
        assert!(!format!("{:?}", PushAuth::parse("u:s3cret", "t").unwrap()).contains("s3cret"));
    }

    #[test]
    fn an_unusable_source_is_one_sentence_without_its_text() {
        for text in ["", "\n \n", "a:b\nc:d", "s3cret\u{1}x"] {
            let e = PushAuth::parse(text, "/etc/push").unwrap_err().to_string();
            assert!(e.starts_with("/etc/push ") && !e.contains("s3cret") && !e.contains('\n'), "{e}");
        }
        let e = PushAuth::read(Some(Path::new("/nonexistent/push")), &REMOTE_WRITE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--remote-write-auth-file"), "{e}");
        let unset = AuthSource {
            option: "--x",
            env: "SRVPROF_TEST_NEVER_SET",
        };
        assert_eq!(PushAuth::read(None, &unset).unwrap(), None);
    }
}
