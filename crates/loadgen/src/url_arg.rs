//! Command-line values that are URLs, checked as the command line is parsed, before anything
//! runs; a refusal is the sentence alone, as clap's own message would quote the value whole and a
//! URL may hold a password.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// A URL option's parser: `Url(check)` where `check` reads the text or says why not.
#[derive(Clone, Copy)]
pub struct Url<T>(pub fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Url<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        // An option is named (several take URLs); the command's one positional URL needs not be.
        let name = arg
            .filter(|a| !a.is_positional())
            .map(|a| format!("{a}: "))
            .unwrap_or_default();
        let refuse = |why: String| {
            let mut cmd = cmd.clone();
            cmd.error(ErrorKind::ValueValidation, format!("{name}{why}"))
        };
        let text = value
            .to_str()
            .ok_or_else(|| refuse("the URL is not UTF-8; give it in UTF-8".to_string()))?;
        (self.0)(text).map_err(refuse)
    }
}

/// A load target: the URL as given, once it names a server (`bad URL ...` otherwise).
pub fn target(text: &str) -> Result<String, String> {
    crate::http_url::HttpUrl::parse(text)
        .map(|_| text.to_string())
        .map_err(|source| {
            crate::LoadError::BadUrl {
                url: crate::redact::url(text),
                source,
            }
            .to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[arg(value_parser = Url(target))]
        url: String,
    }

    #[test]
    fn a_refused_url_is_one_sentence_without_the_password() {
        use clap::Parser;
        let e = Cli::try_parse_from(["x", "http://user:s3cret@127.0.0.1:99999/"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("port `99999` is not a number from 1 to 65535"), "{e}");
        assert!(e.contains("http://<redacted>@127.0.0.1:99999/") && !e.contains("s3cret"), "{e}");
        let ok = Cli::try_parse_from(["x", "http://127.0.0.1:8080/"]).unwrap();
        assert_eq!(ok.url, "http://127.0.0.1:8080/");
    }
}
