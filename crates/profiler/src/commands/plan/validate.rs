//! The values `srvprof plan` writes into scripts and manifests, checked before anything is
//! rendered: names to the alphabet their use allows, and for Ansible what its own parsing of a
//! command line would change. Each refusal is one sentence saying what to give instead.

use crate::error::SrvprofError;

fn refuse(text: String) -> Result<(), SrvprofError> {
    Err(SrvprofError::Usage(text))
}

fn all(text: &str, allowed: impl Fn(char) -> bool) -> bool {
    text.chars().all(allowed)
}

fn starts_alphanumeric(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphanumeric())
}

/// A run id goes into comments, file names, shell lines and manifests: a plain name only.
pub fn run_id(id: &str) -> Result<(), SrvprofError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "._:+-".contains(c);
    if id.len() > 128 || !starts_alphanumeric(id) || !all(id, ok) {
        return refuse(format!(
            "--run-id {id:?} is not a plain name: give letters, digits and . _ : + - only, 128 at most, the first a letter or digit, e.g. nightly-7"
        ));
    }
    Ok(())
}

/// A client or server host: ssh, scp and pdsh read a word starting with `-` as an option, and
/// pdsh and Ansible give `,` `[` `^` `!` `:` `*` meanings of their own.
pub fn host(option: &str, name: &str) -> Result<(), SrvprofError> {
    let plain = |s: &str| {
        starts_alphanumeric(s) && all(s, |c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    let ok = match name.split_once('@') {
        Some((user, host)) => plain(user) && plain(host),
        None => plain(name),
    };
    if name.len() > 253 || !ok {
        return refuse(format!(
            "{option} {name:?} is not a plain host name, and a leading - would be read as an option: give letters, digits and . _ - (after user@ if you like), the first a letter or digit, e.g. web-1.example or admin@web-1"
        ));
    }
    Ok(())
}

/// The results folder: scp hands its remote paths to the remote shell (the legacy protocol), so
/// nothing in it may be read as shell.
pub fn results(path: &str) -> Result<(), SrvprofError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "/._+-".contains(c);
    if path.is_empty() || path.starts_with('-') || !all(path, ok) {
        return refuse(format!(
            "--results {path:?} is not a plain path: give letters, digits and / . _ + - only, not starting with -, e.g. srvprof-runs or /var/lib/srvprof"
        ));
    }
    Ok(())
}

/// The URL is `srvprof load`'s first word: one that is not http(s) could be read as an option.
pub fn url(url: &str) -> Result<(), SrvprofError> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if !lower.starts_with("http://") && !lower.starts_with("https://") {
        return refuse(format!(
            "the URL {url:?} does not start with http:// or https://: give the server's URL, e.g. http://server:8080/"
        ));
    }
    Ok(())
}

/// Whether `c` ends a line for a shell, YAML or a terminal, or is a control character.
fn breaks_a_line(c: char) -> bool {
    (c.is_control() && c != '\t') || c == '\u{2028}' || c == '\u{2029}'
}

/// `--server-pids-from` is shell by design, run on each server host: one line of it.
pub fn pids_from(command: &str) -> Result<(), SrvprofError> {
    if let Some(c) = command.chars().find(|&c| breaks_a_line(c)) {
        return refuse(format!(
            "--server-pids-from {command:?} holds {c:?}, which ends a line or is a control character: give one line of shell, e.g. 'pgrep nginx'"
        ));
    }
    Ok(())
}

/// A container image reference (registry/name:tag or @sha256:digest).
pub fn image(image: &str) -> Result<(), SrvprofError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "._:/@-".contains(c);
    if !starts_alphanumeric(image) || image.len() > 512 || !all(image, ok) {
        return refuse(format!(
            "--image {image:?} is not an image reference: give letters, digits and . _ : / @ - only, the first a letter or digit, e.g. registry.example/srvprof:0.1"
        ));
    }
    Ok(())
}

/// A DNS label (RFC 1123) of `max` characters at most, dots allowed between labels when `dots`.
fn dns_name(name: &str, max: usize, dots: bool) -> bool {
    let ok =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= max && all(name, ok) && ends(name.chars().next()) && ends(name.chars().last())
}

