//! How `srvprof plan` writes a value into what it renders: as one shell word, or as a YAML
//! scalar that no character of the value can end early.

use serde_json::Value;

/// Characters a shell reads as themselves anywhere in a word. `=` is not one of them: Ansible
/// reads a bare `chdir=...` as an option of its shell module, not as part of the command.
fn bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_@%+:,./-".contains(c)
}

/// `word` as one shell word: bare when every character is one the shell reads as itself, else
/// in single quotes with each `'` written `'\''` (inside single quotes nothing else is special).
pub fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(bare) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `words` as shell words, one space between each.
pub fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Characters written `\uXXXX` in a YAML scalar: those YAML 1.1 reads as line breaks (U+0085,
/// U+2028, U+2029: a comment or a plain line would end there) and those it allows only
/// escaped (DEL, C1 controls, U+FEFF, U+FFFE, U+FFFF). serde_json already escapes C0 controls.
fn escaped_in_yaml(c: char) -> bool {
    matches!(
        c,
        '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
    )
}

/// A value as a JSON scalar or list, which YAML reads as the same value: JSON's double-quoted
/// strings are YAML's, and both read `\uXXXX` as the character.
pub fn yaml(value: &Value) -> String {
    let json = serde_json::to_string(value).expect("JSON serializes");
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if escaped_in_yaml(c) {
            // These occur only inside strings in serde_json's output, where \u is an escape.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_shell_word_reads_back_as_itself() {
        for word in [
            "",
            "plain/path-1.2",
            "it's",
            "'",
            "''",
            "$(touch x) `y` ; & | < > * ? [ ] { } ~ # ! ^ \" \\",
            "line\nline\r\u{2028}\u{85}\ttab",
            "a=b",
            "-oProxyCommand=x",
        ] {
            assert_eq!(
                shlex::split(&shell_word(word)),
                Some(vec![word.to_string()])
            );
        }
        assert_eq!(shell_word("--out"), "--out");
        assert_eq!(shell_word("chdir=/tmp"), "'chdir=/tmp'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_yaml_scalar_holds_no_raw_line_break_and_reads_back_as_json_too() {
        let text = "a\nb\u{85}c\u{2028}d\u{2029}e\u{7f}f\u{feff}g";
        let scalar = yaml(&json!(text));
        assert!(
            scalar.chars().all(|c| c.is_ascii_graphic() || c == ' '),
            "{scalar}"
        );
        assert_eq!(serde_json::from_str::<String>(&scalar).unwrap(), text);
        let yaml: String = serde_norway::from_str(&scalar).unwrap();
        assert_eq!(yaml, text);
    }
}
