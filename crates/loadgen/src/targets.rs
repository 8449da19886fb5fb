//! Request lists (`--targets FILE`): many requests to one server, taken in turn or at random.
//!
//! The file is vegeta's "http" targets format: each request is a line `METHOD URL`, then its
//! header lines `Name: value`, then an optional `@FILE` whose contents are its body (a path
//! relative to the targets file's directory). Blank lines and lines starting with `#` are
//! ignored. A request listed twice is taken twice as often. Every URL must be on the run's
//! server (one scheme, host and port): connections go to one address.

use crate::random::SplitMix64;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::LoadError;
use crate::request::{RequestTemplate, Target};

/// How the next request is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// In the file's order, over all connections: with `-n` a multiple of the list's length,
    /// each request is sent exactly its share.
    #[default]
    RoundRobin,
    /// At random, each connection from its own generator seeded by `--seed` and its number.
    Random,
}

/// One request of the file, before it is encoded.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSpec {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// Where it starts in the file (1-based), for messages.
    pub line: usize,
}

/// Read and parse a targets file.
pub fn read(path: &Path) -> Result<Vec<TargetSpec>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        LoadError::Targets(format!(
            "cannot read --targets {} ({e}); give a readable file of `METHOD URL` lines",
            path.display()
        ))
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse(&text, dir).map_err(|(line, why)| {
        LoadError::Targets(format!("{} line {line}: {why}", path.display()))
    })
}

/// The largest request body a targets list may name.
const MAX_BODY: u64 = 64 << 20;

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
];

/// Parse the file's text; bodies are read relative to `dir`. `Err((line, why))`.
pub fn parse(text: &str, dir: &Path) -> Result<Vec<TargetSpec>, (usize, String)> {
    let mut out: Vec<TargetSpec> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((method, url)) = line.split_once(char::is_whitespace)
            && METHODS.contains(&method)
        {
            let url = url.trim();
            if !url.contains("://") {
                return Err((
                    line_no,
                    format!(
                        "`{}` is not an absolute URL; write {method} http://host:port/path",
                        crate::redact::url(url)
                    ),
                ));
            }
            out.push(TargetSpec {
                method: method.to_string(),
                url: url.to_string(),
                headers: Vec::new(),
                body: None,
                line: line_no,
            });
            continue;
        }
        let Some(current) = out.last_mut() else {
            return Err((
                line_no,
                format!(
                    "`{}` comes before any `METHOD URL` line; each request starts with one, e.g. GET http://127.0.0.1:8080/",
                    shown_line(line)
                ),
            ));
        };
        if let Some(file) = line.strip_prefix('@') {
            if current.body.is_some() {
                return Err((line_no, "a second body for one request".to_string()));
            }
            let file = Path::new(file.trim());
            // A list someone else wrote must not send a file from outside its own folder.
            let outside = file.is_absolute()
                || file.components().any(|c| c == std::path::Component::ParentDir);
            if outside {
                return Err((
                    line_no,
                    format!("the body file {} is outside the targets file's folder; put it beside the list and name it relative to it", file.display()),
                ));
            }
            let path = dir.join(file);
            let body = srvprof_files::read_input(&path, MAX_BODY).map_err(|e| {
                (line_no, format!("cannot read the body file {} ({e})", path.display()))
            })?;
            current.body = Some(body);
        } else if let Some((name, value)) = line.split_once(':')
            && !name.trim().is_empty()
            && !name.contains(char::is_whitespace)
        {
            current
                .headers
                .push((name.trim().to_string(), value.trim().to_string()));
        } else {
            return Err((
                line_no,
                format!(
                    "`{}` is neither `METHOD URL`, a header `Name: value`, nor `@body-file`",
                    shown_line(line)
                ),
            ));
        }
    }
    if out.is_empty() {
        return Err((1, "no request in the file; write one `METHOD URL` line at least".into()));
    }
    Ok(out)
}

/// A line quoted in a message: a header line that may hold a secret is not.
fn shown_line(line: &str) -> &str {
    match crate::redact::is_secret_name(line) {
        true => crate::redact::REDACTED,
        false => line,
    }
}