/// `--namespace`: a Kubernetes namespace name.
pub fn namespace(name: &str) -> Result<(), SrvprofError> {
    if !dns_name(name, 63, false) {
        return refuse(format!(
            "--namespace {name:?} is not a Kubernetes namespace name: give lower-case letters, digits and -, 63 at most, starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// `--claim`: a PersistentVolumeClaim's name.
pub fn claim(name: &str) -> Result<(), SrvprofError> {
    if !dns_name(name, 253, true) {
        return refuse(format!(
            "--claim {name:?} is not a PersistentVolumeClaim name: give lower-case letters, digits, . and -, starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// `--server-label` as Kubernetes takes a label: KEY=VALUE, KEY a name with an optional DNS
/// prefix and `/`, each name and the value 63 characters at most.
pub fn server_label(label: &str) -> Result<(&str, &str), SrvprofError> {
    let name = |s: &str| {
        let ok = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
        let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        s.len() <= 63 && all(s, ok) && ends(s.chars().next()) && ends(s.chars().last())
    };
    let parsed = label.split_once('=').filter(|(key, value)| {
        let key_ok = match key.split_once('/') {
            Some((prefix, n)) => dns_name(prefix, 253, true) && name(n),
            None => name(key),
        };
        key_ok && (value.is_empty() || name(value))
    });
    parsed.ok_or_else(|| {
        SrvprofError::Usage(format!(
            "--server-label {label:?} is not a Kubernetes node label KEY=VALUE: give letters, digits and . _ - (KEY may start with a DNS prefix and /), 63 at most each, e.g. srvprof/server=true"
        ))
    })
}

/// A value written into an `ansible -a` command: Ansible renders the string as a Jinja2
/// template on the control machine, reads a backslash before a quote as an escape where the
/// shell does not (after which its `chdir=...` options could be read out of a quoted value), and
/// splits and rejoins the string at line breaks by its own rules.
pub fn for_ansible(what: &str, value: &str) -> Result<(), SrvprofError> {
    let said = |why: &str| {
        refuse(format!(
            "{what} {value:?} holds {why}; with --format ansible leave it out, or use --format ssh or pdsh"
        ))
    };
    if let Some(d) = ["{{", "{%", "{#"].into_iter().find(|d| value.contains(d)) {
        return said(&format!(
            "{d}, which Ansible runs as Jinja2 on the control machine"
        ));
    }
    if value.contains('\\') {
        return said(
            "a backslash, which Ansible reads as escaping a quote where the shell does not",
        );
    }
    if value.contains(['\n', '\r']) {
        return said("a line break, which Ansible splits and rejoins the command at");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_pass() {
        run_id("start-2026-11-29T10:00:00.000Z").unwrap();
        run_id("nightly-7").unwrap();
        for h in ["a", "web-1.example", "admin@web-1", "10.0.0.7", "s_1"] {
            host("--hosts", h).unwrap();
        }
        for r in ["srvprof-runs", "/var/lib/srvprof", "runs/x+1"] {
            results(r).unwrap();
        }
        url("HTTPS://x/").unwrap();
        pids_from("pgrep -d' ' -f 'java .*Main'\t").unwrap();
        image("registry.example:5000/srvprof@sha256:0a").unwrap();
        namespace("default").unwrap();
        claim("results.v1").unwrap();
        assert_eq!(
            server_label("srvprof/server=true").unwrap(),
            ("srvprof/server", "true")
        );
        assert_eq!(server_label("role=").unwrap(), ("role", ""));
        for_ansible("--header", "X-A: 'b' \"c\" $d {e} %f #g").unwrap();
    }

    #[test]
    fn each_refusal_is_one_line_naming_what_to_give() {
        let cases: Vec<(Result<(), SrvprofError>, &str)> = vec![
            (run_id("-x"), "--run-id"),
            (run_id(&"a".repeat(129)), "--run-id"),
            (host("--servers", "-oProxyCommand=x"), "--servers"),
            (host("--hosts", "a@-b"), "--hosts"),
            (host("--hosts", "h[1-3]"), "--hosts"),
            (results("~/r"), "--results"),
            (url("-http://x/"), "URL"),
            (pids_from("pgrep x\u{85}y"), "--server-pids-from"),
            (image("a b"), "--image"),
            (namespace("Default"), "--namespace"),
            (claim("-c"), "--claim"),
            (server_label("a=b=c").map(|_| ()), "--server-label"),
            (server_label("-a=b").map(|_| ()), "--server-label"),
            (for_ansible("--body", "{% x %}"), "Jinja2"),
            (for_ansible("--body", "a\\"), "backslash"),
        ];
        for (result, says) in cases {
            let e = result.unwrap_err().to_string();
            assert!(e.contains(says) && !e.contains('\n'), "{e}");
        }
    }
}