/// The requests of a run: one (the URL of the command line) or a list, how the next is taken,
/// and which entries are the same request (a request listed twice is counted as one).
pub(crate) struct Targets {
    pub templates: Vec<RequestTemplate>,
    /// Per template, its request's index in `names`.
    pub distinct: Vec<u32>,
    /// The distinct requests, "METHOD URL".
    pub names: Vec<String>,
    pub order: Order,
    pub seed: u64,
    next: AtomicU64,
    /// Round-robin over a split run: this host takes the one-host run's picks of its segment.
    segment: crate::segment::Segment,
}

impl Targets {
    pub(crate) fn one(template: RequestTemplate) -> Targets {
        Targets {
            templates: vec![template],
            distinct: vec![0],
            names: Vec::new(),
            order: Order::RoundRobin,
            seed: 0,
            next: AtomicU64::new(0),
            segment: crate::segment::Segment::WHOLE,
        }
    }

    /// The list, every URL on `server` (the run's target).
    pub(crate) fn list(
        specs: &[TargetSpec],
        server: &Target,
        keepalive: bool,
        order: Order,
        seed: u64,
    ) -> Result<Targets, LoadError> {
        let mut templates = Vec::with_capacity(specs.len());
        let mut distinct = Vec::with_capacity(specs.len());
        let mut names: Vec<String> = Vec::new();
        for spec in specs {
            let at = |why: String| LoadError::Targets(format!("--targets line {}: {why}", spec.line));
            let target = Target::parse(&spec.url).map_err(|e| at(e.to_string()))?;
            if target.addr != server.addr || target.tls_host.is_some() != server.tls_host.is_some()
            {
                return Err(at(format!(
                    "{} is not on the run's server ({}): one run loads one server",
                    crate::redact::url(&spec.url),
                    server.authority
                )));
            }
            templates.push(
                RequestTemplate::new(
                    &target,
                    &spec.method,
                    &spec.headers,
                    spec.body.as_deref(),
                    keepalive,
                )
                .map_err(|e| at(e.to_string()))?,
            );
            // The name load.json keeps: the URL without its secrets.
            let name = format!("{} {}", spec.method, crate::redact::url(&spec.url));
            let index = match names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            };
            distinct.push(index as u32);
        }
        Ok(Targets {
            templates,
            distinct,
            names,
            order,
            seed,
            next: AtomicU64::new(0),
            segment: crate::segment::Segment::WHOLE,
        })
    }

    /// The list as one host of a split run takes it round-robin: its segment's picks of the
    /// one-host order.
    pub(crate) fn dealt(self, segment: crate::segment::Segment) -> Targets {
        Targets { segment, ..self }
    }

    /// Whether requests are counted per target (a list was given).
    pub(crate) fn listed(&self) -> bool {
        !self.names.is_empty()
    }

    /// The next request for a slot whose generator is `rng`: its template's index.
    #[inline]
    pub(crate) fn pick(&self, rng: &mut SplitMix64) -> usize {
        let n = self.templates.len();
        if n == 1 {
            return 0;
        }
        match self.order {
            Order::RoundRobin => {
                let k = self.next.fetch_add(1, Ordering::Relaxed);
                (self.segment.global(k) % n as u64) as usize
            }
            Order::Random => {
                let x = rng.next_u64();
                (((x >> 32) * n as u64) >> 32) as usize
            }
        }
    }

    /// A slot's generator: from the seed and the slot's number (in a split run, its number in the
    /// one-host run, so no two hosts' slots draw alike).
    pub(crate) fn rng_for(&self, slot: usize) -> SplitMix64 {
        SplitMix64(self.seed ^ (slot as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vegeta_targets_with_headers_bodies_and_comments() {
        let dir = std::env::temp_dir().join(format!("srvprof-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("body.json"), b"{\"a\":1}").unwrap();
        let text = "# a comment\n\
                    GET http://127.0.0.1:8080/a\n\
                    X-Trace: 1\n\
                    \n\
                    POST http://127.0.0.1:8080/b\n\
                    Content-Type: application/json\n\
                    @body.json\n\
                    GET http://127.0.0.1:8080/a\n\
                    X-Trace: 1\n";
        let specs = parse(text, &dir).unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].headers, [("X-Trace".to_string(), "1".to_string())]);
        assert_eq!(specs[1].method, "POST");
        assert_eq!(specs[1].body.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!((specs[0].line, specs[1].line, specs[2].line), (2, 5, 8));
        let server = Target::parse("http://127.0.0.1:8080/").unwrap();
        let t = Targets::list(&specs, &server, true, Order::RoundRobin, 0).unwrap();
        assert_eq!(t.names, ["GET http://127.0.0.1:8080/a", "POST http://127.0.0.1:8080/b"]);
        assert_eq!(t.distinct, [0, 1, 0]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_line_is_named_with_its_number_and_what_it_should_be() {
        let here = Path::new(".");
        for (text, line, says) in [
            ("", 1, "no request"),
            ("X-Trace: 1\n", 1, "before any `METHOD URL`"),
            ("GET /a\n", 1, "not an absolute URL"),
            ("GET http://h/a\nnonsense here\n", 2, "neither `METHOD URL`"),
            ("GET http://h/a\n@nonexistent-srvprof-body\n", 2, "cannot read the body file"),
            // A list someone else wrote sends nothing from outside its folder.
            ("GET http://h/a\n@/etc/shadow\n", 2, "outside the targets file's folder"),
            ("GET http://h/a\n@../../etc/shadow\n", 2, "outside the targets file's folder"),
        ] {
            let (at, why) = parse(text, here).unwrap_err();
            assert_eq!(at, line, "{text:?}: {why}");
            assert!(why.contains(says), "{text:?}: {why}");
        }
        let specs = parse("GET http://127.0.0.1:9/a\n", here).unwrap();
        let server = Target::parse("http://127.0.0.1:8080/").unwrap();
        let err = Targets::list(&specs, &server, true, Order::RoundRobin, 0)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("line 1") && err.contains("not on the run's server"), "{err}");
    }

    #[test]
    fn round_robin_gives_each_entry_its_share_and_random_is_seeded() {
        let server = Target::parse("http://127.0.0.1:8080/").unwrap();
        let specs = parse(
            "GET http://127.0.0.1:8080/a\nGET http://127.0.0.1:8080/a\nGET http://127.0.0.1:8080/b\n",
            Path::new("."),
        )
        .unwrap();
        let t = Targets::list(&specs, &server, true, Order::RoundRobin, 0).unwrap();
        let mut counts = [0u32; 2];
        let mut rng = t.rng_for(0);
        for _ in 0..300 {
            counts[t.distinct[t.pick(&mut rng)] as usize] += 1;
        }
        assert_eq!(counts, [200, 100]);
        let r = Targets::list(&specs, &server, true, Order::Random, 7).unwrap();
        let draw = |slot| {
            let mut rng = r.rng_for(slot);
            (0..3000).map(|_| r.pick(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3), "the same seed and slot draw the same");
        assert_ne!(draw(3), draw(4));
        let a = draw(3).iter().filter(|i| r.distinct[**i] == 0).count();
        assert!((1900..=2100).contains(&a), "{a} of 3000 for a weight of 2/3");
    }

    /// The hosts of a split run, each taking the list round-robin alone, together send the
    /// one-host run's requests in its order.
    #[test]
    fn the_segments_of_a_split_run_take_the_list_as_one_host_does() {
        let server = Target::parse("http://127.0.0.1:8080/").unwrap();
        let list: String = (0..7)
            .map(|i| format!("GET http://127.0.0.1:8080/{i}\n"))
            .collect();
        let specs = parse(&list, Path::new(".")).unwrap();
        let one_host = Targets::list(&specs, &server, true, Order::RoundRobin, 0).unwrap();
        let mut rng = one_host.rng_for(0);
        let whole: Vec<usize> = (0..3 * 40).map(|_| one_host.pick(&mut rng)).collect();
        let mut dealt = vec![usize::MAX; whole.len()];
        for i in 1..=3 {
            let segment = crate::segment::Segment::parse(&format!("{i}/3")).unwrap();
            let t = Targets::list(&specs, &server, true, Order::RoundRobin, 0)
                .unwrap()
                .dealt(segment);
            for local in 0..40 {
                dealt[segment.global(local) as usize] = t.pick(&mut rng);
            }
        }
        assert_eq!(dealt, whole);
    }
}
